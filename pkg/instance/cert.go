package instance

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// certificateLifetime is how long a certificate Certificate makes is valid:
// it is made again at every start that finds none, and a pod's /run/certs
// lives as long as its container.
const certificateLifetime = 10 * 365 * 24 * time.Hour

// Certificate makes sure PostgreSQL has the certificate and key cfg names
// (postgresql.parameters.ssl_cert_file and ssl_key_file, Spilo's
// SSL_CERTIFICATE_FILE and SSL_PRIVATE_KEY_FILE): when neither file exists
// it makes a self-signed one for name, as Spilo does, and says so; a
// certificate of the pod's own (spec.tls's Secret, mounted) is left as it
// is. One file without the other is an error: PostgreSQL would not start.
// Nothing is done when ssl is off.
func Certificate(cfg map[string]any, name string) (made bool, err error) {
	params, _ := sectionValue(cfg, "postgresql", "parameters").(map[string]any)
	if ssl := fmt.Sprint(params["ssl"]); ssl != "on" && ssl != "true" {
		return false, nil
	}
	certFile, _ := params["ssl_cert_file"].(string)
	keyFile, _ := params["ssl_key_file"].(string)
	if certFile == "" || keyFile == "" {
		return false, errors.New("ssl is on but ssl_cert_file or ssl_key_file is not set")
	}
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case certErr == nil && keyErr == nil:
		return false, nil
	case certErr == nil || keyErr == nil:
		return false, fmt.Errorf("of the certificate %s and its key %s only one exists (%w)", certFile, keyFile, errors.Join(certErr, keyErr))
	case !errors.Is(certErr, os.ErrNotExist) || !errors.Is(keyErr, os.ErrNotExist):
		return false, errors.Join(certErr, keyErr)
	}
	certPEM, keyPEM, err := selfSigned(name)
	if err != nil {
		return false, err
	}
	// The key first: a certificate without its key is the one state a
	// restart cannot mend.
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return false, err
	}
	if err := writeFile(certFile, certPEM, 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// selfSigned returns a self-signed ECDSA P-256 certificate for name and
// its key, PEM-encoded.
func selfSigned(name string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certificateLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
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

// writeFile writes data to path through a temporary file in its directory
// (made when missing, 0700) and a rename: a reader never sees half a file.
func writeFile(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("while writing %s: %w", path, err)
	}
	return nil
}
