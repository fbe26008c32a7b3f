package v1

import (
	"errors"
	"fmt"
	"regexp"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// logicalBackupRetentionRE is the CRD's pattern on logicalBackupRetention:
// one "<number> <unit>" that GNU date reads in `date -d "<value> ago"`, as
// the logical backup image's script runs it. A second item is refused:
// date applies "ago" to the last item only, so "1 month 2 days ago" is a
// month ahead, and the job would delete every dump but one.
var logicalBackupRetentionRE = regexp.MustCompile(`^\s*[0-9]{1,4}\s*(years?|months?|fortnights?|weeks?|days?|hours?|minutes?|mins?|seconds?|secs?)\s*$`)

// maxLogicalBackupRetentionLength is the CRD's MaxLength on
// logicalBackupRetention.
const maxLogicalBackupRetentionLength = 32

// nodePortField is one of the spec's node port settings.
type nodePortField struct {
	enable *bool
	port   *int32
	name   string // the port's JSON name
	// pooler says the port is a pooler Service's: it is used only while
	// that pooler is enabled.
	pooler, replica bool
}

func (s *PostgresqlSpec) nodePortFields() []nodePortField {
	return []nodePortField{
		{s.EnableMasterNodePort, s.MasterNodePort, "masterNodePort", false, false},
		{s.EnableReplicaNodePort, s.ReplicaNodePort, "replicaNodePort", false, true},
		{s.EnableMasterPoolerNodePort, s.MasterPoolerNodePort, "masterPoolerNodePort", true, false},
		{s.EnableReplicaPoolerNodePort, s.ReplicaPoolerNodePort, "replicaPoolerNodePort", true, true},
	}
}

// validateServices checks the Services' annotations and node ports and
// logicalBackupRetention. A node port must be a port number (0 lets the
// apiserver choose), and one the cluster's Services would use twice is
// refused: the apiserver would take it for the first Service and refuse
// the second, after the cluster was admitted.
func (s *PostgresqlSpec) validateServices(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, apivalidation.ValidateAnnotations(s.MasterServiceAnnotations, path.Child("masterServiceAnnotations"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(s.ReplicaServiceAnnotations, path.Child("replicaServiceAnnotations"))...)
	used := map[int32]string{}
	for _, f := range s.nodePortFields() {
		if f.port == nil {
			continue
		}
		p := *f.port
		if p < 0 || p > 65535 {
			errs = append(errs, field.Invalid(path.Child(f.name), p,
				"must be a port number, or 0 to let Kubernetes choose one (in its node port range, 30000-32767 by default)"))
			continue
		}
		inUse := f.enable != nil && *f.enable && (!f.pooler || s.PoolerEnabled(f.replica))
		if p == 0 || !inUse {
			continue
		}
		if other, ok := used[p]; ok {
			errs = append(errs, field.Duplicate(path.Child(f.name),
				fmt.Sprintf("%d is also spec.%s: a node port serves one Service", p, other)))
			continue
		}
		used[p] = f.name
	}
	if r := s.LogicalBackupRetention; r != "" {
		if err := ValidateLogicalBackupRetention(r); err != nil {
			errs = append(errs, field.Invalid(path.Child("logicalBackupRetention"), r, err.Error()))
		}
	}
	return errs
}

// ValidateLogicalBackupRetention checks a logical backup retention as the
// CRD does; the operator's --logical-backup-s3-retention-time is checked
// the same way.
func ValidateLogicalBackupRetention(r string) error {
	switch {
	case len(r) > maxLogicalBackupRetentionLength:
		return fmt.Errorf("must be at most %d characters", maxLogicalBackupRetentionLength)
	case !logicalBackupRetentionRE.MatchString(r):
		return errors.New(`must be one "<number> <unit>", the number at most 4 digits, the unit one of year, month, fortnight, week, day, hour, minute, second or their plurals, e.g. "3 months"`)
	}
	return nil
}
