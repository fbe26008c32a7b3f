package fsm

import (
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Reasons of the ContinuousArchiving condition.
const (
	ReasonArchiving        = "Archiving"
	ReasonArchiveFailing   = "ArchiveFailing"
	ReasonArchiveUnchecked = "ArchiveUnchecked"
	ReasonArchiveBlocked   = "ArchiveBlocked"
)

// archiving shows the cluster's backup repository and how its archiving
// goes (Facts.Repository, Facts.Archiving) in status.backup and the
// ContinuousArchiving condition, with a Warning Event when archiving starts
// to fail and a Normal one when it works again; a cluster without a
// repository has neither. The facts are what the archive checks publish, which change
// rarely (pkg/archiving), so this writes rarely too.
func (m *Machine) archiving() {
	st, f := &m.st, &m.eng.call.facts
	if f.ArchiveBlocked != "" {
		if st.Backup != nil {
			st.Backup = nil
			m.deferWrite()
		}
		m.conditionStatus(v1.ConditionContinuousArchiving, metav1.ConditionFalse, ReasonArchiveBlocked, f.ArchiveBlocked)
		return
	}
	if f.Repository == "" {
		if st.Backup != nil {
			st.Backup = nil
			m.deferWrite()
		}
		if meta.FindStatusCondition(st.Conditions, v1.ConditionContinuousArchiving) != nil {
			st.Conditions = slices.Clone(st.Conditions)
			meta.RemoveStatusCondition(&st.Conditions, v1.ConditionContinuousArchiving)
			m.deferWrite()
		}
		return
	}
	want := &v1.BackupStatus{}
	if st.Backup != nil {
		*want = *st.Backup // the base backups' fields are backups'
	}
	want.Repository, want.Archiving = f.Repository, f.Archiving
	if !apiequality.Semantic.DeepEqual(want, st.Backup) {
		st.Backup = want
		m.deferWrite()
	}
	a := f.Archiving
	was := meta.FindStatusCondition(st.Conditions, v1.ConditionContinuousArchiving)
	wasFailing := was != nil && was.Status == metav1.ConditionFalse
	c := &m.eng.call
	switch {
	case a != nil && a.Failing && !wasFailing:
		c.records = append(c.records, Record{Warning: true, Reason: ReasonArchiveFailing, Message: "WAL archiving fails: " + a.Message})
	case a != nil && !a.Failing && a.Message == "" && wasFailing:
		c.records = append(c.records, Record{Reason: ReasonArchiving, Message: "WAL archiving works again, last segment " + a.LastArchivedWAL})
	}
	switch {
	case a == nil:
		m.conditionStatus(v1.ConditionContinuousArchiving, metav1.ConditionUnknown, ReasonArchiveUnchecked,
			"not checked on the primary yet")
	case a.Failing:
		m.conditionStatus(v1.ConditionContinuousArchiving, metav1.ConditionFalse, ReasonArchiveFailing, a.Message)
	case a.Message != "":
		// The primary could not be asked, or has archived nothing yet:
		// whether archiving works is unknown.
		m.conditionStatus(v1.ConditionContinuousArchiving, metav1.ConditionUnknown, ReasonArchiveUnchecked, a.Message)
	default:
		msg := "archiving to " + f.Repository
		if a.LastArchivedWAL != "" {
			msg += "; last segment " + a.LastArchivedWAL
		}
		m.conditionStatus(v1.ConditionContinuousArchiving, metav1.ConditionTrue, ReasonArchiving, msg)
	}
}
