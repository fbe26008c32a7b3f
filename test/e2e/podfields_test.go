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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
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

	// A new value: a rollout, the primary's pod last after a switchover.
	old := podUIDs(ctx, t, ns, name)
	switchovers := op.LogCount("switched over")
	began := time.Now()
	if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"env":[{"name":"EXTRA_SETTING","value":"two"},{"name":"MY_NAMESPACE","value":"$(POD_NAMESPACE)"}]}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPods(ctx, ns, name, func(pods []*corev1.Pod) bool {
		if !ReadyPods(2)(pods) {
			return false
		}
		for _, p := range pods {
			for _, o := range old {
				if p.UID == o.uid {
					return false
				}
			}
		}
		return true
	}); err != nil {
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
// labelSelector spread the cluster's three pods over the three nodes, the
// priority class's value is in each pod (the apiserver's admission fills
// spec.priority from it), and a cluster whose schedulerName nobody serves
// stays Pending, its status saying why.
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

	const spread = "spread"
	env.CreateCluster(t, ns, spread, 3, func(pg *v1.Postgresql) {
		pg.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule}}
		pg.Spec.PodPriorityClassName = pc.Name
	})
	const unserved = "unserved"
	env.CreateCluster(t, ns, unserved, 1, func(pg *v1.Postgresql) { pg.Spec.SchedulerName = "nobody-runs-this" })

	env.MustState(ctx, t, ns, spread, fsm.Running)
	pods := mustPods(ctx, t, ns, spread, ReadyPods(3))
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.Spec.NodeName] = true
		if p.Spec.Priority == nil || *p.Spec.Priority != 1000 || p.Spec.PriorityClassName != pc.Name {
			t.Errorf("pod %s: priority %v, class %q; want 1000 from %s", p.Name, p.Spec.Priority, p.Spec.PriorityClassName, pc.Name)
		}
		if tsc := p.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].LabelSelector == nil || tsc[0].LabelSelector.MatchLabels[cluster.LabelClusterName] != spread {
			t.Errorf("pod %s: topologySpreadConstraints %+v, want the cluster's selector", p.Name, tsc)
		}
	}
	if len(nodes) != 3 {
		t.Errorf("the three pods are on nodes %v, want three different ones", nodes)
	}
	t.Logf("spread: pods on %d nodes, priority 1000", len(nodes))

	pg, err := env.WaitCluster(ctx, ns, unserved, "a reason naming the scheduler", func(pg *v1.Postgresql) bool {
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
