package pooler

import (
	"crypto/tls"
	"net/netip"
	"time"

	"github.com/pgloop/pgloop/pkg/selfsigned"
)

// certLifetime is how long a self-signed certificate is valid; one that
// has less than certRenewBefore left is made anew at the next start.
const (
	certLifetime    = 365 * 24 * time.Hour
	certRenewBefore = 30 * 24 * time.Hour
)

// SelfSignedCert returns a PEM certificate and key for PgBouncer's client
// TLS, valid for a year for name and, when valid, ip: what zalando's
// entrypoint makes with openssl. Clients connect with sslmode=require,
// which does not verify it.
func SelfSignedCert(name string, ip netip.Addr, now time.Time) (certPEM, keyPEM []byte, err error) {
	return selfsigned.Certificate(name, ip, now, certLifetime)
}

// certUsable reports whether the certificate and key at certPath and
// keyPath match, name name and stay valid for a while after now: then a
// restart keeps them, and clients that pinned it see the same one.
func certUsable(certPath, keyPath, name string, now time.Time) bool {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil || pair.Leaf == nil {
		return false
	}
	return pair.Leaf.Subject.CommonName == name && now.Add(certRenewBefore).Before(pair.Leaf.NotAfter)
}
