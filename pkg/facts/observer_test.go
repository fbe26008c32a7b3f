package facts

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/observed"
)

// reader is a Reader over a map of cluster key to objects.
type reader map[string]observed.Cluster

func (r reader) Objects(key string) (observed.Cluster, bool) {
	objs, ok := r[key]
	return objs, ok
}

// TestObserver checks that Observe derives the facts of what the Reader
// holds, returns the Reader's own status, and that a cluster the Reader
// does not hold is Gone and forgotten.
func TestObserver(t *testing.T) {
	pg := newPG("c1", 1)
	r := reader{"db/c1": objects(pg, statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master))}
	d := NewDeriver(cluster.Options{}, true)
	asked := 0
	o := NewObserver(r, d, func() time.Time { asked++; return now })

	f, status := o.Observe("db/c1")
	if f.Gone || !f.ObjectsCurrent || f.Primary != "c1-0" {
		t.Fatalf("c1 %+v", f)
	}
	if status != &pg.Status {
		t.Errorf("status is not the Reader's: %p, want %p", status, &pg.Status)
	}
	if status.State != "Running" || status.Epoch != 4 {
		t.Errorf("status %+v", status)
	}
	if asked != 1 {
		t.Errorf("now asked %d times, want once", asked)
	}
	c1 := types.NamespacedName{Namespace: "db", Name: "c1"}
	if d.memo[c1] == nil {
		t.Fatal("nothing remembered of c1")
	}

	// Objects of a cluster whose resource is gone are no reason to
	// resurrect it: the Reader does not hold the cluster at all.
	delete(r, "db/c1")
	for _, key := range []string{"db/c1", "db/nope", "no-slash"} {
		f, status := o.Observe(key)
		if !reflect.DeepEqual(f, fsm.Facts{Gone: true}) || status != nil {
			t.Errorf("%s: facts %+v status %v, want gone", key, f, status)
		}
	}
	if len(d.memo) != 0 {
		t.Errorf("c1 gone, the Deriver still remembers %v", d.memo)
	}
}
