package facts

import (
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/observed"
)

// Reader reads a cluster's objects from local caches (pkg/informers
// implements it without knowing this package: pkg/operator's tests check
// it). It must not do network I/O: Observe runs on the loop goroutine.
type Reader interface {
	// Objects returns the objects of cluster key ("namespace/name"), and
	// false when its resource is not in the cache. They are the cache's
	// own objects, shared with every reader.
	Objects(key string) (observed.Cluster, bool)
}

// Observer is the controller's Observer: it reads a cluster's objects from
// a Reader and derives their facts with a Deriver.
type Observer struct {
	reader  Reader
	deriver *Deriver
	now     func() time.Time
}

// NewObserver returns an Observer reading from r and deriving with d; now
// tells the time Warning Events are aged against.
func NewObserver(r Reader, d *Deriver, now func() time.Time) *Observer {
	return &Observer{reader: r, deriver: d, now: now}
}

// Observe returns the facts of cluster key and its stored status. A
// cluster whose resource is not in the cache is Gone, with no status, and
// what the Deriver remembered of it is forgotten. The status is the
// cache's own copy: the caller must copy it before keeping or changing it
// (fsm.Engine.New does).
func (o *Observer) Observe(key string) (fsm.Facts, *v1.PostgresqlStatus) {
	objs, ok := o.reader.Objects(key)
	if !ok {
		o.deriver.Forget(key)
		return fsm.Facts{Gone: true}, nil
	}
	return o.deriver.Facts(objs, o.now()), &objs.Postgresql.Status
}
