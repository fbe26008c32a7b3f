package archiving

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/indb"
	"github.com/pgloop/pgloop/pkg/observed"
	"github.com/pgloop/pgloop/pkg/patroni"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// source is a Source of fixed objects.
type source struct {
	mu       sync.Mutex
	clusters map[string]observed.Cluster
}

func (s *source) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.clusters {
		keys = append(keys, k)
	}
	return keys
}

func (s *source) Postgresql(key string) (*v1.Postgresql, bool) {
	objs, ok := s.Objects(key)
	return objs.Postgresql, ok
}

func (s *source) Objects(key string) (observed.Cluster, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	objs, ok := s.clusters[key]
	return objs, ok
}

// notifier counts notifications by key.
type notifier struct {
	mu    sync.Mutex
	calls map[string]int
}

func (n *notifier) Notify(key, signal string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if signal != SignalArchiving {
		panic(signal)
	}
	n.calls[key]++
}

func (n *notifier) count(key string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[key]
}

// clusterWith returns a cluster whose pod pg-0 leads, its PostgreSQL at
// addr (nothing listens there), and the superuser's Secret at version.
func clusterWith(name string, leader bool, version string) observed.Cluster {
	pg := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "u1"},
		Spec: v1.PostgresqlSpec{DockerImage: cluster.DefaultArchivingImage}}
	role := "replica"
	if leader {
		role = "master"
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-0", Annotations: map[string]string{
		patroni.StatusAnnotation: `{"conn_url":"postgres://127.0.0.1:1/postgres","api_url":"http://127.0.0.1:1/patroni","role":"` + role + `","state":"running"}`,
	}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cluster.SecretName(cluster.SuperuserName, name), ResourceVersion: version}}
	return observed.Cluster{Postgresql: pg, Pods: []*corev1.Pod{pod}, Secrets: []*corev1.Secret{secret}}
}

func TestCheckerRounds(t *testing.T) {
	clock, advance := testClock()

	src := &source{clusters: map[string]observed.Cluster{
		"ns/a":       clusterWith("a", true, "1"),
		"ns/replica": clusterWith("replica", false, "1"),
	}}
	offCluster := clusterWith("off", true, "1")
	offCluster.Postgresql.Spec.Backup = &v1.Backup{Enabled: new(bool)}
	src.clusters["ns/off"] = offCluster

	// The primaries are reached through pkg/indb, which reads the
	// superuser's Secret from the API.
	var reads []string
	var readsMu sync.Mutex
	kube := fake.NewClientset()
	kube.PrependReactor("get", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		readsMu.Lock()
		defer readsMu.Unlock()
		get := a.(k8stesting.GetAction)
		reads = append(reads, get.GetNamespace()+"/"+get.GetName())
		s := src.clusters["ns/a"].Secrets[0].DeepCopy()
		s.Data = map[string][]byte{cluster.SecretPasswordKey: []byte("pw")}
		return true, s, nil
	})
	primaries := indb.New(kube, nil, indb.Options{SQL: pgsql.Options{ConnectTimeout: time.Second}})
	n := &notifier{calls: map[string]int{}}
	p := New(src, primaries, n, testOptions(clock))
	round := func() { roundOf(p) }

	// The one cluster that archives and has a primary is asked; nothing
	// listens there, so its report says why it could not be.
	round()
	objs, _ := p.Objects("ns/a")
	if objs.Archiving == nil || !strings.HasPrefix(objs.Archiving.Message, "could not ask the primary: ") || objs.Archiving.Failing {
		t.Fatalf("report %+v, want one saying the primary could not be asked", objs.Archiving)
	}
	if n.count("ns/a") != 1 {
		t.Errorf("notified %d times, want 1", n.count("ns/a"))
	}
	for _, key := range []string{"ns/replica", "ns/off"} {
		if objs, _ := p.Objects(key); objs.Archiving != nil || n.count(key) != 0 {
			t.Errorf("%s: report %+v, %d notifications: want none (no primary, archiving off)", key, objs.Archiving, n.count(key))
		}
	}

	// Not due again before the period; then due, with the same words:
	// nothing new to publish, and the Secret is not read again.
	advance(10 * time.Second)
	round()
	advance(30 * time.Second)
	round()
	if n.count("ns/a") != 1 {
		t.Errorf("notified %d times for the same words, want 1", n.count("ns/a"))
	}
	if len(reads) != 1 {
		t.Errorf("secret read %d times (%v), want once while its version stays", len(reads), reads)
	}

	// A new version of the Secret is read again.
	c := src.clusters["ns/a"]
	c.Secrets = []*corev1.Secret{c.Secrets[0].DeepCopy()}
	c.Secrets[0].ResourceVersion = "2"
	src.mu.Lock()
	src.clusters["ns/a"] = c
	src.mu.Unlock()
	advance(30 * time.Second)
	round()
	if len(reads) != 2 {
		t.Errorf("secret read %d times after a new version, want 2", len(reads))
	}

	// A cluster deleted from the cache is forgotten.
	src.mu.Lock()
	delete(src.clusters, "ns/a")
	src.mu.Unlock()
	round()
	p.mu.Lock()
	_, kept := p.published["ns/a"]
	p.mu.Unlock()
	if kept {
		t.Error("the report of a cluster gone from the cache is kept")
	}
}

func TestWorthPublishing(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	at := func(d time.Duration, wal string, failing bool, msg string) *v1.ArchivingStatus {
		return &v1.ArchivingStatus{CheckedAt: metav1.NewTime(t0.Add(d)), LastArchivedWAL: wal, Failing: failing, Message: msg}
	}
	for _, tt := range []struct {
		name        string
		prev, next  *v1.ArchivingStatus
		wantPublish bool
	}{
		{"first", nil, at(0, "01", false, ""), true},
		{"same, soon", at(0, "01", false, ""), at(time.Minute, "01", false, ""), false},
		{"moved on, soon", at(0, "01", false, ""), at(time.Minute, "02", false, ""), false},
		{"moved on, a period later", at(0, "01", false, ""), at(5*time.Minute, "02", false, ""), true},
		{"same, a period later", at(0, "01", false, ""), at(10*time.Minute, "01", false, ""), false},
		{"starts failing", at(0, "01", false, ""), at(time.Second, "01", true, "HTTP 403"), true},
		{"other words", at(0, "01", true, "HTTP 403"), at(time.Second, "01", true, "unable to connect"), true},
		{"works again", at(0, "01", true, "HTTP 403"), at(time.Second, "02", false, ""), true},
	} {
		if got := worthPublishing(tt.prev, tt.next, 5*time.Minute); got != tt.wantPublish {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.wantPublish)
		}
	}
}

func TestReport(t *testing.T) {
	now := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	if r := report(&pgsql.Archiver{CurrentWAL: "000000010000000000000001"}, now); r.Failing || !strings.HasPrefix(r.Message, "no WAL segment archived yet") {
		t.Errorf("report of a primary that archived nothing yet: %+v", r)
	}
	r := report(&pgsql.Archiver{FailedCount: 3, LastFailedWAL: "000000010000000000000007", LastFailedTime: now, Ready: 4, WALBytes: 5 << 24}, now)
	if !r.Failing || r.Message != "archive_command failed for 000000010000000000000007 (3 failures); pgBackRest left no words in its spool yet (its asynchronous push may still be trying)" ||
		r.WaitingSegments != 4 || r.WALBytes != 5<<24 || r.LastFailedTime == nil {
		t.Errorf("report %+v", r)
	}
	r = report(&pgsql.Archiver{FailedCount: 1, LastFailedTime: now, Errors: map[string]string{"global.error": "103\nunable to find a valid repository"}}, now)
	if r.Message != "[103] unable to find a valid repository" {
		t.Errorf("message %q, want the archiver's words", r.Message)
	}
	r = report(&pgsql.Archiver{ArchivedCount: 9, LastArchivedWAL: "000000010000000000000009", LastArchivedTime: now.Add(time.Second), FailedCount: 1, LastFailedTime: now,
		Errors: map[string]string{"global.error": "stale"}}, now)
	if r.Failing || r.Message != "" || r.LastArchivedWAL != "000000010000000000000009" {
		t.Errorf("report %+v, want archiving, no words (a success came after the failure)", r)
	}
}

// primaries is a Primaries whose archiver always works and whose backup
// run says what report says, counting the reads of the run.
type primaries struct {
	mu     sync.Mutex
	report v1.BackupReport
	reads  int
}

func (p *primaries) Archiver(context.Context, observed.Cluster, []string) (*pgsql.Archiver, error) {
	return &pgsql.Archiver{ArchivedCount: 1, LastArchivedWAL: "000000010000000000000003"}, nil
}

func (p *primaries) ReadBackup(_ context.Context, _ observed.Cluster, run *v1.BackupRun, now time.Time) (*v1.BackupReport, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	r := p.report
	r.ID, r.CheckedAt = run.ID, metav1.NewTime(now)
	return &r, nil
}

func (p *primaries) Forget(string) {}

func (p *primaries) set(r v1.BackupReport) (reads int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.report = r
	return p.reads
}

// TestCheckerFollowsBackupRun: the checks read the run status names and
// start nothing. A run the primary shows no trace of is news at every
// check (the machine asks for its start again) and is read again within
// notStartedRecheck, not the period, as is one whose backup ended (its
// verify or drill may follow); a run status no longer names is not read.
func TestCheckerFollowsBackupRun(t *testing.T) {
	clock, advance := testClock()

	c := clusterWith("a", true, "1")
	c.Postgresql.Status.Backup = &v1.BackupStatus{Running: &v1.BackupRun{ID: "20261203-060000-full", Type: v1.BackupFull}}
	src := &source{clusters: map[string]observed.Cluster{"ns/a": c}}
	prim := &primaries{report: v1.BackupReport{NotStarted: true}}
	n := &notifier{calls: map[string]int{}}
	p := New(src, prim, n, testOptions(clock))
	round := func() { roundOf(p) }
	backup := func() *v1.BackupReport {
		objs, _ := p.Objects("ns/a")
		return objs.Backup
	}

	round()
	if b := backup(); b == nil || !b.NotStarted {
		t.Fatalf("report %+v, want the run not started", b)
	}
	first := n.count("ns/a")
	// Read again after notStartedRecheck, not the period: news again.
	advance(notStartedRecheck)
	round()
	if got := prim.set(v1.BackupReport{}); got != 2 {
		t.Fatalf("run read %d times, want 2 (again after %s)", got, notStartedRecheck)
	}
	if n.count("ns/a") <= first {
		t.Errorf("a run still not started notified nothing: the machine would not ask for its start again")
	}
	// Under way: read at the period only.
	advance(notStartedRecheck)
	round()
	if b := backup(); b == nil || b.NotStarted || b.Done {
		t.Fatalf("report %+v, want the run under way", b)
	}
	advance(notStartedRecheck)
	round()
	if got := prim.set(v1.BackupReport{Done: true}); got != 3 {
		t.Errorf("run under way read %d times within the period, want 3", got)
	}
	advance(30 * time.Second)
	round()
	if b := backup(); b == nil || !b.Done {
		t.Fatalf("report %+v, want the run ended", b)
	}
	// Its backup ended, status still names it (its verify or drill may
	// follow): read again within notStartedRecheck.
	advance(notStartedRecheck)
	round()
	if got := prim.set(v1.BackupReport{}); got != 5 {
		t.Errorf("run read %d times, want 5: again %s after its backup ended", got, notStartedRecheck)
	}
	// Status no longer names it: not read again.
	c.Postgresql = c.Postgresql.DeepCopy()
	c.Postgresql.Status.Backup.Running = nil
	src.mu.Lock()
	src.clusters["ns/a"] = c
	src.mu.Unlock()
	advance(30 * time.Second)
	round()
	if got := prim.set(v1.BackupReport{}); got != 5 {
		t.Errorf("run read %d times once status no longer names it, want 5", got)
	}
}

// testClock is a clock the test moves on.
func testClock() (now func() time.Time, advance func(time.Duration)) {
	t := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now = func() time.Time { mu.Lock(); defer mu.Unlock(); return t }
	advance = func(d time.Duration) { mu.Lock(); t = t.Add(d); mu.Unlock() }
	return now, advance
}

// testOptions are the checks' options of the tests: a default repository,
// checks every 30 s, a report that only moved on published every 5 min.
func testOptions(now func() time.Time) Options {
	return Options{
		Build: cluster.Options{Backup: &v1.BackupS3{Endpoint: "127.0.0.1:9000", Bucket: "b", SecretName: "s"}},
		Now:   now, Period: 30 * time.Second, StatusPeriod: 5 * time.Minute,
	}
}

// roundOf runs one round of p's checks to their end.
func roundOf(p *Checker) {
	var wg sync.WaitGroup
	p.round(context.Background(), &wg)
	wg.Wait()
}

// TestCheckerBacksOffAStartThatKeepsFailing: a run the primary keeps
// showing no trace of is read again within notStartedRecheck for
// quickRecheckFor only, then once a period: a start that keeps failing
// is asked again no more often than the checks run.
func TestCheckerBacksOffAStartThatKeepsFailing(t *testing.T) {
	clock, advance := testClock()
	c := clusterWith("a", true, "1")
	c.Postgresql.Status.Backup = &v1.BackupStatus{Running: &v1.BackupRun{ID: "20261203-060000-full", Type: v1.BackupFull}}
	src := &source{clusters: map[string]observed.Cluster{"ns/a": c}}
	prim := &primaries{report: v1.BackupReport{NotStarted: true}}
	p := New(src, prim, &notifier{calls: map[string]int{}}, testOptions(clock))
	reads := func() int {
		prim.mu.Lock()
		defer prim.mu.Unlock()
		return prim.reads
	}
	// The first minute: every notStartedRecheck.
	for elapsed := time.Duration(0); elapsed < quickRecheckFor; elapsed += notStartedRecheck {
		roundOf(p)
		advance(notStartedRecheck)
	}
	quick := reads()
	if want := int(quickRecheckFor / notStartedRecheck); quick != want {
		t.Errorf("read %d times in the first %s, want %d", quick, quickRecheckFor, want)
	}
	// Then once a period (30 s): two more in a minute of rounds.
	for range int(time.Minute / notStartedRecheck) {
		roundOf(p)
		advance(notStartedRecheck)
	}
	if got := reads() - quick; got != 2 {
		t.Errorf("read %d times in the minute after, want 2 (once a period)", got)
	}
	// A new wait (the backup ended, its verify to start): quick again.
	prim.set(v1.BackupReport{Done: true})
	advance(30 * time.Second)
	roundOf(p)
	before := reads()
	advance(notStartedRecheck)
	roundOf(p)
	if reads() != before+1 {
		t.Errorf("not read again %s after a new wait", notStartedRecheck)
	}
}
