package cluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// archiving is what a StatefulSet says of a cluster's archiving: its
// PGBACKREST_ variables (secret references as "secret:NAME/KEY"), its
// per-instance parameters, and the CA's volume and mount.
type archiving struct {
	env    map[string]string
	params map[string]string
	volume *corev1.Volume
	mount  *corev1.VolumeMount
}

func archivingOf(t *testing.T, pg *v1.Postgresql, opts Options) archiving {
	t.Helper()
	sts := StatefulSet(pg, opts)
	c := sts.Spec.Template.Spec.Containers[0]
	a := archiving{env: map[string]string{}}
	for _, e := range c.Env {
		switch {
		case e.Name == "SPILO_CONFIGURATION":
			var cfg struct {
				PostgreSQL struct {
					Parameters map[string]string `json:"parameters"`
				} `json:"postgresql"`
			}
			if err := json.Unmarshal([]byte(e.Value), &cfg); err != nil {
				t.Fatal(err)
			}
			a.params = cfg.PostgreSQL.Parameters
		case len(e.Name) > 11 && e.Name[:11] == "PGBACKREST_":
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
				a.env[e.Name] = "secret:" + r.SecretKeyRef.Name + "/" + r.SecretKeyRef.Key
			} else {
				a.env[e.Name] = e.Value
			}
		}
	}
	for i, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == backupCAVolume {
			a.volume = &sts.Spec.Template.Spec.Volumes[i]
		}
	}
	for i, m := range c.VolumeMounts {
		if m.Name == backupCAVolume {
			a.mount = &c.VolumeMounts[i]
		}
	}
	return a
}

func TestArchiving(t *testing.T) {
	repo := &v1.BackupS3{Endpoint: "127.0.0.1:8333", Bucket: "pgloop", SecretName: "backup-creds", CAKey: "ca.pem"}
	newPG := func() *v1.Postgresql {
		pg := loadSample(t, "minimal")
		pg.UID = "uid-1"
		pg.Spec.DockerImage = DefaultArchivingImage
		return pg
	}

	t.Run("the spec's repository", func(t *testing.T) {
		pg := newPG()
		pg.Spec.Backup = &v1.Backup{S3: repo}
		a := archivingOf(t, pg, Options{})
		want := map[string]string{
			"PGBACKREST_STANZA":              pg.Name,
			"PGBACKREST_PG1_PATH":            "/home/postgres/pgdata/pgroot/pgdata",
			"PGBACKREST_PG1_SOCKET_PATH":     "/var/run/postgresql",
			"PGBACKREST_REPO1_TYPE":          "s3",
			"PGBACKREST_REPO1_PATH":          "/pgloop/" + pg.Namespace + "/" + pg.Name + "/uid-1",
			"PGBACKREST_REPO1_S3_ENDPOINT":   "127.0.0.1",
			"PGBACKREST_REPO1_S3_PORT":       "8333",
			"PGBACKREST_REPO1_S3_BUCKET":     "pgloop",
			"PGBACKREST_REPO1_S3_REGION":     "us-east-1",
			"PGBACKREST_REPO1_S3_URI_STYLE":  "path",
			"PGBACKREST_REPO1_S3_KEY":        "secret:backup-creds/AWS_ACCESS_KEY_ID",
			"PGBACKREST_REPO1_S3_KEY_SECRET": "secret:backup-creds/AWS_SECRET_ACCESS_KEY",
			"PGBACKREST_REPO1_S3_CA_FILE":    "/etc/pgbackrest/repo/ca.crt",
			"PGBACKREST_ARCHIVE_ASYNC":       "y",
			"PGBACKREST_SPOOL_PATH":          "/home/postgres/pgdata/pgbackrest/spool",
			"PGBACKREST_LOCK_PATH":           "/home/postgres/pgdata/pgbackrest/lock",
			"PGBACKREST_LOG_LEVEL_CONSOLE":   "warn",
			"PGBACKREST_LOG_LEVEL_STDERR":    "error",
			"PGBACKREST_LOG_LEVEL_FILE":      "off",
		}
		for k, v := range want {
			if a.env[k] != v {
				t.Errorf("%s = %q, want %q", k, a.env[k], v)
			}
		}
		for k := range a.env {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected %s = %q", k, a.env[k])
			}
		}
		if want := ArchiveCommand(pg, repo); a.params["archive_command"] != want || a.params["archive_timeout"] != "60" {
			t.Errorf("parameters %v, want archive_command %q and archive_timeout 60", a.params, want)
		}
		if a.volume == nil || a.volume.Secret == nil || a.volume.Secret.SecretName != "backup-creds" ||
			len(a.volume.Secret.Items) != 1 || a.volume.Secret.Items[0] != (corev1.KeyToPath{Key: "ca.pem", Path: "ca.crt"}) {
			t.Errorf("CA volume %+v, want the Secret's ca.pem as ca.crt", a.volume)
		}
		if a.mount == nil || a.mount.MountPath != "/etc/pgbackrest/repo" || !a.mount.ReadOnly {
			t.Errorf("CA mount %+v", a.mount)
		}
	})

	t.Run("the operator's repository, the spec's archive_timeout", func(t *testing.T) {
		pg := newPG()
		pg.Spec.PostgreSQL.Parameters = map[string]string{"archive_timeout": "5min"}
		def := *repo
		def.Endpoint, def.CAKey, def.Region = "s3.example.com", "", "eu-west-1"
		a := archivingOf(t, pg, Options{Backup: &def, ArchiveTimeout: 90e9})
		if a.env["PGBACKREST_REPO1_S3_ENDPOINT"] != "s3.example.com" || a.env["PGBACKREST_REPO1_S3_REGION"] != "eu-west-1" {
			t.Errorf("env %v", a.env)
		}
		for _, k := range []string{"PGBACKREST_REPO1_S3_PORT", "PGBACKREST_REPO1_S3_CA_FILE"} {
			if v, ok := a.env[k]; ok {
				t.Errorf("%s = %q, want none", k, v)
			}
		}
		if a.volume != nil || a.mount != nil {
			t.Errorf("a CA volume without caKey: %+v %+v", a.volume, a.mount)
		}
		if a.params["archive_timeout"] != "5min" || a.params["archive_command"] != ArchiveCommand(pg, &def) {
			t.Errorf("parameters %v, want the spec's archive_timeout", a.params)
		}
		pg.Spec.PostgreSQL.Parameters = nil
		if a := archivingOf(t, pg, Options{Backup: &def, ArchiveTimeout: 90e9}); a.params["archive_timeout"] != "90" {
			t.Errorf("archive_timeout %q, want the operator's 90", a.params["archive_timeout"])
		}
	})

	for _, tt := range []struct {
		name   string
		mutate func(pg *v1.Postgresql)
		opts   Options
	}{
		{name: "no repository", mutate: func(*v1.Postgresql) {}},
		{name: "archiving off", mutate: func(pg *v1.Postgresql) {
			pg.Spec.Backup = &v1.Backup{Enabled: ptr.To(false), S3: repo}
		}, opts: Options{Backup: repo}},
		{name: "the cluster's own archive_command", mutate: func(pg *v1.Postgresql) {
			pg.Spec.PostgreSQL.Parameters = map[string]string{"archive_command": "/bin/true"}
		}, opts: Options{Backup: repo}},
		{name: "an image not known to carry pgBackRest", mutate: func(pg *v1.Postgresql) {
			pg.Spec.DockerImage = "ghcr.io/zalando/spilo-17:4.0-p2"
			pg.Spec.Backup = &v1.Backup{S3: repo}
		}},
		{name: "an image of another repository whose name starts with pgloop's", mutate: func(pg *v1.Postgresql) {
			pg.Spec.DockerImage = InstanceRepository + "-custom:15-1"
			pg.Spec.Backup = &v1.Backup{S3: repo}
		}},
		{name: "an image the operator does not list", mutate: func(pg *v1.Postgresql) {
			pg.Spec.Backup = &v1.Backup{S3: repo}
		}, opts: Options{ArchivingImages: []string{"registry.example/own:1"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pg := newPG()
			tt.mutate(pg)
			a := archivingOf(t, pg, tt.opts)
			if len(a.env) != 0 || a.volume != nil || a.mount != nil || strings.Contains(a.params["archive_command"], "pgbackrest") {
				t.Errorf("archives: env %v, volume %v, parameters %v", a.env, a.volume, a.params)
			}
			if Repository(pg, tt.opts) != nil {
				t.Errorf("Repository = %+v, want nil", Repository(pg, tt.opts))
			}
			blocked := ArchiveBlocked(pg, tt.opts)
			if wantBlocked := strings.HasPrefix(tt.name, "an image"); (blocked != "") != wantBlocked {
				t.Errorf("ArchiveBlocked = %q, want a reason: %v", blocked, wantBlocked)
			}
		})
	}
}

// TestArchiveCommand runs the archive_command with /bin/sh, as PostgreSQL
// does, against a pgbackrest that records its calls and fails when told.
func TestArchiveCommand(t *testing.T) {
	dir := t.TempDir()
	spool, calls := filepath.Join(dir, "spool"), filepath.Join(dir, "calls")
	fake := filepath.Join(dir, "pgbackrest")
	script := "#!/bin/sh\necho \"$*\" >>" + calls + "\n" +
		"if [ -e " + filepath.Join(dir, "fail-$2") + " ]; then echo \"ERROR: [049]: unable to connect: Connection refused\" >&2; exit 49; fi\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pg := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg", UID: "u1"}}
	repo := &v1.BackupS3{Endpoint: "s3.example.com", Bucket: "b", SecretName: "s"}
	run := func(cmd string) (string, error) {
		t.Helper()
		os.Remove(calls)
		c := exec.Command("/bin/sh", "-c", strings.ReplaceAll(cmd, "%p", "pg_wal/000000010000000000000001"))
		c.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "PGBACKREST_SPOOL_PATH=" + spool}
		out, err := c.CombinedOutput()
		got, _ := os.ReadFile(calls)
		if len(out) > 0 {
			t.Logf("output: %s", out)
		}
		return strings.TrimSpace(string(got)), err
	}
	const push = `--io-timeout=3 archive-push pg_wal/000000010000000000000001`
	const create = `--io-timeout=3 stanza-create`

	// The first push creates the stanza, then pushes.
	if got, err := run(ArchiveCommand(pg, repo)); err != nil || got != create+"\n"+push {
		t.Fatalf("first push: calls %q, %v", got, err)
	}
	// The next ones only push.
	if got, err := run(ArchiveCommand(pg, repo)); err != nil || got != push {
		t.Fatalf("second push: calls %q, %v", got, err)
	}
	// A failing push fails archive_command, stanza-create is not tried
	// again.
	if err := os.WriteFile(filepath.Join(dir, "fail-archive-push"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := run(ArchiveCommand(pg, repo)); err == nil || got != push {
		t.Fatalf("failing push: calls %q, %v", got, err)
	}
	os.Remove(filepath.Join(dir, "fail-archive-push"))

	// Another repository (an edited spec) gets its stanza made; when that
	// fails, nothing is pushed, and pgBackRest's words are in the spool.
	other := *repo
	other.Endpoint = "s3.other.example.com"
	if err := os.WriteFile(filepath.Join(dir, "fail-stanza-create"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := run(ArchiveCommand(pg, &other)); err == nil || got != create {
		t.Fatalf("failing stanza-create: calls %q, %v", got, err)
	}
	words, err := os.ReadFile(filepath.Join(spool, StanzaCreateError))
	if err != nil || !strings.Contains(string(words), "Connection refused") {
		t.Fatalf("%s: %q, %v", StanzaCreateError, words, err)
	}
	os.Remove(filepath.Join(dir, "fail-stanza-create"))
	if got, err := run(ArchiveCommand(pg, &other)); err != nil || got != create+"\n"+push {
		t.Fatalf("stanza-create again: calls %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(spool, StanzaCreateError)); !os.IsNotExist(err) {
		t.Errorf("%s kept after a stanza-create that succeeded: %v", StanzaCreateError, err)
	}

	// An hour later the stanza is checked again.
	markers, _ := filepath.Glob(filepath.Join(spool, "stanza-*"))
	for _, m := range markers {
		old := time.Now().Add(-61 * time.Minute)
		if err := os.Chtimes(m, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := run(ArchiveCommand(pg, &other)); err != nil || got != create+"\n"+push {
		t.Fatalf("an hour later: calls %q, %v", got, err)
	}
}

// BenchmarkArchiveBlocked is what the facts and the archive checks pay per
// cluster and observation: nothing allocated.
func BenchmarkArchiveBlocked(b *testing.B) {
	repo := &v1.BackupS3{Endpoint: "s3.example.com", Bucket: "b", SecretName: "s"}
	pg := &v1.Postgresql{Spec: v1.PostgresqlSpec{DockerImage: DefaultArchivingImage, Backup: &v1.Backup{S3: repo}}}
	spilo := &v1.Postgresql{Spec: v1.PostgresqlSpec{Backup: &v1.Backup{S3: repo}}}
	b.ReportAllocs()
	for b.Loop() {
		if ArchiveBlocked(pg, Options{}) != "" || ArchiveBlocked(spilo, Options{Image: DefaultArchivingImage}) != "" {
			b.Fatal("blocked")
		}
	}
}

// TestArchivingImage: an entry without a tag stands for every tag and
// digest of its repository, an entry with one for that reference only.
func TestArchivingImage(t *testing.T) {
	for _, tt := range []struct {
		images []string
		image  string
		want   bool
	}{
		{[]string{InstanceRepository}, DefaultImage, true},
		{[]string{InstanceRepository}, InstanceRepository + ":17-3", true},
		{[]string{InstanceRepository}, InstanceRepository + "@sha256:0123", true},
		{[]string{InstanceRepository}, InstanceRepository, true}, // :latest
		{[]string{InstanceRepository}, InstanceRepository + "-x:1", false},
		{[]string{"registry.example:5000/own"}, "registry.example:5000/own:2", true},
		{[]string{"registry.example:5000/own:1"}, "registry.example:5000/own:2", false},
		{[]string{"registry.example:5000/own:1"}, "registry.example:5000/own:1", true},
		{nil, DefaultImage, false},
	} {
		if got := archivingImage(tt.images, tt.image); got != tt.want {
			t.Errorf("archivingImage(%v, %s) = %v, want %v", tt.images, tt.image, got, tt.want)
		}
	}
}
