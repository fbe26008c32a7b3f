package kubelet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/kubelet"
	"github.com/pgloop/pgloop/test/testbed"
)

const (
	// archiveDeadline bounds TestKubeletArchive: a plane (~5 s), a build,
	// one bootstrap, one archived segment and a stop.
	archiveDeadline = 3 * time.Minute
	// archivedWithin is how long PostgreSQL has to run archive_command
	// for a switched segment (it runs at once; a failing command is
	// retried after 60 s, which this deadline would show).
	archivedWithin = 30 * time.Second
	// caMount is where the pod mounts its CA Secret.
	caMount = "/etc/pgbackrest/ca"
	// archiveSpool is PGBACKREST_SPOOL_PATH, on the data volume.
	archiveSpool = cluster.DataMountPath + "/pgbackrest/spool"
)

// archiveCommand stands for `pgbackrest archive-push "%p"`: it shows what
// pgBackRest would read, from archive_command's own environment (the CA
// file through PGBACKREST_REPO1_S3_CA_FILE, the variables), in
// PGBACKREST_SPOOL_PATH, and records the segment (%f). It always succeeds.
const archiveCommand = `d="$PGBACKREST_SPOOL_PATH"; mkdir -p "$d" && env | sort > "$d/env" && cat "$PGBACKREST_REPO1_S3_CA_FILE" > "$d/seen.tmp" && mv "$d/seen.tmp" "$d/seen" && echo "%f" >> "$d/archived"; exit 0`

// TestKubeletArchive runs a one-instance cluster whose Spilo container
// carries pgBackRest's configuration as pgloop will: PGBACKREST_* variables
// (credentials from a Secret, the CA file on a Secret volume, paths on the
// data volume) and an archive_command in SPILO_CONFIGURATION. The pod waits
// in ContainerCreating until the CA Secret exists, starts when it is
// created, and a switched WAL segment runs archive_command with the
// container's pgBackRest environment, its local paths translated: it reads
// the Secret's content through PGBACKREST_REPO1_S3_CA_FILE.
func TestKubeletArchive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), archiveDeadline)
	defer cancel()
	plane, k, step := startKubeletPlane(ctx, t)
	cs := plane.Client
	root := k.root

	ns := plane.Namespace(t)
	credentials, caSecret := clusterNm+"-s3", clusterNm+"-s3-ca"
	const s3Key, caPEM = "AKIA-TEST", "-----BEGIN CERTIFICATE-----\ntest CA\n-----END CERTIFICATE-----\n"
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: credentials},
		Data:       map[string][]byte{"key": []byte(s3Key), "secret": []byte("s3-secret")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	repoPath := "/pgloop/" + ns + "/" + clusterNm
	pg := createClusterWith(ctx, t, cs, ns, 1, func(sts *appsv1.StatefulSet) {
		withPgBackRest(t, sts, credentials, caSecret, repoPath)
	})
	pod := cluster.PodName(pg.Name, 0)

	// The CA Secret does not exist yet: the pod waits, naming it.
	want := fmt.Sprintf("Secret %s/%s not found", ns, caSecret)
	if _, err := testbed.WaitForPod(ctx, cs, ns, pod, func(p *corev1.Pod) (bool, error) {
		s := containerStatus(p)
		return s != nil && s.State.Waiting != nil && s.State.Waiting.Reason == kubelet.ReasonContainerCreating &&
			strings.Contains(s.State.Waiting.Message, want), nil
	}); err != nil {
		t.Fatal(k.failure(err))
	}
	step("%s waits in %s: %q", pod, kubelet.ReasonContainerCreating, want)
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: caSecret},
		Data:       map[string][]byte{"ca.crt": []byte(caPEM)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	ready, err := testbed.WaitForPod(ctx, cs, ns, pod, testbed.PodReady)
	if err != nil {
		t.Fatal(k.failure(err))
	}
	step("Secret %s created: %s Ready %v later", caSecret, pod, time.Since(created).Round(time.Millisecond))

	// The Secret's file: the kubelet's, in postgres's group (the pod's
	// fsGroup), defaultMode 0400 plus the group read fsGroup adds.
	caHost := filepath.Join(root, "pods", string(ready.UID), "volumes", "s3-ca", "ca.crt")
	fi, err := os.Stat(caHost)
	if err != nil {
		t.Fatal(err)
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o440 || st.Uid != 0 || strconv.Itoa(int(st.Gid)) != pgUser.Gid {
		t.Errorf("%s: mode %v, owner %d:%d; want 0440 root:%s", caHost, fi.Mode().Perm(), st.Uid, st.Gid, pgUser.Gid)
	}

	// A WAL segment switched: archive_command runs with the container's
	// pgBackRest environment.
	segment := switchWAL(ctx, t, ready.Status.PodIP, superuserPassword(ctx, t, cs, ns))
	switched := time.Now()
	spool := filepath.Join(pvDir(ctx, t, cs, root, ready), strings.TrimPrefix(archiveSpool, cluster.DataMountPath))
	archived := filepath.Join(spool, "archived")
	for deadline := time.Now().Add(archivedWithin); ; time.Sleep(100 * time.Millisecond) {
		data, _ := os.ReadFile(archived)
		if slices.Contains(strings.Fields(string(data)), segment) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s not archived within %v (%s holds %q)", segment, archivedWithin, archived, data)
		}
	}
	step("segment %s archived %v after the switch", segment, time.Since(switched).Round(time.Millisecond))
	seen, err := os.ReadFile(filepath.Join(spool, "seen"))
	if err != nil {
		t.Fatal(err)
	}
	if string(seen) != caPEM {
		t.Errorf("archive_command read %q through PGBACKREST_REPO1_S3_CA_FILE, want the Secret's %q", seen, caPEM)
	}
	envData, err := os.ReadFile(filepath.Join(spool, "env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(envData), "\n") {
		if name, value, ok := strings.Cut(line, "="); ok {
			env[name] = value
		}
	}
	dataDir := filepath.Join(pvDir(ctx, t, cs, root, ready), "pgroot", "pgdata")
	for name, want := range map[string]string{
		"PGBACKREST_PG1_PATH":            dataDir,
		"PGBACKREST_SPOOL_PATH":          spool,
		"PGBACKREST_REPO1_S3_CA_FILE":    caHost,
		"PGBACKREST_REPO1_PATH":          repoPath, // in the bucket: as written
		"PGBACKREST_REPO1_S3_KEY":        s3Key,    // from the Secret
		"PGBACKREST_REPO1_S3_KEY_SECRET": "s3-secret",
		"PGBACKREST_STANZA":              clusterNm,
	} {
		if env[name] != want {
			t.Errorf("archive_command's %s = %q, want %q", name, env[name], want)
		}
	}
	// The rest of the container's environment is Spilo's configuration,
	// not PostgreSQL's.
	for _, name := range []string{"SPILO_CONFIGURATION", "PGPASSWORD_SUPERUSER", "PGROOT"} {
		if v, ok := env[name]; ok {
			t.Errorf("archive_command sees %s=%q: only PGBACKREST_* of the container's environment should reach it", name, v)
		}
	}
	step("archive_command read the CA Secret through PGBACKREST_REPO1_S3_CA_FILE and saw the translated paths")

	if err := k.stop(); err != nil {
		t.Fatal(err)
	}
	if left := processesOf(root); len(left) > 0 {
		t.Errorf("still running after the kubelet stopped: %s", strings.Join(left, "; "))
	}
}

// withPgBackRest gives the Spilo container of sts pgBackRest's
// configuration as pgloop will: a Secret volume with the repository's CA,
// PGBACKREST_* variables, and archiveCommand in SPILO_CONFIGURATION.
func withPgBackRest(t *testing.T, sts *appsv1.StatefulSet, credentials, caSecret, repoPath string) {
	t.Helper()
	spec := &sts.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "s3-ca", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: caSecret, DefaultMode: ptr.To[int32](0o400)},
	}})
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == cluster.ContainerName })
	if i < 0 {
		t.Fatalf("no container %s in the pod template", cluster.ContainerName)
	}
	c := &spec.Containers[i]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "s3-ca", MountPath: caMount, ReadOnly: true})
	secretRef := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: credentials}, Key: key}}
	}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "PGBACKREST_REPO1_TYPE", Value: "s3"},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_ENDPOINT", Value: "127.0.0.1:9000"},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_BUCKET", Value: "pgloop"},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_REGION", Value: "us-east-1"},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_URI_STYLE", Value: "path"},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_KEY", ValueFrom: secretRef("key")},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_KEY_SECRET", ValueFrom: secretRef("secret")},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_CA_FILE", Value: caMount + "/ca.crt"},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_PATH", Value: repoPath},
		corev1.EnvVar{Name: "PGBACKREST_STANZA", Value: clusterNm},
		corev1.EnvVar{Name: "PGBACKREST_PG1_PATH", Value: cluster.PGRoot + "/pgdata"},
		corev1.EnvVar{Name: "PGBACKREST_SPOOL_PATH", Value: archiveSpool},
		corev1.EnvVar{Name: "PGBACKREST_LOCK_PATH", Value: cluster.DataMountPath + "/pgbackrest/lock"},
		corev1.EnvVar{Name: "PGBACKREST_LOG_PATH", Value: cluster.DataMountPath + "/pgbackrest/log"},
		corev1.EnvVar{Name: "PGBACKREST_ARCHIVE_ASYNC", Value: "y"},
	)
	for j := range c.Env {
		if c.Env[j].Name != "SPILO_CONFIGURATION" {
			continue
		}
		var cfg map[string]any
		dec := json.NewDecoder(strings.NewReader(c.Env[j].Value))
		dec.UseNumber() // numbers as written
		if err := dec.Decode(&cfg); err != nil {
			t.Fatalf("SPILO_CONFIGURATION: %v", err)
		}
		pgSection, _ := cfg["postgresql"].(map[string]any)
		if pgSection == nil {
			pgSection = map[string]any{}
			cfg["postgresql"] = pgSection
		}
		params, _ := pgSection["parameters"].(map[string]any)
		if params == nil {
			params = map[string]any{}
			pgSection["parameters"] = params
		}
		params["archive_command"] = archiveCommand
		out, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.Env[j].Value = string(out)
		return
	}
	t.Fatal("the Spilo container has no SPILO_CONFIGURATION")
}

// switchWAL writes a little WAL on the PostgreSQL at ip and switches to a
// new segment; it returns the name of the segment switched out.
func switchWAL(ctx context.Context, t *testing.T, ip, password string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=prefer connect_timeout=5", ip, cluster.PostgresPort, cluster.SuperuserName))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE archive_probe (id int)"); err != nil {
		t.Fatal(err)
	}
	var segment string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment); err != nil {
		t.Fatal(err)
	}
	return segment
}
