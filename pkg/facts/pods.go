package facts

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/observed"
)

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
