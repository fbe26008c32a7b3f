package cluster

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// bootstrapOf returns the bootstrap section of the StatefulSet's
// SPILO_CONFIGURATION, decoded.
func bootstrapOf(t *testing.T, pg *v1.Postgresql, opts Options) map[string]any {
	t.Helper()
	for _, e := range StatefulSet(pg, opts).Spec.Template.Spec.Containers[0].Env {
		if e.Name != "SPILO_CONFIGURATION" {
			continue
		}
		var cfg struct {
			Bootstrap map[string]any `json:"bootstrap"`
		}
		if err := json.Unmarshal([]byte(e.Value), &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Bootstrap
	}
	t.Fatal("no SPILO_CONFIGURATION")
	return nil
}

func TestRestore(t *testing.T) {
	repo := &v1.BackupS3{Endpoint: "127.0.0.1:8333", Bucket: "pgloop", SecretName: "backup-creds"}
	newClone := func() *v1.Postgresql {
		pg := loadSample(t, "minimal")
		pg.Namespace, pg.Name, pg.UID = "staging", "acid-copy", "uid-copy"
		pg.Spec.DockerImage = DefaultArchivingImage
		pg.Spec.Backup = &v1.Backup{S3: repo}
		pg.Spec.Clone = &v1.CloneSpec{Cluster: "acid-source", Namespace: "prod", UID: "uid-source", Timestamp: "2017-12-19T12:40:33+01:00"}
		return pg
	}

	t.Run("the command", func(t *testing.T) {
		pg := newClone()
		want := `pgbackrest --stanza=acid-source --repo1-path=/pgloop/prod/acid-source/uid-source restore --type=time "--target=2017-12-19 11:40:33+00" --target-action=promote`
		if got := RestoreCommand(pg); got != want {
			t.Errorf("RestoreCommand =\n%s\nwant\n%s", got, want)
		}
		pg.Spec.Clone.Namespace = ""
		if got := SourceRepositoryPath(pg); got != "/pgloop/staging/acid-source/uid-source" {
			t.Errorf("SourceRepositoryPath without namespace = %s, want the clone's namespace", got)
		}
		pg.Spec.Clone.Timestamp = "2017-12-19T11:40:33.5Z"
		if got := RestoreTarget(pg); got != "2017-12-19 11:40:33.5+00" {
			t.Errorf("RestoreTarget with a fraction = %q", got)
		}
	})

	t.Run("the bootstrap method; its own repository in the environment", func(t *testing.T) {
		pg := newClone()
		boot := bootstrapOf(t, pg, Options{})
		if boot["method"] != RestoreMethod {
			t.Errorf("bootstrap.method = %v, want %s", boot["method"], RestoreMethod)
		}
		m, _ := boot[RestoreMethod].(map[string]any)
		want := map[string]any{"command": RestoreCommand(pg), "keep_existing_recovery_conf": true, "no_params": true}
		if len(m) != len(want) {
			t.Errorf("bootstrap.%s = %v, want %v", RestoreMethod, m, want)
		}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("bootstrap.%s.%s = %v, want %v", RestoreMethod, k, m[k], v)
			}
		}
		a := archivingOf(t, pg, Options{})
		if a.env["PGBACKREST_REPO1_PATH"] != "/pgloop/staging/acid-copy/uid-copy" || a.env["PGBACKREST_STANZA"] != "acid-copy" {
			t.Errorf("the clone archives to %s, stanza %s: want its own", a.env["PGBACKREST_REPO1_PATH"], a.env["PGBACKREST_STANZA"])
		}
	})

	t.Run("the operator's repository", func(t *testing.T) {
		pg := newClone()
		pg.Spec.Backup = nil
		if boot := bootstrapOf(t, pg, Options{Backup: repo}); boot["method"] != RestoreMethod {
			t.Errorf("bootstrap %v, want the restore", boot)
		}
	})

	t.Run("the pods do not change with the clone", func(t *testing.T) {
		pg := newClone()
		hash := PodTemplateHash(&StatefulSet(pg, Options{}).Spec.Template)
		pg.Spec.Clone = nil
		if other := PodTemplateHash(&StatefulSet(pg, Options{}).Spec.Template); other != hash {
			t.Errorf("pod template hash %s with the clone, %s without: want one", hash, other)
		}
	})

	t.Run("no clone: initdb", func(t *testing.T) {
		pg := newClone()
		pg.Spec.Clone = nil
		if boot := bootstrapOf(t, pg, Options{}); boot["method"] != nil || boot[RestoreMethod] != nil {
			t.Errorf("bootstrap %v, want no method", boot)
		}
		if RestoreBlocked(pg, Options{}) != "" {
			t.Error("RestoreBlocked for a cluster that restores nothing")
		}
	})

	t.Run("no timestamp: the end of the source's archive", func(t *testing.T) {
		pg := newClone()
		pg.Spec.Clone.Timestamp = ""
		want := "pgbackrest --stanza=acid-source --repo1-path=/pgloop/prod/acid-source/uid-source restore"
		if got := RestoreCommand(pg); got != want {
			t.Errorf("RestoreCommand = %q, want %q", got, want)
		}
	})

	for _, tt := range []struct {
		name   string
		mutate func(pg *v1.Postgresql)
		want   string
	}{
		{"no repository", func(pg *v1.Postgresql) { pg.Spec.Backup = nil },
			"cannot restore the clone: it has no pgBackRest repository to read the source's backups from"},
		{"an image without pgBackRest", func(pg *v1.Postgresql) { pg.Spec.DockerImage = "ghcr.io/zalando/spilo-17:4.0-p2" },
			"cannot restore the clone: image ghcr.io/zalando/spilo-17:4.0-p2 is not known to carry pgBackRest"},
	} {
		t.Run(tt.name+": a method that fails and says why", func(t *testing.T) {
			pg := newClone()
			tt.mutate(pg)
			why := RestoreBlocked(pg, Options{})
			if !strings.HasPrefix(why, tt.want) {
				t.Fatalf("RestoreBlocked = %q, want %q...", why, tt.want)
			}
			m, _ := bootstrapOf(t, pg, Options{})[RestoreMethod].(map[string]any)
			cmd, _ := m["command"].(string)
			if !strings.HasPrefix(cmd, `sh -c "echo 'pgloop: cannot restore the clone: `) || !strings.HasSuffix(cmd, ` >&2; exit 1"`) {
				t.Errorf("command %s, want one that fails saying why", cmd)
			}
		})
	}
}
