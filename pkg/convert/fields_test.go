package convert

import "testing"

// TestZalandoFieldsUnsupported keeps the table of reasons honest: a field
// pgloop came to support must leave it, or its stale reason would be shown
// wherever the table is read (docs/migrating.md).
func TestZalandoFieldsUnsupported(t *testing.T) {
	for key := range zalandoFields {
		if pgloopHas(key) {
			t.Errorf("zalandoFields[%q] says why pgloop drops it, but pgloop has it now: remove the line", key)
		}
	}
}

// TestRefusedFields: a field convert drops because pgloop's validation
// refuses it must be one pgloop's type has (else zalandoFields is its
// place).
func TestRefusedFields(t *testing.T) {
	for key := range refusedFields {
		if !pgloopHas(key) {
			t.Errorf("refusedFields[%q]: pgloop's type does not have it; its reason belongs in zalandoFields", key)
		}
	}
}

func TestPgloopHas(t *testing.T) {
	for key, want := range map[string]bool{
		"teamId": true, "volume.size": true, "volume.iops": false, "patroni.pg_hba": true, "clone": true, "clone.timestamp": true, "clone.s3_wal_path": true,
		"resources.requests.cpu": true, "resources.requests.hugepages-2Mi": true, "resources.requests.hugepages-4Mi": false, "users.*": true,
		"connectionPooler.resources.limits.memory": true, "teamId.x": false,
	} {
		if got := pgloopHas(key); got != want {
			t.Errorf("pgloopHas(%q) = %v, want %v", key, got, want)
		}
	}
}
