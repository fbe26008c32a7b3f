package informers

import (
	"reflect"
	"runtime/debug"
	"slices"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/facts"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
	"github.com/pgloop/pgloop/pkg/observed"
)

// TestSlimPod shows what the caches keep of a pod as the API returns it.
func TestSlimPod(t *testing.T) {
	full := newAPICluster("db", "c1", 1).pods[0]
	p := full.DeepCopy()
	if _, err := slim(p); err != nil {
		t.Fatal(err)
	}
	meta := *full.ObjectMeta.DeepCopy()
	meta.ManagedFields = nil
	want := &corev1.Pod{ObjectMeta: meta,
		Spec: corev1.PodSpec{NodeName: full.Spec.NodeName, SchedulerName: corev1.DefaultSchedulerName},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: full.Status.Conditions, PodIP: full.Status.PodIP,
			ContainerStatuses: []corev1.ContainerStatus{{Name: cluster.ContainerName, Ready: true, State: full.Status.ContainerStatuses[0].State}}}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("slim pod\n got %+v\nwant %+v", p, want)
	}
	// What it kept is what the facts read: its labels, Patroni's member
	// data and the template hash among its annotations, its owner.
	for _, k := range []string{cluster.LabelClusterName, cluster.LabelRole, "controller-revision-hash"} {
		if p.Labels[k] == "" {
			t.Errorf("label %s dropped", k)
		}
	}
	if p.Annotations["status"] == "" || p.Annotations[cluster.AnnotationPodTemplateHash] == "" || metav1.GetControllerOf(p) == nil {
		t.Errorf("annotations or owner dropped: %v %v", p.Annotations, p.OwnerReferences)
	}
	if len(full.Spec.Containers[0].Env) == 0 || len(full.Spec.Volumes) == 0 || full.Status.ContainerStatuses[0].Image == "" {
		t.Error("the full pod lacks what slim drops: the test shows nothing")
	}
}

// TestSlimStatefulSet shows what the caches keep of a StatefulSet as the
// API returns it: all but its pod template, of which the hash and the
// containers' SPILO_CONFIGURATION; and that the ensure's update of the
// slimmed one, outdated, writes the spec's template whole.
func TestSlimStatefulSet(t *testing.T) {
	c := newAPICluster("db", "c1", 3)
	full := c.statefulSet
	sts := full.DeepCopy()
	if _, err := slim(sts); err != nil {
		t.Fatal(err)
	}
	want := full.DeepCopy()
	want.ManagedFields = nil
	env := full.Spec.Template.Spec.Containers[0].Env
	named := func(name string) corev1.EnvVar {
		return env[slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })]
	}
	want.Spec.Template = corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{cluster.AnnotationPodTemplateHash: cluster.PodTemplateHash(full)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: cluster.ContainerName, Env: []corev1.EnvVar{
			named("DCS_ENABLE_KUBERNETES_API"), named("KUBERNETES_USE_CONFIGMAPS"), named(cluster.SpiloConfigurationVar)}}}},
	}
	if !reflect.DeepEqual(sts, want) {
		t.Errorf("slim statefulset\n got %+v\nwant %+v", sts, want)
	}
	if cluster.BootstrapConfig(sts) == "" || cluster.BootstrapConfig(sts) != cluster.BootstrapConfig(full) {
		t.Errorf("bootstrap configuration %q, want %q", cluster.BootstrapConfig(sts), cluster.BootstrapConfig(full))
	}
	if store, known := cluster.TemplatePatroniStore(sts); !known || store != v1.PatroniStoreConfigMaps {
		t.Errorf("Patroni's store of the slimmed StatefulSet %q, %v; want %q", store, known, v1.PatroniStoreConfigMaps)
	}

	// A new image: the template pgloop writes is the spec's, whole.
	c.pg.Spec.DockerImage = "example.com/spilo:next"
	desired := cluster.StatefulSet(c.pg, cluster.Options{})
	if got := cluster.Compare(sts, desired); got != cluster.ReplacePods {
		t.Fatalf("Compare of the slimmed outdated StatefulSet = %v, want ReplacePods", got)
	}
	if got := cluster.ApplyStatefulSet(sts, desired); !reflect.DeepEqual(got.Spec.Template, desired.Spec.Template) {
		t.Errorf("update of the slimmed StatefulSet writes template %+v, want the spec's", got.Spec.Template)
	}
}

// TestSlimConfigMapsAndPostgresql shows what the caches keep of Patroni's
// ConfigMaps, of a PodDisruptionBudget and of a Postgresql applied with
// kubectl.
func TestSlimConfigMapsAndPostgresql(t *testing.T) {
	c := newAPICluster("db", "c1", 1)
	got := map[string]map[string]string{}
	for _, cm := range c.configMaps {
		if _, err := slim(cm); err != nil {
			t.Fatal(err)
		}
		if cm.ManagedFields != nil || cm.Labels[cluster.LabelClusterName] != "c1" {
			t.Errorf("%s: managed fields %v, labels %v", cm.Name, cm.ManagedFields, cm.Labels)
		}
		got[cm.Name] = cm.Annotations
	}
	want := map[string]map[string]string{
		// The leader record keeps its holder; the renewals (renewTime,
		// optime), the dynamic configuration and the history go.
		"c1-leader": {cluster.AnnotationLeader: "c1-0"}, "c1-config": nil, "c1-failover": nil,
		// Patroni's sync record names a leader too; no one reads it.
		"c1-sync": {cluster.AnnotationLeader: "c1-0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("annotations\n got %v\nwant %v", got, want)
	}

	pdb := c.budget.(*policyv1.PodDisruptionBudget)
	spec := pdb.Spec.DeepCopy()
	if _, err := slim(pdb); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pdb.Status, policyv1.PodDisruptionBudgetStatus{}) || !reflect.DeepEqual(&pdb.Spec, spec) || len(pdb.OwnerReferences) != 1 {
		t.Errorf("budget kept status %+v, spec changed: %v", pdb.Status, !reflect.DeepEqual(&pdb.Spec, spec))
	}

	pg := c.pg
	pg.Annotations[v1.AnnotationSyncRequestedAt] = "2030-01-02T03:04:05Z"
	pgSpec := pg.Spec.DeepCopy()
	if _, err := slim(pg); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{v1.AnnotationSyncRequestedAt: "2030-01-02T03:04:05Z"}; !reflect.DeepEqual(pg.Annotations, want) ||
		pg.ManagedFields != nil || !reflect.DeepEqual(&pg.Spec, pgSpec) || pg.Status.Primary != "c1-0" {
		t.Errorf("postgresql kept annotations %v, managed fields %v, spec and status changed: %v", pg.Annotations, pg.ManagedFields, !reflect.DeepEqual(&pg.Spec, pgSpec))
	}
}

// TestSlimKeepsFacts derives a cluster's facts from its objects as the API
// returns them and from the same objects slimmed: they must be equal
// whatever state the pods are in, or slim dropped something the facts read.
func TestSlimKeepsFacts(t *testing.T) {
	waiting := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: reason + " of the test"}}
	}
	unready := func(p *corev1.Pod) {
		for i := range p.Status.Conditions {
			if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				c.Status = corev1.ConditionFalse
			}
		}
		p.Status.ContainerStatuses[0].Ready = false
	}
	unscheduled := func(p *corev1.Pod) {
		unready(p)
		p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.Status.ContainerStatuses = "", corev1.PodPending, "", nil
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/46 nodes are available: 46 Insufficient memory."}}
	}
	var healthy *fsm.Facts
	for _, tc := range []struct {
		name string
		mod  func(c *apiCluster)
	}{
		{"healthy", func(*apiCluster) {}},
		{"replica not ready", func(c *apiCluster) { unready(c.pods[1]) }},
		{"replica crash loop", func(c *apiCluster) {
			unready(c.pods[1])
			c.pods[1].Status.ContainerStatuses[0].State = waiting("CrashLoopBackOff")
		}},
		{"init container cannot pull", func(c *apiCluster) {
			unready(c.pods[2])
			c.pods[2].Status.Phase = corev1.PodPending
			c.pods[2].Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", Image: "x", State: waiting("ImagePullBackOff")}}
			c.pods[2].Status.ContainerStatuses[0].State = waiting("PodInitializing")
		}},
		{"unschedulable", func(c *apiCluster) { unscheduled(c.pods[2]) }},
		{"scheduler not running", func(c *apiCluster) {
			unscheduled(c.pods[2])
			c.pods[2].Spec.SchedulerName, c.pods[2].Status.Conditions = "my-scheduler", nil
		}},
		{"leader terminating", func(c *apiCluster) {
			c.pods[0].DeletionTimestamp, c.pods[0].DeletionGracePeriodSeconds = ptr.To(fixtures.Ago(time.Second)), ptr.To[int64](300)
		}},
		{"outdated pods", func(c *apiCluster) {
			for _, p := range c.pods {
				p.Annotations[cluster.AnnotationPodTemplateHash] = "0ld"
			}
		}},
		{"leader outdated: a switchover", func(c *apiCluster) {
			c.pods[0].Annotations[cluster.AnnotationPodTemplateHash] = "0ld"
		}},
		{"leader outdated, replicas without member data", func(c *apiCluster) {
			c.pods[0].Annotations[cluster.AnnotationPodTemplateHash] = "0ld"
			delete(c.pods[1].Annotations, "status")
			delete(c.pods[2].Annotations, "status")
		}},
		{"volumes to grow", func(c *apiCluster) { c.pg.Spec.Volume.Size = resource.MustParse("20Gi") }},
		{"a volume resizing", func(c *apiCluster) {
			c.pg.Spec.Volume.Size = resource.MustParse("20Gi")
			for _, cl := range c.claims {
				cl.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("20Gi")
			}
			c.claims[1].Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue}}
		}},
		{"a claim pending", func(c *apiCluster) {
			unscheduled(c.pods[2])
			c.claims[2].Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
			c.claims[2].Spec.VolumeName = ""
		}},
		{"template changed, pods not replaced yet", func(c *apiCluster) {
			c.statefulSet.Spec.Template.Annotations[cluster.AnnotationPodTemplateHash] = "0ld"
			for _, p := range c.pods {
				p.Annotations[cluster.AnnotationPodTemplateHash] = "0ld"
			}
		}},
		{"a new bootstrap configuration (a shared parameter)", func(c *apiCluster) {
			c.pg.Spec.PostgreSQL.Parameters = map[string]string{"work_mem": "8MB"}
		}},
		{"no leader", func(c *apiCluster) { delete(c.configMaps[0].Annotations, cluster.AnnotationLeader) }},
		{"leader not promoted", func(c *apiCluster) {
			c.configMaps[0].Annotations[cluster.AnnotationLeader] = "c1-1"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full, slimmed := newAPICluster("db", "c1", 3), newAPICluster("db", "c1", 3)
			tc.mod(&full)
			tc.mod(&slimmed)
			slimmed.slim(t)
			want := facts.NewDeriver(cluster.Options{}, true).Facts(full.observed(), fixtures.Now)
			got := facts.NewDeriver(cluster.Options{}, true).Facts(slimmed.observed(), fixtures.Now)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("facts of the slimmed objects\n got %+v\nwant %+v", got, want)
			}
			// Each case but the first shows facts of its own.
			if healthy == nil {
				healthy = &want
			} else if reflect.DeepEqual(want, *healthy) {
				t.Errorf("the facts are a healthy cluster's: the case shows nothing")
			}
		})
	}
}

// slim runs every object of c through the caches' transform (slim, then
// share).
func (c apiCluster) slim(t *testing.T) {
	t.Helper()
	objs := []any{c.pg, c.statefulSet, c.budget}
	for _, list := range [][]any{asAny(c.pods), asAny(c.services), asAny(c.secrets), asAny(c.claims), asAny(c.configMaps)} {
		objs = append(objs, list...)
	}
	for _, o := range objs {
		if _, err := transform(o); err != nil {
			t.Fatal(err)
		}
	}
}

// observed returns what the caches' reader (Informers.Objects) hands the
// facts for c: every object the cluster has.
func (c apiCluster) observed() observed.Cluster {
	return observed.Cluster{Postgresql: c.pg, StatefulSet: c.statefulSet, Pods: c.pods, Claims: c.claims,
		Leader: c.configMaps[0], Secrets: c.secrets}
}

// TestShare checks that the caches' transform keeps one copy of the strings
// equal in two clusters' objects, and changes no value.
func TestShare(t *testing.T) {
	// No collection meanwhile: package unique would forget the
	// canonical copies no handle holds (share's comment).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	a, b := newAPICluster("db", "share1", 1), newAPICluster("db", "share2", 1)
	want := a.pods[0].DeepCopy()
	if _, err := slim(want); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{a.pods[0], b.pods[0]} {
		if _, err := transform(p); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := a.pods[0], b.pods[0]
	if !reflect.DeepEqual(pa, want) {
		t.Errorf("shared pod differs from the slim one\n got %+v\nwant %+v", pa, want)
	}
	same := func(what, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q not one copy", what, x, y)
		}
	}
	same("namespace", pa.Namespace, pb.Namespace)
	same("a label value", pa.Labels[cluster.LabelApplication], pb.Labels[cluster.LabelApplication])
	same("a condition type", string(pa.Status.Conditions[0].Type), string(pb.Status.Conditions[0].Type))
	for k := range pa.Labels {
		for k2 := range pb.Labels {
			if k == k2 {
				same("label key "+k, k, k2)
			}
		}
	}
	// Within one cluster: the StatefulSet's name and UID in the pod's
	// owner reference.
	sts := a.statefulSet
	if _, err := transform(sts); err != nil {
		t.Fatal(err)
	}
	same("owner UID", string(pa.OwnerReferences[0].UID), string(sts.UID))
	same("template hash", pa.Annotations[cluster.AnnotationPodTemplateHash], sts.Spec.Template.Annotations[cluster.AnnotationPodTemplateHash])
	if pa.ResourceVersion != "123458" {
		t.Errorf("resourceVersion %q", pa.ResourceVersion)
	}
}
