package fsm

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Reasons of the Events that say what became of a request.
const (
	ReasonRequestSucceeded = "RequestSucceeded"
	ReasonRequestFailed    = "RequestFailed"
)

// noteRequests is the one way a user's request goes (the request
// annotations, read by pkg/facts' requests.go): each one not seen before
// (a new value of its kind) is recorded in status.requests as Pending;
// the work it asks for answers it (endRequest), Succeeded or Failed with
// why, and says meanwhile what it waits for (requestWaits). Here are
// answered the requests done by work of other steps:
//  1. a sync, once the roles, the databases and Patroni's configuration
//     with it are applied (its value is in their hashes);
//  2. a password rotation, once no Secret asks any more (pkg/indb
//     removes the annotation once PostgreSQL has the new password); a
//     standby rotates nothing.
//
// backups answers a backup's. A kind with no record whose value an older
// record of status already handled (status.database.syncRequest,
// status.backup.request, which pgloop wrote before it recorded requests)
// is recorded Succeeded: an upgrade of pgloop repeats nothing.
func (m *Machine) noteRequests() {
	st, f := &m.st, &m.eng.call.facts
	if st.State == Deleted {
		return
	}
	now := metav1.NewTime(m.eng.call.now)
	for _, r := range f.Requests {
		if cur := m.request(r.Kind); cur != nil && cur.Value == r.Value {
			continue
		}
		rs := v1.RequestStatus{Kind: r.Kind, Value: r.Value, SeenAt: now, Phase: v1.RequestPending}
		if handledBefore(st, r) {
			rs.Phase, rs.Message, rs.EndedAt = v1.RequestSucceeded, "handled before pgloop recorded requests", &now
		}
		m.setRequest(rs)
	}
	if !m.serving() {
		for _, r := range st.Requests {
			if r.Phase == v1.RequestPending {
				m.requestWaits(r.Kind, "waits for the cluster to serve: it is "+st.State)
			}
		}
		return
	}
	if r := m.pendingRequest(v1.RequestSync); r != nil && f.SyncRequest == r.Value && !SyncDue(st, f) && !ConfigDue(st, f) {
		m.endRequest(v1.RequestSync, true, "roles, databases and Patroni's configuration synced")
	}
	if r := m.pendingRequest(v1.RequestRotatePassword); r != nil {
		switch {
		case f.Standby != "":
			m.endRequest(v1.RequestRotatePassword, false, "a standby rotates no password: its roles are its source's")
		case f.Request(v1.RequestRotatePassword).Value == "":
			m.endRequest(v1.RequestRotatePassword, true, "new passwords set in PostgreSQL and stored in the Secrets "+r.Value)
		}
	}
}

// handledBefore says whether an older record of st handled r.
func handledBefore(st *v1.PostgresqlStatus, r Request) bool {
	switch r.Kind {
	case v1.RequestSync:
		return st.Database != nil && st.Database.SyncRequest == r.Value
	case v1.RequestBackup:
		return st.Backup != nil && st.Backup.Request == r.Value
	}
	return false
}

// request is status' record of the last request of kind, nil when none.
func (m *Machine) request(kind string) *v1.RequestStatus {
	i := slices.IndexFunc(m.st.Requests, func(r v1.RequestStatus) bool { return r.Kind == kind })
	if i < 0 {
		return nil
	}
	return &m.st.Requests[i]
}

// pendingRequest is the request of kind seen and not answered yet, nil
// when there is none. The caller must not modify it.
func (m *Machine) pendingRequest(kind string) *v1.RequestStatus {
	if r := m.request(kind); r != nil && r.Phase == v1.RequestPending {
		return r
	}
	return nil
}

// setRequest records rs as the request of its kind, written at once: a
// restarted operator must not act on it again.
func (m *Machine) setRequest(rs v1.RequestStatus) {
	reqs := slices.Clone(m.st.Requests) // copy-on-write
	if i := slices.IndexFunc(reqs, func(r v1.RequestStatus) bool { return r.Kind == rs.Kind }); i >= 0 {
		reqs[i] = rs
	} else {
		reqs = append(reqs, rs)
		slices.SortFunc(reqs, func(a, b v1.RequestStatus) int { return strings.Compare(a.Kind, b.Kind) })
	}
	m.st.Requests = reqs
	m.out.changed()
}

// requestWaits says in the pending request of kind what it waits for.
func (m *Machine) requestWaits(kind, message string) {
	if r := m.pendingRequest(kind); r != nil && r.Message != message {
		rs := *r
		rs.Message = message
		m.setRequest(rs)
	}
}

// endRequest answers the pending request of kind: Succeeded, or Failed,
// with message, and a Kubernetes Event that says so.
func (m *Machine) endRequest(kind string, ok bool, message string) {
	r := m.pendingRequest(kind)
	if r == nil {
		return
	}
	rs := *r
	at := metav1.NewTime(m.eng.call.now)
	rs.Phase, rs.Message, rs.EndedAt = v1.RequestSucceeded, message, &at
	rec := Record{Reason: ReasonRequestSucceeded}
	if !ok {
		rs.Phase = v1.RequestFailed
		rec = Record{Warning: true, Reason: ReasonRequestFailed}
	}
	rec.Message = fmt.Sprintf("%s request %s: %s", kind, rs.Value, message)
	m.eng.call.records = append(m.eng.call.records, rec)
	m.setRequest(rs)
}
