package e2e

import (
	"context"
	"encoding/xml"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestServiceFields runs zalando's Service fields on real PostgreSQL and
// the plane's kube-apiserver, which allocates node ports for real: the
// master Service a NodePort on the port the spec names, the replica
// Service a NodePort on one the apiserver chose (over the load balancer
// the spec also asks for), the master pooler's a LoadBalancer, the
// replica pooler's a NodePort, each with serviceAnnotations and its role's
// annotations over them. Then edits of a running cluster, each made to
// the Services in place with no pod replaced and no switchover: an
// allocated port kept across NodePort -> LoadBalancer and when the spec
// stops naming a port, ClusterIP dropping it, a named port another Service
// holds reported in the status until that Service goes, then taken.
func TestServiceFields(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "svcfields", []string{ns})
	ctx := Context(t, 10*time.Minute)
	const (
		name        = "svc"
		masterPort  = int32(30432)
		blockerName = "holds-a-node-port"
	)
	ranges := []string{"10.0.0.0/8"}
	services := env.Kube.CoreV1().Services(ns)

	// A Service of someone else's that holds a node port, for the
	// cluster to ask for later.
	blocker, err := services.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: blockerName},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "none"},
			Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	takenPort := blocker.Spec.Ports[0].NodePort

	began := time.Now()
	env.CreateCluster(t, ns, name, 2, OnProcessNode, func(pg *v1.Postgresql) {
		s := &pg.Spec
		// Two instances: the replica pooler's PgBouncer starts once it
		// reaches a replica.
		s.EnableConnectionPooler, s.EnableReplicaConnectionPooler = ptr.To(true), ptr.To(true)
		s.ConnectionPooler = &v1.ConnectionPooler{NumberOfInstances: ptr.To[int32](1)}
		s.AllowedSourceRanges = ranges
		s.ServiceAnnotations = map[string]string{"example.com/team": "payments", "example.com/dns": "db.example.com"}
		s.MasterServiceAnnotations = map[string]string{"example.com/dns": "rw.example.com"}
		s.ReplicaServiceAnnotations = map[string]string{"example.com/dns": "ro.example.com", "example.com/replica": "yes"}
		s.EnableMasterNodePort, s.MasterNodePort = ptr.To(true), ptr.To(masterPort)
		s.EnableReplicaNodePort, s.EnableReplicaLoadBalancer = ptr.To(true), ptr.To(true)
		s.EnableMasterPoolerLoadBalancer = ptr.To(true)
		s.EnableReplicaPoolerNodePort = ptr.To(true)
	})
	pg := inEffect(ctx, t, ns, name, 2)
	t.Logf("Running with its Services after %v", time.Since(began).Round(time.Millisecond))
	primary := pg.Status.Primary
	pods := podUIDs(ctx, t, ns, name)
	sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hash := cluster.PodTemplateHash(sts)

	rw := map[string]string{"example.com/team": "payments", "example.com/dns": "rw.example.com"}
	ro := map[string]string{"example.com/team": "payments", "example.com/dns": "ro.example.com", "example.com/replica": "yes"}
	masterName, replicaName := cluster.MasterServiceName(name), cluster.ReplicaServiceName(name)
	poolerName, poolerReplName := cluster.PoolerName(name, cluster.RoleMaster), cluster.PoolerName(name, cluster.RoleReplica)
	var replicaPort, poolerReplPort int32

	t.Run("the Services the apiserver stored", func(t *testing.T) {
		get := func(n string) *corev1.Service {
			t.Helper()
			s, err := services.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s, ports %+v, ranges %q, annotations %v", n, s.Spec.Type, s.Spec.Ports, s.Spec.LoadBalancerSourceRanges, s.Annotations)
			return s
		}
		m := get(masterName)
		if m.Spec.Type != corev1.ServiceTypeNodePort || m.Spec.Ports[0].NodePort != masterPort {
			t.Errorf("master: %s on node port %d, want NodePort %d", m.Spec.Type, m.Spec.Ports[0].NodePort, masterPort)
		}
		r := get(replicaName)
		replicaPort = r.Spec.Ports[0].NodePort
		if r.Spec.Type != corev1.ServiceTypeNodePort || replicaPort < 30000 || replicaPort > 32767 || r.Spec.LoadBalancerSourceRanges != nil {
			t.Errorf("replica: %s on node port %d with ranges %q, want NodePort (over the load balancer) on a port the apiserver chose", r.Spec.Type, replicaPort, r.Spec.LoadBalancerSourceRanges)
		}
		p := get(poolerName)
		if p.Spec.Type != corev1.ServiceTypeLoadBalancer || !slices.Equal(p.Spec.LoadBalancerSourceRanges, ranges) {
			t.Errorf("master pooler: %s with ranges %q, want LoadBalancer with %q", p.Spec.Type, p.Spec.LoadBalancerSourceRanges, ranges)
		}
		pr := get(poolerReplName)
		poolerReplPort = pr.Spec.Ports[0].NodePort
		if pr.Spec.Type != corev1.ServiceTypeNodePort || poolerReplPort == 0 {
			t.Errorf("replica pooler: %s on node port %d, want NodePort", pr.Spec.Type, poolerReplPort)
		}
		for _, c := range []struct {
			s    *corev1.Service
			want map[string]string
		}{{m, rw}, {p, rw}, {r, ro}, {pr, ro}} {
			if !maps.Equal(c.s.Annotations, c.want) {
				t.Errorf("%s: annotations %v, want %v", c.s.Name, c.s.Annotations, c.want)
			}
		}
		if c := get(cluster.ConfigServiceName(name)); len(c.Annotations) != 0 {
			t.Errorf("config Service: annotations %v, want none", c.Annotations)
		}
	})

	// edit patches the cluster, waits until it runs the edit and svc is
	// as want says, and logs how long that took.
	edit := func(t *testing.T, patch, svc, what string, want func(*corev1.Service) bool) *corev1.Service {
		t.Helper()
		at := time.Now()
		edited, err := env.MergePatchCluster(ctx, ns, name, patch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitCluster(ctx, ns, name, "Running the edit", func(pg *v1.Postgresql) bool {
			return pg.Status.ObservedGeneration >= edited.Generation && pg.Status.State == fsm.Running
		}); err != nil {
			t.Fatal(err)
		}
		s := waitService(ctx, t, ns, svc, what, want)
		t.Logf("%s: %s %v after the edit (%s, node port %d)", patch, what, time.Since(at).Round(time.Millisecond), s.Spec.Type, s.Spec.Ports[0].NodePort)
		return s
	}

	t.Run("NodePort to LoadBalancer keeps the allocated port", func(t *testing.T) {
		edit(t, `{"spec":{"enableReplicaNodePort":false}}`, replicaName, "a LoadBalancer on the same node port", func(s *corev1.Service) bool {
			return s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.Ports[0].NodePort == replicaPort &&
				slices.Equal(s.Spec.LoadBalancerSourceRanges, ranges)
		})
	})

	t.Run("a port no longer named stays", func(t *testing.T) {
		before, err := services.Get(ctx, masterName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := edit(t, `{"spec":{"masterNodePort":null}}`, masterName, "still NodePort", func(s *corev1.Service) bool {
			return s.Spec.Type == corev1.ServiceTypeNodePort
		})
		if s.Spec.Ports[0].NodePort != masterPort {
			t.Errorf("node port %d, want %d kept", s.Spec.Ports[0].NodePort, masterPort)
		}
		if s.ResourceVersion != before.ResourceVersion {
			t.Errorf("the Service was written (resourceVersion %s, was %s): nothing of it changed", s.ResourceVersion, before.ResourceVersion)
		}
	})

	t.Run("ClusterIP drops the node port", func(t *testing.T) {
		edit(t, `{"spec":{"enableReplicaPoolerNodePort":false,"enableMasterNodePort":false}}`, poolerReplName, "ClusterIP", func(s *corev1.Service) bool {
			return s.Spec.Type == corev1.ServiceTypeClusterIP && s.Spec.Ports[0].NodePort == 0 && s.Spec.ExternalTrafficPolicy == ""
		})
		waitService(ctx, t, ns, masterName, "ClusterIP", func(s *corev1.Service) bool {
			return s.Spec.Type == corev1.ServiceTypeClusterIP && s.Spec.Ports[0].NodePort == 0
		})
	})

	t.Run("a taken port is reported until it is free", func(t *testing.T) {
		at := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name,
			fmt.Sprintf(`{"spec":{"enableMasterNodePort":true,"masterNodePort":%d}}`, takenPort)); err != nil {
			t.Fatal(err)
		}
		got, err := env.WaitCluster(ctx, ns, name, "the taken port in the status", func(pg *v1.Postgresql) bool {
			return strings.Contains(pg.Status.Message, "provided port is already allocated")
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v after the edit: %s %s: %q", time.Since(at).Round(time.Millisecond), got.Status.State, got.Status.Reason, got.Status.Message)
		if !strings.Contains(got.Status.Message, masterName) || !strings.Contains(got.Status.Message, fmt.Sprint(takenPort)) {
			t.Errorf("message %q does not name the Service and the port", got.Status.Message)
		}
		freed := time.Now()
		if err := services.Delete(ctx, blockerName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitService(ctx, t, ns, masterName, "NodePort on the freed port", func(s *corev1.Service) bool {
			return s.Spec.Type == corev1.ServiceTypeNodePort && s.Spec.Ports[0].NodePort == takenPort
		})
		inEffect(ctx, t, ns, name, 2)
		t.Logf("the port taken %v after it was freed", time.Since(freed).Round(time.Millisecond))
	})

	t.Run("annotations changed in place", func(t *testing.T) {
		edit(t, `{"spec":{"masterServiceAnnotations":{"example.com/dns":"primary.example.com"}}}`, poolerName, "the new annotation", func(s *corev1.Service) bool {
			return s.Annotations["example.com/dns"] == "primary.example.com" && s.Annotations["example.com/team"] == "payments"
		})
		waitService(ctx, t, ns, masterName, "the new annotation", func(s *corev1.Service) bool {
			return s.Annotations["example.com/dns"] == "primary.example.com"
		})
	})

	t.Run("no pod replaced, no switchover", func(t *testing.T) {
		got := inEffect(ctx, t, ns, name, 2)
		if got.Status.Primary != primary {
			t.Errorf("primary %s, was %s", got.Status.Primary, primary)
		}
		samePods(ctx, t, ns, name, pods)
		sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := cluster.PodTemplateHash(sts); h != hash {
			t.Errorf("pod template hash %s, was %s", h, hash)
		}
	})
}

// waitService waits until the Service ns/name is as want says.
func waitService(ctx context.Context, t *testing.T, ns, name, what string, want func(*corev1.Service) bool) *corev1.Service {
	t.Helper()
	var s *corev1.Service
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		s, err = env.Kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && want(s), nil
	})
	if err != nil {
		if s != nil {
			t.Fatalf("service %s not %s: %s, node port %d, ranges %q, annotations %v", name, what, s.Spec.Type, s.Spec.Ports[0].NodePort, s.Spec.LoadBalancerSourceRanges, s.Annotations)
		}
		t.Fatalf("service %s not %s: %v", name, what, err)
	}
	return s
}

// TestLogicalBackupRetention runs zalando's logical backup retention
// against the plane's S3 store: the CronJob's container gets
// LOGICAL_BACKUP_S3_RETENTION_TIME from spec.logicalBackupRetention (over
// the operator's --logical-backup-s3-retention-time), and what the image's
// dump.sh does with it after an upload, run from the test with the
// container's environment and the aws tool (kwok plays the job's pod: no
// container runs the image here), deletes the cluster's dumps last
// modified before the day the retention names, all but the newest of
// those, and keeps the newer ones. The old dumps are made old by their
// objects' modification times, which the script keys on (their names,
// epochs, play no part). An edit of the retention updates the CronJob in
// place, and the next run deletes by the new one.
func TestLogicalBackupRetention(t *testing.T) {
	ns := env.Namespace(t)
	if env.Plane.ObjectStore == nil {
		t.Fatal("the plane runs no object store (testbed.Options.ObjectStore)")
	}
	aws, err := exec.LookPath("aws")
	if err != nil {
		t.Fatalf("the aws command line tool, which the logical backup image runs, is missing: %v", err)
	}
	store := env.Plane.ObjectStore
	const (
		name  = "retained"
		creds = "logical-backup-creds"
	)
	if _, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: creds},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": store.S3.AccessKey, "AWS_SECRET_ACCESS_KEY": store.S3.SecretKey},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.StartLabeller(t, ns)
	env.StartOperator(t, "retention", []string{ns},
		"--logical-backup-s3-bucket="+store.S3.Bucket, "--logical-backup-s3-endpoint="+store.S3.URL(),
		"--logical-backup-s3-region="+store.S3.Region, "--logical-backup-s3-sse=", "--logical-backup-env-secret="+creds,
		"--logical-backup-s3-retention-time=1 year")
	ctx := Context(t, 5*time.Minute)
	env.CreateCluster(t, ns, name, 1, func(pg *v1.Postgresql) {
		pg.Spec.EnableLogicalBackup = true
		pg.Spec.LogicalBackupSchedule = "15 3 1 1 *" // never during the test
		pg.Spec.LogicalBackupRetention = "3 months"
	})
	env.MustState(ctx, t, ns, name, fsm.Running)
	cronJobs := env.Kube.BatchV1().CronJobs(ns)
	cj, err := cronJobs.Get(ctx, cluster.LogicalBackupJobName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jobEnv := func(cj *batchv1.CronJob) map[string]string {
		out := map[string]string{}
		for _, e := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env {
			out[e.Name] = e.Value
		}
		return out
	}
	vars := jobEnv(cj)
	if r := vars["LOGICAL_BACKUP_S3_RETENTION_TIME"]; r != "3 months" {
		t.Fatalf("LOGICAL_BACKUP_S3_RETENTION_TIME %q, want the spec's 3 months over the operator's 1 year", r)
	}
	dir := vars["LOGICAL_BACKUP_S3_BUCKET_PREFIX"] + "/" + vars["SCOPE"] + vars["LOGICAL_BACKUP_S3_BUCKET_SCOPE_SUFFIX"] + "/logical_backups/"

	// Dumps of earlier runs, named by their epochs as the image names
	// them, and as old as their names say.
	now := time.Now()
	ages := []int{200, 120, 95, 40, 10, 1} // days
	times := map[string]time.Time{}
	var keys []string
	for _, days := range ages {
		at := now.AddDate(0, 0, -days)
		key := fmt.Sprintf("%s%d.sql.gz", dir, at.Unix())
		if status, body, err := store.S3.Do(ctx, nil, "PUT", "/"+store.S3.Bucket+"/"+key, []byte("dump of "+at.Format(time.DateOnly))); err != nil || status != 200 {
			t.Fatalf("put %s: %d %v %s", key, status, err, body)
		}
		times[key] = at
		keys = append(keys, key)
	}
	if err := store.SetModTimes(ctx, store.S3.Bucket, times); err != nil {
		t.Fatal(err)
	}

	// runJob uploads a dump and deletes the outdated ones as the image's
	// dump.sh does with the job's environment (its upload, then
	// aws_delete_outdated), and returns the dumps left.
	awsConfig := filepath.Join(t.TempDir(), "aws-config")
	if err := os.WriteFile(awsConfig, []byte("[default]\ns3 =\n    addressing_style = path\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runJob := func(t *testing.T, vars map[string]string) []string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "bash", "-c", jobScript)
		cmd.Dir = t.TempDir()
		// The credentials as the env Secret gives them, the store's CA,
		// and path-style addresses (the store's certificate names no
		// bucket hosts).
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(aws)+":"+os.Getenv("PATH"),
			"AWS_ACCESS_KEY_ID="+store.S3.AccessKey, "AWS_SECRET_ACCESS_KEY="+store.S3.SecretKey,
			"AWS_CA_BUNDLE="+store.S3.CAFile, "AWS_CONFIG_FILE="+awsConfig)
		for k, v := range vars {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		t.Logf("the job's upload and cleanup:\n%s", out)
		if err != nil {
			t.Fatalf("the job's upload and cleanup: %v", err)
		}
		status, body, err := store.S3.Do(ctx, nil, "GET", "/"+store.S3.Bucket+"?prefix="+url.QueryEscape(dir), nil)
		if err != nil || status != 200 {
			t.Fatalf("list: %d %v %s", status, err, body)
		}
		var list struct{ Contents []struct{ Key string } }
		if err := xml.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, o := range list.Contents {
			left = append(left, o.Key)
		}
		return left
	}
	// uploaded is the dump a run added: the one key not in keys.
	uploaded := func(t *testing.T, left []string) string {
		t.Helper()
		for _, k := range left {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
				return k
			}
		}
		t.Fatalf("no new dump in %q", left)
		return ""
	}

	t.Run("3 months: the older dumps go, the newest of them stays", func(t *testing.T) {
		left := runJob(t, vars)
		fresh := uploaded(t, left)
		// 200 and 120 days old are deleted; 95 days, the newest of the
		// outdated, is spared, as dump.sh spares the last it lists.
		want := []string{keys[2], keys[3], keys[4], keys[5], fresh}
		slices.Sort(want)
		if !slices.Equal(left, want) {
			t.Errorf("left %q, want %q", left, want)
		}
	})

	t.Run("an edit of the retention: the CronJob updated in place, the next run keeps a week", func(t *testing.T) {
		at := time.Now()
		edited, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"logicalBackupRetention":"1 week"}}`)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitCluster(ctx, ns, name, "Running the edit", func(pg *v1.Postgresql) bool {
			return pg.Status.ObservedGeneration >= edited.Generation && pg.Status.State == fsm.Running
		}); err != nil {
			t.Fatal(err)
		}
		var got *batchv1.CronJob
		if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err = cronJobs.Get(ctx, cj.Name, metav1.GetOptions{})
			return err == nil && jobEnv(got)["LOGICAL_BACKUP_S3_RETENTION_TIME"] == "1 week", nil
		}); err != nil {
			t.Fatalf("the CronJob's retention %q, want 1 week", jobEnv(got)["LOGICAL_BACKUP_S3_RETENTION_TIME"])
		}
		t.Logf("CronJob updated %v after the edit", time.Since(at).Round(time.Millisecond))
		if got.UID != cj.UID {
			t.Errorf("the CronJob was replaced (uid %s, was %s)", got.UID, cj.UID)
		}
		left := runJob(t, jobEnv(got))
		fresh := uploaded(t, left)
		// 95 and 40 days old go; 10 days old, the newest outdated, stays.
		want := []string{keys[4], keys[5], keys[6], fresh}
		slices.Sort(want)
		if !slices.Equal(left, want) {
			t.Errorf("left %q, want %q", left, want)
		}
	})
}

// jobScript is what the logical backup image's dump.sh does with S3 after
// its dump: upload it as <epoch>.sql.gz, then, with a retention, take the
// day `date -d "RETENTION ago"` names, list the cluster's dumps whose
// LastModified is not after it, spare the last listed, and delete the rest.
// Written from dump.sh's behaviour for the test, not copied.
const jobScript = `set -euo pipefail
endpoint=(--endpoint-url="$LOGICAL_BACKUP_S3_ENDPOINT" --region="$LOGICAL_BACKUP_S3_REGION")
dir="$LOGICAL_BACKUP_S3_BUCKET_PREFIX/$SCOPE$LOGICAL_BACKUP_S3_BUCKET_SCOPE_SUFFIX/logical_backups/"
echo "a dump of $SCOPE" | aws s3 cp - "s3://$LOGICAL_BACKUP_S3_BUCKET/$dir$(date +%s).sql.gz" "${endpoint[@]}"
if [ -z "${LOGICAL_BACKUP_S3_RETENTION_TIME:-}" ]; then echo "no retention"; exit 0; fi
cutoff=$(date -d "$LOGICAL_BACKUP_S3_RETENTION_TIME ago" +%F)
aws s3api list-objects --no-paginate --output=text --prefix="$dir" --bucket="$LOGICAL_BACKUP_S3_BUCKET" "${endpoint[@]}" \
  --query="Contents[?LastModified<='$cutoff'].[Key]" > outdated
sed -i '$d' outdated
echo "cutoff $cutoff: deleting $(wc -l < outdated)"
while read -r key; do
  aws s3api delete-object --bucket="$LOGICAL_BACKUP_S3_BUCKET" --key="$key" "${endpoint[@]}" >/dev/null
  echo "deleted $key"
done < outdated
`
