package testbed

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	// kwokNodeAnnotation marks the nodes kwok plays the kubelet of.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	kwokNodeValue      = "fake"

	// StatusAnnotation set to StatusCustom on a pod makes kwok leave its
	// status alone, so a test can write it (a crash loop, a failed probe).
	// Deleting such a pod needs a zero grace period: no kubelet confirms it.
	StatusAnnotation = "kwok.x-k8s.io/status"
	StatusCustom     = "custom"

	// StorageClassName is the plane's default StorageClass, with
	// allowVolumeExpansion: a claim of it may grow (the plane's resizer,
	// test/resizer, expands it). kwok's volume stages, or the plane's
	// provisioner, provision and bind its claims, standing in for a CSI
	// driver.
	StorageClassName = "kwok-volume"
	// FixedStorageClassName is a second class of the same provisioner
	// without allowVolumeExpansion: the API server refuses a larger
	// request on its claims (the PersistentVolumeClaimResize admission
	// plugin), as a cloud's class that cannot expand does.
	FixedStorageClassName = "kwok-fixed"
	// Provisioner is the provisioner of StorageClassName and
	// FixedStorageClassName.
	Provisioner = "kwok.x-k8s.io/volume"
	// RealStorageClassName is the class of the real node's volumes: local
	// volumes on it, which the kubelet mounts with the pod's fsGroup. In a
	// plane with no other node it is the default class.
	RealStorageClassName = "real-local"

	// NodeLabel is set to "kwok" on every fake node.
	NodeLabel = "type"
)

// storageClasses are the plane's classes, the default first.
var storageClasses = []string{StorageClassName, FixedStorageClassName}

// createStorageClasses creates the default StorageClass, which allows
// volume expansion, and the fixed one, which does not. Both have Immediate
// binding so claims bind before their pods are scheduled, as on most
// clouds' defaults until the pod needs topology.
func (p *Plane) createStorageClasses(ctx context.Context) error {
	isDefault := map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
	classes := []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: StorageClassName, Annotations: isDefault}, AllowVolumeExpansion: ptr.To(true)},
		{ObjectMeta: metav1.ObjectMeta{Name: FixedStorageClassName}},
	}
	if p.opts.RealNodes > 0 {
		real := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: RealStorageClassName}}
		if p.onlyRealNodes() {
			real.Annotations, classes[0].Annotations = isDefault, nil
		}
		classes = append(classes, real)
	}
	for _, sc := range classes {
		sc.Provisioner = Provisioner
		sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingImmediate)
		_, err := p.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("while creating StorageClass %s: %w", sc.Name, err)
		}
	}
	return nil
}

// createNodes creates Options.Nodes nodes named node-1, node-2, … and waits
// for them to be Ready.
func (p *Plane) createNodes(ctx context.Context) error {
	for i := range p.opts.Nodes {
		labels := maps.Clone(p.opts.NodeLabels)
		if len(p.opts.Zones) > 0 {
			if labels == nil {
				labels = map[string]string{}
			}
			labels[corev1.LabelTopologyZone] = p.opts.Zones[i%len(p.opts.Zones)]
		}
		if _, err := p.AddNode(ctx, fmt.Sprintf("node-%d", i+1), p.opts.NodeCapacity, labels); err != nil {
			return err
		}
	}
	return nil
}

// AddNode creates a fake node that kwok manages and waits until it is Ready.
// A test adds one to give a stuck pod somewhere to go.
func (p *Plane) AddNode(ctx context.Context, name string, capacity corev1.ResourceList, labels map[string]string) (*corev1.Node, error) {
	n := p.nodes.Add(1) - 1
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname:   name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
				NodeLabel:              "kwok",
			},
			Annotations: map[string]string{kwokNodeAnnotation: kwokNodeValue},
		},
		// A kubelet registers its node with its capacity and addresses, and
		// so may we: kwok's node stage keeps what is there.
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.1.%d.%d", n/250, n%250+1)},
				{Type: corev1.NodeHostName, Address: name},
			},
		},
	}
	maps.Copy(node.Labels, labels)
	if _, err := p.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("while creating node %s: %w", name, err)
	}
	ready, err := WaitFor(ctx, Nodes(p.Client, name), NodeReady)
	if err != nil {
		return nil, fmt.Errorf("while waiting for node %s to be Ready: %w", name, err)
	}
	return ready, nil
}

// NodeReady holds once the node's Ready condition is True.
func NodeReady(node *corev1.Node) (bool, error) {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

// onlyRealNodes tells a plane whose nodes are all real ones: its default
// class is the real node's, and its real node is not tainted.
func (p *Plane) onlyRealNodes() bool {
	return p.opts.RealNodes > 0 && p.opts.Nodes == 0 && p.opts.ProcessNodes == 0
}
