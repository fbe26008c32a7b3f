package status

import (
	"context"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
)

// Row is one cluster of the list view. It holds values, not text: the
// printers format them against a clock, and -o json|yaml prints rows as
// they are.
type Row struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// State is status.state, or Pending for a cluster the operator has
	// not acted on yet.
	State string `json:"state"`
	// Since is when the cluster entered State (its creation while Pending).
	Since time.Time `json:"since,omitzero"`
	// Ready and Desired are the Ready instances and the desired ones.
	Ready   int32 `json:"readyInstances"`
	Desired int32 `json:"desiredInstances"`
	// Next is the earliest pending timer of the current epoch, if any.
	Next *v1.Timer `json:"next,omitempty"`
	// Reason and Message are status.reason and status.message.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Epoch   int64  `json:"epoch"`
	Primary string `json:"primary,omitempty"`
}

// List returns one row per Postgresql in namespace, or in every namespace
// when all is set, sorted by namespace and name.
func List(ctx context.Context, pg pgclient.Interface, namespace string, all bool) ([]Row, error) {
	if all {
		namespace = metav1.NamespaceAll
	}
	list, err := pg.PgloopV1().Postgresqls(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, explain(err, pgRequest("list", namespace, ""))
	}
	rows := make([]Row, 0, len(list.Items))
	for i := range list.Items {
		rows = append(rows, RowFor(&list.Items[i]))
	}
	sortRows(rows)
	return rows, nil
}

// RowFor summarises one cluster.
func RowFor(pg *v1.Postgresql) Row {
	st := &pg.Status
	r := Row{
		Namespace: pg.Namespace,
		Name:      pg.Name,
		State:     stateOf(pg),
		Ready:     st.ReadyInstances,
		Desired:   st.DesiredInstances,
		Reason:    st.Reason,
		Message:   st.Message,
		Epoch:     st.Epoch,
		Primary:   st.Primary,
		Next:      nextTimer(st),
	}
	switch {
	case st.StateSince != nil:
		r.Since = st.StateSince.Time
	case st.State == "":
		r.Since = pg.CreationTimestamp.Time
	}
	// Until the operator writes a status, the desired count is the spec's.
	if st.State == "" {
		r.Desired = pg.Spec.NumberOfInstances
	}
	return r
}

// stateOf is the cluster's state; a resource without one is Pending, as
// the state machine treats it.
func stateOf(pg *v1.Postgresql) string {
	if pg.Status.State == "" {
		return fsm.Pending
	}
	return pg.Status.State
}

// nextTimer returns the earliest timer set in the current epoch. Timers of
// an older epoch are stale: the operator ignores them when they fire.
func nextTimer(st *v1.PostgresqlStatus) *v1.Timer {
	var next *v1.Timer
	for i := range st.Timers {
		t := &st.Timers[i]
		if stale(st, t) {
			continue
		}
		if next == nil || t.Deadline.Before(&next.Deadline) {
			next = t.DeepCopy()
		}
	}
	return next
}

func stale(st *v1.PostgresqlStatus, t *v1.Timer) bool { return t.Epoch != st.Epoch }

func sortRows(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}
