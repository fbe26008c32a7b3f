package pooler

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pgloop/pgloop/pkg/supervise"
)

// DefaultName is the certificate's name when HOSTNAME is not set.
const DefaultName = "pgbouncer"

// Prepare checks env (Settings) and o, then writes pgbouncer.ini, the auth
// file and, without spec.tls's certificate, a self-signed one (kept from an
// earlier start while it is valid) into o.Dir, and returns the path of
// pgbouncer.ini. Nothing is written when env or o is wrong. Each file is
// written whole (a temporary file renamed over it), readable by its owner
// only, pgbouncer.ini last: a PgBouncer that reloads never reads half a
// configuration, nor one naming files not written yet.
func Prepare(env map[string]string, o Options, now time.Time) (string, error) {
	s, err := ParseSettings(env)
	if err != nil {
		return "", err
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if err := o.validate(); err != nil {
		return "", err
	}
	ini, auth := Config(s, o)
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return "", fmt.Errorf("make the configuration directory: %w", err)
	}
	var files []file
	if s.CertFile == "" {
		certPath, keyPath := filepath.Join(o.Dir, CertFile), filepath.Join(o.Dir, KeyFile)
		if !certUsable(certPath, keyPath, o.Name, now) {
			ip, _ := netip.ParseAddr(o.ListenAddr) // none for "*"
			cert, key, err := SelfSignedCert(o.Name, ip, now)
			if err != nil {
				return "", fmt.Errorf("make PgBouncer's certificate: %w", err)
			}
			// The key first: a certificate is never beside another's key
			// for longer than the two renames.
			files = append(files, file{keyPath, key}, file{certPath, cert})
		}
	}
	files = append(files, file{filepath.Join(o.Dir, AuthFile), auth}, file{filepath.Join(o.Dir, ConfigFile), ini})
	for _, f := range files {
		if err := writeAtomic(f.path, f.data); err != nil {
			return "", err
		}
	}
	return filepath.Join(o.Dir, ConfigFile), nil
}

type file struct {
	path string
	data []byte
}

// writeAtomic writes data to path through a temporary file in the same
// directory, synced, then renamed over path: a reader sees the old file or
// the new one, never a part.
func writeAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	_, werr := tmp.Write(data)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Command is how PgBouncer runs on the configuration at ini: in the
// foreground, its log on stderr, with environ less PGPASSWORD (the
// password is in the auth file, readable by its owner only).
func Command(pgbouncer, ini string, environ []string, logf func(string, ...any)) supervise.Command {
	var env []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, EnvPassword+"=") {
			env = append(env, kv)
		}
	}
	return supervise.Command{Argv: []string{pgbouncer, ini}, Env: env, Dir: filepath.Dir(ini), Logf: logf}
}
