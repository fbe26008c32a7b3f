package status

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// now is the fixed clock of every golden file.
var now = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d)) }

func atp(d time.Duration) *metav1.Time { t := at(d); return &t }

func cond(typ string, on bool, reason, msg string, ago time.Duration) metav1.Condition {
	s := metav1.ConditionFalse
	if on {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, LastTransitionTime: at(-ago)}
}

// conds are the three conditions the machine keeps, for a cluster in
// state with reason and message.
func conds(state, reason, msg string, ago time.Duration) []metav1.Condition {
	return []metav1.Condition{
		cond(v1.ConditionReady, state == fsm.Running, reason, msg, ago),
		cond(v1.ConditionProgressing, state == fsm.Creating || state == fsm.Updating || state == fsm.Deleting, reason, msg, ago),
		cond(v1.ConditionDegraded, state == fsm.Degraded || state == fsm.Invalid, reason, msg, ago),
	}
}

func newPG(ns, name string, instances int32, created time.Duration) *v1.Postgresql {
	return &v1.Postgresql{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + name), Generation: 1, ResourceVersion: "1",
			CreationTimestamp: at(-created),
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
		},
		Spec: v1.PostgresqlSpec{
			TeamID:            "acid",
			NumberOfInstances: instances,
			PostgreSQL:        v1.PostgresqlParam{Version: "17"},
			Volume:            v1.Volume{Size: resource.MustParse("1Gi")},
		},
	}
}

func setStatus(pg *v1.Postgresql, state string, since time.Duration, epoch int64, reason, msg string, ready, desired int32, primary string) {
	pg.Status.State = state
	pg.Status.StateSince = atp(-since)
	pg.Status.Epoch = epoch
	pg.Status.ObservedGeneration = pg.Generation
	pg.Status.Reason, pg.Status.Message = reason, msg
	pg.Status.ReadyInstances, pg.Status.DesiredInstances = ready, desired
	pg.Status.Primary = primary
	pg.Status.Conditions = conds(state, reason, msg, since)
}

func timer(name string, in time.Duration, epoch int64) v1.Timer {
	return v1.Timer{Name: name, Deadline: at(in), Epoch: epoch}
}

func hist(from, to, event, reason string, ago time.Duration) v1.Transition {
	return v1.Transition{From: from, To: to, Event: event, Reason: reason, Time: at(-ago)}
}

const unschedulable = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."

// clusters returns one cluster in every state a resource can be seen in.
// The Degraded one lives in another namespace, for -A.
func clusters() []*v1.Postgresql {
	pending := newPG("default", "db-pending", 2, 5*time.Second)

	invalid := newPG("default", "db-invalid", 1, 2*time.Minute+10*time.Second)
	setStatus(invalid, fsm.Invalid, 2*time.Minute, 1, fsm.ReasonInvalidSpec,
		`spec.postgresql.parameters[listen_addresses]: Forbidden: set by pgloop`, 0, 1, "")
	invalid.Status.History = []v1.Transition{hist(fsm.Pending, fsm.Invalid, fsm.EventInvalidSpec, fsm.ReasonInvalidSpec, 2*time.Minute)}

	creating := newPG("default", "db-creating", 3, 46*time.Second)
	setStatus(creating, fsm.Creating, 45*time.Second, 1, fsm.ReasonCreating, "creating 3 instances", 1, 3, "db-creating-0")
	creating.Status.Timers = []v1.Timer{timer(fsm.TimerTimeout, 9*time.Minute+15*time.Second, 1)}
	creating.Status.History = []v1.Transition{hist(fsm.Pending, fsm.Creating, fsm.EventCreate, fsm.ReasonCreating, 45*time.Second)}

	running := newPG("default", "db-running", 3, 3*time.Hour+5*time.Minute)
	setStatus(running, fsm.Running, 3*time.Hour, 2, fsm.ReasonReady, "3/3 instances ready, primary db-running-0", 3, 3, "db-running-0")
	running.Status.Timers = []v1.Timer{timer(fsm.TimerResync, 4*time.Minute+12*time.Second, 2)}
	running.Status.Backup = &v1.BackupStatus{
		Repository: "s3://backups/pgloop/default/db-running/3f2a at s3.example.com",
		Archiving: &v1.ArchivingStatus{
			CheckedAt: metav1.NewTime(now.Add(-12 * time.Second)), LastArchivedWAL: "00000002000000000000004B",
			LastArchivedTime: &metav1.Time{Time: now.Add(-48 * time.Second)}, WaitingSegments: 0, WALBytes: 80 << 20,
		},
	}
	running.Status.Conditions = append(running.Status.Conditions, metav1.Condition{
		Type: v1.ConditionContinuousArchiving, Status: metav1.ConditionTrue, Reason: fsm.ReasonArchiving,
		Message:            "archiving to s3://backups/pgloop/default/db-running/3f2a at s3.example.com; last segment 00000002000000000000004B",
		LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Hour)),
	})
	running.Status.History = []v1.Transition{
		hist(fsm.Pending, fsm.Creating, fsm.EventCreate, fsm.ReasonCreating, 3*time.Hour+5*time.Minute),
		hist(fsm.Creating, fsm.Running, fsm.EventPodsReady, fsm.ReasonReady, 3*time.Hour),
	}

	updating := newPG("default", "db-updating", 3, 2*24*time.Hour+time.Hour)
	updating.Generation = 2
	setStatus(updating, fsm.Updating, 40*time.Second, 3, fsm.ReasonUpdating, "replacing pod db-updating-1 (2 outdated)", 2, 3, "db-updating-0")
	updating.Status.Timers = []v1.Timer{timer(fsm.TimerTimeout, 9*time.Minute+20*time.Second, 3)}
	updating.Status.Volumes = &v1.VolumesStatus{Size: "20Gi", Claims: []v1.ClaimStatus{
		{Name: "pgdata-db-updating-0", Requested: "20Gi", Capacity: "10Gi", Phase: v1.ClaimFileSystemResizePending,
			Message: "Waiting for user to (re-)start a pod to finish file system resize of volume on node."},
		{Name: "pgdata-db-updating-2", Requested: "10Gi", Capacity: "10Gi", Phase: v1.ClaimToResize},
	}}
	updating.Status.History = []v1.Transition{
		hist(fsm.Pending, fsm.Creating, fsm.EventCreate, fsm.ReasonCreating, 2*24*time.Hour+time.Hour),
		hist(fsm.Creating, fsm.Running, fsm.EventPodsReady, fsm.ReasonReady, 2*24*time.Hour+55*time.Minute),
		hist(fsm.Running, fsm.Updating, fsm.EventSpecChanged, fsm.ReasonUpdating, 40*time.Second),
	}

	// Scaled from 2 to 3 instances, the third pod fits on no node: the
	// update timed out into Degraded, which now names the live cause and
	// retries with backoff. The old epoch's timeout is stale.
	degraded := newPG("team-b", "db-degraded", 3, 26*time.Hour)
	degraded.Generation = 2
	setStatus(degraded, fsm.Degraded, 4*time.Minute+12*time.Second, 5, "Unschedulable",
		"pod db-degraded-2: "+unschedulable, 2, 3, "db-degraded-0")
	degraded.Status.Attempt = 3
	degraded.Status.Timers = []v1.Timer{
		timer(fsm.TimerTimeout, -5*time.Minute, 4),
		timer(fsm.TimerRetry, 8*time.Second, 5),
	}
	degraded.Status.History = []v1.Transition{
		hist(fsm.Pending, fsm.Creating, fsm.EventCreate, fsm.ReasonCreating, 26*time.Hour),
		hist(fsm.Creating, fsm.Running, fsm.EventPodsReady, fsm.ReasonReady, 26*time.Hour-2*time.Minute),
		hist(fsm.Running, fsm.Updating, fsm.EventSpecChanged, fsm.ReasonUpdating, 14*time.Minute+12*time.Second),
		hist(fsm.Updating, fsm.Degraded, fsm.EventTimeout, "Unschedulable", 4*time.Minute+12*time.Second),
	}

	// The cleanup's last attempt failed; its retry is overdue by 3s.
	deleting := newPG("default", "db-deleting", 2, 5*time.Hour)
	deleting.DeletionTimestamp = atp(-12 * time.Second)
	deleting.Finalizers = []string{"pgloop.dev/cleanup"}
	setStatus(deleting, fsm.Deleting, 12*time.Second, 4, fsm.ReasonDeleting, "deletion requested", 1, 2, "")
	deleting.Status.Conditions = conds(fsm.Deleting, fsm.ReasonDeleting, "deletion requested", 12*time.Second)
	deleting.Status.Timers = []v1.Timer{timer(fsm.TimerRetry, -3*time.Second, 4)}
	deleting.Status.History = []v1.Transition{
		hist(fsm.Pending, fsm.Creating, fsm.EventCreate, fsm.ReasonCreating, 5*time.Hour),
		hist(fsm.Creating, fsm.Running, fsm.EventPodsReady, fsm.ReasonReady, 5*time.Hour-3*time.Minute),
		hist(fsm.Running, fsm.Deleting, fsm.EventDelete, fsm.ReasonDeleting, 12*time.Second),
	}

	return []*v1.Postgresql{pending, invalid, creating, running, updating, degraded, deleting}
}

func items(pgs []*v1.Postgresql) []v1.Postgresql {
	out := make([]v1.Postgresql, 0, len(pgs))
	for _, p := range pgs {
		out = append(out, *p)
	}
	return out
}

// pod builds a pod of cluster clusterName. role is Patroni's label, empty
// for none.
func pod(ns, clusterName string, ordinal int, role string, created time.Duration, mutate ...func(*corev1.Pod)) *corev1.Pod {
	name := clusterName + "-" + string(rune('0'+ordinal))
	l := cluster.Selector(clusterName)
	if role != "" {
		l[cluster.LabelRole] = role
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l, CreationTimestamp: at(-created)},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "postgres", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func notReady(reason, msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions[1] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
		p.Status.ContainerStatuses[0].Ready = false
	}
}

func waiting(reason, msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	}
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func restarts(n int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = n }
}

// pods are the pods of clusters(), plus one of a cluster that is not
// shown, which no selector may pick up.
// deployments are the connection poolers of db-updating: the master's
// rolling out its new template, the replicas' ready.
func deployments() []runtime.Object {
	pooler := func(role string, ready int32) *appsv1.Deployment {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: cluster.PoolerName("db-updating", role), Generation: 3},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: ready, AvailableReplicas: ready}
		return d
	}
	return []runtime.Object{pooler(cluster.RoleMaster, 1), pooler(cluster.RoleReplica, 2)}
}

func pods() []runtime.Object {
	crNotReady := notReady("ContainersNotReady", "containers with unready status: [postgres]")
	return []runtime.Object{
		pod("default", "db-creating", 0, cluster.RoleMaster, 45*time.Second),
		pod("default", "db-creating", 1, "", 20*time.Second, crNotReady, waiting("ContainerCreating", "")),

		pod("default", "db-running", 0, cluster.RoleMaster, 3*time.Hour+4*time.Minute),
		pod("default", "db-running", 1, cluster.RoleReplica, 3*time.Hour+3*time.Minute, restarts(1)),
		pod("default", "db-running", 2, cluster.RoleReplica, 3*time.Hour+2*time.Minute),

		pod("default", "db-updating", 0, cluster.RoleMaster, 2*24*time.Hour+time.Hour),
		pod("default", "db-updating", 1, "", 30*time.Second, crNotReady, waiting("PodInitializing", "")),
		pod("default", "db-updating", 2, cluster.RoleReplica, 5*time.Minute),

		pod("team-b", "db-degraded", 0, cluster.RoleMaster, 26*time.Hour),
		pod("team-b", "db-degraded", 1, cluster.RoleReplica, 26*time.Hour, restarts(2)),
		pod("team-b", "db-degraded", 2, "", 14*time.Minute, func(p *corev1.Pod) {
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: unschedulable,
			}}}
		}),

		pod("default", "db-deleting", 0, cluster.RoleMaster, 5*time.Hour, func(p *corev1.Pod) {
			p.DeletionTimestamp = atp(-10 * time.Second)
		}),
		pod("default", "db-deleting", 1, cluster.RoleReplica, 5*time.Hour, crNotReady,
			waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container=postgres pod=db-deleting-1_default"),
			phase(corev1.PodRunning), restarts(7)),

		pod("default", "db-other", 0, cluster.RoleMaster, time.Hour),
	}
}
