package instance

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestPgBackRestEnv(t *testing.T) {
	h := Machine{
		SocketDir: "/tmp/pgk-0123abcd",
		Mounts: map[string]string{
			"/home/postgres/pgdata": "/root/pv/pv-1",
			"/etc/pgbackrest/ca":    "/root/pods/u/volumes/s3-ca",
			"/etc/pgbackrest/conf":  "/root/pods/u/volumes/conf",
		},
	}
	// pgloop's pod: an S3 repository, its CA from a Secret volume, the
	// rest on the data volume.
	s3 := map[string]string{
		"PGBACKREST_REPO1_TYPE":          "s3",
		"PGBACKREST_REPO1_S3_ENDPOINT":   "127.0.0.1:9000",
		"PGBACKREST_REPO1_S3_BUCKET":     "backups",
		"PGBACKREST_REPO1_S3_REGION":     "us-east-1",
		"PGBACKREST_REPO1_S3_URI_STYLE":  "path",
		"PGBACKREST_REPO1_S3_KEY":        "key",
		"PGBACKREST_REPO1_S3_KEY_SECRET": "secret/with/slashes",
		"PGBACKREST_REPO1_PATH":          "/pgloop/db/demo",
		"PGBACKREST_STANZA":              "demo",
		"PGBACKREST_PG1_PATH":            "/home/postgres/pgdata/pgroot/data",
		"PGBACKREST_SPOOL_PATH":          "/home/postgres/pgdata/pgbackrest/spool",
		"PGBACKREST_LOCK_PATH":           "/home/postgres/pgdata/pgbackrest/lock",
		"PGBACKREST_LOG_PATH":            "/home/postgres/pgdata/pgbackrest/log",
		"PGBACKREST_REPO1_S3_CA_FILE":    "/etc/pgbackrest/ca/ca.crt",
		"PGBACKREST_ARCHIVE_ASYNC":       "y",
		"PGBACKREST_LOG_LEVEL_FILE":      "info",
		// Not pgBackRest's: left to Spilo's template.
		"PGDATA":              "/home/postgres/pgdata/pgroot/data",
		"SPILO_CONFIGURATION": "{}",
	}
	with := func(base map[string]string, name, value string) map[string]string {
		out := maps.Clone(base)
		out[name] = value
		return out
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    []string // NAME=value, sorted
		wantErr string
	}{
		{name: "pgloop's S3 repository", env: s3, want: []string{
			"PGBACKREST_ARCHIVE_ASYNC=y",
			"PGBACKREST_LOCK_PATH=/root/pv/pv-1/pgbackrest/lock",
			"PGBACKREST_LOG_LEVEL_FILE=info",
			"PGBACKREST_LOG_PATH=/root/pv/pv-1/pgbackrest/log",
			"PGBACKREST_PG1_PATH=/root/pv/pv-1/pgroot/data",
			"PGBACKREST_REPO1_PATH=/pgloop/db/demo", // in the bucket
			"PGBACKREST_REPO1_S3_BUCKET=backups",
			"PGBACKREST_REPO1_S3_CA_FILE=/root/pods/u/volumes/s3-ca/ca.crt",
			"PGBACKREST_REPO1_S3_ENDPOINT=127.0.0.1:9000",
			"PGBACKREST_REPO1_S3_KEY=key",
			"PGBACKREST_REPO1_S3_KEY_SECRET=secret/with/slashes",
			"PGBACKREST_REPO1_S3_REGION=us-east-1",
			"PGBACKREST_REPO1_S3_URI_STYLE=path",
			"PGBACKREST_REPO1_TYPE=s3",
			"PGBACKREST_SPOOL_PATH=/root/pv/pv-1/pgbackrest/spool",
			"PGBACKREST_STANZA=demo",
		}},
		{name: "no pgBackRest: nothing", env: map[string]string{"PGDATA": "/x", "PGBACKREST": "not an option"}, want: nil},
		{name: "posix repository (type unset): repo1-path is local",
			env:  map[string]string{"PGBACKREST_REPO1_PATH": "/home/postgres/pgdata/repo"},
			want: []string{"PGBACKREST_REPO1_PATH=/root/pv/pv-1/repo"}},
		{name: "posix repository", env: map[string]string{"PGBACKREST_REPO1_TYPE": "posix", "PGBACKREST_REPO1_PATH": "/home/postgres/pgdata/repo"},
			want: []string{"PGBACKREST_REPO1_PATH=/root/pv/pv-1/repo", "PGBACKREST_REPO1_TYPE=posix"}},
		{name: "cifs repository", env: map[string]string{"PGBACKREST_REPO1_TYPE": "cifs", "PGBACKREST_REPO1_PATH": "/home/postgres/pgdata/repo"},
			want: []string{"PGBACKREST_REPO1_PATH=/root/pv/pv-1/repo", "PGBACKREST_REPO1_TYPE=cifs"}},
		{name: "posix repository off every volume", env: map[string]string{"PGBACKREST_REPO1_PATH": "/var/lib/pgbackrest"},
			wantErr: "PGBACKREST_REPO1_PATH=/var/lib/pgbackrest: pgBackRest option repo1-path: /var/lib/pgbackrest is on no mounted volume"},
		{name: "gcs and azure repositories: bucket paths", env: map[string]string{
			"PGBACKREST_REPO1_TYPE": "gcs", "PGBACKREST_REPO1_PATH": "/a",
			"PGBACKREST_REPO2_TYPE": "azure", "PGBACKREST_REPO2_PATH": "/b",
		}, want: []string{"PGBACKREST_REPO1_PATH=/a", "PGBACKREST_REPO1_TYPE=gcs", "PGBACKREST_REPO2_PATH=/b", "PGBACKREST_REPO2_TYPE=azure"}},
		{name: "a repository host's path is the host's", env: map[string]string{
			"PGBACKREST_REPO1_HOST": "backup.example", "PGBACKREST_REPO1_PATH": "/var/lib/pgbackrest",
			"PGBACKREST_REPO1_HOST_CONFIG":  "/etc/pgbackrest/pgbackrest.conf",
			"PGBACKREST_REPO1_HOST_CA_FILE": "/etc/pgbackrest/ca/ca.crt",
		}, want: []string{
			"PGBACKREST_REPO1_HOST=backup.example",
			"PGBACKREST_REPO1_HOST_CA_FILE=/root/pods/u/volumes/s3-ca/ca.crt", // ours, to check it
			"PGBACKREST_REPO1_HOST_CONFIG=/etc/pgbackrest/pgbackrest.conf",
			"PGBACKREST_REPO1_PATH=/var/lib/pgbackrest",
		}},
		{name: "the second repository by its own type", env: map[string]string{
			"PGBACKREST_REPO1_TYPE": "s3", "PGBACKREST_REPO1_PATH": "/bucket/path",
			"PGBACKREST_REPO2_PATH":            "/home/postgres/pgdata/repo2",
			"PGBACKREST_REPO2_STORAGE_CA_PATH": "/etc/pgbackrest/ca",
		}, want: []string{
			"PGBACKREST_REPO1_PATH=/bucket/path",
			"PGBACKREST_REPO1_TYPE=s3",
			"PGBACKREST_REPO2_PATH=/root/pv/pv-1/repo2",
			"PGBACKREST_REPO2_STORAGE_CA_PATH=/root/pods/u/volumes/s3-ca",
		}},
		{name: "configuration from a volume", env: map[string]string{
			"PGBACKREST_CONFIG":              "/etc/pgbackrest/conf/pgbackrest.conf",
			"PGBACKREST_CONFIG_PATH":         "/etc/pgbackrest/conf",
			"PGBACKREST_CONFIG_INCLUDE_PATH": "/etc/pgbackrest/conf/conf.d",
		}, want: []string{
			"PGBACKREST_CONFIG=/root/pods/u/volumes/conf/pgbackrest.conf",
			"PGBACKREST_CONFIG_INCLUDE_PATH=/root/pods/u/volumes/conf/conf.d",
			"PGBACKREST_CONFIG_PATH=/root/pods/u/volumes/conf",
		}},
		{name: "Spilo's socket directory is the pod's", env: map[string]string{"PGBACKREST_PG1_SOCKET_PATH": "/var/run/postgresql/"},
			want: []string{"PGBACKREST_PG1_SOCKET_PATH=/tmp/pgk-0123abcd"}},
		{name: "a remote PostgreSQL host's paths are its own", env: map[string]string{
			"PGBACKREST_PG2_HOST": "db-1", "PGBACKREST_PG2_PATH": "/home/postgres/pgdata/pgroot/data", "PGBACKREST_PG2_SOCKET_PATH": "/run/postgresql",
		}, want: []string{
			"PGBACKREST_PG2_HOST=db-1",
			"PGBACKREST_PG2_PATH=/home/postgres/pgdata/pgroot/data",
			"PGBACKREST_PG2_SOCKET_PATH=/run/postgresql",
		}},
		{name: "GCS key file, and token", env: map[string]string{
			"PGBACKREST_REPO1_TYPE": "gcs", "PGBACKREST_REPO1_GCS_KEY": "/etc/pgbackrest/ca/key.json",
			"PGBACKREST_REPO2_TYPE": "gcs", "PGBACKREST_REPO2_GCS_KEY_TYPE": "token", "PGBACKREST_REPO2_GCS_KEY": "/not/a/path",
		}, want: []string{
			"PGBACKREST_REPO1_GCS_KEY=/root/pods/u/volumes/s3-ca/key.json",
			"PGBACKREST_REPO1_TYPE=gcs",
			"PGBACKREST_REPO2_GCS_KEY=/not/a/path",
			"PGBACKREST_REPO2_GCS_KEY_TYPE=token",
			"PGBACKREST_REPO2_TYPE=gcs",
		}},
		{name: "programs stay", env: map[string]string{"PGBACKREST_CMD": "/usr/bin/pgbackrest"},
			want: []string{"PGBACKREST_CMD=/usr/bin/pgbackrest"}},
		{name: "empty values stay (pgBackRest says what it thinks)", env: map[string]string{"PGBACKREST_SPOOL_PATH": ""},
			want: []string{"PGBACKREST_SPOOL_PATH="}},
		{name: "spool path off every volume", env: with(s3, "PGBACKREST_SPOOL_PATH", "/var/spool/pgbackrest"),
			wantErr: "PGBACKREST_SPOOL_PATH=/var/spool/pgbackrest: pgBackRest option spool-path: /var/spool/pgbackrest is on no mounted volume"},
		{name: "CA file off every volume", env: with(s3, "PGBACKREST_REPO1_S3_CA_FILE", "/etc/ssl/certs/ca.crt"),
			wantErr: "pgBackRest option repo1-s3-ca-file: /etc/ssl/certs/ca.crt is on no mounted volume"},
		{name: "relative path", env: with(s3, "PGBACKREST_LOG_PATH", "log"),
			wantErr: `pgBackRest option log-path: "log" is not an absolute path`},
		{name: "an unknown path option", env: with(s3, "PGBACKREST_DB_PATH", "/home/postgres/pgdata/pgroot/data"),
			wantErr: "pgBackRest option db-path is not one pgloop knows to be a path or not"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PgBackRestEnv(tc.env, h)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("env:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestPgBackRestPathsKnown checks the table against pgBackRest itself when
// it is installed: every option of its help whose name ends in -path, -file
// or config is listed (in its indexed form).
func TestPgBackRestPathsKnown(t *testing.T) {
	options := pgBackRestHelpOptions(t)
	for _, o := range options {
		if !strings.HasSuffix(o, "-path") && !strings.HasSuffix(o, "-file") && !strings.HasSuffix(o, "config") {
			continue
		}
		key := strings.ToUpper(strings.ReplaceAll(o, "-", "_"))
		for _, p := range []string{"PG_", "REPO_"} {
			if strings.HasPrefix(key, p) {
				key = strings.TrimSuffix(p, "_") + "<n>_" + strings.TrimPrefix(key, p)
			}
		}
		if _, ok := pgBackRestPaths[key]; !ok {
			t.Errorf("pgBackRest option %s (%s) is not in pgBackRestPaths", o, key)
		}
	}
}

// pgBackRestHelpOptions lists the options of pgBackRest's commands from its
// help, without --; the test fails when pgBackRest is not installed.
func pgBackRestHelpOptions(t *testing.T) []string {
	t.Helper()
	const bin = "/usr/bin/pgbackrest"
	requireInstalled(t, bin)
	var options []string
	for _, cmd := range []string{"archive-get", "archive-push", "backup", "check", "expire", "info", "restore", "server", "stanza-create", "verify", "repo-get", "repo-ls"} {
		out, err := exec.Command(bin, "help", cmd).Output()
		if err != nil {
			t.Fatalf("pgbackrest help %s: %v", cmd, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "--") {
				options = append(options, strings.TrimPrefix(f[0], "--"))
			}
		}
	}
	if len(options) == 0 {
		t.Fatal("no option in pgBackRest's help")
	}
	slices.Sort(options)
	return slices.Compact(options)
}
