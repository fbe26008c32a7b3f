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

func TestPgloopHas(t *testing.T) {
	for key, want := range map[string]bool{
		"teamId": true, "volume.size": true, "volume.iops": false, "patroni.pg_hba": true, "clone": false,
		"resources.requests.cpu": true, "resources.requests.hugepages-2Mi": false, "users.*": true,
		"connectionPooler.resources.limits.memory": true, "teamId.x": false,
	} {
		if got := pgloopHas(key); got != want {
			t.Errorf("pgloopHas(%q) = %v, want %v", key, got, want)
		}
	}
}
