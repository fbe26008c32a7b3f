package kubelet

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

const (
	// NodeTypeLabel is set to NodeType on the node, as the plane sets it to
	// "kwok" on the nodes kwok plays.
	NodeTypeLabel = "type"
	NodeType      = "process"

	// leaseDuration matches kwok's, which the plane runs with 40 s (with
	// less, the node lifecycle controller marks nodes NotReady between
	// renewals); the lease is renewed every heartbeatInterval, like a
	// kubelet's.
	leaseDuration     = 40
	heartbeatInterval = 10 * time.Second
	// kubeletVersion is what the node reports; nothing reads it.
	kubeletVersion = "v0.0.0-pgkubelet"
)

// nodeCapacity is what the node offers the scheduler: enough for many small
// instances, whatever the host really has.
func nodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

// desiredNode returns the node as this kubelet registers it. It carries no
// kwok.x-k8s.io/node annotation: kwok must leave it, and its pods, alone.
func (k *kubelet) desiredNode(now time.Time) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   k.opts.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
		NodeTypeLabel:          NodeType,
	}
	maps.Copy(labels, k.opts.Labels)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.opts.NodeName, Labels: labels},
		Spec: corev1.NodeSpec{
			PodCIDR:  k.prefix.String(),
			PodCIDRs: []string{k.prefix.String()},
			Taints:   append([]corev1.Taint(nil), k.opts.Taints...),
		},
		Status: k.nodeStatus(now),
	}
}

func (k *kubelet) nodeStatus(now time.Time) corev1.NodeStatus {
	t := metav1.NewTime(now)
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: k.started}
	}
	return corev1.NodeStatus{
		Capacity:    nodeCapacity(),
		Allocatable: nodeCapacity(),
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "process kubelet is posting ready status"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "process kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "process kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "process kubelet has sufficient PID available"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: k.opts.NodeIP},
			{Type: corev1.NodeHostName, Address: k.opts.NodeName},
		},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem: "linux", Architecture: runtime.GOARCH, KubeletVersion: kubeletVersion,
			ContainerRuntimeVersion: "process://patroni",
		},
	}
}

// registerNode creates the node, or takes over an existing one of that name
// (a restarted kubelet): labels are merged, this kubelet's taints replace
// those with the same key (others, such as the node lifecycle controller's,
// stay), and the status is posted.
func (k *kubelet) registerNode(ctx context.Context) error {
	desired := k.desiredNode(time.Now())
	nodes := k.kube.CoreV1().Nodes()
	created, err := nodes.Create(ctx, desired, metav1.CreateOptions{})
	if err == nil {
		k.log.WithField("node", created.Name).Info("registered the node")
		return k.postNodeStatus(ctx)
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("while registering node %s: %w", desired.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, desired.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, kwok := node.Annotations["kwok.x-k8s.io/node"]; kwok {
			return fmt.Errorf("node %s is played by kwok: choose another --node-name", node.Name)
		}
		node = node.DeepCopy()
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		maps.Copy(node.Labels, desired.Labels)
		node.Spec.Taints = mergeTaints(node.Spec.Taints, desired.Spec.Taints)
		if node.Spec.PodCIDR == "" {
			node.Spec.PodCIDR, node.Spec.PodCIDRs = desired.Spec.PodCIDR, desired.Spec.PodCIDRs
		}
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("while taking over node %s: %w", desired.Name, err)
	}
	k.log.WithField("node", desired.Name).Info("took over the existing node")
	return k.postNodeStatus(ctx)
}

// mergeTaints returns ours plus the taints of current with other keys.
func mergeTaints(current, ours []corev1.Taint) []corev1.Taint {
	out := append([]corev1.Taint(nil), ours...)
	for _, t := range current {
		mine := false
		for _, o := range ours {
			mine = mine || o.Key == t.Key
		}
		if !mine {
			out = append(out, t)
		}
	}
	return out
}

// postNodeStatus writes the node's status: Ready, with a fresh heartbeat.
// The node lifecycle controller writes the node too (its taints): a
// conflict is retried on a fresh copy.
func (k *kubelet) postNodeStatus(ctx context.Context) error {
	nodes := k.kube.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, k.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node = node.DeepCopy()
		node.Status = k.nodeStatus(time.Now())
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("while posting the status of node %s: %w", k.opts.NodeName, err)
	}
	return nil
}

// renewLease creates or renews the node's Lease in kube-node-lease, owned by
// the node so it goes with it.
func (k *kubelet) renewLease(ctx context.Context, node *corev1.Node) error {
	leases := k.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, k.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: k.opts.NodeName, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(k.opts.NodeName),
				LeaseDurationSeconds: ptr.To[int32](leaseDuration),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease = lease.DeepCopy()
	lease.Spec.HolderIdentity = ptr.To(k.opts.NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](leaseDuration)
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// heartbeat renews the lease and posts the node status every
// heartbeatInterval until ctx ends. A failed beat is logged and retried at
// the next one: the lease outlives two missed beats.
func (k *kubelet) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(heartbeatInterval)
	defer ticker.Stop()
	for {
		if err := k.beat(ctx); err != nil && ctx.Err() == nil {
			k.log.WithError(err).Warn("node heartbeat failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (k *kubelet) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, heartbeatInterval)
	defer cancel()
	node, err := k.kube.CoreV1().Nodes().Get(ctx, k.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := k.renewLease(ctx, node); err != nil {
		return fmt.Errorf("while renewing the lease: %w", err)
	}
	return k.postNodeStatus(ctx)
}
