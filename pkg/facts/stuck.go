package facts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/observed"
)

// failedCreateWindow is how long a FailedCreate Event counts while pods are
// missing even though a pod was created after it: the StatefulSet
// controller retries with a backoff and refreshes the Event while the cause
// lasts, so one older than this is from a cause that went away.
const failedCreateWindow = 10 * time.Minute

// maxMessage bounds a Stuck message: it ends up in the status, a condition
// and a Kubernetes Event.
const maxMessage = 300

// cause is what stuckCause finds: Facts.StuckReason, Stuck, StuckStale and
// Nudge.
type cause struct {
	reason, message string
	stale           bool
	nudge           string
}

// stuckCause returns the concrete cause that holds the cluster back
// (Facts.StuckReason and Facts.Stuck; stale when it is a Warning older than
// the newest pod), and the version of the namespace's quotas to nudge the
// StatefulSet with (Facts.Nudge), from scan and the counts and volumes of
// f:
//  1. While pods are missing or not Ready, the first found in this order:
//     a claim that cannot bind, when its Warning says why (the scheduler's
//     words for its pod, "pod has unbound immediate
//     PersistentVolumeClaims", do not); a pod the scheduler found no node
//     for; a container that cannot start; a claim that cannot bind,
//     without a Warning; and, while pods are missing, the StatefulSet
//     controller's FailedCreate. Claims and Events are looked at only
//     then, which keeps the healthy path free of them.
//  2. Once every desired pod exists and serves, volumes that cannot grow:
//     they hold back a cluster whose pods all serve, and are no cause of a
//     pod's loss (fsm's podsLost takes a stuck cause for one).
func stuckCause(f *fsm.Facts, scan *podScan, objs observed.Cluster, now time.Time) cause {
	pg, sts := objs.Postgresql, objs.StatefulSet
	if scan.existing < f.Desired || f.Ready < f.Desired {
		claim, warning := pendingClaim(objs, cluster.StatefulSetName(pg.Name), f.Desired)
		switch {
		case claim != nil && warning != nil:
			return cause{reason: fsm.ReasonVolumePending, message: claimMessage(claim, warning)}
		case scan.unschedulable != nil:
			return cause{reason: fsm.ReasonUnschedulable, message: podMessage(scan.unschedulable.Name, scan.unschedulableMessage)}
		case scan.waiting != nil:
			msg := scan.waitingState.Message
			if msg == "" {
				msg = scan.waitingState.Reason
			}
			return cause{reason: scan.waitingState.Reason, message: podMessage(scan.waiting.Name, msg)}
		case claim != nil:
			return cause{reason: fsm.ReasonVolumePending, message: claimMessage(claim, nil)}
		case sts != nil && scan.existing < f.Desired:
			c := failedCreate(objs.StatefulSetWarnings, sts, scan.lastCreated, now)
			if c.reason == fsm.ReasonQuotaExceeded {
				if v := quotaVersion(objs.Quotas, pg.Namespace); v != sts.Annotations[cluster.AnnotationQuotaSeen] {
					c.nudge = v
				}
			}
			return c
		}
		return cause{}
	}
	var c cause
	if scan.existing == f.Desired {
		c.reason, c.message = notExpandable(f.Volumes, f.VolumeSize)
	}
	return c
}

// schedulingFailure returns the scheduler's message when it found no
// node for p.
func schedulingFailure(p *corev1.Pod) (string, bool) {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == corev1.PodScheduled {
			ok := c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
			return c.Message, ok
		}
	}
	// A scheduler writes PodScheduled at its first attempt; a pod of a
	// scheduler nobody runs (spec.schedulerName) never gets one, and
	// stays Pending without a word from anyone but this.
	if s := p.Spec.SchedulerName; p.Spec.NodeName == "" && s != "" && s != corev1.DefaultSchedulerName {
		return fmt.Sprintf("no node yet: scheduler %q (spec.schedulerName) has not tried to place it; is it running?", s), true
	}
	return "", false
}

// stuckContainer returns the waiting state of the first container of p
// (init containers first) that waits for a reason that does not go away by
// itself.
func stuckContainer(p *corev1.Pod) *corev1.ContainerStateWaiting {
	for _, statuses := range [2][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range statuses {
			w := statuses[i].State.Waiting
			if w == nil {
				continue
			}
			switch w.Reason {
			case "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError":
				return w
			}
		}
	}
	return nil
}

// pendingClaim returns the first data volume claim of the cluster's
// current ordinals that is Pending, by name, and its newest Warning: the
// first with a Warning if any has one. It returns nil when none is
// Pending. Claims kept from a scale-down (ordinals >= desired) are not
// waited for.
func pendingClaim(objs observed.Cluster, stsName string, desired int32) (*corev1.PersistentVolumeClaim, *corev1.Event) {
	var first, firstWarned *corev1.PersistentVolumeClaim
	var warning *corev1.Event
	for _, c := range objs.Claims {
		if c.Status.Phase != corev1.ClaimPending || c.DeletionTimestamp != nil {
			continue
		}
		rest, ok := strings.CutPrefix(c.Name, cluster.DataVolumeName+"-")
		if ord := ordinal(rest, stsName); !ok || ord < 0 || ord >= int(desired) {
			continue
		}
		if first == nil || c.Name < first.Name {
			first = c
		}
		if w := claimWarning(objs.ClaimWarnings, c); w != nil && (firstWarned == nil || c.Name < firstWarned.Name) {
			firstWarned, warning = c, w
		}
	}
	if firstWarned != nil {
		return firstWarned, warning
	}
	return first, nil
}

// claimWarning returns the newest Warning Event about claim c among events,
// nil when there is none.
func claimWarning(events []*corev1.Event, c *corev1.PersistentVolumeClaim) *corev1.Event {
	var newest *corev1.Event
	var at time.Time
	for _, ev := range events {
		if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "PersistentVolumeClaim" ||
			!about(ev, c.Namespace, c.Name) {
			continue
		}
		// Events outlive their object: those of a former claim of the
		// same name do not count.
		if ev.InvolvedObject.UID != "" && ev.InvolvedObject.UID != c.UID {
			continue
		}
		if t := eventTime(ev); newest == nil || t.After(at) {
			newest, at = ev, t
		}
	}
	return newest
}

// claimMessage says why claim c is Pending: its class, and its newest
// Warning (nil when none), such as the persistent volume controller's
// ProvisioningFailed naming a StorageClass that does not exist.
func claimMessage(c *corev1.PersistentVolumeClaim, warning *corev1.Event) string {
	class := "the default storage class"
	if sc := ptr.Deref(c.Spec.StorageClassName, ""); sc != "" {
		class = "storage class " + strconv.Quote(sc)
	}
	msg := "persistentvolumeclaim " + c.Name + " (" + class + ") is Pending"
	if warning != nil {
		msg += ": " + warning.Reason + ": " + warning.Message
	}
	return truncate(msg)
}

// failedCreate returns the reason and message of the newest FailedCreate
// Event of sts among events that still explains missing pods at time now:
// newer than the last pod created, or within failedCreateWindow, and then
// stale: the pod created since may show its cause is gone, and an Event a
// fault left behind (an API server restart) must not make a brief gap of
// pods a lasting one.
func failedCreate(events []*corev1.Event, sts *appsv1.StatefulSet, lastCreated, now time.Time) cause {
	var newest *corev1.Event
	var at time.Time
	for _, ev := range events {
		if ev.Type != corev1.EventTypeWarning || ev.Reason != fsm.ReasonFailedCreate ||
			ev.InvolvedObject.Kind != "StatefulSet" || !about(ev, sts.Namespace, sts.Name) {
			continue
		}
		// Events outlive their object: those of a former StatefulSet of
		// the same name do not count.
		if ev.InvolvedObject.UID != "" && sts.UID != "" && ev.InvolvedObject.UID != sts.UID {
			continue
		}
		if t := eventTime(ev); newest == nil || t.After(at) {
			newest, at = ev, t
		}
	}
	stale := !at.After(lastCreated)
	if newest == nil || (stale && now.Sub(at) > failedCreateWindow) {
		return cause{}
	}
	c := cause{reason: fsm.ReasonFailedCreate, message: truncate(newest.Message), stale: stale}
	if strings.Contains(newest.Message, "exceeded quota") {
		c.reason = fsm.ReasonQuotaExceeded
	}
	return c
}

// about reports whether ev is about the object namespace/name. An Event
// that names no namespace for its object is about one of its own.
func about(ev *corev1.Event, namespace, name string) bool {
	ns := ev.InvolvedObject.Namespace
	if ns == "" {
		ns = ev.Namespace
	}
	return ev.InvolvedObject.Name == name && ns == namespace
}

// eventTime is when an Event was last seen, whichever of the core/v1 and
// events.k8s.io fields its recorder filled in.
func eventTime(ev *corev1.Event) time.Time {
	t := ev.LastTimestamp.Time
	if ev.Series != nil && ev.Series.LastObservedTime.After(t) {
		t = ev.Series.LastObservedTime.Time
	}
	if ev.EventTime.After(t) {
		t = ev.EventTime.Time
	}
	if t.IsZero() {
		t = ev.FirstTimestamp.Time
	}
	if t.IsZero() {
		t = ev.CreationTimestamp.Time
	}
	return t
}

// quotaVersion names the state of the ResourceQuotas of namespace ns among
// quotas: it changes whenever one is added, changed (limits or usage) or
// deleted.
func quotaVersion(quotas []*corev1.ResourceQuota, ns string) string {
	parts := make([]string, 0, len(quotas))
	for _, q := range quotas {
		if q.Namespace == ns {
			parts = append(parts, q.Name+"="+q.ResourceVersion)
		}
	}
	slices.Sort(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, ",")))
	return hex.EncodeToString(sum[:6])
}

func podMessage(pod, msg string) string {
	return truncate("pod " + pod + ": " + msg)
}

// truncate cuts s to maxMessage bytes, on a rune boundary.
func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	n := maxMessage
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
