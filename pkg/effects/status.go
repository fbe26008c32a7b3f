package effects

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// writeStatus writes status through the status subresource, as
// CloudNativePG's status helper does: read the resource, skip the write when
// its status already is the desired one, else write and, on a conflict,
// read again and retry. The spec is never written here. A resource that is
// gone needs no status.
//
// The first read is the cache's, and its resourceVersion the write's; a
// conflict means the cache is behind, so the retries read from the API. A
// cached status equal to the desired one is trusted unless this process
// has since written another (the cache has not caught up with it).
func (r *run) writeStatus(ctx context.Context, status *v1.PostgresqlStatus) error {
	want := stored(status)
	fresh := r.cache == nil
	for attempt := 1; ; attempt++ {
		pg, err := r.getCluster(ctx, fresh)
		if pg == nil {
			return err
		}
		if equality.Semantic.DeepEqual(pg.Status, *want) &&
			(fresh || !r.statuses.contradicts(r.key, pg.UID, want)) {
			r.log.Debug("status unchanged")
			return nil
		}
		// pg is this call's own copy.
		pg.Status = *status.DeepCopy()
		_, err = r.postgresqls().UpdateStatus(ctx, pg, metav1.UpdateOptions{FieldManager: act.FieldManager})
		switch {
		case err == nil:
			if r.cache != nil {
				r.statuses.remember(r.key, pg.UID, want)
			}
			r.log.WithField("state", status.State).Debug("status written")
			return nil
		case apierrors.IsNotFound(err):
			r.statuses.remember(r.key, "", nil)
			return nil
		case apierrors.IsConflict(err) && attempt < maxAttempts:
			fresh = true
			continue
		}
		// Whether it was written is not known.
		r.statuses.remember(r.key, "", nil)
		return fmt.Errorf("update status of postgresql %s: %w", r.key, err)
	}
}

// stored returns status as the apiserver stores it, to compare with what it
// returns: times keep whole seconds only (metav1.Time's encoding), while
// the state machine stamps them with its clock's full precision. Without
// this, a status that did not change would still be written. The JSON
// round trip is exactly the apiserver's; status holds only plain fields.
func stored(status *v1.PostgresqlStatus) *v1.PostgresqlStatus {
	out := &v1.PostgresqlStatus{}
	data, err := json.Marshal(status)
	if err == nil {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		// Cannot happen for these types; comparing as it is only costs
		// a write.
		return status
	}
	return out
}
