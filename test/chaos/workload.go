package chaos

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/test/pgtest"
)

// EditAnnotation is the pod annotation the workload's edits change: each
// edit changes every pod template of the cluster, so its pods roll.
const EditAnnotation = "chaos.pgloop.dev/edit"

// ActionKind is what a user action does.
type ActionKind string

// The user actions of a workload.
const (
	Create ActionKind = "create"
	Scale  ActionKind = "scale"
	Edit   ActionKind = "edit"
	Delete ActionKind = "delete"
)

// Phase tells the fault schedules where the workload is.
type Phase int

// The phases of a workload, in order.
const (
	// PhaseCreate creates the first clusters.
	PhaseCreate Phase = iota
	// PhaseMixed scales, edits and deletes them and creates new ones.
	PhaseMixed
	// PhaseRollout edits every live cluster: a rollout of the whole fleet.
	PhaseRollout
	// PhaseDone: every action was made.
	PhaseDone
)

func (p Phase) String() string {
	return [...]string{"create", "mixed", "rollout", "done"}[p]
}

// Action is one user action, made Delay after the one before it.
type Action struct {
	Phase     Phase
	Kind      ActionKind
	Namespace string
	Name      string
	// Instances is the numberOfInstances a create or a scale writes.
	Instances int32
	Delay     time.Duration
}

func (a Action) String() string {
	s := fmt.Sprintf("%s %s/%s", a.Kind, a.Namespace, a.Name)
	if a.Kind == Create || a.Kind == Scale {
		s += fmt.Sprintf(" instances=%d", a.Instances)
	}
	return s
}

// Workload shapes Plan.
type Workload struct {
	// Clusters are created first; a quarter more are created later.
	Clusters int
	// Namespaces share the clusters in turn.
	Namespaces int
	// Pace is the mean delay between two actions.
	Pace time.Duration
}

// Namespace returns the name of namespace i.
func Namespace(i int) string { return fmt.Sprintf("chaos-%d", i) }

// Plan draws the user actions of a workload from r:
//
//  1. every first cluster created, 1-3 instances, in random order;
//  2. a mix, interleaved at random: each first cluster scaled (70 %) and
//     edited (70 %), a quarter of them then deleted, and a quarter as many
//     new clusters created (and edited half of the time);
//  3. every cluster still there edited: the rollout.
//
// A cluster's actions keep their order; names are never reused.
func Plan(r *rand.Rand, w Workload) []Action {
	delay := func() time.Duration {
		return time.Duration((0.25 + 1.5*r.Float64()) * float64(w.Pace))
	}
	instances := func() int32 { return 1 + r.Int32N(3) }
	var out []Action
	type ref struct{ ns, name string }
	var first []ref
	for i := range w.Clusters {
		first = append(first, ref{Namespace(i % w.Namespaces), fmt.Sprintf("c%02d", i)})
	}
	order := r.Perm(len(first))
	for _, i := range order {
		out = append(out, Action{Phase: PhaseCreate, Kind: Create, Namespace: first[i].ns, Name: first[i].name, Instances: instances(), Delay: delay() / 4})
	}

	// Per cluster, its own sequence; then a random merge that keeps each
	// sequence's order.
	var seqs [][]Action
	deleted := map[ref]bool{}
	for _, i := range r.Perm(len(first)) {
		c := first[i]
		var seq []Action
		if r.Float64() < 0.7 {
			seq = append(seq, Action{Kind: Scale, Instances: instances()})
		}
		if r.Float64() < 0.7 {
			seq = append(seq, Action{Kind: Edit})
		}
		if len(deleted) < w.Clusters/4 && r.Float64() < 0.4 {
			seq = append(seq, Action{Kind: Delete})
			deleted[c] = true
		}
		for j := range seq {
			seq[j].Namespace, seq[j].Name = c.ns, c.name
		}
		if len(seq) > 0 {
			seqs = append(seqs, seq)
		}
	}
	var later []ref
	for i := range max(1, w.Clusters/4) {
		c := ref{Namespace(r.IntN(w.Namespaces)), fmt.Sprintf("n%02d", i)}
		later = append(later, c)
		seq := []Action{{Kind: Create, Namespace: c.ns, Name: c.name, Instances: instances()}}
		if r.Float64() < 0.5 {
			seq = append(seq, Action{Kind: Edit, Namespace: c.ns, Name: c.name})
		}
		seqs = append(seqs, seq)
	}
	for len(seqs) > 0 {
		i := r.IntN(len(seqs))
		a := seqs[i][0]
		a.Phase, a.Delay = PhaseMixed, delay()
		out = append(out, a)
		if seqs[i] = seqs[i][1:]; len(seqs[i]) == 0 {
			seqs = append(seqs[:i], seqs[i+1:]...)
		}
	}

	for _, c := range append(first, later...) {
		if !deleted[c] {
			out = append(out, Action{Phase: PhaseRollout, Kind: Edit, Namespace: c.ns, Name: c.name, Delay: delay() / 4})
		}
	}
	return out
}

// Expect is what the user last asked of one cluster.
type Expect struct {
	Namespace, Name string
	Instances       int32
	// Edit is the value of EditAnnotation the pods must carry.
	Edit int
	// Generation is metadata.generation after the user's last write.
	Generation int64
	// Deleted: the user deleted it; it and its objects must go.
	Deleted bool
}

// Key is namespace/name.
func (e *Expect) Key() string { return e.Namespace + "/" + e.Name }

// Book holds what the user asked of every cluster the workload touched.
type Book map[string]*Expect

// NewCluster is the cluster a create action makes.
func NewCluster(a Action) *v1.Postgresql {
	pg := pgtest.Cluster(a.Namespace, a.Name, a.Instances)
	pg.Spec.PodAnnotations = map[string]string{EditAnnotation: "0"}
	return pg
}

// Apply changes pg as the scale or edit action a asks: an edit adds one to
// EditAnnotation.
func Apply(pg *v1.Postgresql, a Action) {
	switch a.Kind {
	case Scale:
		pg.Spec.NumberOfInstances = a.Instances
	case Edit:
		n, _ := strconv.Atoi(pg.Spec.PodAnnotations[EditAnnotation])
		if pg.Spec.PodAnnotations == nil {
			pg.Spec.PodAnnotations = map[string]string{}
		}
		pg.Spec.PodAnnotations[EditAnnotation] = strconv.Itoa(n + 1)
	}
}

// Record notes in b what the user's write of pg (the API's answer) asked.
func (b Book) Record(pg *v1.Postgresql) {
	e := b[pg.Namespace+"/"+pg.Name]
	if e == nil {
		e = &Expect{Namespace: pg.Namespace, Name: pg.Name}
		b[e.Key()] = e
	}
	e.Instances = pg.Spec.NumberOfInstances
	e.Edit, _ = strconv.Atoi(pg.Spec.PodAnnotations[EditAnnotation])
	e.Generation = pg.Generation
}
