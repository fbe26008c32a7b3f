package pgsql

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBouncerBin is Debian's PgBouncer (`make data-plane-deps`).
const pgBouncerBin = "/usr/sbin/pgbouncer"

// TestBouncerPauseResume runs Debian's PgBouncer (1.18) in transaction mode
// in front of the package's PostgreSQL and checks what pgloop relies on
// around a switchover: PAUSE holds a client's query (no error) until
// RESUME; PAUSE and RESUME sent twice succeed; a PAUSE that a transaction
// in flight holds past its deadline fails, and RESUME still ends the
// pause, after which the transaction goes on.
func TestBouncerPauseResume(t *testing.T) {
	if _, err := os.Stat(pgBouncerBin); err != nil {
		t.Fatalf("PgBouncer is missing (%v): run `make data-plane-deps`", err)
	}
	srv := startServer(t)
	b := startBouncer(t, srv.port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := BouncerEndpoint("pooler", "127.0.0.1", b.port, "pooler", "pooler-secret")

	client := b.client(ctx, t)
	defer client.Close(context.Background())
	if _, err := client.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if err := Bouncer(ctx, admin, BouncerPause, time.Second); err != nil {
			t.Fatalf("PAUSE: %v", err)
		}
	}
	held := make(chan error, 1)
	go func() {
		_, err := client.Exec(ctx, "SELECT 1")
		held <- err
	}()
	b.waitWaiting(ctx, t, 1)
	select {
	case err := <-held:
		t.Fatalf("a query through the paused pooler returned (%v) before RESUME", err)
	default:
	}
	for range 2 {
		if err := Bouncer(ctx, admin, BouncerResume, time.Second); err != nil {
			t.Fatalf("RESUME: %v", err)
		}
	}
	if err := <-held; err != nil {
		t.Fatalf("the held query after RESUME: %v", err)
	}

	// A transaction in flight keeps its server connection: PAUSE does
	// not complete within its deadline, and RESUME ends the pause.
	if _, err := client.Exec(ctx, "BEGIN; SELECT 1"); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	err := Bouncer(short, admin, BouncerPause, time.Second)
	cancelShort()
	if err == nil {
		t.Fatalf("PAUSE with a transaction in flight succeeded")
	}
	if err := Bouncer(ctx, admin, BouncerResume, time.Second); err != nil {
		t.Fatalf("RESUME of a pooler still pausing: %v", err)
	}
	if _, err := client.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("the transaction after RESUME: %v", err)
	}
	if _, err := client.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}

	if err := Bouncer(ctx, admin, "SHUTDOWN", time.Second); err == nil || !strings.Contains(err.Error(), "not one pgloop sends") {
		t.Errorf("SHUTDOWN: %v, want refused", err)
	}
	wrong := admin
	wrong.Passwords = []string{"wrong"}
	if err := Bouncer(ctx, wrong, BouncerResume, time.Second); err == nil {
		t.Errorf("RESUME with a wrong password succeeded")
	}
}

type bouncer struct {
	port int
	cmd  *exec.Cmd
	dir  string
}

// startBouncer runs PgBouncer on a free port of 127.0.0.1, in transaction
// mode, client TLS required, admin_users pooler, in front of the
// PostgreSQL at pgPort, as the server's user.
func startBouncer(t *testing.T, pgPort int) *bouncer {
	t.Helper()
	cred, err := credential()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parent is 0700, and PgBouncer runs as postgres.
	dir, err := os.MkdirTemp("", "pgloop-bouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	cert, key := selfSigned(t)
	files := map[string]string{
		"users.txt": fmt.Sprintf("%q %q\n%q %q\n", "postgres", superPassword, "pooler", "pooler-secret"),
		"tls.crt":   string(cert),
		"tls.key":   string(key),
		"pgbouncer.ini": strings.Join([]string{
			"[databases]",
			fmt.Sprintf("postgres = host=127.0.0.1 port=%d user=postgres password=%s", pgPort, superPassword),
			"[pgbouncer]",
			"listen_addr = 127.0.0.1",
			fmt.Sprintf("listen_port = %d", port),
			"unix_socket_dir =",
			"auth_type = md5",
			"auth_file = " + filepath.Join(dir, "users.txt"),
			"admin_users = pooler",
			"pool_mode = transaction",
			"client_tls_sslmode = require",
			"client_tls_cert_file = " + filepath.Join(dir, "tls.crt"),
			"client_tls_key_file = " + filepath.Join(dir, "tls.key"),
			"ignore_startup_parameters = extra_float_digits",
			"",
		}, "\n"),
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(pgBouncerBin, filepath.Join(dir, "pgbouncer.ini"))
	log, err := os.Create(filepath.Join(dir, "pgbouncer.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &bouncer{port: port, cmd: cmd, dir: dir}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Logf("--- pgbouncer.log ---\n%s", out)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = c.Close()
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("PgBouncer does not listen on %d: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// client connects through the pooler as postgres, with TLS.
func (b *bouncer) client(ctx context.Context, t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s dbname=postgres sslmode=require default_query_exec_mode=simple_protocol",
		b.port, superPassword))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// waitWaiting waits until the pool of postgres/postgres has n clients
// waiting for a server (SHOW POOLS, cl_waiting).
func (b *bouncer) waitWaiting(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=pooler password=pooler-secret dbname=pgbouncer sslmode=require default_query_exec_mode=simple_protocol", b.port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		waiting, err := clientsWaiting(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if waiting == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d clients waiting, want %d", waiting, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func clientsWaiting(ctx context.Context, conn *pgx.Conn) (int, error) {
	rows, err := conn.Query(ctx, "SHOW POOLS")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	total := 0
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return 0, err
		}
		row := map[string]any{}
		for i, f := range rows.FieldDescriptions() {
			row[f.Name] = vals[i]
		}
		if row["database"] == "postgres" {
			var n int
			if _, err := fmt.Sscan(fmt.Sprint(row["cl_waiting"]), &n); err != nil {
				return 0, err
			}
			total += n
		}
	}
	return total, rows.Err()
}

func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgbouncer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}
