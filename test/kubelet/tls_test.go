package kubelet

import (
	"strings"
	"testing"
)

// TestPgBouncerCustomCertificate: the pod's certificate replaces the
// generated one in pgbouncer.ini.
func TestPgBouncerCustomCertificate(t *testing.T) {
	s := PoolerSettings{Service: "db", Port: 5432, User: "pooler", Schema: "pooler", Password: "x", ListenPort: 5432,
		Mode: "transaction", DefaultSize: 1, MaxClientConn: 10, MaxDBConn: 2}
	ini, _ := PgBouncerConfig(s, PoolerHost{PodIP: "127.0.0.2", Dir: "/pods/p", CertFile: "/v/tls.crt", KeyFile: "/v/tls.key", CAFile: "/v/ca.crt"})
	for _, line := range []string{"client_tls_cert_file = /v/tls.crt\n", "client_tls_key_file = /v/tls.key\n", "client_tls_ca_file = /v/ca.crt\n"} {
		if !strings.Contains(string(ini), line) {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", line, ini)
		}
	}
}
