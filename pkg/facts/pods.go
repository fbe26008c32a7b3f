package facts

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/observed"
	"github.com/pgloop/pgloop/pkg/patroni"
)

// podScan is what one pass over a cluster's pods finds (scanPods): what
// they count, the leader's pod, what a rollout replaces, and the first
// pod-level causes of a stuck cluster.
type podScan struct {
	// existing counts the pods that are not terminating; ready, those of
	// them that are Ready (Facts.Ready).
	existing, ready int32
	// outdated counts the pods that are not terminating and do not run the
	// StatefulSet's current pod template, or whose claim is replaced with
	// them (Facts.Outdated); outdatedDesired, those of them among the
	// desired ordinals.
	outdated, outdatedDesired int32
	// leaderPod is the pod the leader record names, terminating or not.
	leaderPod *corev1.Pod
	// lastCreated is when the newest pod was created.
	lastCreated time.Time
	// next is the outdated pod that runs PostgreSQL to replace first:
	// replicas before the leader, then the lowest ordinal. nextLeader: it
	// is the leader's; nextOrd is its ordinal.
	next       *corev1.Pod
	nextLeader bool
	nextOrd    int
	// idle are the outdated pods that run nothing, replaced at once.
	idle []fsm.PodRef
	// The first pod-level causes, by kind: a pod the scheduler found no
	// node for, with its message, and a pod with a container that waits
	// for a reason that does not go away by itself (stuckContainer).
	unschedulable        *corev1.Pod
	unschedulableMessage string
	waiting              *corev1.Pod
	waitingState         *corev1.ContainerStateWaiting
}

// scanPods goes once over pods, the pods of objs's cluster in name order;
// leader is the member its leader record names, "" for none.
func scanPods(objs observed.Cluster, pods []*corev1.Pod, leader string) podScan {
	pg, sts := objs.Postgresql, objs.StatefulSet
	stsName := cluster.StatefulSetName(pg.Name)
	// A never-bound claim of another StorageClass than the StatefulSet's
	// is replaced with its pod, once the StatefulSet asks for the spec's
	// class (it was re-created): before that, its controller would make
	// the claim anew with the old class.
	claimClass, replaceClaims := "", false
	if sts != nil {
		claimClass = cluster.ClaimTemplateClass(sts)
		replaceClaims = claimClass == pg.Spec.Volume.StorageClass
	}
	var s podScan
	for _, p := range pods {
		if t := p.CreationTimestamp.Time; t.After(s.lastCreated) {
			s.lastCreated = t
		}
		isLeader := leader != "" && p.Name == leader
		if isLeader {
			s.leaderPod = p
		}
		// A terminating pod is on its way out: it counts for nothing, not
		// even as outdated, or a rollout would pick it again.
		if p.DeletionTimestamp != nil {
			continue
		}
		s.existing++
		if podReady(p) {
			s.ready++
		}
		var claim *corev1.PersistentVolumeClaim
		if replaceClaims && runsNothing(p) {
			claim = wrongClassClaim(objs, p, claimClass)
		}
		// A StatefulSet without pgloop's pod template hash (one just
		// adopted, before the ensure writes pgloop's template) says
		// nothing of its pods: none is outdated until it does.
		if sts != nil && (claim != nil || cluster.PodTemplateHash(sts) != "" && !cluster.PodUpToDate(p, sts)) {
			s.outdated++
			ord := ordinal(p.Name, stsName)
			desired := ord >= 0 && ord < int(pg.Spec.NumberOfInstances)
			if desired {
				s.outdatedDesired++
			}
			switch {
			case !desired:
				// Scaled away: the StatefulSet controller deletes it.
			case runsNothing(p):
				ref := fsm.PodRef{Name: p.Name, UID: string(p.UID)}
				if claim != nil {
					ref.Claim, ref.ClaimUID = claim.Name, string(claim.UID)
				}
				s.idle = append(s.idle, ref)
			case s.next == nil || (!isLeader && s.nextLeader) || (isLeader == s.nextLeader && ord < s.nextOrd):
				s.next, s.nextLeader, s.nextOrd = p, isLeader, ord
			}
		}
		if s.unschedulable == nil {
			if msg, ok := schedulingFailure(p); ok {
				s.unschedulable, s.unschedulableMessage = p, msg
			}
		}
		if s.waiting == nil {
			if w := stuckContainer(p); w != nil {
				s.waiting, s.waitingState = p, w
			}
		}
	}
	return s
}

// replacement says what a rollout does next, from scan, the pods it was
// made of and their members' data, and the counts and the primary of f:
//  1. the outdated pods that run nothing are replaced at once, all of them
//     (running is false);
//  2. otherwise, once every desired pod is Ready, the next outdated pod
//     that runs PostgreSQL (podScan.next) is replaced, one at a time;
//  3. but with switchover the primary's pod, when its Patroni publishes
//     its member data and so can be asked to, first hands its role to the
//     most up-to-date replica; it is replaced once it is a replica. While
//     a replica may become a candidate shortly, nothing is done; when none
//     can take over (all tagged nofailover), the primary's pod is replaced
//     and Patroni fails over as it can.
func (d *Deriver) replacement(f *fsm.Facts, scan *podScan, pods []*corev1.Pod, members map[string]patroni.Member) (replace []fsm.PodRef, running bool, switchover *fsm.Switchover) {
	next := scan.next
	switch {
	case len(scan.idle) > 0:
		return scan.idle, false, nil
	case next == nil || f.Ready != f.Desired:
		return nil, false, nil
	case scan.nextLeader && d.switchover && f.Primary == next.Name && hasMember(members, next.Name):
		switch to, wait := switchoverCandidate(pods, members, next.Name); {
		case to != "":
			return nil, false, &fsm.Switchover{From: next.Name, To: to}
		case wait:
			return nil, false, nil
		}
	}
	return []fsm.PodRef{{Name: next.Name, UID: string(next.UID)}}, true, nil
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
func wrongClassClaim(objs observed.Cluster, p *corev1.Pod, class string) *corev1.PersistentVolumeClaim {
	c := claimNamed(objs.Claims, p.Namespace, cluster.DataVolumeName+"-"+p.Name)
	if c == nil || c.DeletionTimestamp != nil || c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" {
		return nil
	}
	have := ptr.Deref(c.Spec.StorageClassName, "")
	switch {
	case have == class:
		return nil
	case class != "":
		return c
	}
	if w := claimWarning(objs.ClaimWarnings, c); w != nil && strings.Contains(w.Message, `storageclass.storage.k8s.io "`+have+`" not found`) {
		return c
	}
	return nil
}

// claimNamed returns the claim namespace/name of claims, nil when none.
func claimNamed(claims []*corev1.PersistentVolumeClaim, namespace, name string) *corev1.PersistentVolumeClaim {
	for _, c := range claims {
		if c.Name == name && c.Namespace == namespace {
			return c
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func byName(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) }

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
