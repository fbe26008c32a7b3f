package patroni

import (
	"reflect"
	"testing"
)

// FuzzParseMember parses arbitrary text as a pod's Patroni status
// annotation, which anyone allowed to patch the pod can write. It checks
// that parsing and the addresses read from the result never panic and are
// deterministic, that a value is either parsed or refused with an error,
// and that a PostgreSQL port read from it is a valid port.
func FuzzParseMember(f *testing.F) {
	for _, seed := range []string{
		leaderAnnotation, pendingReplicaAnnotation, stoppedAnnotation,
		"", "null", "{}", `{"conn_url":"postgres://[::1]/postgres","api_url":"https://[::1]:8008/patroni"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, annotation string) {
		m, ok, err := ParseMember(annotation)
		m2, ok2, err2 := ParseMember(annotation)
		if ok != ok2 || (err == nil) != (err2 == nil) || !reflect.DeepEqual(m, m2) {
			t.Fatalf("ParseMember(%q) is not deterministic", annotation)
		}
		if ok && err != nil {
			t.Fatalf("ParseMember(%q) = ok with error %v", annotation, err)
		}
		if !ok {
			return
		}
		if _, port, err := m.PostgresHostPort(); err == nil && (port <= 0 || port > 65535) {
			t.Fatalf("PostgresHostPort of %q gives port %d", m.ConnURL, port)
		}
		_, _ = m.APIBase()
		_ = m.IsLeaderRole()
	})
}
