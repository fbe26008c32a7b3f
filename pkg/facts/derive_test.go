package facts

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestFacts feeds a cluster's objects to a Deriver and checks the facts it
// derives.
func TestFacts(t *testing.T) {
	pg := newPG("c1", 3)
	sts := statefulSet(pg)
	// healthy is the StatefulSet, the leader record naming c1-0 and three
	// Ready pods, c1-0 labelled master.
	healthy := func(mods ...map[int32]func(*corev1.Pod)) []runtime.Object {
		objs := []runtime.Object{sts, lock(pg, "c1-0")}
		for ord := range int32(3) {
			var fs []func(*corev1.Pod)
			if ord == 0 {
				fs = append(fs, master)
			}
			for _, m := range mods {
				if f := m[ord]; f != nil {
					fs = append(fs, f)
				}
			}
			objs = append(objs, pod(pg, ord, fs...))
		}
		return objs
	}
	running := fsm.Facts{Generation: 1, Desired: 3, Ready: 3, Primary: "c1-0", ObjectsCurrent: true}
	with := func(f fsm.Facts, mod func(*fsm.Facts)) fsm.Facts { mod(&f); return f }
	// record replaces healthy's leader record; nil removes it.
	record := func(objs []runtime.Object, cm *corev1.ConfigMap) []runtime.Object {
		objs = slices.Clone(objs)
		if cm == nil {
			return slices.Delete(objs, 1, 2)
		}
		objs[1] = cm
		return objs
	}
	notLabelled := lock(pg, "c1-0")
	notLabelled.Labels = map[string]string{cluster.LabelApplication: cluster.ApplicationSpilo, cluster.LabelClusterName: "other"}
	quota := `create Pod c1-2 in StatefulSet c1 failed error: pods "c1-2" is forbidden: exceeded quota: small, requested: cpu=1, used: cpu=2, limited: cpu=2`
	invalid := newPG("c1", 3)
	invalid.Spec.PostgreSQL.Version = "9"
	deleting := newPG("c1", 3)
	deleting.DeletionTimestamp = ptr.To(ago(time.Second))
	deleting.Finalizers = []string{"pgloop.dev/cleanup"}
	scaledUp := newPG("c1", 4)
	scaledUp.Generation = 2
	longMessage := strings.Repeat("é", 400)
	newImage := newPG("c1", 3)
	newImage.Generation = 2
	newImage.Spec.DockerImage = "spilo:next"
	inClass := newPG("c1", 3)
	inClass.Spec.Volume.StorageClass = "fast"

	tests := []struct {
		name string
		pg   *v1.Postgresql
		objs []runtime.Object
		want fsm.Facts
	}{
		{name: "new cluster without objects", pg: pg,
			want: fsm.Facts{Generation: 1, Desired: 3, NoPrimary: "Patroni has not written its leader record c1-leader yet"}},
		{name: "all ready with a master", pg: pg, objs: healthy(), want: running},
		// The primary is the lock holder, whatever the labels say.
		{name: "master label on two pods, the lock on one", pg: pg, objs: healthy(map[int32]func(*corev1.Pod){1: master}),
			want: running},
		{name: "the lock holder not Ready", pg: pg, objs: healthy(map[int32]func(*corev1.Pod){0: notReady}),
			want: with(running, func(f *fsm.Facts) {
				f.Primary, f.NoPrimary, f.Ready = "", "the leader pod c1-0 is not Ready", 2
			})},
		{name: "the lock holder terminating", pg: pg, objs: healthy(map[int32]func(*corev1.Pod){0: terminating}),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, NoPrimary: "the leader pod c1-0 is terminating"}},
		{name: "no leader record: the master label alone is no primary", pg: pg, objs: record(healthy(), nil),
			want: with(running, func(f *fsm.Facts) {
				f.Primary, f.NoPrimary = "", "Patroni has not written its leader record c1-leader yet"
			})},
		{name: "a record not labelled for the cluster is none", pg: pg, objs: record(healthy(), notLabelled),
			want: with(running, func(f *fsm.Facts) {
				f.Primary, f.NoPrimary = "", "Patroni has not written its leader record c1-leader yet"
			})},
		{name: "a record that names no member", pg: pg, objs: record(healthy(), lock(pg, "")),
			want: with(running, func(f *fsm.Facts) {
				f.Primary, f.NoPrimary = "", "no member holds Patroni's leader lock (c1-leader)"
			})},
		{name: "a record naming a pod that does not exist", pg: pg, objs: record(healthy(), lock(pg, "c1-7")),
			want: with(running, func(f *fsm.Facts) {
				f.Primary, f.NoPrimary = "", "the leader c1-7 named by c1-leader has no pod"
			})},
		{name: "failover: the new holder not promoted yet, the killed leader keeps its label", pg: pg,
			objs: record(healthy(map[int32]func(*corev1.Pod){0: notReady}), lock(pg, "c1-1")),
			want: with(running, func(f *fsm.Facts) {
				f.Primary, f.Ready = "", 2
				f.NoPrimary = "the leader pod c1-1 is not promoted yet (not labelled spilo-role=master)"
			})},
		{name: "failover: the new holder promoted while the killed leader keeps its label", pg: pg,
			objs: record(healthy(map[int32]func(*corev1.Pod){0: notReady, 1: master}), lock(pg, "c1-1")),
			want: with(running, func(f *fsm.Facts) { f.Primary, f.Ready = "c1-1", 2 })},
		{name: "failover: the new holder, both labelled, both Ready", pg: pg,
			objs: record(healthy(map[int32]func(*corev1.Pod){1: master}), lock(pg, "c1-1")),
			want: with(running, func(f *fsm.Facts) { f.Primary = "c1-1" })},
		{name: "unschedulable pod", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){2: unschedulable("0/3 nodes are available: 3 Insufficient cpu.")}),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.StuckReason, f.Stuck = 2, "Unschedulable", "pod c1-2: 0/3 nodes are available: 3 Insufficient cpu."
			})},
		{name: "unschedulable before crash loop, whatever the pod order", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){
				1: waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container=postgres"),
				2: unschedulable("0/3 nodes are available"),
			}),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.StuckReason, f.Stuck = 1, "Unschedulable", "pod c1-2: 0/3 nodes are available"
			})},
		{name: "crash loop", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){1: waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container=postgres")}),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.StuckReason, f.Stuck = 2, "CrashLoopBackOff", "pod c1-1: back-off 5m0s restarting failed container=postgres"
			})},
		{name: "image pull back-off in an init container, long message truncated", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){1: func(p *corev1.Pod) {
				notReady(p)
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{
					Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: longMessage}}}}
			}}),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.StuckReason = 2, "ImagePullBackOff"
				f.Stuck = truncate("pod c1-1: " + longMessage)
			})},
		{name: "a waiting reason that passes by itself is no cause", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){1: waiting("ContainerCreating", "")}),
			want: with(running, func(f *fsm.Facts) { f.Ready = 2 })},
		{name: "volume pending", pg: pg,
			objs: append(healthy(map[int32]func(*corev1.Pod){2: func(p *corev1.Pod) {
				p.Status = corev1.PodStatus{Phase: corev1.PodPending}
			}}), claim(pg, 0, corev1.ClaimBound), claim(pg, 2, corev1.ClaimPending), claim(pg, 5, corev1.ClaimPending)),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.StuckReason, f.Stuck = 2, "VolumePending", "persistentvolumeclaim pgdata-c1-2 (the default storage class) is Pending"
			})},
		{name: "a claim that cannot bind says why, before its pod's scheduler message", pg: pg,
			objs: append(healthy(map[int32]func(*corev1.Pod){
				2: unschedulable("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"),
			}), claim(pg, 2, corev1.ClaimPending, withClass("standard")),
				claimEvent(pg, 2, "ProvisioningFailed", `failed to provision volume with StorageClass "standard": timeout`)),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.StuckReason = 2, "VolumePending"
				f.Stuck = `persistentvolumeclaim pgdata-c1-2 (storage class "standard") is Pending: ProvisioningFailed: failed to provision volume with StorageClass "standard": timeout`
			})},
		{name: "outdated pods that run nothing are all replaced at once, the one that runs waits", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){
				0: outdated,
				1: func(p *corev1.Pod) { unschedulable("0/3 nodes are available")(p); outdated(p) },
				2: func(p *corev1.Pod) { waiting("CrashLoopBackOff", "back-off")(p); outdated(p) },
			}),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.ObjectsCurrent, f.Outdated = 1, false, 3
				f.StuckReason, f.Stuck = "Unschedulable", "pod c1-1: 0/3 nodes are available"
				f.Replace = []fsm.PodRef{{Name: "c1-1", UID: "c1-1-uid"}, {Name: "c1-2", UID: "c1-2-uid"}}
			})},
		{name: "a running pod that is not Ready is no idle pod", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){1: func(p *corev1.Pod) { notReady(p); outdated(p) }, 2: outdated}),
			want: with(running, func(f *fsm.Facts) { f.Ready, f.ObjectsCurrent, f.Outdated, f.RolloutStarted = 2, false, 2, true })},
		{name: "a never-bound claim of another class than the StatefulSet's is replaced with its pod", pg: inClass,
			objs: []runtime.Object{statefulSet(inClass), lock(inClass, "c1-0"), pod(inClass, 0, master), pod(inClass, 1),
				pod(inClass, 2, unschedulable("pod has unbound immediate PersistentVolumeClaims")),
				claim(inClass, 2, corev1.ClaimPending, withClass("missing"))},
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.ObjectsCurrent, f.Outdated = 2, false, 1
				f.StuckReason, f.Stuck = "Unschedulable", "pod c1-2: pod has unbound immediate PersistentVolumeClaims"
				f.Replace = []fsm.PodRef{{Name: "c1-2", UID: "c1-2-uid", Claim: "pgdata-c1-2", ClaimUID: "pgdata-c1-2-uid"}}
			})},
		{name: "no claim is replaced before the StatefulSet asks for the new class", pg: inClass,
			objs: []runtime.Object{statefulSet(pg), lock(inClass, "c1-0"), pod(inClass, 0, master), pod(inClass, 1),
				pod(inClass, 2, unschedulable("pod has unbound immediate PersistentVolumeClaims")),
				claim(inClass, 2, corev1.ClaimPending, withClass("missing"))},
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.ObjectsCurrent = 2, false
				f.StuckReason, f.Stuck = "Unschedulable", "pod c1-2: pod has unbound immediate PersistentVolumeClaims"
			})},
		{name: "with the default class, a claim of a class that does not exist is replaced", pg: pg,
			objs: append(healthy(map[int32]func(*corev1.Pod){2: unschedulable("unbound")}),
				claim(pg, 2, corev1.ClaimPending, withClass("missing")),
				claimEvent(pg, 2, "ProvisioningFailed", `storageclass.storage.k8s.io "missing" not found`)),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.ObjectsCurrent, f.Outdated, f.StuckReason = 2, false, 1, "VolumePending"
				f.Stuck = `persistentvolumeclaim pgdata-c1-2 (storage class "missing") is Pending: ProvisioningFailed: storageclass.storage.k8s.io "missing" not found`
				f.Replace = []fsm.PodRef{{Name: "c1-2", UID: "c1-2-uid", Claim: "pgdata-c1-2", ClaimUID: "pgdata-c1-2-uid"}}
			})},
		{name: "with the default class, a claim waiting for its provisioner is left alone", pg: pg,
			objs: append(healthy(map[int32]func(*corev1.Pod){2: unschedulable("unbound")}),
				claim(pg, 2, corev1.ClaimPending, withClass("standard"))),
			want: with(running, func(f *fsm.Facts) {
				f.Ready, f.StuckReason, f.Stuck = 2, "Unschedulable", "pod c1-2: unbound"
			})},
		{name: "a pending claim left from a scale-down is no cause", pg: pg,
			objs: append(healthy(map[int32]func(*corev1.Pod){2: notReady}), claim(pg, 5, corev1.ClaimPending)),
			want: with(running, func(f *fsm.Facts) { f.Ready = 2 })},
		{name: "quota FailedCreate event", pg: pg,
			objs: append(healthy()[:4],
				event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", quota, 30*time.Minute),
				event(sts, "e2", corev1.EventTypeWarning, "FailedCreate", quota, time.Minute),
				event(sts, "e3", corev1.EventTypeNormal, "SuccessfulCreate", "create Pod c1-1 in StatefulSet c1 successful", 0)),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-0", StuckReason: "QuotaExceeded", Stuck: quota,
				Nudge: quotaVersionOf()}},
		{name: "quota changed since the StatefulSet was nudged", pg: pg,
			objs: append([]runtime.Object{nudged(sts, "old")}, append(healthy()[1:4], resourceQuota("q", "7"),
				event(sts, "e2", corev1.EventTypeWarning, "FailedCreate", quota, time.Minute))...),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-0", StuckReason: "QuotaExceeded", Stuck: quota,
				Nudge: quotaVersionOf(resourceQuota("q", "7"))}},
		{name: "quota unchanged since the StatefulSet was nudged", pg: pg,
			objs: append([]runtime.Object{nudged(sts, quotaVersionOf(resourceQuota("q", "7")))}, append(healthy()[1:4], resourceQuota("q", "7"),
				event(sts, "e2", corev1.EventTypeWarning, "FailedCreate", quota, time.Minute))...),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-0", StuckReason: "QuotaExceeded", Stuck: quota}},
		{name: "other FailedCreate event", pg: pg,
			objs: append(healthy()[:4], event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", "admission webhook denied the request", time.Minute)),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-0", StuckReason: "FailedCreate", Stuck: "admission webhook denied the request"}},
		{name: "FailedCreate newer than the last pod counts however old", pg: pg,
			objs: append(healthy()[:4], event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", quota, 50*time.Minute)),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-0", StuckReason: "QuotaExceeded", Stuck: quota,
				Nudge: quotaVersionOf()}},
		{name: "FailedCreate older than the last pod but within 10 minutes is a stale cause", pg: pg,
			objs: append(healthy(map[int32]func(*corev1.Pod){1: func(p *corev1.Pod) { p.CreationTimestamp = ago(30 * time.Second) }})[:4],
				event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", quota, time.Minute)),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-0", StuckReason: "QuotaExceeded", Stuck: quota,
				StuckStale: true, Nudge: quotaVersionOf()}},
		{name: "FailedCreate older than the last pod and than 10 minutes is stale", pg: pg,
			objs: append(healthy()[:4], event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", quota, 2*time.Hour)),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-0"}},
		{name: "FailedCreate of a former StatefulSet of the same name is ignored", pg: pg,
			objs: append(healthy()[:4], func() runtime.Object {
				e := event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", quota, time.Minute)
				e.InvolvedObject.UID = "former"
				return e
			}()),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-0"}},
		{name: "FailedCreate while no pod is missing is no cause", pg: pg,
			objs: append(healthy(map[int32]func(*corev1.Pod){2: notReady}),
				event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", quota, time.Minute)),
			want: with(running, func(f *fsm.Facts) { f.Ready = 2 })},
		{name: "outdated pods: a replica first", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){0: outdated, 1: outdated, 2: outdated}),
			want: with(running, func(f *fsm.Facts) {
				f.ObjectsCurrent, f.Outdated, f.Replace, f.ReplaceRunning = false, 3, []fsm.PodRef{{Name: "c1-1", UID: "c1-1-uid"}}, true
			})},
		{name: "outdated pods: the lowest replica ordinal first", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){0: outdated, 2: outdated}),
			want: with(running, func(f *fsm.Facts) {
				f.ObjectsCurrent, f.Outdated, f.Replace, f.ReplaceRunning = false, 2, []fsm.PodRef{{Name: "c1-2", UID: "c1-2-uid"}}, true
				f.RolloutStarted = true
			})},
		{name: "outdated pods: the primary last", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){0: outdated}),
			want: with(running, func(f *fsm.Facts) {
				f.ObjectsCurrent, f.Outdated, f.Replace, f.ReplaceRunning = false, 1, []fsm.PodRef{{Name: "c1-0", UID: "c1-0-uid"}}, true
				f.RolloutStarted = true
			})},
		{name: "outdated pods: the lock holder last, not the pod labelled master", pg: pg,
			objs: record(healthy(map[int32]func(*corev1.Pod){0: outdated, 1: outdated}), lock(pg, "c1-0")),
			want: with(running, func(f *fsm.Facts) {
				f.ObjectsCurrent, f.Outdated, f.Replace, f.ReplaceRunning = false, 2, []fsm.PodRef{{Name: "c1-1", UID: "c1-1-uid"}}, true
				f.RolloutStarted = true
			})},
		{name: "outdated pods: a former master's label does not put it last", pg: pg,
			objs: record(healthy(map[int32]func(*corev1.Pod){0: outdated, 1: func(p *corev1.Pod) { outdated(p); master(p) }}), lock(pg, "c1-1")),
			want: with(running, func(f *fsm.Facts) {
				f.Primary, f.ObjectsCurrent, f.Outdated, f.Replace = "c1-1", false, 2, []fsm.PodRef{{Name: "c1-0", UID: "c1-0-uid"}}
				f.ReplaceRunning, f.RolloutStarted = true, true
			})},
		{name: "outdated pods: nothing replaced while one is not ready", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){0: outdated, 1: outdated, 2: notReady}),
			want: with(running, func(f *fsm.Facts) { f.ObjectsCurrent, f.Outdated, f.Ready, f.RolloutStarted = false, 2, 2, true })},
		{name: "outdated pods: a rollout under way, its replaced pod not made yet", pg: pg,
			objs: slices.Delete(healthy(map[int32]func(*corev1.Pod){0: outdated, 2: outdated}), 3, 4),
			want: with(running, func(f *fsm.Facts) { f.ObjectsCurrent, f.Outdated, f.Ready, f.RolloutStarted = false, 2, 2, true })},
		{name: "outdated pods: a rollout under way, its replaced pod terminating", pg: pg,
			objs: healthy(map[int32]func(*corev1.Pod){0: outdated, 1: func(p *corev1.Pod) { terminating(p); outdated(p) }, 2: outdated}),
			want: with(running, func(f *fsm.Facts) { f.ObjectsCurrent, f.Outdated, f.Ready, f.RolloutStarted = false, 2, 2, true })},
		{name: "outdated pods scaled away start no rollout", pg: newPG("c1", 2),
			objs: healthy(map[int32]func(*corev1.Pod){2: outdated}),
			want: fsm.Facts{Generation: 1, Desired: 2, Ready: 3, Primary: "c1-0", Outdated: 1}},
		{name: "terminating pods not counted", pg: pg,
			objs: record(healthy(map[int32]func(*corev1.Pod){
				0: func(p *corev1.Pod) { terminating(p); outdated(p) },
				1: master,
			}), lock(pg, "c1-1")),
			want: fsm.Facts{Generation: 1, Desired: 3, Ready: 2, Primary: "c1-1"}},
		{name: "StatefulSet not yet observed by its controller", pg: pg,
			objs: append([]runtime.Object{func() runtime.Object {
				s := statefulSet(pg)
				s.Generation = 2
				return s
			}()}, healthy()[1:]...),
			want: with(running, func(f *fsm.Facts) { f.ObjectsCurrent = false })},
		// The template the StatefulSet is to get makes every pod outdated:
		// a rollout is due (fsm.Facts.TemplateChanged)...
		{name: "the pod template to change", pg: newImage, objs: healthy(),
			want: with(running, func(f *fsm.Facts) { f.Generation, f.ObjectsCurrent, f.TemplateChanged = 2, false, true })},
		// ... once every pod serves; a pod that is not Ready is the
		// StatefulSet controller's or the stuck pods' business first.
		{name: "the pod template to change, a pod not Ready", pg: newImage, objs: healthy(map[int32]func(*corev1.Pod){2: notReady}),
			want: with(running, func(f *fsm.Facts) { f.Generation, f.ObjectsCurrent, f.Ready = 2, false, 2 })},
		// An adopted StatefulSet, before the ensure writes pgloop's
		// template: its pods carry the hash it will have, and none is a
		// rollout's, even one that is not Ready.
		{name: "adopted: no pod template hash on the statefulset yet", pg: pg,
			objs: append([]runtime.Object{func() *appsv1.StatefulSet {
				s := sts.DeepCopy()
				delete(s.Spec.Template.Annotations, cluster.AnnotationPodTemplateHash)
				return s
			}()}, healthy(map[int32]func(*corev1.Pod){2: notReady})[1:]...),
			want: with(running, func(f *fsm.Facts) { f.ObjectsCurrent, f.Ready = false, 2 })},
		{name: "scaled up: replicas differ", pg: scaledUp, objs: healthy(),
			want: fsm.Facts{Generation: 2, Desired: 4, Ready: 3, Primary: "c1-0"}},
		{name: "invalid spec", pg: invalid, objs: healthy(),
			want: with(running, func(f *fsm.Facts) {
				f.ObjectsCurrent = false
				f.SpecError = invalid.Validate().ToAggregate().Error()
			})},
		{name: "deleting", pg: deleting, objs: healthy(),
			want: with(running, func(f *fsm.Facts) { f.Deleting = true })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := objects(tt.pg, tt.objs...)
			got := podFacts(NewDeriver(cluster.Options{}, true).Facts(objs, now))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("facts\n got %+v\nwant %+v", got, tt.want)
			}
			// The pods come in any order: the facts are the same.
			slices.Reverse(objs.Pods)
			if got := podFacts(NewDeriver(cluster.Options{}, true).Facts(objs, now)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("facts of the pods in reverse order\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestDeriveCached checks that the spec is validated and the desired
// StatefulSet built once per (UID, generation), not per pod event.
func TestDeriveCached(t *testing.T) {
	d := NewDeriver(cluster.Options{}, true)
	pg := newPG("c1", 3)
	d1 := d.derive(pg)
	sts1 := d.desiredStatefulSet(d1, pg)

	same := pg.DeepCopy()
	same.Spec.PostgreSQL.Version = "9" // not how specs change, but shows no re-validation
	if s := d.derive(same); s != d1 || s.specError != "" || d.desiredStatefulSet(s, same) != sts1 {
		t.Errorf("re-derived at the same generation")
	}

	next := same.DeepCopy()
	next.Generation = 2
	d2 := d.derive(next)
	if d2 == d1 || d2.specError == "" || !strings.Contains(d2.specError, "spec.postgresql.version") {
		t.Errorf("generation 2: %+v", d2)
	}

	recreated := pg.DeepCopy()
	recreated.UID = "new"
	recreated.Generation = 2
	if s := d.derive(recreated); s == d2 || s.specError != "" {
		t.Errorf("a new UID reused the old derivation")
	}

	other := newPG("c2", 3)
	if s := d.derive(other); s == d1 || s == d2 {
		t.Errorf("another cluster reused c1's derivation")
	}
	d.Forget("db/c1")
	if len(d.memo) != 1 || d.memo[types.NamespacedName{Namespace: "db", Name: "c2"}] == nil {
		t.Errorf("forget of db/c1 left %v", d.memo)
	}
}

// TestDesiredWithBuildOptions checks that the desired StatefulSet is built
// with the Deriver's options: a StatefulSet the effects built with other
// options than the defaults is current.
func TestDesiredWithBuildOptions(t *testing.T) {
	build := cluster.Options{Image: "registry.example/spilo:custom"}
	pg := newPG("c1", 1)
	sts := cluster.StatefulSet(pg, build)
	sts.Generation, sts.Status.ObservedGeneration = 1, 1
	p := pod(pg, 0, master)
	p.Annotations[cluster.AnnotationPodTemplateHash] = cluster.PodTemplateHash(sts)
	objs := objects(pg, sts, lock(pg, "c1-0"), p)
	if f := NewDeriver(build, true).Facts(objs, now); !f.ObjectsCurrent {
		t.Errorf("built with the effects' options: not current: %+v", f)
	}
	if f := NewDeriver(cluster.Options{}, true).Facts(objs, now); f.ObjectsCurrent {
		t.Errorf("built with other options than the effects': current: %+v", f)
	}
}

// TestKnownStatefulSet checks what the Deriver tells the effects of a
// desired StatefulSet: nothing until the facts of that generation built
// it, then the summary of the one the effects would build with the same
// options, and nothing again for another generation or UID, or once the
// cluster is forgotten.
func TestKnownStatefulSet(t *testing.T) {
	build := cluster.Options{Image: "registry.example/spilo:custom"}
	pg := newPG("c1", 1)
	d := NewDeriver(build, true)
	if _, ok := d.KnownStatefulSet(pg); ok {
		t.Fatal("known before any facts")
	}
	// No pod yet: the facts build no desired StatefulSet.
	d.Facts(objects(pg), now)
	if _, ok := d.KnownStatefulSet(pg); ok {
		t.Fatal("known after facts that did not build it")
	}
	sts := cluster.StatefulSet(pg, build)
	sts.Generation, sts.Status.ObservedGeneration = 1, 1
	p := pod(pg, 0, master)
	p.Annotations[cluster.AnnotationPodTemplateHash] = cluster.PodTemplateHash(sts)
	if f := d.Facts(objects(pg, sts, lock(pg, "c1-0"), p), now); !f.ObjectsCurrent {
		t.Fatalf("not current: %+v", f)
	}
	got, ok := d.KnownStatefulSet(pg)
	if !ok {
		t.Fatal("not known after the facts built it")
	}
	if want := cluster.Summarize(cluster.StatefulSet(pg, build)); !reflect.DeepEqual(got, want) {
		t.Errorf("known summary differs from the effects' build")
	}
	if cluster.CompareSummary(sts, got) != cluster.NoChange {
		t.Errorf("the StatefulSet as built does not match the known summary")
	}
	next := pg.DeepCopy()
	next.Generation = 2
	recreated := pg.DeepCopy()
	recreated.UID = "new"
	for name, other := range map[string]*v1.Postgresql{"generation 2": next, "new UID": recreated} {
		if _, ok := d.KnownStatefulSet(other); ok {
			t.Errorf("%s: known from the first generation's facts", name)
		}
	}
	d.Forget("db/c1")
	if _, ok := d.KnownStatefulSet(pg); ok {
		t.Error("known once forgotten")
	}
}

// TestCompareWithSummary checks that the facts, which keep only a summary
// of the desired StatefulSet (cluster.Summarize), say what cluster.Compare
// of the cached StatefulSet with the whole desired one says, for each
// change Compare tells apart: current for NoChange alone, a template
// changed for ReplacePods alone.
func TestCompareWithSummary(t *testing.T) {
	pg := newPG("c1", 1)
	tests := []struct {
		name string
		edit func(sts *appsv1.StatefulSet)
		want cluster.Change
	}{
		{name: "as built", edit: func(*appsv1.StatefulSet) {}, want: cluster.NoChange},
		{name: "a label of pgloop's changed", edit: func(sts *appsv1.StatefulSet) { sts.Labels[cluster.LabelManagedBy] = "helm" },
			want: cluster.UpdateInPlace},
		{name: "update strategy", edit: func(sts *appsv1.StatefulSet) {
			sts.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		}, want: cluster.UpdateInPlace},
		{name: "another template", edit: func(sts *appsv1.StatefulSet) {
			sts.Spec.Template.Annotations[cluster.AnnotationPodTemplateHash] = "other"
		}, want: cluster.ReplacePods},
		{name: "another storage class", edit: func(sts *appsv1.StatefulSet) {
			sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName = ptr.To("fast")
		}, want: cluster.Recreate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := cluster.StatefulSet(pg, cluster.Options{})
			tt.edit(sts)
			sts.Generation, sts.Status.ObservedGeneration = 1, 1
			if got := cluster.Compare(sts, cluster.StatefulSet(pg, cluster.Options{})); got != tt.want {
				t.Fatalf("Compare with the whole desired StatefulSet = %v, want %v", got, tt.want)
			}
			p := pod(pg, 0, master)
			p.Annotations[cluster.AnnotationPodTemplateHash] = cluster.PodTemplateHash(sts)
			f := NewDeriver(cluster.Options{}, true).Facts(objects(pg, sts, lock(pg, "c1-0"), p), now)
			if f.ObjectsCurrent != (tt.want == cluster.NoChange) || f.TemplateChanged != (tt.want == cluster.ReplacePods) {
				t.Errorf("%v: ObjectsCurrent %v, TemplateChanged %v", tt.want, f.ObjectsCurrent, f.TemplateChanged)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("a", maxMessage), strings.Repeat("a", maxMessage+1), strings.Repeat("€", 200)} {
		got := truncate(s)
		if len(s) <= maxMessage && got != s {
			t.Errorf("truncate(%q) = %q", s, got)
		}
		if len(s) > maxMessage && (len(got) > maxMessage+3 || !strings.HasSuffix(got, "...") || !strings.HasPrefix(s, strings.TrimSuffix(got, "..."))) {
			t.Errorf("truncate(%d bytes) = %q", len(s), got)
		}
		if !utf8Valid(got) {
			t.Errorf("truncate cut a rune: %q", got)
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// BenchmarkFacts measures the facts of a healthy 3-pod cluster, the loop's
// hot path: every event of every cluster starts with them.
func BenchmarkFacts(b *testing.B) {
	pg := newPG("c1", 3)
	objs := objects(pg, statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1), pod(pg, 2))
	d := NewDeriver(cluster.Options{}, true)
	if f := d.Facts(objs, now); !f.ObjectsCurrent || f.Primary != "c1-0" {
		b.Fatalf("not a healthy cluster: %+v", f)
	}
	b.ReportAllocs()
	for b.Loop() {
		d.Facts(objs, now)
	}
}

// BenchmarkFactsCold measures the first facts of a cluster in a process:
// what a restart pays for each cluster it resumes (the desired StatefulSet
// built once).
func BenchmarkFactsCold(b *testing.B) {
	pg := newPG("c1", 3)
	objs := objects(pg, statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1), pod(pg, 2))
	b.ReportAllocs()
	for b.Loop() {
		NewDeriver(cluster.Options{}, true).Facts(objs, now)
	}
}
