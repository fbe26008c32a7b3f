package testbed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// adminUser is the identity of the plane's bearer token; system:masters
// bypasses RBAC, as kubeadm's admin.conf does.
const (
	adminUser   = "admin"
	adminGroup  = "system:masters"
	contextName = "pgloop-testbed"
)

// newToken returns a random bearer token.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("while generating the admin token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeTokenFile writes the apiserver's --token-auth-file.
func writeTokenFile(path, token string) error {
	line := fmt.Sprintf("%s,%s,%s-uid,%s\n", token, adminUser, adminUser, adminGroup)
	return os.WriteFile(path, []byte(line), 0o600)
}

// writeServiceAccountKeys writes the RSA key that signs service account
// tokens (apiserver and controller-manager) and its public half (apiserver).
func writeServiceAccountKeys(keyPath, pubPath string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("while generating the service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("while encoding the service account public key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// errNoCA means apiserver.crt does not yet hold the whole chain: the apiserver
// is still writing it.
var errNoCA = errors.New("serving certificate chain not written yet")

// extractCA returns, PEM encoded, the CA that signed the apiserver's
// self-signed serving certificate: apiserver.crt holds the serving
// certificate followed by that CA.
func extractCA(certPath string) ([]byte, error) {
	data, err := os.ReadFile(certPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errNoCA
		}
		return nil, err
	}
	var certs []*pem.Block
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, errNoCA
		}
		certs = append(certs, block)
	}
	if len(certs) < 2 {
		return nil, errNoCA
	}
	ca := certs[len(certs)-1]
	parsed, _ := x509.ParseCertificate(ca.Bytes)
	if !parsed.IsCA {
		return nil, fmt.Errorf("last certificate of %s is not a CA (subject %s)", certPath, parsed.Subject)
	}
	return pem.EncodeToMemory(ca), nil
}

// writeKubeconfig writes a kubeconfig for the admin token and returns the
// matching rest.Config.
func writeKubeconfig(path, server string, caPEM []byte, token string) (*rest.Config, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName, Namespace: "default"}
	cfg.CurrentContext = contextName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return nil, fmt.Errorf("while writing %s: %w", path, err)
	}
	restCfg, err := clientcmd.NewNonInteractiveClientConfig(*cfg, contextName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("while reading back %s: %w", path, err)
	}
	return restCfg, nil
}

// certAuthority is a CA the plane generates to sign serving certificates
// of its own servers (the object store's); its key never leaves memory.
type certAuthority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// newCA returns a self-signed CA named name, valid from a minute ago for a
// week (planes live for minutes, `make plane` for a working day).
func newCA(name string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("while generating the key of CA %s: %w", name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"pgloop test bed"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("while signing CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// certValidity is how long the plane's certificates are valid.
const certValidity = 7 * 24 * time.Hour

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("while generating a serial number: %w", err)
	}
	return serial, nil
}

// issueServer returns a serving certificate for 127.0.0.1 and localhost
// signed by ca, and its key, both PEM encoded. 127.0.0.1 is both an IP
// address SAN (what Go, curl and OpenSSL's own host check match) and a DNS
// SAN: pgBackRest 2.45 matches the host it connects to against the DNS
// names, not the IP addresses (seen on Debian's build), so with an IP
// SAN alone (common name 127.0.0.1) it fails with "unable to find hostname
// '127.0.0.1' in certificate common name or subject alternative names".
// Each of hosts, other addresses the server listens on, is named the same
// two ways.
func (ca *certAuthority) issueServer(name string, hosts ...net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("while generating the key of %s: %w", name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"pgloop test bed"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"127.0.0.1", "localhost"},
	}
	for _, ip := range hosts {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		tmpl.DNSNames = append(tmpl.DNSNames, ip.String())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("while signing the certificate of %s: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// ServingCert returns a new CA named after name and a serving certificate
// for 127.0.0.1 it signed (issueServer), with the certificate's key, all
// PEM encoded: for the object store, and for a test's own server that the
// plane's API server calls (an admission webhook, trusting the CA through
// its caBundle). hosts are more addresses it names.
func ServingCert(name string, hosts ...net.IP) (caPEM, certPEM, keyPEM []byte, err error) {
	ca, err := newCA(name + " CA")
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, keyPEM, err = ca.issueServer("127.0.0.1", hosts...)
	if err != nil {
		return nil, nil, nil, err
	}
	return ca.certPEM, certPEM, keyPEM, nil
}
