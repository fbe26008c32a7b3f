package status

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
)

// View is the detail view of one cluster: the resource and its pods.
type View struct {
	// Cluster is the resource as read; its status is the state machine.
	Cluster *v1.Postgresql
	// Pods are the cluster's pods, sorted by name.
	Pods []Pod
	// PodsError is set when the pods could not be listed; the rest of the
	// view is still valid.
	PodsError error
	// Poolers are the cluster's connection poolers that exist, master
	// first; PoolersError is set when they could not be listed.
	Poolers      []Pooler
	PoolersError error
}

// Pooler is one connection pooler (a Deployment and the Service of the
// same name) as the detail view shows it.
type Pooler struct {
	Name string
	// Role is the role the pooler fronts: master or replica.
	Role           string
	Ready, Desired int32
	// Why says how far the pooler is from running all its pods; empty
	// when it does.
	Why string
}

// Pod is one pod of a cluster as the detail view shows it.
type Pod struct {
	Name string
	// Role is Patroni's spilo-role label (master, replica), empty when
	// Patroni has not labelled the pod.
	Role     string
	Phase    corev1.PodPhase
	Ready    bool
	Restarts int32
	Created  time.Time
	// Why says why the pod is not Ready; empty when it is.
	Why string
}

// Detail reads one cluster, its pods and its connection poolers'
// Deployments. When only the pods cannot be listed, or only the poolers
// read, it returns the view (with PodsError or PoolersError set) and that
// error, so a caller can show what it has and still fail.
func Detail(ctx context.Context, pg pgclient.Interface, kube kubernetes.Interface, ns, name string) (*View, error) {
	obj, err := Get(ctx, pg, ns, name)
	if err != nil {
		return nil, err
	}
	v := &View{Cluster: obj}
	sel := labels.SelectorFromSet(cluster.Selector(name)).String()
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		v.PodsError = explain(err, request{verb: "list", resource: "pods", namespace: ns})
		return v, v.PodsError
	}
	for i := range pods.Items {
		v.Pods = append(v.Pods, podOf(&pods.Items[i]))
	}
	slices.SortFunc(v.Pods, func(a, b Pod) int { return strings.Compare(a.Name, b.Name) })
	v.Poolers, v.PoolersError = poolers(ctx, kube, ns, name)
	return v, v.PoolersError
}

// poolers reads the connection poolers' Deployments of cluster name.
func poolers(ctx context.Context, kube kubernetes.Interface, ns, name string) ([]Pooler, error) {
	var out []Pooler
	for _, role := range cluster.PoolerRoles {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, cluster.PoolerName(name, role), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return out, explain(err, request{verb: "get", resource: "deployments", group: "apps", namespace: ns, name: cluster.PoolerName(name, role)})
		}
		_, why := cluster.DeploymentReady(d)
		out = append(out, Pooler{Name: d.Name, Role: role, Ready: d.Status.ReadyReplicas, Desired: ptr.Deref(d.Spec.Replicas, 1), Why: why})
	}
	return out, nil
}

// Get reads one cluster, with the errors explained as Detail explains
// them (--mermaid needs the cluster, not its pods).
func Get(ctx context.Context, pg pgclient.Interface, ns, name string) (*v1.Postgresql, error) {
	obj, err := pg.PgloopV1().Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, notFound(ctx, pg, err, ns, name)
	}
	if err != nil {
		return nil, explain(err, pgRequest("get", ns, name))
	}
	return obj, nil
}

// notFound tells a missing cluster from a missing CRD. A get answers
// NotFound for both; a list of the resource answers NotFound only when the
// resource type itself is not served.
func notFound(ctx context.Context, pg pgclient.Interface, getErr error, ns, name string) error {
	_, err := pg.PgloopV1().Postgresqls(ns).List(ctx, metav1.ListOptions{Limit: 1})
	switch {
	case err == nil:
		return clusterNotFound(getErr, ns, name)
	case apierrors.IsNotFound(err):
		return crdMissing(err)
	case apierrors.IsForbidden(err):
		// The get was allowed, so the resource is served: only this
		// cluster is missing.
		return clusterNotFound(getErr, ns, name)
	default:
		return explain(err, pgRequest("list", ns, ""))
	}
}

func podOf(p *corev1.Pod) Pod {
	out := Pod{
		Name:    p.Name,
		Role:    p.Labels[cluster.LabelRole],
		Phase:   p.Status.Phase,
		Ready:   podReady(p) && p.DeletionTimestamp == nil,
		Created: p.CreationTimestamp.Time,
	}
	for _, c := range p.Status.ContainerStatuses {
		out.Restarts += c.RestartCount
	}
	if !out.Ready {
		out.Why = whyNotReady(p)
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	c := podCondition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// whyNotReady names the first cause found, most specific first:
//  1. the pod is being deleted;
//  2. the scheduler placed it nowhere (PodScheduled False: reason, message);
//  3. a container (init containers first) waits (CrashLoopBackOff,
//     ImagePullBackOff, ContainerCreating...);
//  4. the pod ended (Failed, Succeeded);
//  5. the Ready condition's own reason (ContainersNotReady, ...).
func whyNotReady(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	if c := podCondition(p, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
		return join(c.Reason, c.Message)
	}
	for _, statuses := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range statuses {
			if w := s.State.Waiting; w != nil && w.Reason != "" {
				return join(w.Reason, fmt.Sprintf("container %s: %s", s.Name, w.Message))
			}
		}
	}
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return join(string(p.Status.Phase), join(p.Status.Reason, p.Status.Message))
	}
	if c := podCondition(p, corev1.PodReady); c != nil && (c.Reason != "" || c.Message != "") {
		return join(c.Reason, c.Message)
	}
	return "not Ready yet"
}

// join is "reason: message", or whichever of the two is set.
func join(reason, message string) string {
	message = strings.TrimSuffix(strings.TrimSpace(message), ":")
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	}
	return reason + ": " + message
}
