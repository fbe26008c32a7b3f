package chaos

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

var testWorkload = Workload{Clusters: 20, Namespaces: 4, Pace: time.Second}

func plan(seed uint64) []Action { return Plan(rand.New(rand.NewPCG(seed, 1)), testWorkload) }

func TestPlanIsDeterministic(t *testing.T) {
	if a, b := plan(7), plan(7); !reflect.DeepEqual(a, b) {
		t.Error("two plans of seed 7 differ")
	}
	if a, b := plan(7), plan(8); reflect.DeepEqual(a, b) {
		t.Error("seeds 7 and 8 give the same plan")
	}
}

// Every plan keeps a cluster's actions in order: created first, nothing
// after its delete, names never reused; the phases come in order; every
// live cluster is edited once in the rollout.
func TestPlanOrder(t *testing.T) {
	for seed := range uint64(50) {
		actions := plan(seed)
		created, deleted := map[string]bool{}, map[string]bool{}
		rolled := map[string]int{}
		last := PhaseCreate
		counts := map[ActionKind]int{}
		for i, a := range actions {
			key := a.Namespace + "/" + a.Name
			counts[a.Kind]++
			switch {
			case a.Phase < last:
				t.Fatalf("seed %d, action %d (%s): phase %s after %s", seed, i, a, a.Phase, last)
			case a.Kind == Create && created[key]:
				t.Fatalf("seed %d: %s created twice", seed, key)
			case a.Kind != Create && !created[key]:
				t.Fatalf("seed %d: %s before its create", seed, a)
			case deleted[key]:
				t.Fatalf("seed %d: %s after its delete", seed, a)
			case (a.Kind == Create || a.Kind == Scale) && (a.Instances < 1 || a.Instances > 3):
				t.Fatalf("seed %d: %s", seed, a)
			}
			last = a.Phase
			created[key] = true
			if a.Kind == Delete {
				deleted[key] = true
			}
			if a.Phase == PhaseRollout {
				rolled[key]++
			}
		}
		if counts[Create] != testWorkload.Clusters+testWorkload.Clusters/4 {
			t.Errorf("seed %d: %d creates", seed, counts[Create])
		}
		if counts[Delete] > testWorkload.Clusters/4 {
			t.Errorf("seed %d: %d deletes", seed, counts[Delete])
		}
		for key := range created {
			if want := map[bool]int{true: 0, false: 1}[deleted[key]]; rolled[key] != want {
				t.Errorf("seed %d: %s edited %d times in the rollout, want %d", seed, key, rolled[key], want)
			}
		}
	}
}

func TestApplyAndRecord(t *testing.T) {
	book := Book{}
	pg := NewCluster(Action{Kind: Create, Namespace: "ns", Name: "a", Instances: 2})
	pg.Generation = 1
	book.Record(pg)
	Apply(pg, Action{Kind: Edit})
	Apply(pg, Action{Kind: Scale, Instances: 3})
	Apply(pg, Action{Kind: Edit})
	pg.Generation = 2
	book.Record(pg)
	want := &Expect{Namespace: "ns", Name: "a", Instances: 3, Edit: 2, Generation: 2}
	if got := book["ns/a"]; !reflect.DeepEqual(got, want) {
		t.Errorf("book has %+v, want %+v", got, want)
	}
}

// converged returns the objects of a cluster as the user asked it, in
// namespace ns.
func converged(e *Expect) Snapshot {
	pg := NewCluster(Action{Kind: Create, Namespace: e.Namespace, Name: e.Name, Instances: e.Instances})
	pg.Spec.PodAnnotations[EditAnnotation] = strconv.Itoa(e.Edit)
	pg.Generation = e.Generation
	pg.Status.ObservedGeneration = e.Generation
	pg.Status.State = fsm.Running
	labels := cluster.Labels(pg)
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: e.Namespace, Name: name, Labels: labels}
	}
	replicas := e.Instances
	sts := &appsv1.StatefulSet{ObjectMeta: meta(cluster.StatefulSetName(e.Name)), Spec: appsv1.StatefulSetSpec{Replicas: &replicas}}
	sts.Spec.Template.Annotations = map[string]string{EditAnnotation: strconv.Itoa(e.Edit), cluster.AnnotationPodTemplateHash: "h1"}
	s := Snapshot{Clusters: []*v1.Postgresql{pg}, StatefulSets: []*appsv1.StatefulSet{sts}}
	for i := range e.Instances {
		pod := &corev1.Pod{ObjectMeta: meta(cluster.PodName(e.Name, i))}
		pod.Labels = map[string]string{cluster.LabelClusterName: e.Name, cluster.LabelRole: cluster.RoleReplica}
		if i == 0 {
			pod.Labels[cluster.LabelRole] = cluster.RoleMaster
		}
		pod.Annotations = map[string]string{cluster.AnnotationPodTemplateHash: "h1"}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		s.Pods = append(s.Pods, pod)
	}
	names := cluster.Names(pg)
	for _, n := range names.Services {
		s.Services = append(s.Services, &corev1.Service{ObjectMeta: meta(n)})
	}
	for _, n := range names.Secrets {
		s.Secrets = append(s.Secrets, &corev1.Secret{ObjectMeta: meta(n)})
	}
	s.PDBs = []*policyv1.PodDisruptionBudget{{ObjectMeta: meta(names.PodDisruptionBudget)}}
	s.ConfigMaps = []*corev1.ConfigMap{{ObjectMeta: meta(e.Name + "-leader")}}
	return s
}

func TestJudge(t *testing.T) {
	live := &Expect{Namespace: "ns", Name: "a", Instances: 2, Edit: 1, Generation: 3}
	gone := &Expect{Namespace: "ns", Name: "b", Instances: 1, Generation: 1, Deleted: true}
	book := Book{live.Key(): live, gone.Key(): gone}
	tests := []struct {
		name   string
		change func(s *Snapshot)
		// converged, gone, duplicates, lost
		want [4]int
		// pending names a word of the first pending reason.
		pending string
	}{
		{name: "all done", change: func(*Snapshot) {}, want: [4]int{1, 1, 0, 0}},
		{name: "generation not observed", change: func(s *Snapshot) { s.Clusters[0].Status.ObservedGeneration = 2 },
			want: [4]int{0, 1, 0, 1}, pending: "observedGeneration"},
		{name: "scale not applied to the StatefulSet", change: func(s *Snapshot) { one := int32(1); s.StatefulSets[0].Spec.Replicas = &one },
			want: [4]int{0, 1, 0, 1}, pending: "StatefulSet has 1 replicas"},
		{name: "edit not applied", change: func(s *Snapshot) { s.StatefulSets[0].Spec.Template.Annotations[EditAnnotation] = "0" },
			want: [4]int{0, 1, 0, 1}, pending: "edit 0"},
		{name: "a pod of the old template: pending, not lost", change: func(s *Snapshot) { s.Pods[1].Annotations[cluster.AnnotationPodTemplateHash] = "h0" },
			want: [4]int{0, 1, 0, 0}, pending: "1 Ready"},
		{name: "no master", change: func(s *Snapshot) { s.Pods[0].Labels[cluster.LabelRole] = cluster.RoleReplica },
			want: [4]int{0, 1, 0, 0}, pending: "0 pods labelled master"},
		{name: "not Running yet", change: func(s *Snapshot) { s.Clusters[0].Status.State = fsm.Updating },
			want: [4]int{0, 1, 0, 0}, pending: "state Updating"},
		{name: "a second StatefulSet", change: func(s *Snapshot) {
			extra := s.StatefulSets[0].DeepCopy()
			extra.Name = "a-2"
			s.StatefulSets = append(s.StatefulSets, extra)
		}, want: [4]int{1, 1, 1, 0}},
		{name: "a deleted cluster still there", change: func(s *Snapshot) {
			s.Clusters = append(s.Clusters, converged(gone).Clusters[0])
		}, want: [4]int{1, 0, 0, 1}, pending: "deleted, still there"},
		{name: "an orphan of a deleted cluster", change: func(s *Snapshot) {
			s.ConfigMaps = append(s.ConfigMaps, converged(gone).ConfigMaps[0])
		}, want: [4]int{1, 0, 1, 0}, pending: "1 objects left"},
		{name: "an object of a cluster no one made", change: func(s *Snapshot) {
			other := converged(&Expect{Namespace: "ns", Name: "z", Instances: 1})
			s.Services = append(s.Services, other.Services[0])
		}, want: [4]int{1, 1, 1, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := converged(live)
			tc.change(&s)
			v := Judge(book, s)
			got := [4]int{v.Converged, v.Gone, len(v.Duplicates), len(v.Lost)}
			if got != tc.want || v.Live != 1 || v.Deleted != 1 {
				t.Errorf("converged, gone, duplicates, lost = %v, want %v; %+v", got, tc.want, v)
			}
			if v.Done() != (tc.want == [4]int{1, 1, 0, 0}) {
				t.Errorf("Done() = %v", v.Done())
			}
			if tc.pending != "" && (len(v.Pending) == 0 || !strings.Contains(v.Pending[0], tc.pending)) {
				t.Errorf("pending %q, want it to name %q", v.Pending, tc.pending)
			}
		})
	}
}

// The faults' targets: the last in the rollout, the first in the creates
// when asked, the rest in the mixed phase, in order.
func TestTargets(t *testing.T) {
	r := &run{phaseCounts: map[Phase]int{PhaseCreate: 20, PhaseMixed: 40, PhaseRollout: 20}}
	for seed := range uint64(20) {
		r.faults = rand.New(rand.NewPCG(seed, 2))
		got := r.targets(3, true)
		if len(got) != 3 || !slices.IsSorted(got) ||
			got[0] < 5 || got[0] > 15 || got[1] < 20 || got[1] > 60 || got[2] < 65 || got[2] > 75 {
			t.Errorf("seed %d: targets(3, creates) = %v", seed, got)
		}
		got = r.targets(2, false)
		if len(got) != 2 || got[0] < 20 || got[0] > 60 || got[1] < 65 || got[1] > 75 {
			t.Errorf("seed %d: targets(2, no creates) = %v", seed, got)
		}
	}
}

// Names lists every scenario the issue asks for.
func TestNames(t *testing.T) {
	if got, want := Names(), []string{"kill", "proxy", "apiserver", "leader"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}

// A cluster may go Running -> Degraded once per fault, not more.
func TestFlapping(t *testing.T) {
	ok := Result{Faults: 3, ConvergedAt: time.Now(), Losses: map[string]int{"chaos-0/c01": 3, "chaos-1/c02": 1}}
	if f := ok.Flapping(); len(f) != 0 || ok.Failed() {
		t.Errorf("3 losses in 3 faults: Flapping() = %v, Failed() = %v; want none, false", f, ok.Failed())
	}
	flapping := ok
	flapping.Losses = map[string]int{"chaos-0/c01": 11, "chaos-1/c02": 1}
	want := []string{"flapping: chaos-0/c01 went Running -> Degraded 11 times (3 faults)"}
	if f := flapping.Flapping(); !slices.Equal(f, want) || !flapping.Failed() {
		t.Errorf("11 losses in 3 faults: Flapping() = %v, Failed() = %v; want %v, true", f, flapping.Failed(), want)
	}
	if line := flapping.Line(); !strings.Contains(line, "Running -> Degraded 12 (most of one cluster 11)") {
		t.Errorf("Line() = %q; want the losses counted", line)
	}
}
