package kubelet

import (
	"strings"
	"testing"
)

// TestCustomCertificate: a certificate on a mounted volume (spec.tls) is
// served from the host's files; Spilo's own (not mounted) is dropped.
func TestCustomCertificate(t *testing.T) {
	h := Host{Mounts: map[string]string{"/tls": "/pods/u/volumes/tls-secret", "/tlsca": "/pods/u/volumes/tls-ca-secret"}}
	params := map[string]any{"ssl": "on", "ssl_cert_file": "/tls/tls.crt", "ssl_key_file": "/tls/tls.key", "ssl_ca_file": "/tlsca/ca.crt"}
	ok, err := customCertificate(params, h)
	if err != nil || !ok {
		t.Fatalf("mounted: %v %v", ok, err)
	}
	want := map[string]string{"ssl_cert_file": "/pods/u/volumes/tls-secret/tls.crt", "ssl_key_file": "/pods/u/volumes/tls-secret/tls.key",
		"ssl_ca_file": "/pods/u/volumes/tls-ca-secret/ca.crt"}
	for k, v := range want {
		if params[k] != v {
			t.Errorf("%s = %v, want %s", k, params[k], v)
		}
	}
	spilo := map[string]any{"ssl": "on", "ssl_cert_file": "/run/certs/server.crt", "ssl_key_file": "/run/certs/server.key"}
	if ok, err := customCertificate(spilo, h); ok || err != nil {
		t.Errorf("Spilo's generated certificate: %v %v, want false", ok, err)
	}
	bad := map[string]any{"ssl_cert_file": "/tls/tls.crt", "ssl_key_file": "/elsewhere/tls.key"}
	if _, err := customCertificate(bad, h); err == nil {
		t.Errorf("a key on no volume: no error")
	}
}

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
