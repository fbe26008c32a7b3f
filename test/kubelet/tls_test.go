package kubelet

import (
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
