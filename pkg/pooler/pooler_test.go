package pooler

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// podEnv is the environment of a pooler pod of cluster "db" for its
// master or replica Service, as pkg/cluster's PoolerDeployment writes it
// (with the password resolved from the Secret).
func podEnv(role string) map[string]string {
	host := "db"
	if role == "replica" {
		host = "db-repl"
	}
	return map[string]string{
		EnvHost: host, EnvPort: "5432", EnvUser: "pooler", EnvSchema: "pooler",
		EnvPassword: `pw"with"quotes`, EnvListenPort: "5432", EnvMode: "transaction",
		EnvDefaultSize: "20", EnvMinSize: "10", EnvReserveSize: "10", EnvMaxClientConn: "10000", EnvMaxDBConn: "60",
		"HOSTNAME": "db-pooler-5d8f7c9b4-x2x7q", "PATH": "/usr/sbin:/usr/bin",
	}
}

func TestParseSettings(t *testing.T) {
	got, err := ParseSettings(podEnv("replica"))
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{
		Service: "db-repl", Port: 5432, User: "pooler", Schema: "pooler", Password: `pw"with"quotes`,
		ListenPort: 5432, Mode: "transaction",
		DefaultSize: 20, MinSize: 10, ReserveSize: 10, MaxClientConn: 10000, MaxDBConn: 60,
	}
	if got != want {
		t.Errorf("settings\n got %+v\nwant %+v", got, want)
	}

	for _, tc := range []struct {
		name   string
		change map[string]string // "" removes
		errs   []string
	}{
		{"missing", map[string]string{EnvHost: "", EnvPassword: ""}, []string{"PGHOST", "PGPASSWORD", "unset or empty"}},
		{"mode", map[string]string{EnvMode: "statement"}, []string{`CONNECTION_POOLER_MODE="statement"`}},
		{"number", map[string]string{EnvDefaultSize: "many", EnvMinSize: "-1"},
			[]string{`CONNECTION_POOLER_DEFAULT_SIZE="many"`, `CONNECTION_POOLER_MIN_SIZE="-1"`}},
		{"port", map[string]string{EnvListenPort: "70000"}, []string{"is not a port"}},
		{"identifiers", map[string]string{EnvUser: "pooler; DROP", EnvSchema: "a.b"}, []string{`PGUSER="pooler; DROP"`, `PGSCHEMA="a.b"`}},
		{"host", map[string]string{EnvHost: "db port=1"}, []string{"is not a Service name"}},
		{"key without certificate", map[string]string{EnvClientTLSKey: "/tls/tls.key"}, []string{"go together", "CONNECTION_POOLER_CLIENT_TLS_KEY=/tls/tls.key is not a readable file"}},
		{"certificate not mounted", map[string]string{EnvClientTLSCert: "/nonexistent/tls.crt", EnvClientTLSKey: "/nonexistent/tls.key"},
			[]string{"CONNECTION_POOLER_CLIENT_TLS_CRT=/nonexistent/tls.crt is not a readable file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := podEnv("master")
			for k, v := range tc.change {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			_, err := ParseSettings(env)
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// TestConfig checks pgbouncer.ini and the auth file against testdata/ (go
// test -update rewrites them): in a container (the defaults), and as the
// test plane's process kubelet runs it (its own listen address, upstream
// and server TLS mode).
func TestConfig(t *testing.T) {
	container := Options{Dir: "/home/postgres/pgbouncer", ListenAddr: DefaultListenAddr, ServerTLSMode: DefaultServerTLSMode}
	plane := Options{Dir: "/root/pods/5f0c1e2a-0000-4000-8000-000000000001/pgbouncer", ListenAddr: "127.1.9.2",
		Upstream: "127.1.9.2:15432", ServerTLSMode: "prefer"}
	for _, tc := range []struct {
		golden, role string
		o            Options
	}{
		{"container-master.ini", "master", container},
		{"container-replica.ini", "replica", container},
		{"plane-master.ini", "master", plane},
		{"plane-replica.ini", "replica", plane},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			s, err := ParseSettings(podEnv(tc.role))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.o.validate(); err != nil {
				t.Fatal(err)
			}
			ini, auth := Config(s, tc.o)
			golden(t, filepath.Join("testdata", tc.golden), ini)
			if want := "\"pooler\" \"pw\"\"with\"\"quotes\"\n"; string(auth) != want {
				t.Errorf("auth file %q, want %q", auth, want)
			}
		})
	}
}

// TestConfigCustomCertificate: spec.tls's certificate replaces the
// self-signed one.
func TestConfigCustomCertificate(t *testing.T) {
	s := Settings{Service: "db", Port: 5432, User: "pooler", Schema: "pooler", Password: "x", ListenPort: 5432,
		Mode: "transaction", DefaultSize: 1, MaxClientConn: 10, MaxDBConn: 2,
		CertFile: "/v/tls.crt", KeyFile: "/v/tls.key", CAFile: "/v/ca.crt"}
	ini, _ := Config(s, Options{Dir: "/pods/p", ListenAddr: "127.0.0.2", ServerTLSMode: "prefer"})
	for _, line := range []string{"client_tls_cert_file = /v/tls.crt\n", "client_tls_key_file = /v/tls.key\n", "client_tls_ca_file = /v/ca.crt\n"} {
		if !strings.Contains(string(ini), line) {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", line, ini)
		}
	}
	if strings.Contains(string(ini), "/pods/p/pgbouncer.crt") {
		t.Errorf("pgbouncer.ini names the self-signed certificate:\n%s", ini)
	}
}

func TestOptionsValidate(t *testing.T) {
	good := Options{Dir: "/d", ListenAddr: "*", ServerTLSMode: "require"}
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"relative directory", func(o *Options) { o.Dir = "d" }, `directory "d" is not an absolute path`},
		{"listen address", func(o *Options) { o.ListenAddr = "localhost" }, `listen address "localhost"`},
		{"upstream without port", func(o *Options) { o.Upstream = "10.0.0.1" }, `upstream "10.0.0.1"`},
		{"upstream port", func(o *Options) { o.Upstream = "10.0.0.1:0" }, `upstream "10.0.0.1:0"`},
		{"server TLS mode", func(o *Options) { o.ServerTLSMode = "on" }, `server TLS mode "on"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.change(&o)
			if err := o.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
	if err := good.validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// golden compares got with the file at path, or writes it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to rewrite it):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

func TestSelfSignedCert(t *testing.T) {
	ip := netip.MustParseAddr("127.1.9.2")
	now := time.Now()
	certPEM, keyPEM, err := SelfSignedCert("db-pooler-x", ip, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "db-pooler-x" || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(ip.AsSlice()) {
		t.Errorf("subject %v, IPs %v", cert.Subject, cert.IPAddresses)
	}
	if !cert.NotBefore.Before(now) || !cert.NotAfter.After(now.Add(300*24*time.Hour)) {
		t.Errorf("valid %v to %v", cert.NotBefore, cert.NotAfter)
	}
}

// TestPrepare: the files written (owner-only), the certificate kept across
// starts while valid and made anew near its end, and nothing written at
// all when the environment or the options are wrong.
func TestPrepare(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pgbouncer")
	o := Options{Dir: dir, ListenAddr: DefaultListenAddr, ServerTLSMode: DefaultServerTLSMode, Name: "db-pooler-x"}
	now := time.Now()
	ini, err := Prepare(podEnv("master"), o, now)
	if err != nil {
		t.Fatal(err)
	}
	if ini != filepath.Join(dir, ConfigFile) {
		t.Errorf("pgbouncer.ini at %s", ini)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if info, _ := e.Info(); info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), info.Mode().Perm())
		}
	}
	if got := strings.Join(names, " "); got != "auth_file.txt pgbouncer.crt pgbouncer.ini pgbouncer.key" {
		t.Errorf("files %s (no temporary file may stay)", got)
	}
	if info, _ := os.Stat(dir); info.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", info.Mode().Perm())
	}
	cert, _ := os.ReadFile(filepath.Join(dir, CertFile))

	if _, err := Prepare(podEnv("master"), o, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, CertFile)); !bytes.Equal(again, cert) {
		t.Error("a restart made a new certificate though the old one is valid")
	}
	if _, err := Prepare(podEnv("master"), o, now.Add(340*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if renewed, _ := os.ReadFile(filepath.Join(dir, CertFile)); bytes.Equal(renewed, cert) {
		t.Error("a certificate near its end was kept")
	}

	for name, tc := range map[string]struct {
		env map[string]string
		o   Options
	}{
		"environment": {map[string]string{EnvHost: "db"}, o},
		"options":     {podEnv("master"), Options{Dir: o.Dir, ListenAddr: "everywhere", ServerTLSMode: "require"}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.o.Dir = filepath.Join(t.TempDir(), "pgbouncer")
			if _, err := Prepare(tc.env, tc.o, now); err == nil {
				t.Fatal("no error")
			}
			if _, err := os.Stat(tc.o.Dir); !os.IsNotExist(err) {
				t.Errorf("the directory was made: %v", err)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	c := Command("pgbouncer", "/d/pgbouncer.ini", []string{"PATH=/usr/bin", "PGPASSWORD=secret", "PGHOST=db"}, nil)
	if strings.Join(c.Argv, " ") != "pgbouncer /d/pgbouncer.ini" || c.Dir != "/d" {
		t.Errorf("argv %v in %s", c.Argv, c.Dir)
	}
	if strings.Join(c.Env, " ") != "PATH=/usr/bin PGHOST=db" {
		t.Errorf("env %v: the password must not reach PgBouncer's environment", c.Env)
	}
}

// TestPrepareCustomCertificate: with spec.tls's files, no certificate is
// made and pgbouncer.ini names theirs.
func TestPrepareCustomCertificate(t *testing.T) {
	tlsDir := t.TempDir()
	env := podEnv("master")
	for name, file := range map[string]string{EnvClientTLSCert: "tls.crt", EnvClientTLSKey: "tls.key", EnvClientCAFile: "ca.crt"} {
		env[name] = filepath.Join(tlsDir, file)
		if err := os.WriteFile(env[name], []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "pgbouncer")
	ini, err := Prepare(env, Options{Dir: dir, ListenAddr: DefaultListenAddr, ServerTLSMode: DefaultServerTLSMode}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CertFile)); !os.IsNotExist(err) {
		t.Errorf("a self-signed certificate was made beside spec.tls's: %v", err)
	}
	data, _ := os.ReadFile(ini)
	if want := "client_tls_cert_file = " + env[EnvClientTLSCert] + "\n"; !strings.Contains(string(data), want) {
		t.Errorf("pgbouncer.ini lacks %q:\n%s", want, data)
	}
}
