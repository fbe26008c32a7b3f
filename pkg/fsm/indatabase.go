package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// acceptBootstrap records as applied what Patroni's bootstrap makes, when
// nothing was ever applied (Facts.Want.Bootstrap): no users nor databases,
// and, while Creating, the configuration the StatefulSet bootstraps with.
// Such a cluster needs no SQL or Patroni call.
func (m *Machine) acceptBootstrap() {
	st, f := &m.st, &m.eng.call.facts
	switch st.State {
	case Creating, Running, Updating, Degraded:
	default:
		return
	}
	// Derived from the StatefulSet, which a restarted operator finds
	// again: the write may wait.
	if st.Database == nil && f.Sync.Bootstrap && f.Sync.Hash != "" {
		st.Database = &v1.DatabaseStatus{Hash: f.Sync.Hash}
		m.deferWrite()
	}
	if st.Config == nil && st.State == Creating && f.Config.Bootstrap && f.Config.Hash != "" {
		st.Config = &v1.ConfigStatus{Hash: f.Config.Hash}
		m.deferWrite()
	}
}

// inDatabaseWork is the in-database work a plan of ensure effects carries
// now: what is due, once every pod is Ready and the primary's Patroni
// publishes where to reach it.
func (m *Machine) inDatabaseWork() *InDatabase {
	st, f := &m.st, &m.eng.call.facts
	if f.Target == "" || !f.converged() {
		return nil
	}
	var w InDatabase
	if SyncDue(st, f) {
		w.Sync = syncHash(st, f)
	}
	if ConfigDue(st, f) {
		w.Config = f.Config.Hash
		if st.Config != nil {
			for _, p := range st.Config.Parameters {
				if !slices.Contains(f.ConfigParameters, p) {
					w.RemoveParameters = append(w.RemoveParameters, p)
				}
			}
		}
	}
	if w.Sync == "" && w.Config == "" {
		return nil
	}
	return &w
}

// noteInDatabase asks for the ensure effects, which carry the in-database
// work, when it is due and nothing else is on its way: not while a plan of
// effects is wanted or in flight, nor after a failure (the retry timer asks,
// with backoff), nor while waiting (the next observation asks).
func (m *Machine) noteInDatabase() {
	switch m.st.State {
	case Creating, Updating, Degraded:
	default:
		return
	}
	o := &m.out
	if o.want != noWork || o.effectsPlan != 0 || o.troubled || o.again || m.inDatabaseWork() == nil {
		return
	}
	o.ask(ensureWork)
}

// recordInDatabase records the in-database work of a plan whose effects
// succeeded as applied.
func (m *Machine) recordInDatabase(w *InDatabase) {
	st, f := &m.st, &m.eng.call.facts
	now := metav1.NewTime(m.eng.call.now)
	if w.Sync != "" {
		db := &v1.DatabaseStatus{Hash: w.Sync, SyncedAt: &now, SyncRequest: f.SyncRequest}
		for _, u := range f.Users {
			db.Roles = append(db.Roles, v1.RoleStatus{Name: u, SyncedAt: now})
		}
		db.Databases = slices.Clone(f.Databases)
		db.Retained = retained(st.Database, f)
		st.Database = db
	}
	if w.Config != "" {
		cfg := &v1.ConfigStatus{Hash: w.Config, AppliedAt: &now, Parameters: slices.Clone(f.ConfigParameters)}
		if st.Config != nil {
			cfg.PendingRestart = st.Config.PendingRestart
		}
		st.Config = cfg
	}
	m.out.changed()
}

// retained lists the roles and databases applied before (or retained
// before) that the spec no longer has: pgloop never drops them.
func retained(prev *v1.DatabaseStatus, f *Facts) []string {
	if prev == nil {
		return nil
	}
	var out []string
	add := func(kind, name string, current []string) {
		item := kind + " " + name
		if !slices.Contains(current, name) && !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	for _, r := range prev.Roles {
		add("role", r.Name, f.Users)
	}
	for _, d := range prev.Databases {
		add("database", d, f.Databases)
	}
	for _, item := range prev.Retained {
		kind, name, _ := strings.Cut(item, " ")
		current := f.Users
		if kind == "database" {
			current = f.Databases
		}
		add(kind, name, current)
	}
	slices.Sort(out)
	return out
}

// inDatabaseConditions keeps RolesSynced and ConfigApplied in line with
// what is applied. A failure or a wait reported by a plan (partCondition)
// stays until what was due is applied, or a new cause is known.
func (m *Machine) inDatabaseConditions() {
	st, f := &m.st, &m.eng.call.facts
	why := f.NoTarget
	if !f.converged() {
		why = "waiting for every instance to be Ready"
	} else if why == "" {
		why = "applying"
	}
	switch {
	case f.Standby != "":
		m.condition(v1.ConditionRolesSynced, false, ReasonStandby,
			"a standby of "+f.Standby+": its roles and databases are the source's (read-only); the spec's are synced once it is promoted (spec.standby removed)")
	case SyncDue(st, f):
		m.pendingCondition(v1.ConditionRolesSynced, ReasonSyncPending, "roles and databases not synced yet: "+why)
	case st.Database != nil:
		m.condition(v1.ConditionRolesSynced, true, ReasonSynced, synced(st.Database))
	}
	switch {
	case ConfigDue(st, f):
		m.pendingCondition(v1.ConditionConfigApplied, ReasonConfigPending, "Patroni configuration not applied yet: "+why)
	case len(f.PendingRestart) > 0:
		m.condition(v1.ConditionConfigApplied, false, ReasonRestartPending,
			"settings pending a restart on "+strings.Join(f.PendingRestart, ", ")+": restarting one member at a time, replicas first")
	case st.Config != nil:
		msg := "the spec's configuration, which the cluster was bootstrapped with"
		if st.Config.AppliedAt != nil {
			msg = "applied to every member at " + st.Config.AppliedAt.UTC().Format(time.RFC3339)
		}
		m.condition(v1.ConditionConfigApplied, true, ReasonApplied, msg)
	}
	if st.Config != nil && !slices.Equal(st.Config.PendingRestart, f.PendingRestart) {
		cfg := *st.Config
		cfg.PendingRestart = slices.Clone(f.PendingRestart)
		st.Config = &cfg
		m.out.changed()
	}
}

// pendingCondition sets a condition False with a pending reason, unless a
// plan reported a failure or a wait on it that still stands.
func (m *Machine) pendingCondition(typ, reason, message string) {
	if c := meta.FindStatusCondition(m.st.Conditions, typ); c != nil && c.Status == metav1.ConditionFalse && c.Reason != reason {
		return
	}
	m.condition(typ, false, reason, message)
}

// partCondition reports a failure or a wait of the in-database work on its
// condition.
func (m *Machine) partCondition(e *PartError, rolesReason, configReason string) {
	switch e.Part {
	case PartRoles:
		m.condition(v1.ConditionRolesSynced, false, rolesReason, e.Err.Error())
	case PartConfig:
		m.condition(v1.ConditionConfigApplied, false, configReason, e.Err.Error())
	}
}

func synced(db *v1.DatabaseStatus) string {
	if db.SyncedAt == nil {
		return "no users nor databases: Patroni's bootstrap made the system roles"
	}
	msg := fmt.Sprintf("%d roles and %d databases synced at %s", len(db.Roles), len(db.Databases), db.SyncedAt.UTC().Format(time.RFC3339))
	if len(db.Retained) > 0 {
		msg += "; left in place, no longer in the spec: " + strings.Join(db.Retained, ", ")
	}
	return msg
}
