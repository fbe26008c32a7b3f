package pooler

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/netip"
	"time"
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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip.IsValid() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
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
