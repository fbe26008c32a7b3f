package instance

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/pgloop/pgloop/pkg/selfsigned"
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
	certPEM, keyPEM, err := selfsigned.Certificate(name, netip.Addr{}, time.Now(), certificateLifetime)
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
