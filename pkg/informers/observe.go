package informers

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// Reasons of fsm.Facts.StuckReason that pgloop names itself. A container
// that cannot start reports the kubelet's own reason instead
// (CrashLoopBackOff, ImagePullBackOff, ErrImagePull,
// CreateContainerConfigError).
const (
	// ReasonUnschedulable: the scheduler found no node for a pod.
	ReasonUnschedulable = corev1.PodReasonUnschedulable
	// ReasonVolumePending: a data volume claim of the cluster is not bound.
	ReasonVolumePending = "VolumePending"
	// ReasonQuotaExceeded: the StatefulSet controller could not create a
	// pod because a ResourceQuota is exhausted.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonFailedCreate: the StatefulSet controller could not create a pod
	// for another reason (admission, a missing ServiceAccount...).
	ReasonFailedCreate = "FailedCreate"
)

// failedCreateWindow is how long a FailedCreate Event counts while pods are
// missing even though a pod was created after it: the StatefulSet
// controller retries with a backoff and refreshes the Event while the cause
// lasts, so one older than this is from a cause that went away.
const failedCreateWindow = 10 * time.Minute

// maxMessage bounds a Stuck message: it ends up in the status, a condition
// and a Kubernetes Event.
const maxMessage = 300

// derived is what Observe computes from the spec alone. The spec only
// changes with the generation, so it is computed once per (UID, generation)
// and not again for every pod event.
type derived struct {
	uid        types.UID
	generation int64
	specError  string
	// leaderKey is the cache key of the cluster's leader record.
	leaderKey string
	// desired is the StatefulSet the spec asks for, built on first need.
	desired *appsv1.StatefulSet
}

// Observe implements controller.Observer: the cluster's facts, read from
// the caches only (it runs on the loop goroutine), and its stored status.
// The status is the cache's own copy: the caller must copy it before
// keeping or changing it (fsm.Engine.New does).
func (i *Informers) Observe(key string) (fsm.Facts, *v1.PostgresqlStatus) {
	pg, ok := i.Postgresql(key)
	if !ok {
		i.forget(key)
		return fsm.Facts{Gone: true}, nil
	}
	s := i.scopeOf(key)
	d := i.derive(key, pg)
	f := fsm.Facts{
		Generation: pg.Generation,
		Deleting:   pg.DeletionTimestamp != nil,
		Desired:    pg.Spec.NumberOfInstances,
		SpecError:  d.specError,
	}

	stsName := cluster.StatefulSetName(pg.Name)
	stsKey := key
	if stsName != pg.Name {
		stsKey = pg.Namespace + "/" + stsName
	}
	var sts *appsv1.StatefulSet
	if obj, ok, _ := s.statefulSets.GetStore().GetByKey(stsKey); ok {
		sts, _ = obj.(*appsv1.StatefulSet)
	}

	objs, _ := s.pods.GetIndexer().ByIndex(byCluster, key)
	// Name order makes "the first cause found" the same on every call.
	slices.SortFunc(objs, func(a, b any) int { return strings.Compare(a.(*corev1.Pod).Name, b.(*corev1.Pod).Name) })

	leader, recorded := leaderRecord(s, d.leaderKey, pg.Name)
	// A never-bound claim of another StorageClass than the StatefulSet's
	// is replaced with its pod, once the StatefulSet asks for the spec's
	// class (it was re-created): before that, its controller would make
	// the claim anew with the old class.
	claimClass, replaceClaims := "", false
	if sts != nil {
		claimClass = cluster.ClaimTemplateClass(sts)
		replaceClaims = claimClass == pg.Spec.Volume.StorageClass
	}
	var (
		existing    int32
		leaderPod   *corev1.Pod // the pod the leader record names, terminating or not
		lastCreated time.Time
		// next is the outdated pod that runs PostgreSQL to replace first:
		// replicas before the leader, then the lowest ordinal.
		next       *corev1.Pod
		nextLeader bool
		nextOrd    int
		// idle are the outdated pods that run nothing, replaced at once.
		idle []fsm.PodRef
		// The first pod-level causes, by kind.
		unschedulable        *corev1.Pod
		unschedulableMessage string
		waiting              *corev1.Pod
		waitingState         *corev1.ContainerStateWaiting
	)
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if t := p.CreationTimestamp.Time; t.After(lastCreated) {
			lastCreated = t
		}
		isLeader := leader != "" && p.Name == leader
		if isLeader {
			leaderPod = p
		}
		// A terminating pod is on its way out: it counts for nothing, not
		// even as outdated, or a rollout would pick it again.
		if p.DeletionTimestamp != nil {
			continue
		}
		existing++
		if podReady(p) {
			f.Ready++
		}
		var claim *corev1.PersistentVolumeClaim
		if replaceClaims && runsNothing(p) {
			claim = wrongClassClaim(s, p, claimClass)
		}
		if sts != nil && (claim != nil || !cluster.PodUpToDate(p, sts)) {
			f.Outdated++
			ord := ordinal(p.Name, stsName)
			switch {
			case ord < 0 || ord >= int(f.Desired):
				// Scaled away: the StatefulSet controller deletes it.
			case runsNothing(p):
				ref := fsm.PodRef{Name: p.Name, UID: string(p.UID)}
				if claim != nil {
					ref.Claim, ref.ClaimUID = claim.Name, string(claim.UID)
				}
				idle = append(idle, ref)
			case next == nil || (!isLeader && nextLeader) || (isLeader == nextLeader && ord < nextOrd):
				next, nextLeader, nextOrd = p, isLeader, ord
			}
		}
		if unschedulable == nil {
			if msg, ok := schedulingFailure(p); ok {
				unschedulable, unschedulableMessage = p, msg
			}
		}
		if waiting == nil {
			if w := stuckContainer(p); w != nil {
				waiting, waitingState = p, w
			}
		}
	}

	f.Primary, f.NoPrimary = primary(pg.Name, leader, recorded, leaderPod)
	switch {
	case len(idle) > 0:
		f.Replace = idle
	case f.Ready == f.Desired && next != nil:
		f.Replace = []fsm.PodRef{{Name: next.Name, UID: string(next.UID)}}
	}
	// Cheapest checks first: the desired StatefulSet is built (once per
	// generation) only when everything else already holds.
	f.ObjectsCurrent = f.SpecError == "" && sts != nil &&
		sts.Status.ObservedGeneration >= sts.Generation &&
		ptr.Deref(sts.Spec.Replicas, 1) == f.Desired &&
		f.Outdated == 0 && existing == f.Desired &&
		cluster.Compare(sts, i.desiredStatefulSet(d, pg)) == cluster.NoChange

	// Stuck causes, the first found in this order. Claims and Events are
	// looked up only while pods are missing or not Ready, which keeps the
	// healthy path free of those lookups. A claim that cannot bind comes
	// first when its Warning says why: the scheduler's words for its pod
	// ("pod has unbound immediate PersistentVolumeClaims") do not.
	if existing < f.Desired || f.Ready < f.Desired {
		claim, warning := pendingClaim(s, key, stsName, f.Desired)
		switch {
		case claim != nil && warning != nil:
			f.StuckReason, f.Stuck = ReasonVolumePending, claimMessage(claim, warning)
		case unschedulable != nil:
			f.StuckReason, f.Stuck = ReasonUnschedulable, podMessage(unschedulable.Name, unschedulableMessage)
		case waiting != nil:
			msg := waitingState.Message
			if msg == "" {
				msg = waitingState.Reason
			}
			f.StuckReason, f.Stuck = waitingState.Reason, podMessage(waiting.Name, msg)
		case claim != nil:
			f.StuckReason, f.Stuck = ReasonVolumePending, claimMessage(claim, nil)
		case sts != nil && existing < f.Desired:
			f.StuckReason, f.Stuck = i.failedCreate(s, stsKey, sts, lastCreated)
			if f.StuckReason == ReasonQuotaExceeded {
				if v := quotaVersion(s, pg.Namespace); v != sts.Annotations[cluster.AnnotationQuotaSeen] {
					f.Nudge = v
				}
			}
		}
	}
	return f, &pg.Status
}

// runsNothing reports whether pod p runs no PostgreSQL: not Ready, and
// not scheduled, not started (waiting on a volume, an image, its
// configuration), or with no container running (a crash loop between two
// tries). Replacing such a pod interrupts nothing.
func runsNothing(p *corev1.Pod) bool {
	if podReady(p) {
		return false
	}
	if !scheduled(p) || p.Status.Phase == corev1.PodPending {
		return true
	}
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].State.Running != nil {
			return false
		}
	}
	return true
}

// scheduled reports whether p was bound to a node.
func scheduled(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" {
		return true
	}
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// wrongClassClaim returns the data volume claim of pod p when it never
// bound (it holds no data) and asks for another StorageClass than class,
// the StatefulSet's ("" for the default): replacing it with the pod gives
// it the StatefulSet's class. With the default class, whose name the
// StatefulSet does not say, a claim is replaced only when its own class
// does not exist (its ProvisioningFailed Warning says so), so a claim of
// the default class that waits for its provisioner is left alone.
func wrongClassClaim(s *scope, p *corev1.Pod, class string) *corev1.PersistentVolumeClaim {
	key := p.Namespace + "/" + cluster.DataVolumeName + "-" + p.Name
	obj, ok, _ := s.claims.GetStore().GetByKey(key)
	if !ok {
		return nil
	}
	c, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || c.DeletionTimestamp != nil || c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" {
		return nil
	}
	have := ptr.Deref(c.Spec.StorageClassName, "")
	switch {
	case have == class:
		return nil
	case class != "":
		return c
	}
	if w := claimWarning(s, c); w != nil && strings.Contains(w.Message, `storageclass.storage.k8s.io "`+have+`" not found`) {
		return c
	}
	return nil
}

// claimWarning returns the newest Warning Event about claim c, nil when
// there is none.
func claimWarning(s *scope, c *corev1.PersistentVolumeClaim) *corev1.Event {
	objs, _ := s.claimWarnings.GetIndexer().ByIndex(byInvolvedObject, c.Namespace+"/"+c.Name)
	var newest *corev1.Event
	var at time.Time
	for _, o := range objs {
		ev, ok := o.(*corev1.Event)
		if !ok || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "PersistentVolumeClaim" {
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

// quotaVersion names the state of the ResourceQuotas of namespace ns: it
// changes whenever one is added, changed (limits or usage) or deleted.
func quotaVersion(s *scope, ns string) string {
	objs, _ := s.quotas.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	parts := make([]string, 0, len(objs))
	for _, o := range objs {
		if q, ok := o.(*corev1.ResourceQuota); ok {
			parts = append(parts, q.Name+"="+q.ResourceVersion)
		}
	}
	slices.Sort(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, ",")))
	return hex.EncodeToString(sum[:6])
}

// primary decides the cluster's primary from Patroni's leader record:
// the member named there (leader, "" when the record names none; recorded
// is false when there is no record), whose pod is leaderPod (nil when it
// has none). It returns the primary, or "" and why there is none.
//
// The role label does not decide. Patroni labels its pod after taking the
// lock, and a leader that was killed keeps spilo-role=master until its
// Patroni runs again, so for a while two pods may carry the label while
// another member already holds the lock. The lock is the truth:
//  1. no record yet (Patroni has not bootstrapped): no primary;
//  2. a record that names no member (the leader released the lock, in a
//     switchover or a shutdown): no primary;
//  3. the named member has no pod, or its pod is terminating or not Ready
//     (a killed leader keeps the lock until its ttl runs out and another
//     member takes it): no primary;
//  4. the named pod is not labelled master yet: Patroni takes the lock,
//     then promotes its PostgreSQL, then labels the pod; until the label
//     is there the new leader may still be read-only (seen: a write 20 s
//     into a failover refused as "read-only transaction"): no primary;
//  5. otherwise the named pod, whatever labels the others carry.
//
// Readiness, not the record's renewTime and ttl, tells a dead holder: the
// pod's readiness probe asks its Patroni, and pgloop's clock need not agree
// with Patroni's. Only the ConfigMap is read: pgloop always runs Patroni
// with KUBERNETES_USE_CONFIGMAPS=true (cluster.spiloEnv), so there is no
// Endpoints-mode lock to fall back to.
func primary(clusterName, leader string, recorded bool, leaderPod *corev1.Pod) (string, string) {
	record := cluster.LeaderConfigMapName(clusterName)
	switch {
	case !recorded:
		return "", "Patroni has not written its leader record " + record + " yet"
	case leader == "":
		return "", "no member holds Patroni's leader lock (" + record + ")"
	case leaderPod == nil:
		return "", "the leader " + leader + " named by " + record + " has no pod"
	case leaderPod.DeletionTimestamp != nil:
		return "", "the leader pod " + leader + " is terminating"
	case !podReady(leaderPod):
		return "", "the leader pod " + leader + " is not Ready"
	case leaderPod.Labels[cluster.LabelRole] != cluster.RoleMaster:
		return "", "the leader pod " + leader + " is not promoted yet (not labelled " + cluster.LabelRole + "=" + cluster.RoleMaster + ")"
	}
	return leader, ""
}

// leaderRecord returns the member Patroni's leader record (cache key
// key) of cluster clusterName names ("" when none), and whether there is a
// record. A ConfigMap of that name that Patroni did not label for the
// cluster is not its record.
func leaderRecord(s *scope, key, clusterName string) (string, bool) {
	obj, ok, _ := s.configMaps.GetStore().GetByKey(key)
	if !ok {
		return "", false
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Labels[cluster.LabelClusterName] != clusterName {
		return "", false
	}
	return cm.Annotations[cluster.AnnotationLeader], true
}

// derive returns what the spec of pg says, computed once per (UID,
// generation).
func (i *Informers) derive(key string, pg *v1.Postgresql) *derived {
	i.mu.Lock()
	defer i.mu.Unlock()
	if d := i.derived[key]; d != nil && d.uid == pg.UID && d.generation == pg.Generation {
		return d
	}
	d := &derived{uid: pg.UID, generation: pg.Generation,
		leaderKey: pg.Namespace + "/" + cluster.LeaderConfigMapName(pg.Name)}
	if errs := pg.Validate(); len(errs) > 0 {
		d.specError = errs.ToAggregate().Error()
	}
	i.derived[key] = d
	return d
}

// desiredStatefulSet returns the StatefulSet pg asks for; d must be pg's.
// Building it hashes the pod template, so it is done once per generation.
func (i *Informers) desiredStatefulSet(d *derived, pg *v1.Postgresql) *appsv1.StatefulSet {
	i.mu.Lock()
	defer i.mu.Unlock()
	if d.desired == nil {
		d.desired = cluster.StatefulSet(pg, i.opts)
	}
	return d.desired
}

// forget drops what was derived for a cluster that is gone.
func (i *Informers) forget(key string) {
	i.mu.Lock()
	delete(i.derived, key)
	i.mu.Unlock()
}

func podReady(p *corev1.Pod) bool {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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
func pendingClaim(s *scope, key, stsName string, desired int32) (*corev1.PersistentVolumeClaim, *corev1.Event) {
	objs, _ := s.claims.GetIndexer().ByIndex(byCluster, key)
	var first, firstWarned *corev1.PersistentVolumeClaim
	var warning *corev1.Event
	for _, o := range objs {
		c, ok := o.(*corev1.PersistentVolumeClaim)
		if !ok || c.Status.Phase != corev1.ClaimPending || c.DeletionTimestamp != nil {
			continue
		}
		rest, ok := strings.CutPrefix(c.Name, cluster.DataVolumeName+"-")
		if ord := ordinal(rest, stsName); !ok || ord < 0 || ord >= int(desired) {
			continue
		}
		if first == nil || c.Name < first.Name {
			first = c
		}
		if w := claimWarning(s, c); w != nil && (firstWarned == nil || c.Name < firstWarned.Name) {
			firstWarned, warning = c, w
		}
	}
	if firstWarned != nil {
		return firstWarned, warning
	}
	return first, nil
}

// failedCreate returns the reason and message of the newest FailedCreate
// Event of sts that still explains missing pods: newer than the last pod
// created, or within failedCreateWindow.
func (i *Informers) failedCreate(s *scope, stsKey string, sts *appsv1.StatefulSet, lastCreated time.Time) (string, string) {
	objs, _ := s.warnings.GetIndexer().ByIndex(byInvolvedObject, stsKey)
	var newest *corev1.Event
	var at time.Time
	for _, o := range objs {
		ev, ok := o.(*corev1.Event)
		if !ok || ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonFailedCreate ||
			ev.InvolvedObject.Kind != "StatefulSet" {
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
	if newest == nil || (!at.After(lastCreated) && i.now().Sub(at) > failedCreateWindow) {
		return "", ""
	}
	reason := ReasonFailedCreate
	if strings.Contains(newest.Message, "exceeded quota") {
		reason = ReasonQuotaExceeded
	}
	return reason, truncate(newest.Message)
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

// ordinal returns n of a name "<stsName>-<n>", -1 for any other name.
func ordinal(name, stsName string) int {
	rest, ok := strings.CutPrefix(name, stsName)
	if !ok {
		return -1
	}
	rest, ok = strings.CutPrefix(rest, "-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return -1
	}
	return n
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
