package instance

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// Test fixtures: pod 0 of a cluster pgloop created, run outside a
// container as the test plane's process kubelet runs it.
const (
	testPodIP       = "127.1.254.2"
	testSuPassword  = "su-secret"
	testReplPasswd  = "repl-secret"
	testDataVolume  = "/var/lib/pgk/pv/pv-0001"
	testShmVolume   = "/var/lib/pgk/pods/uid-0001/volumes/dshm"
	testCertsDir    = "/var/lib/pgk/pods/uid-0001/certs"
	testSocketDir   = "/tmp/pgk-0001"
	testKubeconfig  = "/var/lib/pgk/pods/uid-0001/kubeconfig"
	testKubeContext = "pgloop-pod"
	testBinDir      = "/usr/lib/postgresql/15/bin"
)

// requireInstalled fails t when a program the image runs is missing:
// `make data-plane-deps` installs them all on a test machine, so a
// missing one is a broken machine, never a reason to skip the check.
func requireInstalled(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run `make data-plane-deps` (as root: it installs Debian's patroni, postgresql-15, pgbouncer and pgbackrest)", err)
		}
	}
}

// loadSample reads manifests/samples/<name>.yaml as a cluster in namespace
// db, on PostgreSQL 15.
func loadSample(t *testing.T, name string) *v1.Postgresql {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "manifests", "samples", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pg := &v1.Postgresql{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(pg); err != nil {
		t.Fatalf("decode sample %s: %v", name, err)
	}
	pg.Namespace = "db"
	pg.UID = "cluster-uid"
	pg.Spec.PostgreSQL.Version = "15"
	if errs := pg.Validate(); len(errs) > 0 {
		t.Fatalf("sample %s is invalid: %v", name, errs.ToAggregate())
	}
	return pg
}

// podEnv is the environment of the postgres container of pod 0 of the
// StatefulSet pgloop builds for pg, as a kubelet resolves it: values,
// the pod's fields, and the Secrets given (namespace/name -> key -> value).
// It knows the references pgloop's pod spec makes, and fails on others.
func podEnv(t *testing.T, pg *v1.Postgresql, secrets map[string]map[string]string) (string, map[string]string) {
	t.Helper()
	sts := cluster.StatefulSet(pg, cluster.Options{})
	c := sts.Spec.Template.Spec.Containers[0]
	name := sts.Name + "-0"
	all := map[string]map[string]string{
		pg.Namespace + "/" + cluster.SecretName(cluster.SuperuserName, pg.Name):       {cluster.SecretPasswordKey: testSuPassword},
		pg.Namespace + "/" + cluster.SecretName(cluster.ReplicationUserName, pg.Name): {cluster.SecretPasswordKey: testReplPasswd},
	}
	maps.Copy(all, secrets)
	env := map[string]string{}
	for _, v := range c.Env {
		switch src := v.ValueFrom; {
		case src == nil:
			env[v.Name] = v.Value
		case src.FieldRef != nil:
			switch src.FieldRef.FieldPath {
			case "status.podIP":
				env[v.Name] = testPodIP
			case "metadata.namespace":
				env[v.Name] = pg.Namespace
			case "metadata.name":
				env[v.Name] = name
			default:
				t.Fatalf("env %s: field %s unknown to this test", v.Name, src.FieldRef.FieldPath)
			}
		case src.SecretKeyRef != nil:
			val, ok := all[pg.Namespace+"/"+src.SecretKeyRef.Name][src.SecretKeyRef.Key]
			if !ok {
				t.Fatalf("env %s: secret %s key %s not given to the test", v.Name, src.SecretKeyRef.Name, src.SecretKeyRef.Key)
			}
			env[v.Name] = val
		default:
			t.Fatalf("env %s: a source unknown to this test", v.Name)
		}
	}
	if len(c.EnvFrom) > 0 {
		t.Fatalf("envFrom unknown to this test")
	}
	return name, env
}

// testMachine is pod 0's machine outside a container, as the process
// kubelet gives it.
func testMachine(name string) Machine {
	return Machine{
		PodIP:         testPodIP,
		Name:          name,
		MemoryMB:      1024,
		BinDir:        testBinDir,
		SocketDir:     testSocketDir,
		Mounts:        map[string]string{cluster.DataMountPath: testDataVolume, "/dev/shm": testShmVolume, "/run/certs": testCertsDir},
		ListenOnPodIP: true,
		Kubeconfig:    testKubeconfig,
		KubeContext:   testKubeContext,
		SharedBuffers: "16MB",
	}
}

// withoutLocale makes the machine lack every locale but C.UTF-8 for the
// test, so the output does not depend on the machine's locales.
func withoutLocale(t *testing.T, have bool) {
	saved := installedLocale
	installedLocale = func(name string) bool { return have || normalizeLocale(name) == "c.utf8" }
	t.Cleanup(func() { installedLocale = saved })
}

func requireBinDir(t *testing.T) {
	t.Helper()
	requireInstalled(t, filepath.Join(testBinDir, "postgres"))
}

// TestPatroniConfigGolden renders the Patroni configuration of pod 0 of
// each sample cluster and compares it with testdata/spilo/<sample>.json. A
// change to the pod spec pgloop generates shows here. Run
// `go test ./pkg/instance -run TestPatroniConfigGolden -update` after an intended
// change and review the diff.
func TestPatroniConfigGolden(t *testing.T) {
	requireBinDir(t)
	withoutLocale(t, false)
	for _, name := range []string{"minimal", "full"} {
		t.Run(name, func(t *testing.T) {
			member, env := podEnv(t, loadSample(t, name), nil)
			got, _, err := PatroniConfig(env, testMachine(member))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./pkg/instance -run TestPatroniConfigGolden -update creates it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs (go test ./pkg/instance -run TestPatroniConfigGolden -update rewrites it)\ngot:\n%s", path, got)
			}
		})
	}
}

// TestPatroniConfigSanity checks what must hold outside a container
// whatever the cluster: only the pod IP is bound, every path is a local
// path, and no Spilo image script is referenced.
func TestPatroniConfigSanity(t *testing.T) {
	requireBinDir(t)
	for _, name := range []string{"minimal", "full"} {
		t.Run(name, func(t *testing.T) {
			member, env := podEnv(t, loadSample(t, name), nil)
			out, _, err := PatroniConfig(env, testMachine(member))
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			for _, bad := range []string{"0.0.0.0", `"*:`, `":80`, "/scripts/", "/run/certs", "/home/postgres", `"/run/postgresql`} {
				if bytes.Contains(out, []byte(bad)) {
					t.Errorf("config contains %s", bad)
				}
			}
			for _, c := range []struct {
				path []string
				want any
			}{
				{[]string{"name"}, member},
				{[]string{"namespace"}, "db"},
				{[]string{"restapi", "listen"}, testPodIP + ":8008"},
				{[]string{"restapi", "connect_address"}, testPodIP + ":8008"},
				{[]string{"postgresql", "listen"}, testPodIP + ":5432"},
				{[]string{"postgresql", "connect_address"}, testPodIP + ":5432"},
				{[]string{"postgresql", "data_dir"}, testDataVolume + "/pgroot/pgdata"},
				{[]string{"postgresql", "bin_dir"}, testBinDir},
				{[]string{"postgresql", "pgpass"}, testSocketDir + "/pgpass"},
				{[]string{"postgresql", "parameters", "unix_socket_directories"}, testSocketDir},
				{[]string{"postgresql", "authentication", "superuser", "password"}, testSuPassword},
				{[]string{"postgresql", "authentication", "replication", "password"}, testReplPasswd},
				{[]string{"kubernetes", "use_endpoints"}, false},
				{[]string{"postgresql", "parameters", "ssl_cert_file"}, testCertsDir + "/server.crt"},
				{[]string{"postgresql", "parameters", "ssl_key_file"}, testCertsDir + "/server.key"},
			} {
				if got := sectionValue(cfg, c.path...); got != c.want {
					t.Errorf("%s = %v, want %v", strings.Join(c.path, "."), got, c.want)
				}
			}
		})
	}
}

// TestPatroniConfigValidates runs Patroni's own validator on the
// configuration of the sample clusters.
func TestPatroniConfigValidates(t *testing.T) {
	requireBinDir(t)
	const python, patroni = "/usr/bin/python3", "/usr/bin/patroni"
	requireInstalled(t, python, patroni)
	for _, name := range []string{"minimal", "full", "clone"} {
		t.Run(name, func(t *testing.T) {
			var pg *v1.Postgresql
			if name == "clone" {
				// The minimal sample as a clone to a time: Patroni's
				// custom bootstrap method.
				pg = loadSample(t, "minimal")
				pg.Spec.DockerImage = cluster.DefaultArchivingImage
				pg.Spec.Backup = &v1.Backup{S3: &v1.BackupS3{Endpoint: "127.0.0.1:8333", Bucket: "pgloop", SecretName: "s3"}}
				pg.Spec.Clone = &v1.CloneSpec{Cluster: "src", UID: "uid", Timestamp: "2017-12-19T12:40:33+01:00"}
			} else {
				pg = loadSample(t, name)
			}
			member, env := podEnv(t, pg, map[string]map[string]string{pg.Namespace + "/s3": {
				v1.BackupAccessKeyIDKey: "key", v1.BackupSecretAccessKeyKey: "secret"}})
			h := testMachine(member)
			dir := t.TempDir()
			h.Mounts[cluster.DataMountPath] = filepath.Join(dir, "pgdata")
			out, _, err := PatroniConfig(env, h)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "patroni.yml")
			if err := os.WriteFile(file, out, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(python, patroni, "--validate-config", file)
			// Patroni reads PATRONI_* from its environment: keep it clean.
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
			res, err := cmd.CombinedOutput()
			if err != nil || len(bytes.TrimSpace(res)) > 0 {
				t.Errorf("patroni --validate-config: %v\n%s\nconfig:\n%s", err, res, out)
			}
		})
	}
}

func TestPatroniConfigCases(t *testing.T) {
	requireBinDir(t)
	pg := loadSample(t, "minimal")
	member, baseEnv := podEnv(t, pg, nil)

	oldData := t.TempDir()
	writeVersion := func(dir, v string) {
		if err := os.MkdirAll(filepath.Join(dir, "pgroot", "pgdata"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pgroot", "pgdata", "PG_VERSION"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeVersion(oldData, "14")
	sameData := t.TempDir()
	writeVersion(sameData, "15")

	// expect is a path of keys and the wanted value; nil wants the key
	// absent.
	type expect struct {
		path []string
		want any
	}
	p := func(s ...string) []string { return s }
	userHBA := []any{"local all all trust", "hostssl replication standby all md5", "hostnossl all all all reject", "hostssl all all all cert", "hostssl  all all 10.0.0.0/8 md5"}
	tests := []struct {
		name    string
		env     map[string]string // set; "" deletes
		host    func(*Machine)
		locale  bool
		want    []expect
		wantErr string
	}{
		{
			name: "Spilo's defaults",
			want: []expect{
				{p("bootstrap", "dcs", "ttl"), 30.0},
				{p("bootstrap", "dcs", "postgresql", "use_pg_rewind"), true},
				{p("bootstrap", "dcs", "postgresql", "use_slots"), true},
				{p("bootstrap", "dcs", "postgresql", "parameters", "max_connections"), 100.0},
				{p("bootstrap", "dcs", "postgresql", "parameters", "wal_retrieve_retry_interval"), nil},
				{p("bootstrap", "dcs", "postgresql", "parameters", "ssl"), nil},
				{p("bootstrap", "post_init"), nil},
				{p("bootstrap", "initdb"), []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "C.UTF-8"}, "data-checksums"}},
				{p("postgresql", "parameters", "shared_buffers"), "16MB"},
				{p("postgresql", "parameters", "shared_preload_libraries"), "pg_stat_statements"},
				{p("postgresql", "parameters", "pg_stat_statements.track_utility"), "off"},
				{p("postgresql", "parameters", "bg_mon.listen_address"), nil},
				{p("postgresql", "parameters", "extwlist.extensions"), nil},
				{p("postgresql", "parameters", "ssl"), "on"},
				{p("postgresql", "parameters", "ssl_cert_file"), testCertsDir + "/server.crt"},
				{p("postgresql", "callbacks"), nil},
				{p("postgresql", "basebackup_fast_xlog"), nil},
				{p("postgresql", "create_replica_method"), []any{"basebackup"}},
				{p("postgresql", "authentication", "rewind"), map[string]any{"username": "postgres", "password": testSuPassword}},
				{p("postgresql", "pg_hba"), []any{
					"local all all trust",
					"host all all 127.0.0.1/32 md5",
					"host all all ::1/128 md5",
					"local replication standby trust",
					"hostssl replication standby all md5",
					"hostnossl all all all reject",
					"hostssl all all all md5",
				}},
				{p("kubernetes", "bypass_api_service"), nil},
				{p("kubernetes", "leader_label_value"), nil},
				{p("kubernetes", "pod_ip"), nil},
			},
		},
		{
			name:   "locale installed",
			locale: true,
			want:   []expect{{p("bootstrap", "initdb"), []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "en_US.UTF-8"}, "data-checksums"}}},
		},
		{
			name: "SPILO_CONFIGURATION merges maps and replaces lists and values",
			env: map[string]string{"SPILO_CONFIGURATION": `{
				"bootstrap": {"dcs": {"ttl": 10, "retry_timeout": null, "postgresql": {"parameters": {"wal_retrieve_retry_interval": "1s", "max_connections": "42"}}}},
				"postgresql": {"parameters": {"shared_buffers": "32MB", "ssl": "on", "ssl_cert_file": "/run/certs/x.crt"},
				  "pg_hba": ["local all all trust", "hostssl replication standby all md5", "hostnossl all all all reject", "hostssl all all all cert", "hostssl  all all 10.0.0.0/8 md5"],
				  "callbacks": {"on_start": "/scripts/x"}}}`},
			want: []expect{
				{p("bootstrap", "dcs", "ttl"), 10.0},
				{p("bootstrap", "dcs", "loop_wait"), 10.0},
				{p("bootstrap", "dcs", "retry_timeout"), 10.0},
				{p("bootstrap", "dcs", "postgresql", "use_slots"), true},
				{p("bootstrap", "dcs", "postgresql", "parameters", "wal_retrieve_retry_interval"), "1s"},
				{p("bootstrap", "dcs", "postgresql", "parameters", "max_connections"), "42"},
				{p("bootstrap", "dcs", "postgresql", "parameters", "max_wal_senders"), 10.0},
				{p("postgresql", "parameters", "shared_buffers"), "32MB"},
				{p("postgresql", "parameters", "log_destination"), "csvlog"},
				{p("postgresql", "parameters", "ssl"), "on"},
				{p("postgresql", "parameters", "ssl_cert_file"), testCertsDir + "/x.crt"},
				{p("postgresql", "callbacks"), nil},
				{p("postgresql", "pg_hba"), userHBA},
				{p("bootstrap", "pg_hba"), userHBA},
			},
		},
		{
			name: "a bootstrap.pg_hba without replication gets Spilo's line",
			env:  map[string]string{"SPILO_CONFIGURATION": `{"bootstrap": {"pg_hba": ["hostssl all all all md5"]}}`},
			want: []expect{{p("bootstrap", "pg_hba"), []any{"hostssl replication standby all md5", "hostssl all all all md5"}}},
		},
		{
			name: "the user's libraries, kept when installed",
			env: map[string]string{"SPILO_CONFIGURATION": `{"postgresql": {"parameters": {
				"shared_preload_libraries": "pg_stat_statements, pg_cron,auto_explain,$libdir/passwordcheck",
				"cron.database_name": "app", "auto_explain.log_min_duration": "1s"}}}`},
			want: []expect{
				{p("postgresql", "parameters", "shared_preload_libraries"), "pg_stat_statements,auto_explain,$libdir/passwordcheck"},
				{p("postgresql", "parameters", "cron.database_name"), nil},
				{p("postgresql", "parameters", "auto_explain.log_min_duration"), "1s"},
			},
		},
		{
			name: "listen and paths of SPILO_CONFIGURATION are translated",
			env: map[string]string{"SPILO_CONFIGURATION": `{"restapi": {"listen": "0.0.0.0:8009"},
				"postgresql": {"listen": "*:5433", "parameters": {"log_directory": "/home/postgres/pgdata/logs"}}}`},
			want: []expect{
				{p("restapi", "listen"), testPodIP + ":8009"},
				{p("postgresql", "listen"), testPodIP + ":5433"},
				{p("postgresql", "parameters", "log_directory"), testDataVolume + "/logs"},
			},
		},
		{
			name:    "a data directory on no volume",
			env:     map[string]string{"SPILO_CONFIGURATION": `{"postgresql": {"data_dir": "/var/lib/postgresql/data"}}`},
			wantErr: "postgresql.data_dir: /var/lib/postgresql/data is on no mounted volume",
		},
		{
			name:    "PGVERSION of other binaries",
			env:     map[string]string{"PGVERSION": "17"},
			wantErr: "PGVERSION asks for PostgreSQL 17, but the binaries in /usr/lib/postgresql/15/bin are PostgreSQL 15",
		},
		{
			name:    "a data directory of another version",
			host:    func(h *Machine) { h.Mounts[cluster.DataMountPath] = oldData },
			wantErr: "the data directory's PG_VERSION asks for PostgreSQL 14",
		},
		{
			name: "a data directory of this version wins over PGVERSION",
			env:  map[string]string{"PGVERSION": "17"},
			host: func(h *Machine) { h.Mounts[cluster.DataMountPath] = sameData },
			want: []expect{{p("postgresql", "data_dir"), sameData + "/pgroot/pgdata"}},
		},
		{
			name:    "SPILO_CONFIGURATION's bin_dir",
			env:     map[string]string{"SPILO_CONFIGURATION": `{"postgresql": {"bin_dir": "/usr/lib/postgresql/16/bin"}}`},
			wantErr: "SPILO_CONFIGURATION's postgresql.bin_dir asks for PostgreSQL 16",
		},
		{
			name: "Endpoints on a routable pod IP",
			env:  map[string]string{"KUBERNETES_USE_CONFIGMAPS": "", "POD_IP": "10.245.0.5"},
			host: func(h *Machine) { h.PodIP = "10.245.0.5" },
			want: []expect{
				{p("kubernetes", "use_endpoints"), true},
				{p("kubernetes", "pod_ip"), "10.245.0.5"},
				{p("kubernetes", "ports"), []any{map[string]any{"name": "postgresql", "port": 5432.0}}},
				{p("postgresql", "listen"), "10.245.0.5:5432"},
			},
		},
		{
			name:    "Endpoints on a loopback pod IP",
			env:     map[string]string{"KUBERNETES_USE_CONFIGMAPS": ""},
			wantErr: "which the API server rejects for loopback addresses",
		},
		{
			name: "an admin user and the default namespace",
			env:  map[string]string{"PGPASSWORD_ADMIN": "adm", "POD_NAMESPACE": "default"},
			want: []expect{
				{p("bootstrap", "users"), map[string]any{"admin": map[string]any{"password": "adm", "options": []any{"createrole", "createdb"}}}},
				{p("namespace"), nil},
			},
		},
		{name: "another leader label", env: map[string]string{"KUBERNETES_LEADER_LABEL_VALUE": "primary"}, wantErr: "always labels the leader master"},
		{name: "an unknown KUBERNETES_ variable", env: map[string]string{"KUBERNETES_TMP_ROLE_LABEL": "x"}, wantErr: "KUBERNETES_TMP_ROLE_LABEL"},
		{name: "no Kubernetes store", env: map[string]string{"DCS_ENABLE_KUBERNETES_API": ""}, wantErr: "DCS_ENABLE_KUBERNETES_API is empty"},
		{name: "a clone", env: map[string]string{"CLONE_METHOD": "CLONE_WITH_BASEBACKUP"}, wantErr: "Spilo's clone"},
		{name: "a standby cluster", env: map[string]string{"STANDBY_HOST": "elsewhere"}, wantErr: "STANDBY_HOST is set"},
		{name: "POD_IP of another pod", env: map[string]string{"POD_IP": "127.1.254.3"}, wantErr: "POD_IP=127.1.254.3 differs"},
		{name: "labels that are not JSON", env: map[string]string{"KUBERNETES_LABELS": "application=spilo"}, wantErr: "KUBERNETES_LABELS"},
		{name: "SPILO_CONFIGURATION not JSON", env: map[string]string{"SPILO_CONFIGURATION": "postgresql: {}"}, wantErr: "SPILO_CONFIGURATION is not JSON"},
		{name: "SPILO_CONFIGURATION not a map", env: map[string]string{"SPILO_CONFIGURATION": "[1]"}, wantErr: "should contain a map"},
		{name: "wildcard pod IP", host: func(h *Machine) { h.PodIP = "0.0.0.0" }, wantErr: "wildcard"},
		{name: "the host's loopback address", host: func(h *Machine) { h.PodIP = "127.0.0.1" }, wantErr: "host's own loopback"},
		{name: "a long socket directory", host: func(h *Machine) { h.SocketDir = "/" + strings.Repeat("s", 100) }, wantErr: "too long"},
		{name: "no pod IP", env: map[string]string{"POD_IP": ""}, host: func(h *Machine) { h.PodIP = "" }, wantErr: "POD_IP is not set"},
		{
			name: "in a container",
			host: func(h *Machine) {
				h.Mounts, h.ListenOnPodIP, h.Kubeconfig, h.KubeContext, h.SharedBuffers, h.SocketDir = nil, false, "", "", "", DefaultSocketDir
			},
			want: []expect{
				{p("postgresql", "listen"), "*:5432"},
				{p("restapi", "listen"), ":8008"},
				{p("postgresql", "data_dir"), cluster.PGData},
				{p("postgresql", "pgpass"), "/run/postgresql/pgpass"},
				{p("postgresql", "parameters", "ssl_cert_file"), "/run/certs/server.crt"},
				{p("postgresql", "parameters", "shared_buffers"), "204MB"},
				{p("kubernetes", "bypass_api_service"), true},
			},
		},
		{
			name:    "a version the image lacks",
			env:     map[string]string{"PGVERSION": "17"},
			host:    func(h *Machine) { h.BinDir = "" },
			wantErr: "PGVERSION asks for PostgreSQL 17, which this image does not have",
		},
		{
			name:    "a wildcard connect address",
			env:     map[string]string{"RESTAPI_CONNECT_ADDRESS": "0.0.0.0"},
			wantErr: `restapi.connect_address "0.0.0.0:8008" is not an address`,
		},
		{name: "no context", host: func(h *Machine) { h.KubeContext = "" }, wantErr: "context"},
		{
			name: "a clone's restore method kept",
			env: map[string]string{"SPILO_CONFIGURATION": `{"bootstrap":{"method":"pgloop_restore","pgloop_restore":` +
				`{"command":"pgbackrest --stanza=src --repo1-path=/pgloop/db/src/uid restore --type=time \"--target=2017-12-19 11:40:33+00\"",` +
				`"keep_existing_recovery_conf":true,"no_params":true}}}`},
			want: []expect{
				{p("bootstrap", "method"), "pgloop_restore"},
				{p("bootstrap", "pgloop_restore", "command"), `pgbackrest --stanza=src --repo1-path=/pgloop/db/src/uid restore --type=time "--target=2017-12-19 11:40:33+00"`},
				{p("bootstrap", "pgloop_restore", "keep_existing_recovery_conf"), true},
				{p("bootstrap", "pgloop_restore", "no_params"), true},
			},
		},
		{
			name: "a bootstrap command naming a container path",
			env: map[string]string{"SPILO_CONFIGURATION": `{"bootstrap":{"method":"restore","restore":` +
				`{"command":"pgbackrest restore --pg1-path=/home/postgres/pgdata/pgroot/pgdata"}}}`},
			wantErr: "bootstrap.restore.command names /home/postgres/pgdata/pgroot/pgdata, a path of the container's volumes",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			withoutLocale(t, tc.locale)
			env := maps.Clone(baseEnv)
			for k, v := range tc.env {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			h := testMachine(member)
			if tc.host != nil {
				tc.host(&h)
			}
			out, _, err := PatroniConfig(env, h)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.want {
				if got := sectionValue(cfg, e.path...); !reflect.DeepEqual(got, e.want) {
					t.Errorf("%s = %s, want %s", strings.Join(e.path, "."), jsonString(got), jsonString(e.want))
				}
			}
		})
	}
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func TestSpiloDeepUpdate(t *testing.T) {
	tests := []struct {
		name       string
		user, base string
		want       string
	}{
		{"maps merge key by key", `{"a": {"x": 1}, "c": 3}`, `{"a": {"y": 2}, "b": 2}`, `{"a": {"x": 1, "y": 2}, "b": 2, "c": 3}`},
		{"the user's value wins", `{"a": "user"}`, `{"a": "spilo"}`, `{"a": "user"}`},
		{"the user's list replaces", `{"a": [1]}`, `{"a": [2, 3]}`, `{"a": [1]}`},
		{"null keeps Spilo's", `{"a": null}`, `{"a": {"x": 1}}`, `{"a": {"x": 1}}`},
		{"a map over a value wins", `{"a": {"x": 1}}`, `{"a": 2}`, `{"a": {"x": 1}}`},
		{"a value over a map wins", `{"a": 1}`, `{"a": {"x": 2}}`, `{"a": 1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var user, base, want any
			for _, d := range []struct {
				s string
				v *any
			}{{tc.user, &user}, {tc.base, &base}, {tc.want, &want}} {
				if err := json.Unmarshal([]byte(d.s), d.v); err != nil {
					t.Fatal(err)
				}
			}
			if got := deepUpdate(user, base); !reflect.DeepEqual(got, want) {
				t.Errorf("got %s, want %s", jsonString(got), tc.want)
			}
		})
	}
}
