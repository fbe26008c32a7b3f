package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// The upgrade suite (issue 33, part 4; docs/upgrading.md).
const (
	// upgradeFleet is how many clusters run while pgloop is upgraded.
	upgradeFleet = 100
	// upgradeBudget is every version's --max-rolling-clusters.
	upgradeBudget = 10
	// upgradeVersion is the version of the second build (its
	// pgloop_build_info); the first is the suite's build.
	upgradeVersion = "e2e-upgrade"
	// upgradeSpiloImage is the default Spilo image of the third version:
	// every cluster's pod template changes with it.
	upgradeSpiloImage = "ghcr.io/zalando/spilo-17:e2e-upgrade"
	// upgradeDeadline bounds the whole test.
	upgradeDeadline = 8 * time.Minute
)

// eventComponent is the source of pgloop's Events (pkg/operator's
// EventComponent; that package is not a dependency of this module).
const eventComponent = "pgloop"

// operatorVersion is one version of pgloop as its replicas run it: an
// image tag (the process node maps it to a binary, main_test.go) and the
// flags it adds to the suite's.
type operatorVersion struct {
	name string
	tag  string
	args []string
}

// handover is a change of the Lease's holder that a rolling update caused.
type handover struct {
	from, to string // replica names
	// took is from the SIGTERM of the leader until the Lease named
	// another holder, at.
	took time.Duration
	at   time.Time
}

// operatorRollout is how the operator's versions run: replicas behind one
// Lease, replaced by a rolling update (maxSurge 1, maxUnavailable 0).
type operatorRollout interface {
	// start runs the replicas at version v, and returns once one leads.
	start(t *testing.T, v operatorVersion)
	// rollTo replaces every replica by one of version v, one at a time:
	// a new replica, Ready, then an old one terminated (SIGTERM). onNewLeader
	// is called, once, as soon as a replica of v leads (h names it), while
	// the rolling update may not be over.
	rollTo(t *testing.T, v operatorVersion, onNewLeader func(h handover, metricsURL string)) []handover
	// leader returns the replica that holds the Lease and its /metrics URL.
	leader(t *testing.T) (name, metricsURL string)
	// leaseNamespace holds the Lease and its LeaderElection Events.
	leaseNamespace() string
}

// deploymentRollout runs the replicas as users do: manifests/operator's
// Deployment (DeployOperator), its pods on the process node with the
// image's binary. A version is an image tag and args; the rolling update
// is the Deployment controller's (the manifests keep its default strategy,
// 25% surge and unavailable: with 2 replicas, one new pod Ready before an
// old one is deleted), and the kubelet's SIGTERM makes the leader release
// the Lease.
type deploymentRollout struct {
	namespaces []string
	d          *OperatorDeployment
	// base is the container's args in the manifests, before the suite's
	// and the version's.
	base []string
}

// upgradeArgs are every version's flags after the manifests' own.
func upgradeArgs(v operatorVersion) []string {
	return append([]string{"--max-rolling-clusters", strconv.Itoa(upgradeBudget), "--log-level", "debug"}, v.args...)
}

func (r *deploymentRollout) start(t *testing.T, v operatorVersion) {
	t.Helper()
	r.d = env.DeployOperator(t, OperatorOptions{Namespaces: r.namespaces, Tag: v.tag, Args: upgradeArgs(v)})
	dep, err := r.d.Deployment(Context(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	args := operatorContainerOf(&dep.Spec.Template.Spec).Args
	r.base = args[:len(args)-len(upgradeArgs(v))]
	r.leader(t)
}

func (r *deploymentRollout) leaseNamespace() string { return r.d.Namespace }

// operatorContainerOf is the operator's container in spec.
func operatorContainerOf(spec *corev1.PodSpec) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == operatorContainer {
			return &spec.Containers[i]
		}
	}
	return &corev1.Container{}
}

// image is the image of version v.
func (v operatorVersion) image() string {
	if v.tag == "" {
		return OperatorImage + ":latest"
	}
	return OperatorImage + ":" + v.tag
}

// runs reports whether pod runs version v of the rollout.
func (r *deploymentRollout) runs(pod *corev1.Pod, v operatorVersion) bool {
	c := operatorContainerOf(&pod.Spec)
	return c.Image == v.image() && slices.Equal(c.Args, append(slices.Clone(r.base), upgradeArgs(v)...))
}

// holderChange is the Lease naming holder, seen at.
type holderChange struct {
	holder string
	at     time.Time
}

func (r *deploymentRollout) rollTo(t *testing.T, v operatorVersion, onNewLeader func(h handover, metricsURL string)) []handover {
	t.Helper()
	ctx := Context(t, 3*time.Minute)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	// What the Lease and the pods went through, from before the update.
	var (
		mu         sync.Mutex
		changes    []holderChange
		terminated = map[string]time.Time{} // pod -> first seen deleted
		changed    = make(chan struct{}, 1)
	)
	lease, err := r.d.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	changes = append(changes, holderChange{holder: holderOf(lease), at: time.Now()})
	go func() {
		_, _ = testbed.WaitFor(wctx, testbed.ListWatch(env.Kube.CoordinationV1().Leases(r.d.Namespace), ByName(r.d.Name)),
			func(l *coordinationv1.Lease) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				if h := holderOf(l); h != changes[len(changes)-1].holder {
					changes = append(changes, holderChange{holder: h, at: time.Now()})
					select {
					case changed <- struct{}{}:
					default:
					}
				}
				return false, nil
			})
	}()
	go func() {
		// The namespace holds the Deployment's pods only.
		_, _ = testbed.WaitFor(wctx, testbed.ListWatch(env.Kube.CoreV1().Pods(r.d.Namespace), ""), func(p *corev1.Pod) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := terminated[p.Name]; !ok && p.DeletionTimestamp != nil {
				terminated[p.Name] = time.Now()
			}
			return false, nil
		})
	}()
	err = r.d.update(ctx, func(c *corev1.Container) {
		c.Image = v.image()
		c.Args = append(slices.Clone(r.base), upgradeArgs(v)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	handovers := func() []handover {
		mu.Lock()
		defer mu.Unlock()
		// A leader that releases the Lease leaves it without a holder
		// until another takes it: a hand-over is from one holder to the
		// next.
		var hs []handover
		from := HolderPod(changes[0].holder)
		for _, c := range changes[1:] {
			to := HolderPod(c.holder)
			if to == "" || to == from {
				continue
			}
			h := handover{from: from, to: to, at: c.at}
			if at, ok := terminated[from]; ok {
				h.took = c.at.Sub(at)
			}
			hs, from = append(hs, h), to
		}
		return hs
	}
	// As soon as a pod of v leads.
	for called := false; !called; {
		select {
		case <-ctx.Done():
			t.Fatalf("no replica of %s led: %v; hand-overs %s%s", v.name, ctx.Err(), describeHandovers(handovers()), r.d.describePods())
		case <-changed:
		}
		hs := handovers()
		if len(hs) == 0 {
			continue
		}
		h := hs[len(hs)-1]
		pod, err := env.Kube.CoreV1().Pods(r.d.Namespace).Get(ctx, h.to, metav1.GetOptions{})
		if err != nil || !r.runs(pod, v) {
			continue
		}
		called = true
		t.Logf("upgrade: %s (%s) leads, %v after %s was deleted", h.to, v.name, h.took.Round(time.Millisecond), h.from)
		onNewLeader(h, fmt.Sprintf("http://%s:%d/metrics", pod.Status.PodIP, operatorHTTPPort))
	}
	if err := r.d.WaitRollout(ctx); err != nil {
		t.Fatal(err)
	}
	return handovers()
}

func (r *deploymentRollout) leader(t *testing.T) (string, string) {
	t.Helper()
	_, pod, err := r.d.WaitLeader(Context(t, time.Minute), "")
	if err != nil {
		t.Fatal(err)
	}
	return pod.Name, fmt.Sprintf("http://%s:%d/metrics", pod.Status.PodIP, operatorHTTPPort)
}

// A rolling update of pgloop's replicas while 100 clusters run. To a
// version that does not change the pod templates: no pod replaced, no
// status written, the new leader writes nothing but its Lease (and the
// Lease's Events), and a spec edited meanwhile is acknowledged alone. Then
// to one that changes every pod template (another default Spilo image),
// and back to the previous version (a rollback, which changes them again):
// each time every pod replaced, at most --max-rolling-clusters clusters at
// once, none Degraded.
func TestUpgradeOperator(t *testing.T) {
	ctx := Context(t, upgradeDeadline)
	fleetNS := env.Namespace(t)
	env.StartLabeller(t, fleetNS)

	// The second version's image runs a build of its own; the first's is
	// the suite's (DeployOperator installs it).
	newBin, ok := env.Plane.ImageBinaries()[OperatorImage+":"+upgradeVersion]
	if !ok {
		t.Fatalf("the plane maps no binary to %s:%s (main_test.go)", OperatorImage, upgradeVersion)
	}
	built := make(chan error, 1)
	go func() { built <- buildVersion(ctx, newBin, upgradeVersion) }()

	first := operatorVersion{name: "v1", tag: "v1"}
	second := operatorVersion{name: "v2", tag: upgradeVersion}
	third := operatorVersion{name: "v3", tag: upgradeVersion, args: []string{"--spilo-image", upgradeSpiloImage}}
	var ops operatorRollout = &deploymentRollout{namespaces: []string{fleetNS}}
	ops.start(t, first)

	// 1. The fleet.
	began := time.Now()
	for i := range upgradeFleet {
		env.CreateCluster(t, fleetNS, fmt.Sprintf("db-%03d", i), 1)
	}
	running := func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Running && pg.Status.ObservedGeneration >= pg.Generation &&
			pg.Status.ReadyInstances == pg.Spec.NumberOfInstances
	}
	if err := waitFleet(ctx, fleetNS, upgradeFleet, running); err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrade: %d clusters Running %v after their creation", upgradeFleet, time.Since(began).Round(time.Millisecond))
	_, url := ops.leader(t)
	if _, err := waitSettled(ctx, url, upgradeFleet); err != nil {
		t.Fatal(err)
	}
	if err := <-built; err != nil {
		t.Fatal(err)
	}

	// 2. To a version that changes no template.
	before := snapshot(ctx, t, fleetNS)
	clusters := watchClusters(ctx, t, fleetNS, before)
	const edited = "db-007"
	var (
		takeover       time.Time
		quiet          apiRequests
		leaderName     string
		settled        time.Duration
		electionEvents int
	)
	rolled := time.Now()
	hs := ops.rollTo(t, second, func(h handover, url string) {
		leaderName, takeover = h.to, h.at
		var err error
		if _, err = waitSettled(ctx, url, upgradeFleet); err != nil {
			t.Fatal(err)
		}
		settled = time.Since(h.at)
		if quiet, err = scrapeRequests(ctx, url); err != nil {
			t.Fatal(err)
		}
		electionEvents = leaderElectionEvents(ctx, t, ops.leaseNamespace())
		checkBuildInfo(ctx, t, url, upgradeVersion)
		// Edited while the rolling update may still go on.
		if _, err := env.UpdateCluster(ctx, fleetNS, edited, func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = 2 }); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("upgrade to %s: rolling update %v, %d hand-overs %s; new leader %s settled %v after it led",
		second.name, time.Since(rolled).Round(time.Millisecond), len(hs), describeHandovers(hs), leaderName, settled.Round(time.Millisecond))
	if leaderName == "" {
		t.Fatalf("no replica of %s led", second.name)
	}
	if len(hs) == 0 {
		t.Errorf("the rolling update handed the Lease over 0 times; the leader must go")
	}
	if w := quiet.writes().without("leases", "events"); len(w) > 0 {
		t.Errorf("the new leader wrote %s before the edit (besides its Lease and Events); want 0 writes", w)
	}
	// Its Events are the Lease's: "<identity> became leader".
	if n := quiet.writes().count("events"); n > float64(electionEvents) {
		t.Errorf("the new leader created %.0f Events, and the Lease's namespace holds %d of its LeaderElection Events", n, electionEvents)
	}
	t.Logf("upgrade: the new leader's requests from its start until settled: %s; writes: %s", quiet, quiet.writes())
	pg, err := env.WaitCluster(ctx, fleetNS, edited, "scaled to 2 and Running", func(pg *v1.Postgresql) bool {
		return running(pg) && pg.Status.ReadyInstances == 2
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrade: %s edited %v after the takeover, acknowledged: %s", edited, time.Since(takeover).Round(time.Millisecond), Summary(pg))
	if name, _ := ops.leader(t); name != leaderName {
		t.Errorf("leader %s at the end, %s took over; want one hand-over to the new version", name, leaderName)
	}
	_, url = ops.leader(t)
	if _, err := waitSettled(ctx, url, upgradeFleet); err != nil {
		t.Fatal(err)
	}
	after, err := scrapeRequests(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	editWrites := after.minus(quiet).writes().without("leases", "events")
	t.Logf("upgrade: the new leader's writes since, for the edit: %s", editWrites)
	seen := clusters.stop()
	// Each status write of the new leader since changed the edited
	// cluster's status: none was for another cluster, none a no-op.
	if n := editWrites.succeeded().count("postgresqls/status"); n == 0 || int(n) != seen.statusWrites[edited] {
		t.Errorf("the new leader wrote a status %.0f times since it settled; %s's status changed %d times", n, edited, seen.statusWrites[edited])
	}
	now := snapshot(ctx, t, fleetNS)
	checkUnchanged(t, before, now, edited)
	checkNoFlapping(t, seen, edited)
	checkNoPgloopEvents(t, now, rolled, edited)

	// 3. To a version whose pod template differs, and back: a rollback
	// to the previous version changes every template again.
	now = rollTemplates(ctx, t, ops, fleetNS, now, third, upgradeSpiloImage)
	rollTemplates(ctx, t, ops, fleetNS, now, second, cluster.DefaultImage)
}

// rollTemplates rolls the replicas to v, whose pods run image where the
// fleet's run another, and fails t unless every pod of the fleet is
// replaced, by at most upgradeBudget clusters at once, and every cluster
// is Running again, none Degraded meanwhile. It returns the fleet then.
func rollTemplates(ctx context.Context, t *testing.T, ops operatorRollout, ns string, before fleetSnapshot, v operatorVersion, image string) fleetSnapshot {
	t.Helper()
	clusters := watchClusters(ctx, t, ns, before)
	pods := watchRollouts(ctx, t, ns, before)
	rolled := time.Now()
	var rolloutLeader string
	hs := ops.rollTo(t, v, func(h handover, _ string) { rolloutLeader = h.to })
	t.Logf("upgrade to %s: rolling update %v, hand-overs %s, leader %s", v.name, time.Since(rolled).Round(time.Millisecond), describeHandovers(hs), rolloutLeader)
	if rolloutLeader == "" {
		t.Fatalf("no replica of %s led", v.name)
	}
	replacedAll := func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Running && pg.Status.ObservedGeneration >= pg.Generation &&
			pods.replaced(pg.Name) == int(pg.Spec.NumberOfInstances)
	}
	if err := waitFleet(ctx, ns, upgradeFleet, replacedAll); err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrade to %s: every pod of the %d clusters replaced and all Running %v after the rolling update began", v.name, upgradeFleet, time.Since(rolled).Round(time.Millisecond))
	seen, most := clusters.stop(), pods.stop()
	queued := seen.reasonCount(fsm.ReasonRolloutQueued)
	t.Logf("upgrade to %s: at most %d clusters replacing pods at once (budget %d); %d clusters said %s", v.name, most, upgradeBudget, queued, fsm.ReasonRolloutQueued)
	if most > upgradeBudget {
		t.Errorf("%d clusters replaced pods at once; the budget is %d", most, upgradeBudget)
	}
	if most == 0 || queued == 0 {
		t.Errorf("no cluster waited for the budget (%d at once, %d queued): the rollout was not bounded", most, queued)
	}
	for name, states := range seen.states {
		if slices.Contains(states, fsm.Degraded) {
			t.Errorf("cluster %s was Degraded during the rollout: %v", name, states)
		}
	}
	after := snapshot(ctx, t, ns)
	checkTemplate(t, before, after, image)
	return after
}

// buildVersion builds pgloop at out with version v (pgloop_build_info,
// `pgloop version`), and, when the plane has a real node, its image
// OperatorImage:v there.
func buildVersion(ctx context.Context, out, v string) error {
	cmd := exec.CommandContext(ctx, pgtest.GoCommand(), "build", "-o", out,
		"-ldflags", "-X github.com/pgloop/pgloop/pkg/version.Version="+v, "./cmd/pgloop")
	cmd.Dir = env.Repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/pgloop (version %s): %w\n%s", v, err, b)
	}
	if len(env.Plane.RealNodes()) > 0 {
		return env.LoadOperatorImage(ctx, out, v)
	}
	return nil
}

func describeHandovers(hs []handover) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s->%s in %v", h.from, h.to, h.took.Round(time.Millisecond)))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// waitFleet waits, with one watch, until n clusters of ns satisfy cond.
func waitFleet(ctx context.Context, ns string, n int, cond func(*v1.Postgresql) bool) error {
	var store cache.Store
	count := func() (int, *v1.Postgresql) {
		ok := 0
		var lagging *v1.Postgresql
		for _, obj := range store.List() {
			if pg := obj.(*v1.Postgresql); cond(pg) {
				ok++
			} else {
				lagging = pg
			}
		}
		return ok, lagging
	}
	_, err := watchtools.UntilWithSync(ctx, env.Clusters(ns, ""), &v1.Postgresql{},
		func(s cache.Store) (bool, error) { store = s; ok, _ := count(); return ok >= n, nil },
		func(watch.Event) (bool, error) { ok, _ := count(); return ok >= n, nil })
	if err != nil {
		ok, lagging := count()
		name := ""
		if lagging != nil {
			name = lagging.Name
		}
		return fmt.Errorf("%d of %d clusters of %s as wanted: %w; one not (%s): %s", ok, n, ns, err, name, Summary(lagging))
	}
	return nil
}

// Metrics.

// metricsPoll is how often a leader's /metrics are read while waiting for
// its loop to settle: they have no watch.
const metricsPoll = 100 * time.Millisecond

// waitSettled waits until the leader at url runs clusters machines and its
// loop is quiet (nothing in its inbox, no plan running or waiting), and
// returns how long that took.
func waitSettled(ctx context.Context, url string, clusters int) (time.Duration, error) {
	began := time.Now()
	tick := time.NewTicker(metricsPoll)
	defer tick.Stop()
	var last map[string]float64
	for {
		m, err := scrape(ctx, url)
		if err == nil {
			last = m
			if m["pgloop_leader"] == 1 && m["pgloop_loop_clusters"] >= float64(clusters) && m["pgloop_loop_inbox_depth"] == 0 &&
				m["pgloop_loop_plans_running"] == 0 && m["pgloop_loop_plans_waiting"] == 0 {
				return time.Since(began), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the leader at %s never settled with %d clusters: %w (leader %v, clusters %v, inbox %v, plans running %v, waiting %v)",
				url, clusters, ctx.Err(), last["pgloop_leader"], last["pgloop_loop_clusters"], last["pgloop_loop_inbox_depth"],
				last["pgloop_loop_plans_running"], last["pgloop_loop_plans_waiting"])
		case <-tick.C:
		}
	}
}

// scrape reads the series of the /metrics at url, keyed by their name and
// labels as written ("pgloop_leader", `pgloop_api_requests_total{...}`).
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// checkBuildInfo fails t unless the replica at url says it is version v.
func checkBuildInfo(ctx context.Context, t *testing.T, url, v string) {
	t.Helper()
	m, err := scrape(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	for series, value := range m {
		if strings.HasPrefix(series, "pgloop_build_info{") && strings.Contains(series, `version="`+v+`"`) && value == 1 {
			return
		}
	}
	t.Errorf("the new leader's pgloop_build_info has no version %q", v)
}

// apiRequest is one series of pgloop_api_requests_total.
type apiRequest struct{ verb, resource, code string }

// apiRequests counts pgloop's requests to the Kubernetes API (its
// pgloop_api_requests_total: every try its client sent, by verb, resource
// and status code).
type apiRequests map[apiRequest]float64

var requestLabels = regexp.MustCompile(`(\w+)="([^"]*)"`)

func scrapeRequests(ctx context.Context, url string) (apiRequests, error) {
	m, err := scrape(ctx, url)
	if err != nil {
		return nil, err
	}
	out := apiRequests{}
	for series, v := range m {
		if !strings.HasPrefix(series, "pgloop_api_requests_total{") || v == 0 {
			continue
		}
		var r apiRequest
		for _, kv := range requestLabels.FindAllStringSubmatch(series, -1) {
			switch kv[1] {
			case "verb":
				r.verb = kv[2]
			case "resource":
				r.resource = kv[2]
			case "code":
				r.code = kv[2]
			}
		}
		out[r] += v
	}
	return out, nil
}

// writes are the requests that change something, refused ones included.
func (a apiRequests) writes() apiRequests {
	out := apiRequests{}
	for r, n := range a {
		if slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, r.verb) {
			out[r] = n
		}
	}
	return out
}

// succeeded are the requests answered with a 2xx.
func (a apiRequests) succeeded() apiRequests {
	out := apiRequests{}
	for r, n := range a {
		if strings.HasPrefix(r.code, "2") {
			out[r] = n
		}
	}
	return out
}

func (a apiRequests) without(resources ...string) apiRequests {
	out := apiRequests{}
	for r, n := range a {
		if !slices.Contains(resources, r.resource) {
			out[r] = n
		}
	}
	return out
}

func (a apiRequests) minus(b apiRequests) apiRequests {
	out := apiRequests{}
	for r, n := range a {
		if d := n - b[r]; d > 0 {
			out[r] = d
		}
	}
	return out
}

func (a apiRequests) String() string {
	var parts []string
	for r, n := range a {
		parts = append(parts, fmt.Sprintf("%.0f %s %s (%s)", n, r.verb, r.resource, r.code))
	}
	if len(parts) == 0 {
		return "none"
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// The fleet's objects.

// fleetSnapshot is what the fleet's namespace holds at one time.
type fleetSnapshot struct {
	at                 time.Time
	clustersRV, podsRV string
	clusters           map[string]*v1.Postgresql
	pods               map[string]*corev1.Pod
	// versions are the resourceVersions of the Services and Secrets, and
	// the generation and metadata of the StatefulSets (whose status the
	// StatefulSet controller writes), by kind/name.
	versions map[string]string
	// events are pgloop's Events, by UID.
	events map[types.UID]recorded
}

// count sums the requests on resource.
func (a apiRequests) count(resource string) float64 {
	var n float64
	for r, v := range a {
		if r.resource == resource {
			n += v
		}
	}
	return n
}

// recorded is an Event as a snapshot keeps it.
type recorded struct {
	last          time.Time // to the second
	about, reason string
}

func snapshot(ctx context.Context, t *testing.T, ns string) fleetSnapshot {
	t.Helper()
	s := fleetSnapshot{at: time.Now(), versions: map[string]string{}, events: map[types.UID]recorded{}}
	pgs, err := env.PG.Postgresqls(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.clustersRV, s.clusters = pgs.ResourceVersion, byName(pgs.Items)
	pods, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.podsRV, s.pods = pods.ResourceVersion, byName(pods.Items)
	sts, err := env.Kube.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range sts.Items {
		var owners []types.UID
		for _, ref := range o.OwnerReferences {
			owners = append(owners, ref.UID)
		}
		s.versions["statefulset/"+o.Name] = fmt.Sprintf("generation %d, labels %v, annotations %v, owners %v",
			o.Generation, o.Labels, o.Annotations, owners)
	}
	svcs, err := env.Kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range svcs.Items {
		s.versions["service/"+o.Name] = o.ResourceVersion
	}
	secrets, err := env.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range secrets.Items {
		s.versions["secret/"+o.Name] = o.ResourceVersion
	}
	evs, err := env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Source.Component == eventComponent {
			last := ev.LastTimestamp.Time
			if last.IsZero() {
				last = ev.EventTime.Time
			}
			s.events[ev.UID] = recorded{last: last, about: ev.InvolvedObject.Name, reason: ev.Reason}
		}
	}
	return s
}

// byName indexes a list's items by name.
func byName[T any, P interface {
	*T
	GetName() string
}](items []T) map[string]*T {
	out := make(map[string]*T, len(items))
	for i := range items {
		out[P(&items[i]).GetName()] = &items[i]
	}
	return out
}

// checkUnchanged fails t if a pod of the fleet was replaced or restarted,
// or an object of a cluster but edited changed, between before and after.
func checkUnchanged(t *testing.T, before, after fleetSnapshot, edited string) {
	t.Helper()
	for name, p := range before.pods {
		q, ok := after.pods[name]
		switch {
		case !ok:
			t.Errorf("pod %s is gone", name)
		case q.UID != p.UID:
			t.Errorf("pod %s was replaced (uid %s, was %s)", name, q.UID, p.UID)
		case restarts(q) != restarts(p):
			t.Errorf("pod %s restarted: %d restarts, %d before", name, restarts(q), restarts(p))
		}
	}
	changed := 0
	for key, rv := range before.versions {
		if after.versions[key] != rv && !strings.Contains(key, edited) {
			t.Errorf("%s changed (resourceVersion %s, was %s)", key, after.versions[key], rv)
		}
		if after.versions[key] != rv {
			changed++
		}
	}
	t.Logf("upgrade: %d pods, same UIDs and restart counts; %d StatefulSets, Services and Secrets, %d of them (%s's) changed",
		len(before.pods), len(before.versions), changed, edited)
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// checkNoPgloopEvents fails t if pgloop recorded an Event in the fleet's
// namespace since (to the second: an Event's time has no fraction), but
// about cluster edited. client-go posts Events a while after they are
// recorded, which is why their time is the test and not their arrival.
func checkNoPgloopEvents(t *testing.T, after fleetSnapshot, since time.Time, edited string) {
	t.Helper()
	for _, ev := range after.events {
		if ev.last.After(since.Truncate(time.Second)) && !strings.HasPrefix(ev.about, edited) {
			t.Errorf("pgloop recorded Event %s about %s at %s, during the upgrade (since %s)", ev.reason, ev.about,
				ev.last.UTC().Format(time.TimeOnly), since.UTC().Format(time.TimeOnly))
		}
	}
}

// leaderElectionEvents counts the Events of the Lease's holder in ns:
// "<identity> became leader".
func leaderElectionEvents(ctx context.Context, t *testing.T, ns string) int {
	t.Helper()
	lease, err := env.Kube.CoordinationV1().Leases(ns).Get(ctx, operatorName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs.Items {
		if ev.Reason == "LeaderElection" && strings.HasPrefix(ev.Message, holderOf(lease)+" ") {
			n++
		}
	}
	return n
}

// clusterLog is what one watch saw of the fleet's clusters.
type clusterLog struct {
	// events counts every change of each cluster; statusWrites those that
	// changed its status.
	events, statusWrites map[string]int
	// states and reasons are those each cluster's status showed, in order.
	states, reasons map[string][]string
}

func (l *clusterLog) reasonCount(reason string) int {
	n := 0
	for _, rs := range l.reasons {
		if slices.Contains(rs, reason) {
			n++
		}
	}
	return n
}

type clusterWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	log    clusterLog
	err    error
}

// watchClusters records every change of the clusters of ns from
// resourceVersion rv until stop.
func watchClusters(ctx context.Context, t *testing.T, ns string, before fleetSnapshot) *clusterWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w, err := watchtools.NewRetryWatcherWithContext(ctx, before.clustersRV, env.Clusters(ns, ""))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cw := &clusterWatch{cancel: cancel, done: make(chan struct{}), log: clusterLog{
		events: map[string]int{}, statusWrites: map[string]int{}, states: map[string][]string{}, reasons: map[string][]string{},
	}}
	last := map[string]v1.PostgresqlStatus{}
	for name, pg := range before.clusters {
		last[name] = pg.Status
	}
	go func() {
		defer close(cw.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if ev.Type == watch.Error {
					cw.err = fmt.Errorf("watch error: %v", ev.Object)
					return
				}
				pg, isPG := ev.Object.(*v1.Postgresql)
				if !isPG {
					continue
				}
				l := &cw.log
				l.events[pg.Name]++
				if prev, known := last[pg.Name]; !known || !equality.Semantic.DeepEqual(prev, pg.Status) {
					l.statusWrites[pg.Name]++
				}
				last[pg.Name] = pg.Status
				if s := l.states[pg.Name]; len(s) == 0 || s[len(s)-1] != pg.Status.State {
					l.states[pg.Name] = append(s, pg.Status.State)
				}
				if r := l.reasons[pg.Name]; len(r) == 0 || r[len(r)-1] != pg.Status.Reason {
					l.reasons[pg.Name] = append(r, pg.Status.Reason)
				}
			}
		}
	}()
	t.Cleanup(func() { cw.cancel(); <-cw.done })
	return cw
}

// stop ends the watch and returns what it saw.
func (cw *clusterWatch) stop() *clusterLog {
	cw.cancel()
	<-cw.done
	return &cw.log
}

// checkNoFlapping fails t if any cluster but edited changed at all, or
// edited left Running but for its own rollout.
func checkNoFlapping(t *testing.T, l *clusterLog, edited string) {
	t.Helper()
	for name, n := range l.events {
		if name == edited {
			continue
		}
		t.Errorf("cluster %s changed %d times (%d status writes, states %v, reasons %q); want no change", name, n, l.statusWrites[name], l.states[name], l.reasons[name])
	}
	if l.events[edited] == 0 {
		t.Errorf("the edit of %s was not seen", edited)
	}
	for _, s := range l.states[edited] {
		if s != fsm.Running && s != fsm.Updating {
			t.Errorf("cluster %s was %s after its edit; want Updating, then Running", edited, s)
		}
	}
	t.Logf("upgrade: %d clusters changed during the upgrade: %s (%d changes, %d of its status, states %v)",
		len(l.events), edited, l.events[edited], l.statusWrites[edited], l.states[edited])
}

// rolloutWatch follows the fleet's pods through a rollout: a cluster
// replaces pods from when one of its pods of before goes (terminating or
// deleted) until it has as many pods of after Ready as it had before.
type rolloutWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	old      map[types.UID]bool
	gone     map[string]int                // by cluster: old pods that went
	fresh    map[string]map[types.UID]bool // by cluster: new pods Ready
	rolling  map[string]bool               // clusters replacing pods now
	most     int
	instance map[string]int // by cluster: pods before
}

func watchRollouts(ctx context.Context, t *testing.T, ns string, before fleetSnapshot) *rolloutWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	lw := testbed.ListWatch(env.Kube.CoreV1().Pods(ns), "")
	w, err := watchtools.NewRetryWatcherWithContext(ctx, before.podsRV, lw)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rw := &rolloutWatch{cancel: cancel, done: make(chan struct{}), old: map[types.UID]bool{}, gone: map[string]int{},
		fresh: map[string]map[types.UID]bool{}, rolling: map[string]bool{}, instance: map[string]int{}}
	for _, p := range before.pods {
		rw.old[p.UID] = true
		rw.instance[p.Labels[cluster.LabelClusterName]]++
	}
	go func() {
		defer close(rw.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if p, isPod := ev.Object.(*corev1.Pod); isPod {
					rw.observe(ev.Type, p)
				}
			}
		}
	}()
	t.Cleanup(func() { rw.cancel(); <-rw.done })
	return rw
}

func (rw *rolloutWatch) observe(typ watch.EventType, p *corev1.Pod) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	name := p.Labels[cluster.LabelClusterName]
	if rw.old[p.UID] {
		if typ == watch.Deleted || p.DeletionTimestamp != nil {
			delete(rw.old, p.UID)
			rw.gone[name]++
			rw.rolling[name] = true
			rw.most = max(rw.most, len(rw.rolling))
		}
		return
	}
	if rw.fresh[name] == nil {
		rw.fresh[name] = map[types.UID]bool{}
	}
	ready, _ := testbed.PodReady(p)
	rw.fresh[name][p.UID] = typ != watch.Deleted && ready && p.DeletionTimestamp == nil
	if rw.replacedLocked(name) >= rw.instance[name] {
		delete(rw.rolling, name)
	}
}

// replaced is how many pods of cluster name are new and Ready.
func (rw *rolloutWatch) replaced(name string) int {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.replacedLocked(name)
}

func (rw *rolloutWatch) replacedLocked(name string) int {
	n := 0
	for _, ok := range rw.fresh[name] {
		if ok {
			n++
		}
	}
	return n
}

// stop ends the watch and returns the most clusters that replaced pods at
// once.
func (rw *rolloutWatch) stop() int {
	rw.cancel()
	<-rw.done
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.most
}

// checkTemplate fails t unless every pod of after is new since before,
// runs image and is Ready.
func checkTemplate(t *testing.T, before, after fleetSnapshot, image string) {
	t.Helper()
	for _, p := range after.pods {
		i := slices.IndexFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == cluster.ContainerName })
		ready, _ := testbed.PodReady(p)
		switch {
		case i < 0 || p.Spec.Containers[i].Image != image:
			t.Errorf("pod %s does not run %s", p.Name, image)
		case before.pods[p.Name] != nil && before.pods[p.Name].UID == p.UID:
			t.Errorf("pod %s was not replaced", p.Name)
		case !ready:
			t.Errorf("pod %s is not Ready", p.Name)
		}
	}
	if len(after.pods) != len(before.pods) {
		t.Errorf("%d pods after the rollout, %d before", len(after.pods), len(before.pods))
	}
}
