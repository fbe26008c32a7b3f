package selfsigned

import (
	"crypto/tls"
	"net/netip"
	"testing"
	"time"
)

func TestCertificate(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	certPEM, keyPEM, err := Certificate("db-0", netip.MustParseAddr("10.0.0.5"), now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := pair.Leaf
	if c.Subject.CommonName != "db-0" || len(c.DNSNames) != 1 || c.DNSNames[0] != "db-0" ||
		len(c.IPAddresses) != 1 || c.IPAddresses[0].String() != "10.0.0.5" {
		t.Errorf("names %s %v %v", c.Subject.CommonName, c.DNSNames, c.IPAddresses)
	}
	if !c.NotBefore.Equal(now.Add(-time.Hour)) || !c.NotAfter.Equal(now.Add(24*time.Hour)) {
		t.Errorf("valid %v to %v", c.NotBefore, c.NotAfter)
	}
	if _, _, err := Certificate("x", netip.Addr{}, now, time.Hour); err != nil {
		t.Errorf("without an IP: %v", err)
	}
}
