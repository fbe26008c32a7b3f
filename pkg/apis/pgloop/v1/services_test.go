package v1

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

func TestValidateServices(t *testing.T) {
	tests := []struct {
		name string
		edit func(*PostgresqlSpec)
		// want is a substring of the only error; empty means valid.
		want string
	}{
		{"node ports named", func(s *PostgresqlSpec) {
			s.EnableMasterNodePort, s.MasterNodePort = ptr.To(true), ptr.To[int32](30001)
			s.EnableReplicaNodePort, s.ReplicaNodePort = ptr.To(true), ptr.To[int32](30002)
		}, ""},
		{"node ports chosen by Kubernetes", func(s *PostgresqlSpec) {
			s.EnableMasterNodePort, s.MasterNodePort = ptr.To(true), ptr.To[int32](0)
			s.EnableReplicaNodePort = ptr.To(true)
		}, ""},
		{"negative node port", func(s *PostgresqlSpec) {
			s.EnableMasterNodePort, s.MasterNodePort = ptr.To(true), ptr.To[int32](-1)
		}, "spec.masterNodePort: Invalid value: -1: must be a port number"},
		{"node port beyond 65535", func(s *PostgresqlSpec) {
			s.ReplicaPoolerNodePort = ptr.To[int32](70000)
		}, "spec.replicaPoolerNodePort: Invalid value: 70000"},
		{"one node port for two Services", func(s *PostgresqlSpec) {
			s.EnableMasterNodePort, s.MasterNodePort = ptr.To(true), ptr.To[int32](30001)
			s.EnableConnectionPooler = ptr.To(true)
			s.EnableMasterPoolerNodePort, s.MasterPoolerNodePort = ptr.To(true), ptr.To[int32](30001)
		}, "spec.masterPoolerNodePort: Duplicate value: \"30001 is also spec.masterNodePort"},
		{"a port of a Service that is no node port is not used", func(s *PostgresqlSpec) {
			s.EnableMasterNodePort, s.MasterNodePort = ptr.To(true), ptr.To[int32](30001)
			s.ReplicaNodePort = ptr.To[int32](30001)
		}, ""},
		{"a port of a pooler not enabled is not used", func(s *PostgresqlSpec) {
			s.EnableMasterNodePort, s.MasterNodePort = ptr.To(true), ptr.To[int32](30001)
			s.EnableReplicaPoolerNodePort, s.ReplicaPoolerNodePort = ptr.To(true), ptr.To[int32](30001)
		}, ""},
		{"role annotations", func(s *PostgresqlSpec) {
			s.MasterServiceAnnotations = map[string]string{"example.com/dns": "db.example.com"}
			s.ReplicaServiceAnnotations = map[string]string{"example.com/dns": "ro.example.com"}
		}, ""},
		{"bad annotation key", func(s *PostgresqlSpec) {
			s.ReplicaServiceAnnotations = map[string]string{"not a key": "x"}
		}, "spec.replicaServiceAnnotations: Invalid value: \"not a key\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validCluster()
			tt.edit(&p.Spec)
			checkOneError(t, p.Spec.Validate().ToAggregate(), tt.want)
		})
	}
}

func TestValidateLogicalBackupRetention(t *testing.T) {
	for _, tt := range []struct {
		retention, want string
	}{
		{"3 months", ""},
		{"1 month", ""},
		{"2 weeks", ""},
		{"3days", ""},
		{" 1 year ", ""},
		{"12 hours", ""},
		{"1 fortnight", ""},
		{"1 month 2 days", `must be one "<number> <unit>"`},
		{"3 days ago", `must be one "<number> <unit>"`},
		{"month", `must be one "<number> <unit>"`},
		{"-3 days", `must be one "<number> <unit>"`},
		{"99999 days", `must be one "<number> <unit>"`},
		{"3 Days", `must be one "<number> <unit>"`},
		{"3 decades", `must be one "<number> <unit>"`},
		{strings.Repeat(" ", 30) + "3 days", "at most 32 characters"},
	} {
		t.Run(tt.retention, func(t *testing.T) {
			p := validCluster()
			p.Spec.EnableLogicalBackup = true
			p.Spec.LogicalBackupRetention = tt.retention
			errs := p.Spec.Validate()
			if tt.want != "" && (len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "spec.logicalBackupRetention")) {
				t.Errorf("errors %v, want one at spec.logicalBackupRetention", errs)
			}
			checkOneError(t, errs.ToAggregate(), tt.want)
			if (ValidateLogicalBackupRetention(tt.retention) == nil) != (tt.want == "") {
				t.Errorf("ValidateLogicalBackupRetention disagrees with Validate")
			}
		})
	}
}

// checkOneError fails unless err is nil when want is empty, or holds want.
func checkOneError(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("invalid: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("error %v, want one containing %q", err, want)
	}
}
