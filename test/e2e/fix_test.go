package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// fixCreateTimeout is the operator's --create-timeout in TestFixStuck:
// short, so every stuck cluster is Degraded and retrying before its fix,
// the case of a user who notices a broken cluster late.
const fixCreateTimeout = 15 * time.Second

// causeDeadline bounds how long a stuck cluster may take to show its
// concrete cause at the top level of its status: "within a few seconds"
// on an idle plane, with room for two busy cores.
const causeDeadline = 20 * time.Second

// fixCase is one way a cluster gets stuck, and the fix a user applies.
type fixCase struct {
	name      string
	instances int32
	// quota: the cluster's namespace has a ResourceQuota of zero pods.
	quota bool
	stick func(*v1.Postgresql)
	// reason and words are what status.reason and status.message say
	// once the cause is observed.
	reason string
	words  []string
	// fix repairs the cluster: an edit of it, or (quota) of the quota.
	fix func(ctx context.Context, t *testing.T, ns, name string)
	// check asserts what runs once the cluster is Running again.
	check func(ctx context.Context, t *testing.T, ns, name string, pods []*corev1.Pod)
}

// editCluster returns a fix that updates the cluster with change.
func editCluster(change func(*v1.Postgresql)) func(context.Context, *testing.T, string, string) {
	return func(ctx context.Context, t *testing.T, ns, name string) {
		t.Helper()
		if _, err := env.UpdateCluster(ctx, ns, name, change); err != nil {
			t.Fatal(err)
		}
	}
}

var fixCases = []fixCase{
	{
		name: "affinity", instances: 2,
		stick: func(pg *v1.Postgresql) {
			pg.Spec.NodeAffinity = &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: testbed.ImpossibleNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
					}}}},
				},
			}
		},
		reason: "Unschedulable", words: []string{"node affinity/selector"},
		fix: editCluster(func(pg *v1.Postgresql) { pg.Spec.NodeAffinity = nil }),
		check: func(_ context.Context, t *testing.T, _, _ string, pods []*corev1.Pod) {
			for _, p := range pods {
				if p.Spec.Affinity != nil && p.Spec.Affinity.NodeAffinity != nil {
					t.Errorf("pod %s still has the node affinity %+v", p.Name, p.Spec.Affinity.NodeAffinity)
				}
			}
		},
	},
	{
		name: "oversized", instances: 2,
		stick: func(pg *v1.Postgresql) {
			cpu := resource.MustParse(testbed.OversizedCPU)
			pg.Spec.Resources.Requests.CPU = &cpu
			pg.Spec.Resources.Limits.CPU = &cpu
		},
		reason: "Unschedulable", words: []string{"Insufficient cpu"},
		fix: editCluster(func(pg *v1.Postgresql) {
			cpu := resource.MustParse("100m")
			pg.Spec.Resources.Requests.CPU = &cpu
			pg.Spec.Resources.Limits.CPU = &cpu
		}),
		check: func(_ context.Context, t *testing.T, _, _ string, pods []*corev1.Pod) {
			for _, p := range pods {
				if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "100m" {
					t.Errorf("pod %s requests cpu %s, want 100m", p.Name, got)
				}
			}
		},
	},
	{
		name: "storage-class", instances: 1,
		stick:  func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = "missing" },
		reason: "VolumePending", words: []string{`storage class "missing"`},
		fix: editCluster(func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = testbed.StorageClassName }),
		check: func(ctx context.Context, t *testing.T, ns, name string, pods []*corev1.Pod) {
			claims, err := env.Kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{
				LabelSelector: cluster.LabelClusterName + "=" + name})
			if err != nil {
				t.Fatal(err)
			}
			if len(claims.Items) != 1 {
				t.Fatalf("%d claims, want 1", len(claims.Items))
			}
			c := claims.Items[0]
			if class := ptr.Deref(c.Spec.StorageClassName, ""); class != testbed.StorageClassName || c.Status.Phase != corev1.ClaimBound {
				t.Errorf("claim %s: class %q, %s; want %s and Bound", c.Name, class, c.Status.Phase, testbed.StorageClassName)
			}
			sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := cluster.ClaimTemplateClass(sts); got != testbed.StorageClassName {
				t.Errorf("statefulset claim template class %q, want %s", got, testbed.StorageClassName)
			}
			for _, p := range pods {
				if owner := metav1.GetControllerOf(p); owner == nil || owner.UID != sts.UID {
					t.Errorf("pod %s is not controlled by the re-created statefulset (%v)", p.Name, owner)
				}
			}
		},
	},
	{
		name: "quota", instances: 1, quota: true,
		stick:  func(*v1.Postgresql) {},
		reason: "QuotaExceeded", words: []string{"exceeded quota"},
		fix: func(ctx context.Context, t *testing.T, ns, _ string) {
			t.Helper()
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				q, err := env.Kube.CoreV1().ResourceQuotas(ns).Get(ctx, "no-pods", metav1.GetOptions{})
				if err != nil {
					return err
				}
				q.Spec.Hard[corev1.ResourcePods] = resource.MustParse("10")
				_, err = env.Kube.CoreV1().ResourceQuotas(ns).Update(ctx, q, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		},
		// The StatefulSet was nudged for the raised quota: its controller
		// did not wait for its own backoff.
		check: func(ctx context.Context, t *testing.T, ns, name string, _ []*corev1.Pod) {
			sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sts.Annotations[cluster.AnnotationQuotaSeen] == "" {
				t.Errorf("statefulset %s was never nudged (annotations %v)", sts.Name, sts.Annotations)
			}
		},
	},
}

// TestFixStuck is the scenario pgloop exists for (issue 11): a cluster stuck
// four ways (a node affinity no node has, more CPU than any node, a
// StorageClass that does not exist, a ResourceQuota of zero pods) says why
// at the top level of its status within seconds, in `kubectl get pg` and in
// `pgloop status -A`, while still Creating; it goes Degraded at its
// timeout; the user's fix (an edit of the cluster, or of the quota) takes it
// to Running within seconds, with the new spec in the pods that run. The
// time from the fix to Running is printed (docs/isolation.md).
func TestFixStuck(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	nsOf := map[string]string{}
	var namespaces []string
	for _, c := range fixCases {
		ns := env.Namespace(t)
		nsOf[c.name] = ns
		namespaces = append(namespaces, ns)
		env.StartLabeller(t, ns)
		if c.quota {
			ctx := Context(t, time.Minute)
			if _, err := testbed.CreateQuota(ctx, env.Kube, testbed.NoPodsQuota(ns, "no-pods")); err != nil {
				t.Fatal(err)
			}
		}
	}
	env.StartOperator(t, "operator", namespaces, "--create-timeout", fixCreateTimeout.String())
	pgloop := env.operatorBinary(t)

	created := map[string]time.Time{}
	for _, c := range fixCases {
		env.CreateCluster(t, nsOf[c.name], c.name, c.instances, c.stick)
		created[c.name] = time.Now()
	}

	// 1. Each shows its concrete cause at the top level while Creating.
	for _, c := range fixCases {
		ctx := Context(t, causeDeadline)
		pg, err := env.WaitCluster(ctx, nsOf[c.name], c.name, "its cause in status.reason and status.message", func(pg *v1.Postgresql) bool {
			return pg.Status.Reason == c.reason && containsAll(pg.Status.Message, c.words)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s %s: %q, %v after its creation", c.name, pg.Status.State, pg.Status.Reason, pg.Status.Message,
			time.Since(created[c.name]).Round(time.Millisecond))
		if pg.Status.State != fsm.Creating {
			t.Errorf("%s: state %s when its cause showed, want Creating (timeout %v)", c.name, pg.Status.State, fixCreateTimeout)
		}
		// What `kubectl get pg` shows: the CRD's printer columns, as the
		// API server renders them for kubectl.
		row := tableRow(ctx, t, nsOf[c.name], c.name)
		if row["Reason"] != c.reason {
			t.Errorf("%s: kubectl get pg shows %v, want Reason %s", c.name, row, c.reason)
		}
	}
	// pgloop status -A: one row per cluster, the reason in its REASON
	// column.
	out, err := exec.Command(pgloop, "status", "-A", "--kubeconfig", env.Plane.Kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("pgloop status -A: %v\n%s", err, out)
	}
	t.Logf("pgloop status -A:\n%s", out)
	for _, c := range fixCases {
		if !hasRow(string(out), nsOf[c.name], c.name, c.reason) {
			t.Errorf("pgloop status -A has no row for %s/%s with %s", nsOf[c.name], c.name, c.reason)
		}
	}

	// 2. Each goes Degraded at its timeout, then its fix is applied; all
	// at once, in parallel, as they would be by different users.
	var wg sync.WaitGroup
	for _, c := range fixCases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fixOne(t, c, nsOf[c.name])
		}()
	}
	wg.Wait()
}

// fixOne waits for the stuck cluster of c to be Degraded, applies c's fix and
// waits for Running; it checks what runs and prints the time it took.
func fixOne(t *testing.T, c fixCase, ns string) {
	ctx := Context(t, fixCreateTimeout+2*stepDeadline)
	degraded, err := env.WaitCluster(ctx, ns, c.name, "Degraded with its cause", func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Degraded && pg.Status.Reason == c.reason
	})
	if err != nil {
		t.Error(err)
		return
	}
	fixed := time.Now()
	c.fix(ctx, t, ns, c.name)
	pg, err := env.WaitCluster(ctx, ns, c.name, "Running and Ready after the fix", func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Running && pg.Status.ReadyInstances == c.instances &&
			pg.Status.ObservedGeneration == pg.Generation && isTrue(pg, v1.ConditionReady)
	})
	if err != nil {
		t.Error(err)
		return
	}
	took := time.Since(fixed)
	t.Logf("%s: fix -> Running in %v (%s)", c.name, took.Round(time.Millisecond), historyOf(pg))

	// 3. The way out of Degraded is in the history: an edit goes through
	// Updating at once; a quota raised brings the pods, and Running.
	want := []string{fsm.Degraded + ">" + fsm.Updating, fsm.Updating + ">" + fsm.Running}
	if c.quota {
		want = []string{fsm.Degraded + ">" + fsm.Running}
	}
	if got := transitionsSince(pg, degraded.Status.StateSince.Time); !slices.Equal(got, want) {
		t.Errorf("%s: transitions after Degraded %v, want %v", c.name, got, want)
	}
	for _, tm := range pg.Status.Timers {
		if tm.Name != fsm.TimerResync {
			t.Errorf("%s: timer %s still pending once Running", c.name, tm.Name)
		}
	}

	// 4. What runs: every pod Ready on the current template, a primary.
	pods, err := env.WaitPods(ctx, ns, c.name, ReadyPods(int(c.instances)))
	if err != nil {
		t.Error(err)
		return
	}
	sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(c.name), metav1.GetOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	for _, p := range pods {
		if !cluster.PodUpToDate(p, sts) {
			t.Errorf("%s: pod %s runs template %s, the statefulset's is %s", c.name, p.Name,
				cluster.PodTemplateHash(p), cluster.PodTemplateHash(sts))
		}
	}
	if pg.Status.Primary == "" {
		t.Errorf("%s: no primary once Running", c.name)
	}
	if c.check != nil {
		c.check(ctx, t, ns, c.name, pods)
	}
}

// tableRow returns the columns `kubectl get postgresql` prints for one
// cluster, by column name, as the API server renders the CRD's printer
// columns.
func tableRow(ctx context.Context, t *testing.T, ns, name string) map[string]string {
	t.Helper()
	raw, err := env.Kube.CoreV1().RESTClient().Get().
		AbsPath("/apis", v1.SchemeGroupVersion.Group, v1.SchemeGroupVersion.Version, "namespaces", ns, "postgresqls", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatalf("get postgresql %s/%s as a table: %v", ns, name, err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatalf("decode table: %v", err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("table of %s/%s has %d rows", ns, name, len(table.Rows))
	}
	row := map[string]string{}
	for i, col := range table.ColumnDefinitions {
		if i < len(table.Rows[0].Cells) {
			row[col.Name] = fmt.Sprint(table.Rows[0].Cells[i])
		}
	}
	return row
}

// hasRow reports whether the output of `pgloop status -A` has a row for
// ns/name whose words include reason.
func hasRow(out, ns, name, reason string) bool {
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == ns && fields[1] == name && strings.Contains(line, reason) {
			return true
		}
	}
	return false
}

func isTrue(pg *v1.Postgresql, typ string) bool {
	for _, c := range pg.Status.Conditions {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// transitionsSince lists the state changes of pg's history at or after
// since, as "From>To", ignoring self-transitions.
func transitionsSince(pg *v1.Postgresql, since time.Time) []string {
	var out []string
	for _, h := range pg.Status.History {
		if h.From != h.To && !h.Time.Time.Before(since.Truncate(time.Second)) && h.From != "" {
			out = append(out, h.From+">"+h.To)
		}
	}
	// The entry that entered Degraded is at since itself.
	return slices.DeleteFunc(out, func(s string) bool { return strings.HasSuffix(s, ">"+fsm.Degraded) })
}

func historyOf(pg *v1.Postgresql) string {
	var parts []string
	for _, h := range pg.Status.History {
		parts = append(parts, fmt.Sprintf("%s->%s on %s", h.From, h.To, h.Event))
	}
	return strings.Join(parts, ", ")
}
