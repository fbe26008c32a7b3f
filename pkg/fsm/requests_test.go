package fsm

import (
	"testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestRequestsHandledBefore: after an upgrade of pgloop, a request an
// older pgloop handled (recorded only in status.database.syncRequest or
// status.backup.request) is recorded Succeeded, and nothing is done
// again: no sync, no backup.
func TestRequestsHandledBefore(t *testing.T) {
	cfg := DefaultConfig()
	st := statusIn(Running)
	st.Database = &v1.DatabaseStatus{Hash: "s1+r1", SyncRequest: "r1"}
	st.Config = &v1.ConfigStatus{Hash: "c1+r1"}
	st.Backup = &v1.BackupStatus{Repository: "s3://b/p", Request: "b1"}
	m := newMachine(NewEngine(cfg), st)
	f := with(ready(1), func(f *Facts) {
		f.Sync, f.Config, f.SyncRequest = Want{Hash: "s1+r1"}, Want{Hash: "c1+r1"}, "r1"
		f.Requests = []Request{{Kind: v1.RequestBackup, Value: "b1", Detail: v1.BackupFull}, {Kind: v1.RequestSync, Value: "r1"}}
		f.Repository = "s3://b/p"
	})
	res := m.Handle(Input{Kind: Signal}, f, t0)
	if res.Plan == nil || res.Plan.Status == nil {
		t.Fatalf("plan %+v: want the requests recorded", res.Plan)
	}
	if p := res.Plan; p.Ensure || p.InDatabase != nil || p.StartBackup != nil {
		t.Errorf("plan %+v: want nothing done again", p)
	}
	if r := m.Status().Backup.Running; r != nil {
		t.Errorf("backup %+v started again", r)
	}
	for _, kind := range []string{v1.RequestSync, v1.RequestBackup} {
		r := m.request(kind)
		if r == nil || r.Phase != v1.RequestSucceeded || r.EndedAt == nil {
			t.Errorf("%s request recorded as %+v, want Succeeded", kind, r)
		}
	}
	// The same input again writes nothing.
	if res := m.Handle(Input{Kind: Signal}, f, t0.Add(1)); res.Plan != nil {
		t.Errorf("plan %+v for requests already recorded", res.Plan)
	}
}

// TestRequestWaitsWhileNotServing: a request seen while the cluster does
// not serve (here Invalid) says what it waits for.
func TestRequestWaitsWhileNotServing(t *testing.T) {
	cfg := DefaultConfig()
	m := newMachine(NewEngine(cfg), statusIn(Invalid))
	f := with(ready(1), func(f *Facts) {
		f.SpecError = "spec.numberOfInstances: must be at least 1"
		f.Requests = []Request{{Kind: v1.RequestBackup, Value: "b1", Detail: v1.BackupFull}}
	})
	m.Handle(Input{Kind: Signal}, f, t0)
	r := m.request(v1.RequestBackup)
	if r == nil || r.Phase != v1.RequestPending || r.Message != "waits for the cluster to serve: it is Invalid" {
		t.Errorf("request %+v, want Pending, waiting for the cluster to serve", r)
	}
}
