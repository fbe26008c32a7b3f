package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestPodFieldsAtWork runs a cluster on the process node with zalando's
// env, envFrom, additionalVolumes, spiloFSGroup, livenessProbe and
// volume.subPath (an expression) set, and looks at what runs: the
// container's environment as the kubelet resolved it (pgloop's variables
// first, the spec's, a $(VAR) reference expanded, a ConfigMap's keys), the
// ConfigMap's file mounted, and PostgreSQL's data directory under the
// expanded subPath. A new env value then replaces every pod, the primary
// last after a switchover, and the new pods see it; the data stays.
func TestPodFieldsAtWork(t *testing.T) {
	ns := env.Namespace(t)
	op := env.StartOperator(t, "operator", []string{ns})
	const name = "podfields"
	ctx := Context(t, 8*time.Minute)

	cms := env.Kube.CoreV1().ConfigMaps(ns)
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Data: map[string]string{"greeting.conf": "hello from a ConfigMap\n"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "extra-env"}, Data: map[string]string{"FROM_CONFIGMAP": "cm-value", "EXTRA_SETTING": "from-envFrom"}},
	} {
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	env.CreateCluster(t, ns, name, 2, OnProcessNode, func(pg *v1.Postgresql) {
		pg.Spec.Env = []corev1.EnvVar{{Name: "EXTRA_SETTING", Value: "one"}, {Name: "MY_NAMESPACE", Value: "$(POD_NAMESPACE)"}}
		pg.Spec.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "extra-env"}}}}
		pg.Spec.AdditionalVolumes = []v1.AdditionalVolume{{Name: "extra", MountPath: "/etc/extra",
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "extra"}}}}}
		pg.Spec.SpiloFSGroup = ptr.To[int64](2000)
		pg.Spec.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/liveness", Port: intstr.FromString(cluster.PatroniPortName)}},
			PeriodSeconds: 10, FailureThreshold: 6}
		pg.Spec.Volume.SubPath, pg.Spec.Volume.IsSubPathExpr = "$(POD_NAMESPACE)", ptr.To(true)
	})
	pg := inEffect(ctx, t, ns, name, 2)
	root := env.ProcessNode(t).Root

	// The StatefulSet as the apiserver stored it.
	sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	if m := c.VolumeMounts[0]; m.Name != cluster.DataVolumeName || m.SubPathExpr != "$(POD_NAMESPACE)" {
		t.Errorf("data mount %+v, want subPathExpr $(POD_NAMESPACE)", m)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/liveness" || c.LivenessProbe.FailureThreshold != 6 {
		t.Errorf("liveness probe %+v, want the spec's", c.LivenessProbe)
	}
	if sc := spec.SecurityContext; *sc.FSGroup != 2000 || *sc.RunAsUser != 101 {
		t.Errorf("securityContext %+v, want fsGroup 2000 and pgloop's user 101", sc)
	}

	// What runs, on every pod.
	conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
	if _, err := conn.Exec(ctx, "CREATE TABLE kept AS SELECT 42 AS answer"); err != nil {
		t.Fatal(err)
	}
	checkRunning := func(want string) {
		t.Helper()
		for _, id := range podUIDs(ctx, t, ns, name) {
			environ := readFile(t, filepath.Join(root, "pods", string(id.uid), "environ"))
			for _, line := range []string{"SCOPE=" + name, "EXTRA_SETTING=" + want, "MY_NAMESPACE=" + ns, "FROM_CONFIGMAP=cm-value"} {
				if !strings.Contains("\n"+environ, "\n"+line+"\n") {
					t.Errorf("pod %s: the container's environment has no %s", id.name, line)
				}
			}
			if got := readFile(t, filepath.Join(root, "pods", string(id.uid), "volumes", "extra", "greeting.conf")); got != "hello from a ConfigMap\n" {
				t.Errorf("pod %s: /etc/extra/greeting.conf is %q", id.name, got)
			}
			var dir string
			if err := env.SQL(ctx, t, env.Pod(ctx, t, ns, id.name)).QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(dir, "/"+ns+"/pgroot/pgdata") {
				t.Errorf("pod %s: PostgreSQL's data directory is %s, want it under the subPath %s", id.name, dir, ns)
			}
			t.Logf("pod %s: EXTRA_SETTING=%s in its environment, greeting.conf mounted, data directory %s", id.name, want, dir)
		}
	}
	checkRunning("one")
	for _, id := range podUIDs(ctx, t, ns, name) {
		p := env.Pod(ctx, t, ns, id.name)
		if n := p.Status.ContainerStatuses[0].RestartCount; n != 0 {
			t.Errorf("pod %s restarted %d times under a liveness probe Patroni answers", p.Name, n)
		}
	}

	// A new value: a rollout, the primary's pod last after a switchover.
	old := podUIDs(ctx, t, ns, name)
	switchovers := op.LogCount("switched over")
	began := time.Now()
	if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"env":[{"name":"EXTRA_SETTING","value":"two"},{"name":"MY_NAMESPACE","value":"$(POD_NAMESPACE)"}]}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPods(ctx, ns, name, replacedReady(2, old)); err != nil {
		t.Fatal(err)
	}
	pg = inEffect(ctx, t, ns, name, 2)
	t.Logf("env changed: both pods replaced and the cluster in effect %v later", time.Since(began).Round(time.Millisecond))
	if n := op.LogCount("switched over"); n <= switchovers {
		t.Errorf("no switchover logged for the rollout (%d before, %d after)", switchovers, n)
	}
	checkRunning("two")
	var answer int
	if err := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary)).QueryRow(ctx, "SELECT answer FROM kept").Scan(&answer); err != nil || answer != 42 {
		t.Errorf("the row written before the rollout: %d, %v", answer, err)
	}
}

// TestPodFieldsScheduling runs clusters on kwok's nodes, where the
// scheduler's decisions are real: topologySpreadConstraints without a
// labelSelector spread the cluster's pods one per node (the fourth of four
// finds none, on three nodes), the priority class's value is in each pod
// (the apiserver's admission fills spec.priority from it), a cluster
// whose schedulerName nobody serves stays Pending, and one asking for huge
// pages no node has too, the status of each saying why.
func TestPodFieldsScheduling(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns})
	ctx := Context(t, 4*time.Minute)

	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "pgloop-" + ns}, Value: 1000}
	if _, err := env.Kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.Kube.SchedulingV1().PriorityClasses().Delete(cctx, pc.Name, metav1.DeleteOptions{})
	})

	// Four pods, at most one per node (maxSkew 1 with minDomains 4 above
	// three nodes: the global minimum counts as 0), so the fourth finds
	// no node, which the default spreading alone would not refuse.
	const spread = "spread"
	env.CreateCluster(t, ns, spread, 4, func(pg *v1.Postgresql) {
		pg.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule, MinDomains: ptr.To[int32](4)}}
		pg.Spec.PodPriorityClassName = pc.Name
	})
	const unserved = "unserved"
	env.CreateCluster(t, ns, unserved, 1, func(pg *v1.Postgresql) { pg.Spec.SchedulerName = "nobody-runs-this" })
	const huge = "hugepages"
	env.CreateCluster(t, ns, huge, 1, func(pg *v1.Postgresql) {
		q := resource.MustParse("2Mi")
		pg.Spec.Resources = &v1.Resources{Requests: &v1.ResourceDescription{HugePages2Mi: &q}, Limits: &v1.ResourceDescription{HugePages2Mi: &q}}
	})

	pods := mustPods(ctx, t, ns, spread, func(pods []*corev1.Pod) bool {
		n := 0
		for _, p := range pods {
			if ok, _ := testbed.PodReady(p); ok {
				n++
			}
		}
		return len(pods) == 4 && n == 3
	})
	nodes := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			nodes[p.Spec.NodeName] = true
		}
		if p.Spec.Priority == nil || *p.Spec.Priority != 1000 || p.Spec.PriorityClassName != pc.Name {
			t.Errorf("pod %s: priority %v, class %q; want 1000 from %s", p.Name, p.Spec.Priority, p.Spec.PriorityClassName, pc.Name)
		}
		if tsc := p.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].LabelSelector == nil || tsc[0].LabelSelector.MatchLabels[cluster.LabelClusterName] != spread {
			t.Errorf("pod %s: topologySpreadConstraints %+v, want the cluster's selector", p.Name, tsc)
		}
	}
	if len(nodes) != 3 {
		t.Errorf("the three pods placed are on nodes %v, want three different ones", nodes)
	}
	pg, err := env.WaitCluster(ctx, ns, spread, "a reason naming the spread constraint", func(pg *v1.Postgresql) bool {
		return pg.Status.Reason == fsm.ReasonUnschedulable && strings.Contains(pg.Status.Message, "topology spread constraints")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("spread: 3 of 4 pods placed, on %d nodes; priority 1000 in all four; the cluster %s, %s: %s", len(nodes), pg.Status.State, pg.Status.Reason, pg.Status.Message)

	pg, err = env.WaitCluster(ctx, ns, huge, "a reason naming the huge pages", func(pg *v1.Postgresql) bool {
		return pg.Status.Reason == fsm.ReasonUnschedulable && strings.Contains(pg.Status.Message, "Insufficient hugepages-2Mi")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hugepages: %s, %s: %s", pg.Status.State, pg.Status.Reason, pg.Status.Message)

	pg, err = env.WaitCluster(ctx, ns, unserved, "a reason naming the scheduler", func(pg *v1.Postgresql) bool {
		return strings.Contains(pg.Status.Message, `scheduler "nobody-runs-this" (spec.schedulerName) has not tried to place it`)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("unserved: state %s, reason %s: %s", pg.Status.State, pg.Status.Reason, pg.Status.Message)
	p := env.Pod(ctx, t, ns, cluster.StatefulSetName(unserved)+"-0")
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod %s of an unserved scheduler is on %q, %s; want Pending on none", p.Name, p.Spec.NodeName, p.Status.Phase)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPodFieldsLiveness: a liveness probe that fails (a port nothing
// listens on) makes the process kubelet kill the PostgreSQL container and
// restart it, as a kubelet does, which the pod's restart count shows.
func TestPodFieldsLiveness(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "operator", []string{ns})
	const name = "liveness"
	ctx := Context(t, 3*time.Minute)
	env.CreateCluster(t, ns, name, 1, OnProcessNode, func(pg *v1.Postgresql) {
		pg.Spec.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9)}},
			PeriodSeconds: 1, FailureThreshold: 2}
	})
	pods, err := env.WaitPods(ctx, ns, name, func(pods []*corev1.Pod) bool {
		return len(pods) == 1 && len(pods[0].Status.ContainerStatuses) > 0 && pods[0].Status.ContainerStatuses[0].RestartCount >= 1
	})
	if err != nil {
		t.Fatal(err)
	}
	st := pods[0].Status.ContainerStatuses[0]
	if st.LastTerminationState.Terminated == nil {
		t.Errorf("pod %s restarted %d times without a last termination state", pods[0].Name, st.RestartCount)
	}
	t.Logf("pod %s: restart count %d, last termination %+v, now %+v", pods[0].Name, st.RestartCount, st.LastTerminationState.Terminated, st.State)
}

// TestPodFieldsVolumeSelector: a new volume.selector on a running cluster
// re-creates its StatefulSet with the selector in the claim template (a
// StatefulSet's claim templates cannot change in place), as zalando's
// operator replaces it; the pods are kept (orphaned, then adopted), not
// rolled, and the existing claims keep theirs.
func TestPodFieldsVolumeSelector(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns})
	const name = "selector"
	ctx := Context(t, 3*time.Minute)
	env.CreateCluster(t, ns, name, 2)
	env.MustState(ctx, t, ns, name, fsm.Running)
	mustPods(ctx, t, ns, name, ReadyPods(2))
	pods := podUIDs(ctx, t, ns, name)
	sets := env.Kube.AppsV1().StatefulSets(ns)
	before, err := sets.Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	edited, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"volume":{"selector":{"matchLabels":{"tier":"db"}}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitCluster(ctx, ns, name, "Running with the selector", func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Running && pg.Status.ObservedGeneration >= edited.Generation
	}); err != nil {
		t.Fatal(err)
	}
	after, err := sets.Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID == before.UID {
		t.Errorf("the StatefulSet was not re-created (uid %s)", after.UID)
	}
	if sel := after.Spec.VolumeClaimTemplates[0].Spec.Selector; sel == nil || sel.MatchLabels["tier"] != "db" {
		t.Errorf("claim template selector %v, want tier=db", sel)
	}
	samePods(ctx, t, ns, name, pods)
	for _, id := range pods {
		p := env.Pod(ctx, t, ns, id.name)
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != after.UID {
			t.Errorf("pod %s is controlled by %v, want the new StatefulSet %s", p.Name, ref, after.UID)
		}
		claim, err := env.Kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, cluster.DataVolumeName+"-"+p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if claim.Spec.Selector != nil {
			t.Errorf("claim %s now has selector %v; an existing claim keeps its own", claim.Name, claim.Spec.Selector)
		}
	}
	t.Logf("StatefulSet re-created (uid %s -> %s) with selector tier=db; pods %v kept", before.UID, after.UID, pods)
}
