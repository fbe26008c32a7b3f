package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Kinds of user actions.
const (
	opCreate = "create"
	opEdit   = "edit"
	opDelete = "delete"
)

// op is one action of the user on a cluster.
type op struct {
	at   time.Duration // from the start
	kind string
	key  string // namespace/name
	// edit changes the spec (opEdit) or builds it (opCreate).
	edit func(*v1.Postgresql)
	desc string
}

// plannedCluster is what the seed decided about one cluster.
type plannedCluster struct {
	key   string
	fate  fate
	valid bool
	// hung: every step of the cluster blocks until its deadline while
	// the faults last (FaultHungCluster).
	hung bool
}

// images are the Spilo images edits switch between: a new image is a
// rollout.
var images = []string{"ghcr.io/zalando/spilo-17:4.0-p2", "ghcr.io/zalando/spilo-17:4.0-p3"}

// newWorkload draws the clusters of a run and what the user does to them
// while the faults last (active): creates, edits of the instances or the
// image, deletions. Names are never reused, so "after its deletion" means
// one cluster.
func newWorkload(rng *rand.Rand, active time.Duration) ([]plannedCluster, []op) {
	var clusters []plannedCluster
	var ops []op
	n := 1 + rng.IntN(5)
	for i := range n {
		ns := fmt.Sprintf("ns%d", rng.IntN(2))
		key := fmt.Sprintf("%s/pg%d", ns, i)
		pc := plannedCluster{key: key, valid: rng.IntN(8) != 0,
			fate: fate{kind: fateReady, delay: time.Duration(5+rng.IntN(120)) * time.Second}}
		switch rng.IntN(10) {
		case 0:
			pc.fate.kind = fateUnschedulable
		case 1:
			pc.fate.kind = fateCrashLoop
		}
		clusters = append(clusters, pc)
		created := time.Duration(rng.Int64N(int64(active / 2)))
		instances := int32(1 + rng.IntN(3))
		valid := pc.valid
		ops = append(ops, op{at: created, kind: opCreate, key: key,
			desc: fmt.Sprintf("%d instances, valid %t, pods %s after %v", instances, valid, pc.fate.kind, pc.fate.delay),
			edit: func(pg *v1.Postgresql) {
				pg.Spec.NumberOfInstances = instances
				if !valid {
					pg.Spec.Tolerations = []corev1.Toleration{{Key: "postgres", Operator: "Sometimes"}}
				}
			}})
		at := created
		for range rng.IntN(3) {
			at += time.Duration(rng.Int64N(int64(active / 4)))
			if at >= active {
				break
			}
			if rng.IntN(2) == 0 {
				n := int32(1 + rng.IntN(3))
				ops = append(ops, op{at: at, kind: opEdit, key: key, desc: fmt.Sprintf("instances %d", n),
					edit: func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = n }})
				continue
			}
			image := images[rng.IntN(len(images))]
			ops = append(ops, op{at: at, kind: opEdit, key: key, desc: "image " + image,
				edit: func(pg *v1.Postgresql) { pg.Spec.DockerImage = image }})
		}
		if rng.IntN(4) == 0 {
			at += time.Duration(rng.Int64N(int64(active / 4)))
			ops = append(ops, op{at: min(at, active), kind: opDelete, key: key})
		}
	}
	slices.SortStableFunc(ops, func(a, b op) int { return int(a.at - b.at) })
	return clusters, ops
}

// newPostgresql is the resource a user creates.
func newPostgresql(ns, name string) *v1.Postgresql {
	return &v1.Postgresql{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: "Postgresql"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PostgresqlSpec{
			TeamID:     "acid",
			PostgreSQL: v1.PostgresqlParam{Version: "17"},
			Volume:     v1.Volume{Size: resource.MustParse("1Gi")},
		},
	}
}
