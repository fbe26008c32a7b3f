package cluster

import (
	"maps"
	"slices"
	"strings"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Keys of Patroni's dynamic configuration that pgloop manages.
const (
	ConfigTTL                  = "ttl"
	ConfigLoopWait             = "loop_wait"
	ConfigRetryTimeout         = "retry_timeout"
	ConfigMaximumLagOnFailover = "maximum_lag_on_failover"
	ConfigSynchronousMode      = "synchronous_mode"
	ConfigSynchronousStrict    = "synchronous_mode_strict"
	ConfigSynchronousCount     = "synchronous_node_count"
	ConfigFailsafeMode         = "failsafe_mode"
	ConfigSlots                = "slots"
	ConfigPostgreSQL           = "postgresql"
	ConfigParameters           = "parameters"
	ConfigStandbyCluster       = "standby_cluster"
)

// DynamicConfig is the part of Patroni's dynamic configuration (GET
// /config) that the spec decides: the Patroni timings and the PostgreSQL
// parameters shared by all members (every parameter Spilo does not set per
// instance). pgloop applies it with PATCH /config, which every member
// applies within a loop_wait: a reload, or a restart that Patroni reports
// as pending_restart.
type DynamicConfig struct {
	// Settings are the top-level keys (ttl, loop_wait, retry_timeout,
	// maximum_lag_on_failover, synchronous_mode, synchronous_mode_strict,
	// synchronous_node_count, failsafe_mode, slots) and, when the spec has
	// shared parameters, postgresql.parameters (name to value, names lower
	// case). A nil value is a key the spec leaves to Patroni's default: it
	// is removed from the DCS (PATCH with null), and left out of the hash
	// and of Spilo's bootstrap.dcs, so that a spec without the key keeps
	// the configuration it had before pgloop knew it.
	Settings map[string]any
	// Parameters are the names of the shared parameters, sorted (the
	// spec's keys are, and lower-casing keeps their order but for case).
	Parameters []string
	// Hash identifies Settings.
	Hash string
	// Bootstrap is true when Settings are exactly what Spilo's bootstrap
	// writes (the default timings, no parameter of the spec, none of the
	// keys left to Patroni's defaults set): a new
	// cluster already runs them, and nothing needs sending.
	Bootstrap bool
}

// Dynamic returns the dynamic configuration pg asks for.
func Dynamic(pg *v1.Postgresql) DynamicConfig {
	p := pg.Spec.Patroni
	ttl, loopWait, retryTimeout := p.EffectiveTimings()
	lag, syncMode := int64(v1.DefaultPatroniMaximumLagOnFailover), false
	if p != nil {
		// 0 is what an omitted maximum_lag_on_failover decodes to: the
		// field is omitempty, so an explicit 0 cannot be stored either.
		if p.MaximumLagOnFailover != 0 {
			lag = p.MaximumLagOnFailover
		}
		syncMode = p.SynchronousMode
	}
	settings := map[string]any{
		ConfigTTL:                  ttl,
		ConfigLoopWait:             loopWait,
		ConfigRetryTimeout:         retryTimeout,
		ConfigMaximumLagOnFailover: lag,
		ConfigSynchronousMode:      syncMode,
		ConfigSynchronousStrict:    nil,
		ConfigSynchronousCount:     nil,
		ConfigFailsafeMode:         nil,
		ConfigSlots:                nil,
		// Removed from the store when the spec has no standby: that
		// promotes a standby cluster's leader.
		ConfigStandbyCluster: nil,
	}
	if sb := pg.Spec.Standby; sb != nil {
		settings[ConfigStandbyCluster] = standbyCluster(pg, sb)
	}
	if p != nil {
		if p.SynchronousModeStrict {
			settings[ConfigSynchronousStrict] = true
		}
		if p.SynchronousNodeCount > 0 {
			settings[ConfigSynchronousCount] = p.SynchronousNodeCount
		}
		if p.FailsafeMode != nil {
			settings[ConfigFailsafeMode] = *p.FailsafeMode
		}
		if len(p.Slots) > 0 {
			// map[string]any all the way down, as GET /config decodes, so
			// that the comparison recurses into each slot.
			slots := map[string]any{}
			for name, opts := range p.Slots {
				slot := map[string]any{}
				for k, v := range opts {
					slot[k] = v
				}
				slots[name] = slot
			}
			settings[ConfigSlots] = slots
		}
	}
	// map[string]any, as the JSON of GET /config decodes.
	shared := map[string]any{}
	var names []string
	for _, name := range slices.Sorted(maps.Keys(pg.Spec.PostgreSQL.Parameters)) {
		lower := strings.ToLower(name)
		if spiloLocalParameters[lower] {
			continue
		}
		if _, dup := shared[lower]; !dup {
			names = append(names, lower)
		}
		shared[lower] = pg.Spec.PostgreSQL.Parameters[name]
	}
	if len(shared) > 0 {
		settings[ConfigPostgreSQL] = map[string]any{ConfigParameters: shared}
	}
	// The keys left to Patroni's defaults are not hashed: a spec that sets
	// none of the newer fields keeps the hash it had before them, and its
	// cluster is not configured again.
	set := withoutNil(settings)
	return DynamicConfig{
		Settings:   settings,
		Parameters: names,
		Hash:       jsonHash(set),
		Bootstrap: len(shared) == 0 && ttl == v1.DefaultPatroniTTL && loopWait == v1.DefaultPatroniLoopWait &&
			retryTimeout == v1.DefaultPatroniRetryTimeout && lag == v1.DefaultPatroniMaximumLagOnFailover && !syncMode &&
			len(set) == 5, // the five keys above, nothing else
	}
}

// withoutNil returns the keys of settings that have a value: what Spilo's
// bootstrap.dcs holds.
func withoutNil(settings map[string]any) map[string]any {
	out := make(map[string]any, len(settings))
	for k, v := range settings {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

// standbyCluster is Patroni's standby_cluster section of a standby: the
// primary it streams from, a new member's copy by pg_basebackup from it,
// and, with s3_wal_path, the source's repository as restore_command (the
// same bucket and credentials as the cluster's own repository: its
// PGBACKREST_* variables, with the source's path and stanza).
func standbyCluster(pg *v1.Postgresql, sb *v1.StandbyDescription) map[string]any {
	out := map[string]any{"create_replica_methods": []any{"basebackup"}}
	if sb.StandbyHost != "" {
		out["host"], out["port"] = sb.StandbyHost, int64(sb.Port())
	} else {
		// From the repository alone: the first copy is a restore of
		// its newest backup (standbyRestoreMethod).
		out["create_replica_methods"] = []any{StandbyRestoreMethod}
	}
	if bucket, path, stanza, ok := sb.Repository(); ok {
		out["restore_command"] = "pgbackrest " + sourceRepositoryOptions(bucket, path, stanza) + ` archive-get %f "%p"`
	}
	return out
}

// StandbyRestoreMethod is the replica method, in Patroni's postgresql
// section, with which a standby cluster that follows a repository only
// makes its leader's first copy.
const StandbyRestoreMethod = "pgloop_standby_restore"

// replicaMethod is a custom replica method of Patroni's.
type replicaMethod struct {
	Command string `json:"command"`
	// NoParams: pgbackrest takes neither --scope nor --datadir; it
	// reads pg1-path from the environment.
	NoParams bool `json:"no_params"`
	// NoLeader (no_master before Patroni 3): the method works without a
	// leader to copy from, which a standby cluster's first member has not.
	NoLeader bool `json:"no_leader"`
	NoMaster bool `json:"no_master"`
}

// standbyRestoreMethod is the replica method of a standby cluster without
// standby_host: a restore of the source repository's newest backup as a
// standby (pgBackRest's --type=standby), which then replays the archive
// through standby_cluster's restore_command. Nil for other clusters.
func standbyRestoreMethod(pg *v1.Postgresql) *replicaMethod {
	sb := pg.Spec.Standby
	if sb == nil || sb.StandbyHost != "" {
		return nil
	}
	bucket, path, stanza, ok := sb.Repository()
	if !ok {
		return nil
	}
	return &replicaMethod{Command: "pgbackrest " + sourceRepositoryOptions(bucket, path, stanza) + " --type=standby restore",
		NoParams: true, NoLeader: true, NoMaster: true}
}

// sourceRepositoryOptions name a source's repository in the cluster's
// bucket settings on pgbackrest's command line.
func sourceRepositoryOptions(bucket, path, stanza string) string {
	return "--repo1-s3-bucket=" + bucket + " --repo1-path=" + path + " --stanza=" + stanza
}
