package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// Snapshot is what the API holds of the workload's namespaces: the
// clusters, and the objects labelled application=spilo.
type Snapshot struct {
	Clusters     []*v1.Postgresql
	StatefulSets []*appsv1.StatefulSet
	Pods         []*corev1.Pod
	Services     []*corev1.Service
	Secrets      []*corev1.Secret
	PDBs         []*policyv1.PodDisruptionBudget
	ConfigMaps   []*corev1.ConfigMap
}

// Verdict is Judge's account of a snapshot against the book.
type Verdict struct {
	// Live are the clusters the user did not delete; Converged of them are
	// as the user asked (Judge says what that means).
	Live, Converged int
	// Deleted are the clusters the user deleted; Gone of them left the API
	// with their objects.
	Deleted, Gone int
	// Duplicates are objects beyond those of a cluster's spec: a second
	// StatefulSet, Service, PodDisruptionBudget or Secret of a live
	// cluster, an object of a cluster no one asked for, or one left by a
	// deleted cluster (orphan).
	Duplicates []string
	// Lost are user actions pgloop did not act on: a generation of a live
	// cluster never observed or not applied to its StatefulSet, a delete
	// that did not finish.
	Lost []string
	// Pending says, per cluster not converged, why.
	Pending []string
}

// Done holds when every cluster converged and nothing is duplicated or
// lost.
func (v Verdict) Done() bool {
	return v.Converged == v.Live && v.Gone == v.Deleted && len(v.Duplicates) == 0 && len(v.Lost) == 0
}

// object is what Judge needs of any object.
type object interface {
	metav1.Object
}

// byCluster groups objects by namespace/cluster-name label.
func byCluster[T object](objs []T) map[string][]T {
	out := map[string][]T{}
	for _, o := range objs {
		name, ok := o.GetLabels()[cluster.LabelClusterName]
		if !ok {
			continue
		}
		key := o.GetNamespace() + "/" + name
		out[key] = append(out[key], o)
	}
	return out
}

// extra names the objects of objs whose names are not in want.
func extra[T object](kind string, objs []T, want ...string) []string {
	var out []string
	for _, o := range objs {
		if !slices.Contains(want, o.GetName()) {
			out = append(out, fmt.Sprintf("%s %s/%s", kind, o.GetNamespace(), o.GetName()))
		}
	}
	return out
}

// Judge compares s with what the user asked. A live cluster converged when:
//
//  1. it exists, not being deleted, its spec the user's last write
//     (instances, edit count) and its status Running for that generation
//     (observedGeneration == generation, at least the written one);
//  2. its StatefulSet has the spec's replicas and edit count;
//  3. it has exactly that many pods, all Ready and none terminating, all
//     of the StatefulSet's template (pgloop's template hash), one of them
//     labelled master.
//
// A deleted cluster is gone when neither it nor any object labelled with
// its name remains (its volume claims stay on purpose; they are not
// listed). Lost actions are the part of the pending clusters that pgloop
// had not acted on at all: for the caller to read once the deadline has
// passed.
func Judge(book Book, s Snapshot) Verdict {
	var v Verdict
	clusters := map[string]*v1.Postgresql{}
	for _, pg := range s.Clusters {
		clusters[pg.Namespace+"/"+pg.Name] = pg
	}
	stss, pods, svcs := byCluster(s.StatefulSets), byCluster(s.Pods), byCluster(s.Services)
	secrets, pdbs, cms := byCluster(s.Secrets), byCluster(s.PDBs), byCluster(s.ConfigMaps)
	// Every object, named, by cluster.
	all := []map[string][]string{
		names(stss, "statefulset"), names(pods, "pod"), names(svcs, "service"),
		names(secrets, "secret"), names(pdbs, "poddisruptionbudget"), names(cms, "configmap"),
	}
	keys := make([]string, 0, len(book))
	for k := range book {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		e := book[key]
		pg := clusters[key]
		if e.Deleted {
			v.Deleted++
			left := len(stss[key]) + len(pods[key]) + len(svcs[key]) + len(secrets[key]) + len(pdbs[key]) + len(cms[key])
			switch {
			case pg != nil:
				v.Pending = append(v.Pending, fmt.Sprintf("%s: deleted, still there (%s, finalizers %v)", key, pg.Status.State, pg.Finalizers))
				v.Lost = append(v.Lost, fmt.Sprintf("%s: delete never finished", key))
			case left > 0:
				v.Pending = append(v.Pending, fmt.Sprintf("%s: deleted, %d objects left", key, left))
				for _, group := range all {
					for _, o := range group[key] {
						v.Duplicates = append(v.Duplicates, "orphan "+o)
					}
				}
			default:
				v.Gone++
			}
			continue
		}
		v.Live++
		if pg == nil {
			v.Pending = append(v.Pending, key+": missing")
			v.Lost = append(v.Lost, key+": created, then gone")
			continue
		}
		var dup []string
		dup = append(dup, extra("statefulset", stss[key], cluster.StatefulSetName(pg.Name))...)
		names := cluster.Names(pg)
		dup = append(dup, extra("service", svcs[key], names.Services...)...)
		dup = append(dup, extra("poddisruptionbudget", pdbs[key], names.PodDisruptionBudget)...)
		dup = append(dup, extra("secret", secrets[key], names.Secrets...)...)
		v.Duplicates = append(v.Duplicates, dup...)

		why, lost := judgeLive(e, pg, stss[key], pods[key])
		if why == "" {
			v.Converged++
			continue
		}
		v.Pending = append(v.Pending, key+": "+why)
		if lost != "" {
			v.Lost = append(v.Lost, key+": "+lost)
		}
	}
	// Objects of clusters the user never made.
	for _, group := range all {
		for key, objs := range group {
			if book[key] == nil {
				v.Duplicates = append(v.Duplicates, objs...)
			}
		}
	}
	sort.Strings(v.Duplicates)
	return v
}

func names[T object](groups map[string][]T, kind string) map[string][]string {
	out := map[string][]string{}
	for key, objs := range groups {
		for _, o := range objs {
			out[key] = append(out[key], fmt.Sprintf("%s %s/%s", kind, o.GetNamespace(), o.GetName()))
		}
	}
	return out
}

// judgeLive returns why a live cluster has not converged ("" when it has),
// and, when that is because pgloop did not act on the user's last write,
// which action was lost.
func judgeLive(e *Expect, pg *v1.Postgresql, stss []*appsv1.StatefulSet, pods []*corev1.Pod) (why, lost string) {
	edit := strconv.Itoa(e.Edit)
	switch {
	case pg.DeletionTimestamp != nil:
		return "being deleted", "deleted though the user did not"
	case pg.Generation < e.Generation:
		return fmt.Sprintf("generation %d, the user wrote %d", pg.Generation, e.Generation), "a write went back"
	case pg.Spec.NumberOfInstances != e.Instances || pg.Spec.PodAnnotations[EditAnnotation] != edit:
		return fmt.Sprintf("spec has %d instances, edit %s; the user wrote %d, %s",
			pg.Spec.NumberOfInstances, pg.Spec.PodAnnotations[EditAnnotation], e.Instances, edit), "spec changed behind the user"
	case pg.Status.ObservedGeneration < pg.Generation:
		return fmt.Sprintf("observedGeneration %d < generation %d (%s)", pg.Status.ObservedGeneration, pg.Generation, pg.Status.State),
			fmt.Sprintf("generation %d never observed", pg.Generation)
	}
	var sts *appsv1.StatefulSet
	for _, s := range stss {
		if s.Name == cluster.StatefulSetName(pg.Name) {
			sts = s
		}
	}
	if sts == nil {
		return "no StatefulSet", "no StatefulSet made"
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != e.Instances || sts.Spec.Template.Annotations[EditAnnotation] != edit {
		replicas := int32(-1)
		if sts.Spec.Replicas != nil {
			replicas = *sts.Spec.Replicas
		}
		return fmt.Sprintf("StatefulSet has %d replicas, edit %s; want %d, %s", replicas, sts.Spec.Template.Annotations[EditAnnotation], e.Instances, edit),
			fmt.Sprintf("generation %d not applied to the StatefulSet", pg.Generation)
	}
	hash := sts.Spec.Template.Annotations[cluster.AnnotationPodTemplateHash]
	masters, ready := 0, 0
	for _, p := range pods {
		ok := p.DeletionTimestamp == nil && podReady(p) && p.Annotations[cluster.AnnotationPodTemplateHash] == hash
		if ok {
			ready++
		}
		if p.Labels[cluster.LabelRole] == cluster.RoleMaster {
			masters++
		}
	}
	switch {
	case len(pods) != int(e.Instances) || ready != len(pods):
		return fmt.Sprintf("%d pods, %d Ready of the current template; want %d", len(pods), ready, e.Instances), ""
	case masters != 1:
		return fmt.Sprintf("%d pods labelled master", masters), ""
	case pg.Status.State != fsm.Running:
		return fmt.Sprintf("state %s (%s)", pg.Status.State, pg.Status.Reason), ""
	}
	return "", ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
