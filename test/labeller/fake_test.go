package labeller_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/labeller"
)

const fakeNS = "db"

func node(name, kind string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labeller.NodeLabel: kind}}}
}

// spiloPod is a pod of cluster name, bound to node ("" for none), Ready
// or not.
func spiloPod(name string, ord int32, node string, ready bool) *corev1.Pod {
	p := pod(cluster.PodName(name, ord), "", ready, false)
	p.Namespace = fakeNS
	p.Labels = cluster.Selector(name)
	p.Spec.NodeName = node
	return p
}

// fakeRun runs the labeller on a fake API holding objs until the test ends.
func fakeRun(t *testing.T, objs ...runtime.Object) *fake.Clientset {
	t.Helper()
	kube := fake.NewClientset(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := logrus.New()
	log.SetOutput(t.Output())
	log.SetLevel(logrus.DebugLevel)
	go func() { done <- labeller.Run(ctx, kube, fakeNS, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("labeller.Run: %v", err)
		}
	})
	return kube
}

// eventually waits until cond holds; the labeller works on its own
// goroutine, from informer events.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func roleOf(t *testing.T, kube *fake.Clientset, name string) string {
	t.Helper()
	p, err := kube.CoreV1().Pods(fakeNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Labels[cluster.LabelRole]
}

// leaderOf returns the leader record of a cluster, nil when there is none.
func leaderOf(t *testing.T, kube *fake.Clientset, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(fakeNS).Get(context.Background(), cluster.LeaderConfigMapName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// holds reports whether cluster name's roles are want (pod name: role, ""
// for no label) and its leader record names leader ("" for no record).
func holds(t *testing.T, kube *fake.Clientset, name, leader string, want map[string]string) func() bool {
	return func() bool {
		for pod, role := range want {
			if roleOf(t, kube, pod) != role {
				return false
			}
		}
		cm := leaderOf(t, kube, name)
		if leader == "" {
			return cm == nil
		}
		return cm != nil && cm.Annotations[cluster.AnnotationLeader] == leader
	}
}

// checkRecord checks a leader record is written as Patroni writes it.
func checkRecord(t *testing.T, cm *corev1.ConfigMap, name, transitions string) {
	t.Helper()
	if !maps.Equal(cm.Labels, cluster.Selector(name)) {
		t.Errorf("record labels %v, want Patroni's %v", cm.Labels, cluster.Selector(name))
	}
	if len(cm.OwnerReferences) != 0 || len(cm.Data) != 0 {
		t.Errorf("record owners %v data %v: Patroni's have neither", cm.OwnerReferences, cm.Data)
	}
	a := cm.Annotations
	if a[cluster.AnnotationTTL] != labeller.LeaderTTL || a[cluster.AnnotationTransitions] != transitions {
		t.Errorf("record ttl %q transitions %q, want %q %q", a[cluster.AnnotationTTL], a[cluster.AnnotationTransitions], labeller.LeaderTTL, transitions)
	}
	for _, k := range []string{cluster.AnnotationAcquireTime, cluster.AnnotationRenewTime} {
		// Python's isoformat() of a UTC datetime.
		at, err := time.Parse("2006-01-02T15:04:05.999999-07:00", a[k])
		if err != nil || !strings.HasSuffix(a[k], "+00:00") || time.Since(at) > time.Minute {
			t.Errorf("record %s %q: %v", k, a[k], err)
		}
	}
}

// touched lists the pods the labeller patched and the leader records it
// wrote, as "pod NAME" and "configmap NAME".
func touched(kube *fake.Clientset) []string {
	var out []string
	for _, a := range kube.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchActionImpl:
			out = append(out, "pod "+a.GetName())
		case k8stesting.CreateActionImpl:
			if cm, ok := a.GetObject().(*corev1.ConfigMap); ok {
				out = append(out, "configmap "+cm.Name)
			}
		case k8stesting.UpdateActionImpl:
			if cm, ok := a.GetObject().(*corev1.ConfigMap); ok {
				out = append(out, "configmap "+cm.Name)
			}
		}
	}
	return out
}

// TestLeaderRecordAndNodes runs the labeller on a fake API: it labels the
// pods bound to kwok nodes and writes their cluster's leader record as
// Patroni does; it leaves alone pods not bound yet and every cluster with
// a pod on another node (real Patroni's).
func TestLeaderRecordAndNodes(t *testing.T) {
	const m, r = cluster.RoleMaster, cluster.RoleReplica
	kube := fakeRun(t,
		node("kwok-1", labeller.KwokNode), node("proc-1", "process"),
		// a: two pods on kwok.
		spiloPod("a", 0, "kwok-1", true), spiloPod("a", 1, "kwok-1", true),
		// p: one pod on a process node: Patroni's, all of it.
		spiloPod("p", 0, "proc-1", true), spiloPod("p", 1, "kwok-1", true),
		// u: not bound yet.
		spiloPod("u", 0, "", true),
		// k: one pod on kwok, one not bound yet.
		spiloPod("k", 0, "kwok-1", true), spiloPod("k", 1, "", false),
		// n: on a node that does not exist (yet).
		spiloPod("n", 0, "kwok-2", true),
	)
	ctx := context.Background()

	// 1. The kwok pods get their roles and the record names the master.
	eventually(t, "cluster a's roles and record", holds(t, kube, "a", "a-0", map[string]string{"a-0": m, "a-1": r}))
	checkRecord(t, leaderOf(t, kube, "a"), "a", "0")
	eventually(t, "cluster k's roles and record", holds(t, kube, "k", "k-0", map[string]string{"k-0": m}))

	// 2. The master stops being Ready: the role and the lock move, one
	// transition more.
	notReady := spiloPod("a", 0, "kwok-1", false)
	notReady.Labels[cluster.LabelRole] = m
	if _, err := kube.CoreV1().Pods(fakeNS).UpdateStatus(ctx, notReady, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the role and the lock on a-1", holds(t, kube, "a", "a-1", map[string]string{"a-0": r, "a-1": m}))
	checkRecord(t, leaderOf(t, kube, "a"), "a", "1")

	// 3. A record deleted is written again.
	if err := kube.CoreV1().ConfigMaps(fakeNS).Delete(ctx, cluster.LeaderConfigMapName("a"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a's record again", holds(t, kube, "a", "a-1", nil))

	// 4. Nothing else was touched: not the pods of p (one on a process
	// node), of u (not bound), k-1 (not bound), n (unknown node), nor their
	// records.
	for _, w := range touched(kube) {
		if !slices.Contains([]string{"pod a-0", "pod a-1", "pod k-0", "configmap a-leader", "configmap k-leader"}, w) {
			t.Errorf("the labeller touched %s", w)
		}
	}
	for _, name := range []string{"p-0", "p-1", "u-0", "k-1", "n-0"} {
		if role := roleOf(t, kube, name); role != "" {
			t.Errorf("pod %s labelled %q", name, role)
		}
	}

	// 5. The node of n appears as a kwok node, and p's process node is
	// handed to kwok: both clusters become the labeller's.
	if _, err := kube.CoreV1().Nodes().Create(ctx, node("kwok-2", labeller.KwokNode), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cluster n once its node is kwok's", holds(t, kube, "n", "n-0", map[string]string{"n-0": m}))
	if _, err := kube.CoreV1().Nodes().Update(ctx, node("proc-1", labeller.KwokNode), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cluster p once its nodes are kwok's", holds(t, kube, "p", "p-0", map[string]string{"p-0": m, "p-1": r}))
	if got := leaderOf(t, kube, "u"); got != nil {
		t.Errorf("a record for u, whose pod is not bound: %+v", got)
	}
}

// TestLeaderRecordTakesOver: a record that names another member (as
// Patroni's would after the holder was killed) is taken over by the master
// with one transition more, keeping what else is there.
func TestLeaderRecordTakesOver(t *testing.T) {
	stale := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: fakeNS, Name: cluster.LeaderConfigMapName("a"), Labels: cluster.Selector("a"),
		Annotations: map[string]string{cluster.AnnotationLeader: "a-9", cluster.AnnotationTransitions: "4", "optime": "1234"},
	}}
	kube := fakeRun(t, node("kwok-1", labeller.KwokNode), spiloPod("a", 0, "kwok-1", true), stale)
	eventually(t, "the record naming a-0", holds(t, kube, "a", "a-0", map[string]string{"a-0": cluster.RoleMaster}))
	cm := leaderOf(t, kube, "a")
	checkRecord(t, cm, "a", "5")
	if cm.Annotations["optime"] != "1234" {
		t.Errorf("record annotations %v: the others are kept", cm.Annotations)
	}
}
