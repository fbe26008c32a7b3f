package testbed

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The object store is SeaweedFS's `weed server` (bin/weed, built by
// test/tools/build.sh from test/tools/seaweedfs), one process holding its
// master, volume server, filer and S3 gateway, serving S3 over HTTPS only on
// 127.0.0.1: where backups and WAL go (issue 31). docs/testbed.md, "Object
// store".
const (
	binWeed = "weed"

	// DefaultBucket and DefaultRegion are the object store's when its
	// options leave them empty.
	DefaultBucket = "pgloop"
	DefaultRegion = "us-east-1"

	// objectStoreDir is the store's directory in the plane's.
	objectStoreDir = "objectstore"
	// grpcSocketsFile, in the store's directory, lists the Unix sockets
	// weed makes in /tmp whatever its flags say, for removeStaleDirs.
	grpcSocketsFile = "grpc-sockets"
	// objectStoreStopGrace is how long weed may take to exit after
	// SIGTERM before it is killed: it often takes more than 5 s (its
	// filer waits for gRPC streams, its master keeps growing volumes),
	// and what it has written is in files the kill leaves whole.
	objectStoreStopGrace = 2 * time.Second
	// volumeSizeLimitMB and defaultMaxVolumes size the store: 16 volumes
	// of 64 MiB at most, made as they fill (not preallocated).
	volumeSizeLimitMB = 64
	defaultMaxVolumes = 16
)

// ObjectStoreOptions shapes a store started alone (StartObjectStore); in a
// plane the plane's options apply and these are defaulted.
type ObjectStoreOptions struct {
	// Host is the address it listens on; empty means 127.0.0.1. A plane
	// with a real node uses the node's bridge address, which its pods
	// reach as well as this host.
	Host string
	// Bucket is created at start; empty means DefaultBucket.
	Bucket string
	// Region is what requests are signed for; empty means DefaultRegion.
	Region string
	// BinDir holds weed; empty means $PGLOOP_BIN, else bin/ at the
	// repository root.
	BinDir string
	// TempDir is where the store's directory is created; empty means
	// os.TempDir().
	TempDir string
	// KeepDir keeps the store's directory after Stop.
	KeepDir bool
	// StartTimeout bounds the start-up; 0 means 1 minute.
	StartTimeout time.Duration
	// Log receives one line per start-up step; nil discards them.
	Log io.Writer
	// MaxVolumes bounds what the store holds, in volumes of 64 MiB made
	// as they fill; 0 means 16. A backup of a 1 GiB database that gzip
	// only halves needs more (BenchmarkBackup1GiB): SeaweedFS answers
	// 500 Internal Server Error once none can grow.
	MaxVolumes int
}

func (o ObjectStoreOptions) withDefaults() ObjectStoreOptions {
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.MaxVolumes == 0 {
		o.MaxVolumes = defaultMaxVolumes
	}
	return o
}

// ObjectStore is a running S3 object store. StopServer and StartServer stop
// and start its process on the same port, data and certificate, to test
// what clients do while it is away; Stop ends it for good.
type ObjectStore struct {
	// S3 is what clients need.
	S3 S3
	// Dir holds its data (data/), certificates, configuration and log.
	Dir string
	// StartupTime is how long its first start took, from the exec to the
	// bucket created.
	StartupTime time.Duration

	bin string
	log io.Writer
	// shellArgs reach its master and filer (ShellArgs).
	shellArgs []string
	launcher  *launcher
	args      []string
	sockets   []string // the gRPC sockets weed makes in /tmp
	// standalone: started by StartObjectStore, which owns the launcher
	// and the directory above Dir.
	standalone bool
	topDir     string
	keepDir    bool

	mu      sync.Mutex
	proc    *process
	stopped bool // by StopServer, not yet started again

	stopOnce sync.Once
	stopErr  error
}

// StartObjectStore starts an object store alone, without a plane, in a new
// directory under opts.TempDir (a plane's, pgloop-testbed-*, so a store whose
// owner was killed is removed by the next Start), and returns once its
// bucket exists. On error nothing is left running.
func StartObjectStore(ctx context.Context, opts ObjectStoreOptions) (*ObjectStore, error) {
	opts = opts.withDefaults()
	bins, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	if err := missingBinaries(bins, binWeed); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	step := func(format string, args ...any) { fmt.Fprintf(opts.Log, "testbed: "+format+"\n", args...) }
	removeStaleDirs(opts.TempDir, step)
	for attempt := 1; ; attempt++ {
		s, err := startObjectStore(ctx, opts, bins)
		if err == nil {
			step("object store ready at %s in %v", s.S3.URL(), s.StartupTime.Round(time.Millisecond))
			return s, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return nil, err
		}
		step("port clash, retrying (%v)", err)
	}
}

func startObjectStore(ctx context.Context, opts ObjectStoreOptions, bins binaries) (_ *ObjectStore, err error) {
	top, err := os.MkdirTemp(opts.TempDir, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("while creating the object store's directory: %w", err)
	}
	l := newLauncher()
	s := &ObjectStore{standalone: true, topDir: top, keepDir: opts.KeepDir, launcher: l}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	if err := writeOwner(top); err != nil {
		return nil, err
	}
	// pgBackRest runs as postgres and reads the CA file in here.
	if err := os.Chmod(top, 0o711); err != nil {
		return nil, err
	}
	if err := s.init(filepath.Join(top, objectStoreDir), bins, l, opts); err != nil {
		return nil, err
	}
	if err := s.StartServer(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// init prepares the store in dir (certificates, credentials, ports, flags)
// without starting it.
func (s *ObjectStore) init(dir string, bins binaries, l *launcher, opts ObjectStoreOptions) error {
	s.Dir, s.bin, s.log, s.launcher = dir, bins.path(binWeed), opts.Log, l
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o711}, {filepath.Join(dir, "data"), 0o700}, {filepath.Join(dir, "home"), 0o700}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	var extra []net.IP
	if ip := net.ParseIP(host); ip == nil {
		return fmt.Errorf("object store host %q: not an IP address", host)
	} else if !ip.IsLoopback() {
		extra = append(extra, ip)
	}
	caPEM, certPEM, keyPEM, err := ServingCert("pgloop test bed object store", extra...)
	if err != nil {
		return err
	}
	caFile := filepath.Join(dir, "ca.crt")
	certFile, keyFile := filepath.Join(dir, "s3.crt"), filepath.Join(dir, "s3.key")
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{caFile, caPEM, 0o644}, {certFile, certPEM, 0o644}, {keyFile, keyPEM, 0o600}} {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			return err
		}
	}
	accessKey, err := randomString(20, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
	if err != nil {
		return err
	}
	secretKey, err := randomString(40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
	if err != nil {
		return err
	}
	identities := filepath.Join(dir, "identities.json")
	if err := writeIdentities(identities, accessKey, secretKey); err != nil {
		return err
	}
	port, err := freePorts(8)
	if err != nil {
		return err
	}
	master, masterGRPC, volume, volumeGRPC, filer, filerGRPC, s3, s3GRPC := port[0], port[1], port[2], port[3], port[4], port[5], port[6], port[7]
	s.S3 = S3{
		Endpoint:  net.JoinHostPort(host, strconv.Itoa(s3)),
		Host:      host,
		Port:      s3,
		Region:    opts.Region,
		Bucket:    opts.Bucket,
		AccessKey: accessKey,
		SecretKey: secretKey,
		CAFile:    caFile,
		URIStyle:  "path",
	}
	for _, svc := range []struct {
		name string
		port int
	}{{"master", masterGRPC}, {"volume", volumeGRPC}, {"filer", filerGRPC}, {"s3", s3GRPC}} {
		s.sockets = append(s.sockets, fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", svc.name, svc.port))
	}
	if err := os.WriteFile(filepath.Join(dir, grpcSocketsFile), []byte(strings.Join(s.sockets, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"s3.env":  []byte(strings.Join(s.S3.Env(), "\n") + "\n"),
		"s3.json": s.S3.JSON(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	// host:port.grpcPort: weed's address form for a gRPC port that is
	// not port+10000.
	s.shellArgs = []string{
		fmt.Sprintf("-master=%s:%d.%d", host, master, masterGRPC),
		fmt.Sprintf("-filer=%s:%d.%d", host, filer, filerGRPC),
	}
	s.args = []string{
		"server",
		"-ip=" + host,
		"-ip.bind=" + host,
		"-dir=" + filepath.Join(dir, "data"),
		fmt.Sprintf("-master.port=%d", master),
		fmt.Sprintf("-master.port.grpc=%d", masterGRPC),
		// On by default, to a server on the Internet.
		"-master.telemetry=false",
		// A single master elects itself at once, on a restart too
		// (else it waits for its 10 s election timeout, and more).
		"-master.peers=none",
		fmt.Sprintf("-master.volumeSizeLimitMB=%d", volumeSizeLimitMB),
		fmt.Sprintf("-volume.port=%d", volume),
		fmt.Sprintf("-volume.port.grpc=%d", volumeGRPC),
		fmt.Sprintf("-volume.max=%d", opts.MaxVolumes),
		// Else it waits 10 s after SIGTERM before it stops.
		"-volume.preStopSeconds=0",
		"-filer",
		fmt.Sprintf("-filer.port=%d", filer),
		fmt.Sprintf("-filer.port.grpc=%d", filerGRPC),
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-s3",
		// With a certificate, this port serves HTTPS and nothing else.
		fmt.Sprintf("-s3.port=%d", s3),
		fmt.Sprintf("-s3.port.grpc=%d", s3GRPC),
		// Its Iceberg and Lance catalogs are on by default, on fixed ports.
		"-s3.port.iceberg=0",
		"-s3.port.lance=0",
		"-s3.localSocket=" + filepath.Join(dir, "s3.sock"),
		"-s3.cert.file=" + certFile,
		"-s3.key.file=" + keyFile,
		"-s3.config=" + identities,
	}
	return nil
}

// Shell runs `weed shell` against the store with commands on its
// standard input, and returns what it printed: for what S3 cannot do, such
// as setting an object's modification time (fs.meta.save, fs.meta.load).
func (s *ObjectStore) Shell(ctx context.Context, commands string) (string, error) {
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"shell"}, s.shellArgs...)...)
	cmd.Dir, cmd.Env = s.Dir, s.env()
	cmd.Stdin = strings.NewReader(commands + "\nexit\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("weed shell: %w\n%s", err, out)
	}
	return string(out), nil
}

// writeIdentities writes weed's -s3.config: one identity, the store's only
// credentials, allowed everything (Admin creates buckets).
func writeIdentities(path, accessKey, secretKey string) error {
	type credential struct {
		AccessKey string `json:"accessKey"`
		SecretKey string `json:"secretKey"`
	}
	type identity struct {
		Name        string       `json:"name"`
		Credentials []credential `json:"credentials"`
		Actions     []string     `json:"actions"`
	}
	data, err := json.MarshalIndent(map[string][]identity{"identities": {{
		Name:        "pgloop",
		Credentials: []credential{{accessKey, secretKey}},
		Actions:     []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

func randomString(n int, alphabet string) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("while generating a credential: %w", err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b), nil
}

// env is weed's environment: ours without WEED_* variables (its
// configuration) and with HOME in its directory, where it looks for
// configuration files too.
func (s *ObjectStore) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "WEED_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+filepath.Join(s.Dir, "home"))
}

// launch starts weed; waitReady waits for it.
func (s *ObjectStore) launch() (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.hasExited() {
		return nil, errors.New("the object store is running")
	}
	// weed's working directory is its own: it reads *.toml from there.
	proc, err := s.launcher.startIn(s.Dir, binWeed, s.bin, filepath.Join(s.Dir, binWeed+".log"), s.args, s.env())
	if err != nil {
		return nil, err
	}
	proc.grace = objectStoreStopGrace
	s.proc, s.stopped = proc, false
	return proc, nil
}

// probeKey is the object waitReady writes and deletes.
const probeKey = ".pgloop-testbed-probe"

// waitReady waits until signed requests over TLS, checked against the CA,
// create the bucket (or find it there: a restart) and then write and delete
// an object in it. The write is what takes long: weed answers S3 requests
// about 2 s before it takes an object, and holds the first write for about
// 7 s more (it defers its first volume allocation, then its filer's lock
// ring forms), so a store said ready takes writes at once.
func (s *ObjectStore) waitReady(ctx context.Context, proc *process) error {
	client, err := s.S3.HTTPClient()
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	var last string
	bucket := false
	err = poll(ctx, proc, func() (bool, error) {
		if !bucket {
			status, body, err := s.S3.Do(ctx, client, http.MethodPut, "/"+s.S3.Bucket, nil)
			switch {
			case err != nil:
				last = err.Error()
				return false, nil
			case status == http.StatusOK,
				status == http.StatusConflict && strings.Contains(string(body), "BucketAlreadyOwnedByYou"):
				bucket = true
			default:
				// 503s while the filer or the volumes come up.
				last = fmt.Sprintf("PUT /%s: %d %s", s.S3.Bucket, status, body)
				return false, nil
			}
		}
		path := "/" + s.S3.Bucket + "/" + probeKey
		for _, method := range []string{http.MethodPut, http.MethodDelete} {
			status, body, err := s.S3.Do(ctx, client, method, path, []byte(nil))
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if status != http.StatusOK && status != http.StatusNoContent {
				last = fmt.Sprintf("%s %s: %d %s", method, path, status, body)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("while waiting for bucket %s at %s to take an object (last answer: %s): %w", s.S3.Bucket, s.S3.URL(), last, err)
	}
	return nil
}

// StartServer starts the store's process, the first time or after
// StopServer, with the same flags (port, data, certificate, credentials),
// and returns once the bucket is there.
func (s *ObjectStore) StartServer(ctx context.Context) error {
	began := time.Now()
	proc, err := s.launch()
	if err != nil {
		return err
	}
	if err := s.waitReady(ctx, proc); err != nil {
		return err
	}
	if s.StartupTime == 0 {
		s.StartupTime = time.Since(began)
	}
	return nil
}

// StopServer stops the store's process, with SIGKILL when kill (a crash),
// else SIGTERM and a grace of a few seconds, and returns once it is reaped.
// Its data stays for StartServer; until then Healthy does not count it as
// dead.
func (s *ObjectStore) StopServer(kill bool) error {
	s.mu.Lock()
	proc := s.proc
	s.stopped = true
	s.mu.Unlock()
	if proc == nil {
		return nil
	}
	if kill {
		proc.kill()
	} else if proc.stop() {
		fmt.Fprintf(s.log, "testbed: weed ignored SIGTERM for %v, killed\n", proc.grace)
	}
	return s.removeSockets()
}

// removeSockets removes the Unix sockets weed made in /tmp, which it
// removes itself only when it stops gracefully, unless something serves
// there: another weed that took the same port since.
func (s *ObjectStore) removeSockets() error {
	var errs []error
	for _, path := range s.sockets {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
			if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
				c.Close()
				continue
			}
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Process is the store's process (its current one, after a restart).
func (s *ObjectStore) Process() Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Process{Name: binWeed, PID: s.proc.pid(), Log: s.proc.logPath}
}

// Healthy returns an error with the end of its log when the process has
// exited other than by StopServer.
func (s *ObjectStore) Healthy() error {
	s.mu.Lock()
	proc, stopped := s.proc, s.stopped
	s.mu.Unlock()
	if proc == nil || stopped || !proc.hasExited() {
		return nil
	}
	return proc.failure(errors.New("process is gone"))
}

// Stop stops the store's process and, for a store started alone, removes
// its directory unless KeepDir. It is idempotent; a plane's store is
// stopped by the plane's Stop.
func (s *ObjectStore) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *ObjectStore) stop() error {
	err := s.StopServer(false)
	if !s.standalone {
		return err
	}
	s.launcher.Close()
	if err != nil {
		return err
	}
	if s.keepDir {
		_ = os.Remove(filepath.Join(s.topDir, ownerFile))
		fmt.Fprintf(s.log, "testbed: kept %s\n", s.topDir)
		return nil
	}
	if err := os.RemoveAll(s.topDir); err != nil {
		return fmt.Errorf("while removing %s: %w", s.topDir, err)
	}
	return nil
}

// removeStaleSockets removes the sockets listed in the store directory of
// a plane's directory dir, if it has one, when its owner is gone.
func removeStaleSockets(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, objectStoreDir, grpcSocketsFile))
	if err != nil {
		return
	}
	s := &ObjectStore{sockets: strings.Fields(string(data))}
	_ = s.removeSockets()
}
