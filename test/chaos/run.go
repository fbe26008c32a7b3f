package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	pginformers "github.com/pgloop/pgloop/pkg/generated/informers/externalversions"
	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/faultproxy"
	"github.com/pgloop/pgloop/test/labeller"
	"github.com/pgloop/pgloop/test/testbed"
)

// callTimeout bounds each API call of the user and of the checks.
const callTimeout = 15 * time.Second

// retryPause is how long the user waits before trying a failed action
// again, as a person or a CI job retrying would.
const retryPause = 250 * time.Millisecond

// run is one scenario on one plane.
type run struct {
	cfg      Config
	scenario string
	seed     uint64
	faults   *rand.Rand // the fault schedule's own stream
	dir      string     // operators' logs
	log      func(format string, args ...any)

	plane      *testbed.Plane
	kube       kubernetes.Interface
	pg         pgclient.Interface
	proxy      *faultproxy.Proxy
	kubeconfig string // the operators': through the proxy

	mu         sync.Mutex
	book       Book
	done       int           // actions made
	phase      Phase         // of the action being made
	progressed chan struct{} // closed, and replaced, after each action
	lastAction time.Time
	injected   int
	detail     map[string]int // faults injected, by kind
	lastFault  time.Time
	operators  []*operator
	started    int

	span          time.Duration // the workload's, from its delays
	phaseCounts   map[Phase]int // its actions by phase
	operatorFlags []string      // leader election's
	opChanged     chan struct{} // closed, and replaced, when an operator leads or exits

	bg        context.Context // the labellers', informers' and supervisor's until teardown
	stopBG    context.CancelFunc
	labellers sync.WaitGroup // and the supervisor

	// planeMu is held while a scenario restarts a process of the plane,
	// so the supervisor leaves it alone.
	planeMu       sync.Mutex
	planeRestarts map[string]int // by the supervisor, by process
	losses        map[string]int // Running -> Degraded, by cluster (Result.Losses)

	informed chan struct{} // a change reached the check's caches
	snapshot func() Snapshot
}

// Scenario is a fault schedule: it injects faults while the workload runs,
// through the run's helpers, and returns once it has injected its last one.
type Scenario struct {
	Name string
	// LeaderElection runs the operators with leader election on.
	LeaderElection bool
	// Pace, when not nil, is the mean delay between the workload's actions
	// for cfg (else cfg.Workload.Pace).
	Pace   func(cfg Config) time.Duration
	Inject func(ctx context.Context, r *run) error
}

// execute runs s once with seed and returns its result.
func execute(ctx context.Context, cfg Config, s Scenario, seed uint64) (res Result) {
	res = Result{Scenario: s.Name, Seed: seed}
	r := &run{
		cfg: cfg, scenario: s.Name, seed: seed,
		faults:     rand.New(rand.NewPCG(seed, 2)),
		book:       Book{},
		progressed: make(chan struct{}),
		detail:     map[string]int{},
		informed:   make(chan struct{}, 1),
		opChanged:  make(chan struct{}),

		planeRestarts: map[string]int{},
		losses:        map[string]int{},
	}
	r.log = func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "chaos %s seed %d: %s "+format+"\n", append([]any{s.Name, seed, time.Now().UTC().Format("15:04:05.0")}, args...)...)
	}
	var err error
	keep := cfg.WorkDir != ""
	if keep {
		r.dir = filepath.Join(cfg.WorkDir, fmt.Sprintf("%s-%d", s.Name, seed))
		err = os.MkdirAll(r.dir, 0o755)
	} else {
		r.dir, err = os.MkdirTemp("", "pgloop-chaos-")
	}
	if err != nil {
		res.Err = err
		return res
	}
	defer func() {
		if !keep && res.Err == nil && res.Verdict.Done() {
			_ = os.RemoveAll(r.dir)
		} else {
			res.LogDir = r.dir
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := r.setup(ctx); err != nil {
		res.Err = err
		r.teardown()
		return res
	}
	defer r.teardown()

	wl := cfg.Workload
	if s.Pace != nil {
		wl.Pace = s.Pace(cfg)
	}
	actions := Plan(rand.New(rand.NewPCG(seed, 1)), wl)
	r.phaseCounts = map[Phase]int{}
	for _, a := range actions {
		r.span += a.Delay
		r.phaseCounts[a.Phase]++
	}
	r.log("workload: %d actions over about %v; faults: %s", len(actions), r.span.Round(time.Second), s.Name)
	began := time.Now()

	var extra []string
	if s.LeaderElection {
		extra = []string{"--leader-elect=true", "--leader-election-namespace", Namespace(0), "--leader-election-id", "pgloop-chaos"}
	} else {
		extra = []string{"--leader-elect=false"}
	}
	r.operatorFlags = extra
	if !s.LeaderElection {
		if _, err := r.startOperator(); err != nil {
			res.Err = err
			return res
		}
	}

	// Either side failing stops the other.
	both, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var workErr, faultErr error
	wg.Go(func() {
		if workErr = r.workload(both, actions); workErr != nil {
			stop()
		}
	})
	wg.Go(func() {
		if faultErr = s.Inject(both, r); faultErr != nil {
			stop()
		}
	})
	wg.Wait()
	stop()
	if err := errors.Join(workErr, faultErr); err != nil {
		res.Err = err
		return res
	}
	r.mu.Lock()
	res.Faults, res.Detail, res.LastFault, res.LastAction = r.injected, byKind(r.detail), r.lastFault, r.lastAction
	res.PlaneRestarts = byKind(r.planeRestarts)
	res.Workload = len(actions)
	r.mu.Unlock()
	r.log("workload and faults done after %v (%s); waiting for convergence", time.Since(began).Round(time.Second), res.Detail)

	from := res.LastFault
	if res.LastAction.After(from) {
		from = res.LastAction
	}
	res.Verdict, res.ConvergedAt, res.Err = r.converge(ctx, from.Add(cfg.ConvergeTimeout))
	if keep {
		if err := r.dumpEvents(ctx); err != nil {
			r.log("events not written: %v", err)
		}
	}
	r.mu.Lock()
	res.Operators = r.started
	res.PlaneRestarts = byKind(r.planeRestarts)
	res.Losses = maps.Clone(r.losses)
	r.mu.Unlock()
	return res
}

// byKind renders fault counts by kind.
func byKind(m map[string]int) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// setup starts the plane, the CRDs, the namespaces, the labellers, the
// proxy and the check's informers.
func (r *run) setup(ctx context.Context) error {
	var err error
	r.bg, r.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	// A busy machine may need more than the default 2 minutes.
	opts := testbed.Options{Nodes: 3, BinDir: r.cfg.BinDir, Log: io.Discard, StartTimeout: 5 * time.Minute}
	if r.cfg.WorkDir != "" {
		// The plane's logs (and etcd's data) stay with the run's.
		opts.TempDir, opts.KeepDir = r.dir, true
	}
	r.plane, err = testbed.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("while starting the plane: %w", err)
	}
	r.log("plane up in %v at %s", r.plane.StartupTime.Round(time.Millisecond), r.plane.Config.Host)
	r.labellers.Go(r.supervise)
	var pg pgclient.Interface
	var kube kubernetes.Interface
	if _, kube, pg, err = benchkit.Clients(r.plane.Config); err != nil {
		return err
	}
	r.kube, r.pg = kube, pg
	if err := benchkit.ApplyCRDs(ctx, r.plane.Config, r.cfg.Repo); err != nil {
		return err
	}
	for i := range r.cfg.Workload.Namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace(i)}}
		if _, err := r.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		quiet := logrus.New()
		quiet.SetOutput(io.Discard)
		r.labellers.Go(func() {
			if err := labeller.Run(r.bg, r.kube, ns.Name, quiet); err != nil && !errors.Is(err, context.Canceled) {
				r.log("labeller of %s: %v", ns.Name, err)
			}
		})
	}
	host := strings.TrimPrefix(r.plane.Config.Host, "https://")
	if r.proxy, err = faultproxy.New(host); err != nil {
		return err
	}
	r.kubeconfig = filepath.Join(r.dir, "kubeconfig")
	if err := writeProxyKubeconfig(r.plane.Kubeconfig, r.kubeconfig, "https://"+r.proxy.Addr()); err != nil {
		return err
	}
	return r.startInformers(ctx)
}

// supervise restarts a process of the plane that exits, as a kubelet
// restarts a static pod, until teardown: kube-scheduler exits on purpose
// when it finds its cache inconsistent, which an apiserver crash can
// cause. Restarts are logged and counted.
func (r *run) supervise() {
	for {
		wctx, cancel := context.WithCancel(r.bg)
		_ = r.plane.Wait(wctx) // which process exited is Dead's to say
		cancel()
		if r.bg.Err() != nil {
			return
		}
		r.planeMu.Lock()
		for _, name := range r.plane.Dead() {
			r.log("plane: %s exited; restarting it (its log is in the plane's directory)", name)
			if _, err := r.plane.RestartProcess(r.bg, name, false); err != nil {
				r.log("plane: %s not restarted: %v", name, err)
				r.planeMu.Unlock()
				return
			}
			r.mu.Lock()
			r.planeRestarts[name]++
			r.mu.Unlock()
		}
		r.planeMu.Unlock()
	}
}

// writeProxyKubeconfig copies the kubeconfig at from to to, every cluster
// pointing at server. TLS goes through the proxy untouched: the apiserver's
// certificate is valid for 127.0.0.1, the proxy's address too.
func writeProxyKubeconfig(from, to, server string) error {
	kc, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return err
	}
	for _, c := range kc.Clusters {
		c.Server = server
	}
	return clientcmd.WriteToFile(*kc, to)
}

// startInformers watches what Judge reads, and signals r.informed on every
// change.
func (r *run) startInformers(ctx context.Context) error {
	spilo := labels.SelectorFromSet(labels.Set{cluster.LabelApplication: cluster.ApplicationSpilo}).String()
	kf := informers.NewSharedInformerFactoryWithOptions(r.kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = spilo }))
	pf := pginformers.NewSharedInformerFactory(r.pg, 0)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.inform() },
		UpdateFunc: func(any, any) { r.inform() },
		DeleteFunc: func(any) { r.inform() },
	}
	pgs, stss, pods := pf.Pgloop().V1().Postgresqls(), kf.Apps().V1().StatefulSets(), kf.Core().V1().Pods()
	svcs, secrets, pdbs, cms := kf.Core().V1().Services(), kf.Core().V1().Secrets(), kf.Policy().V1().PodDisruptionBudgets(), kf.Core().V1().ConfigMaps()
	for _, inf := range []cache.SharedIndexInformer{pgs.Informer(), stss.Informer(), pods.Informer(), svcs.Informer(), secrets.Informer(), pdbs.Informer(), cms.Informer()} {
		if _, err := inf.AddEventHandler(notify); err != nil {
			return err
		}
	}
	// Every status the watch sees: a cluster that leaves Running for
	// Degraded more often than faults were injected flaps.
	_, err := pgs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(oldObj, newObj any) {
		old, ok1 := oldObj.(*v1.Postgresql)
		pg, ok2 := newObj.(*v1.Postgresql)
		if ok1 && ok2 && old.Status.State == fsm.Running && pg.Status.State == fsm.Degraded {
			r.mu.Lock()
			r.losses[pg.Namespace+"/"+pg.Name]++
			r.mu.Unlock()
		}
	}})
	if err != nil {
		return err
	}
	kf.Start(r.bg.Done())
	pf.Start(r.bg.Done())
	for typ, ok := range kf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the check's cache of %v did not sync", typ)
		}
	}
	for typ, ok := range pf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the check's cache of %v did not sync", typ)
		}
	}
	r.snapshot = func() Snapshot {
		var s Snapshot
		s.Clusters, _ = pgs.Lister().List(labels.Everything())
		s.StatefulSets, _ = stss.Lister().List(labels.Everything())
		s.Pods, _ = pods.Lister().List(labels.Everything())
		s.Services, _ = svcs.Lister().List(labels.Everything())
		s.Secrets, _ = secrets.Lister().List(labels.Everything())
		s.PDBs, _ = pdbs.Lister().List(labels.Everything())
		s.ConfigMaps, _ = cms.Lister().List(labels.Everything())
		return s
	}
	return nil
}

func (r *run) inform() {
	select {
	case r.informed <- struct{}{}:
	default:
	}
}

// apiSnapshot lists from the apiserver what snapshot reads from the
// caches: the caches may lag, the final word is the API's.
func (r *run) apiSnapshot(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	opts := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{cluster.LabelApplication: cluster.ApplicationSpilo}).String()}
	var s Snapshot
	pgs, err := r.pg.PgloopV1().Postgresqls("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, err
	}
	for i := range pgs.Items {
		s.Clusters = append(s.Clusters, &pgs.Items[i])
	}
	core, apps := r.kube.CoreV1(), r.kube.AppsV1()
	stss, err := apps.StatefulSets("").List(ctx, opts)
	if err != nil {
		return s, err
	}
	for i := range stss.Items {
		s.StatefulSets = append(s.StatefulSets, &stss.Items[i])
	}
	pods, err := core.Pods("").List(ctx, opts)
	if err != nil {
		return s, err
	}
	for i := range pods.Items {
		s.Pods = append(s.Pods, &pods.Items[i])
	}
	svcs, err := core.Services("").List(ctx, opts)
	if err != nil {
		return s, err
	}
	for i := range svcs.Items {
		s.Services = append(s.Services, &svcs.Items[i])
	}
	secrets, err := core.Secrets("").List(ctx, opts)
	if err != nil {
		return s, err
	}
	for i := range secrets.Items {
		s.Secrets = append(s.Secrets, &secrets.Items[i])
	}
	pdbs, err := r.kube.PolicyV1().PodDisruptionBudgets("").List(ctx, opts)
	if err != nil {
		return s, err
	}
	for i := range pdbs.Items {
		s.PDBs = append(s.PDBs, &pdbs.Items[i])
	}
	cms, err := core.ConfigMaps("").List(ctx, opts)
	if err != nil {
		return s, err
	}
	for i := range cms.Items {
		s.ConfigMaps = append(s.ConfigMaps, &cms.Items[i])
	}
	return s, nil
}

// converge waits until Judge finds everything done, first in the caches
// (on every change they see), then in the API, or until deadline. It
// returns the last verdict and when convergence was reached (zero if not).
func (r *run) converge(ctx context.Context, deadline time.Time) (Verdict, time.Time, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	book := r.bookCopy()
	var v Verdict
	for {
		if v = Judge(book, r.snapshot()); v.Done() {
			at := time.Now()
			s, err := r.apiSnapshot(ctx)
			if err == nil {
				if v = Judge(book, s); v.Done() {
					return v, at, nil
				}
			}
		}
		select {
		case <-r.informed:
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded {
				// The verdict at the deadline, from the API when it answers.
				if s, err := r.apiSnapshot(context.WithoutCancel(ctx)); err == nil {
					v = Judge(book, s)
				}
				return v, time.Time{}, nil
			}
			return v, time.Time{}, ctx.Err()
		}
	}
}

func (r *run) bookCopy() Book {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := Book{}
	for k, e := range r.book {
		c := *e
		out[k] = &c
	}
	return out
}

// dumpEvents writes the Kubernetes Events of the workload's namespaces
// into events.txt of the run's directory, oldest first.
func (r *run) dumpEvents(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var lines []string
	for i := range r.cfg.Workload.Namespaces {
		list, err := r.kube.CoreV1().Events(Namespace(i)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ev := range list.Items {
			t := ev.LastTimestamp.Time
			if t.IsZero() {
				t = ev.EventTime.Time
			}
			lines = append(lines, fmt.Sprintf("%s %s %s x%d %s/%s/%s (%s): %s", t.UTC().Format(time.RFC3339), ev.Type, ev.Reason, ev.Count,
				ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, ev.Source.Component, ev.Message))
		}
	}
	slices.Sort(lines)
	return os.WriteFile(filepath.Join(r.dir, "events.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// teardown stops the operators, the labellers, the proxy and the plane.
func (r *run) teardown() {
	r.mu.Lock()
	ops := slices.Clone(r.operators)
	r.mu.Unlock()
	for _, o := range ops {
		if err := o.Stop(); err != nil {
			r.log("operator %s: %v", o.name, err)
		}
	}
	if r.stopBG != nil {
		r.stopBG()
	}
	r.labellers.Wait()
	if r.proxy != nil {
		_ = r.proxy.Close()
	}
	if r.plane != nil {
		if err := r.plane.Stop(); err != nil {
			r.log("stopping the plane: %v", err)
		}
	}
}

// fault records one injected fault of kind, ended at end.
func (r *run) fault(kind string, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.injected++
	r.detail[kind]++
	if end.After(r.lastFault) {
		r.lastFault = end
	}
}

// Workload.

// workload makes the actions in order, each after its delay, each retried
// until it lands: a user action fails only with ctx.
func (r *run) workload(ctx context.Context, actions []Action) error {
	defer r.setPhase(PhaseDone)
	for _, a := range actions {
		if err := pause(ctx, a.Delay); err != nil {
			return err
		}
		r.setPhase(a.Phase)
		if err := r.act(ctx, a); err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		r.mu.Lock()
		r.done++
		r.lastAction = time.Now()
		close(r.progressed)
		r.progressed = make(chan struct{})
		r.mu.Unlock()
	}
	return nil
}

func (r *run) setPhase(p Phase) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p != r.phase {
		r.phase = p
		close(r.progressed)
		r.progressed = make(chan struct{})
	}
}

// pause waits d, the workload's pace; it returns ctx's error if ctx ends
// first.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// act makes one action, again after any failure but one that says it
// landed (AlreadyExists for a create, NotFound for a delete).
func (r *run) act(ctx context.Context, a Action) error {
	client := r.pg.PgloopV1().Postgresqls(a.Namespace)
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		var got *v1.Postgresql
		var err error
		switch a.Kind {
		case Create:
			got, err = client.Create(cctx, NewCluster(a), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				got, err = client.Get(cctx, a.Name, metav1.GetOptions{})
			}
		case Scale, Edit:
			got, err = client.Get(cctx, a.Name, metav1.GetOptions{})
			if err == nil {
				Apply(got, a)
				got, err = client.Update(cctx, got, metav1.UpdateOptions{})
			}
		case Delete:
			err = client.Delete(cctx, a.Name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				err = nil
			}
		}
		cancel()
		switch {
		case err == nil:
			r.mu.Lock()
			if a.Kind == Delete {
				r.book[a.Namespace+"/"+a.Name].Deleted = true
			} else {
				r.book.Record(got)
			}
			r.mu.Unlock()
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case apierrors.IsNotFound(err):
			return fmt.Errorf("the cluster is gone: %w", err)
		case apierrors.IsConflict(err):
			continue
		}
		if err := pause(ctx, retryPause); err != nil {
			return err
		}
	}
}

// waitProgress waits until cond holds of the workload's phase and actions
// made.
func (r *run) waitProgress(ctx context.Context, cond func(phase Phase, done int) bool) error {
	for {
		r.mu.Lock()
		ok, ch := cond(r.phase, r.done), r.progressed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitClusters waits until cond holds of the clusters in the check's cache.
func (r *run) waitClusters(ctx context.Context, cond func([]*v1.Postgresql) bool) error {
	for {
		if cond(r.snapshot().Clusters) {
			return nil
		}
		select {
		case <-r.informed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
