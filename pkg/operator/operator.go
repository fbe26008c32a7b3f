package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/archiving"
	"github.com/pgloop/pgloop/pkg/controller"
	"github.com/pgloop/pgloop/pkg/effects"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/events"
	"github.com/pgloop/pgloop/pkg/facts"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	pgscheme "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/scheme"
	"github.com/pgloop/pgloop/pkg/indb"
	"github.com/pgloop/pgloop/pkg/informers"
	"github.com/pgloop/pgloop/pkg/metrics"
	"github.com/pgloop/pgloop/pkg/patroni"
	"github.com/pgloop/pgloop/pkg/pgsql"
	"github.com/pgloop/pgloop/pkg/traffic"
	"github.com/pgloop/pgloop/pkg/version"
)

// EventComponent is the source component of the Kubernetes Events pgloop
// records.
const EventComponent = "pgloop"

// EventFlushTimeout bounds how long a stopping operator writes the Events
// it still holds: a few seconds of the Deployment's grace period, whatever
// the API server's state.
const EventFlushTimeout = 5 * time.Second

// ErrLeadershipLost is returned by Run when this replica stopped being the
// leader without being asked to stop. The process should exit: a new
// process starts clean as a standby, with fresh caches.
var ErrLeadershipLost = errors.New("lost leadership")

// crdName is the CustomResourceDefinition the operator needs.
var crdName = v1.PostgresqlResource + "." + v1.SchemeGroupVersion.Group

// eventScheme knows the built-in types and pgloop's, so the event recorder
// can refer to either.
var eventScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(kubescheme.AddToScheme(s))
	utilruntime.Must(pgscheme.AddToScheme(s))
	return s
}()

// clients are the API clients Run uses; tests pass fakes to run.
type clients struct {
	kube kubernetes.Interface
	pg   pgclient.Interface
	// fence refuses the writes of kube and pg once this replica no
	// longer holds the Lease (armed by elect).
	fence *traffic.Fence
	// election renews the Lease. Its requests time out well within the
	// renew deadline, so that one hung request cannot cost the lease.
	election kubernetes.Interface
}

// Run runs the operator until ctx is done, then shuts down cleanly (the
// Lease released, in-flight effects cancelled) and returns nil. It returns
// an error when the configuration is invalid, the API cannot be reached or
// the CRD is not installed (both checked within cfg.CacheSyncTimeout), the
// health server fails, or leadership is lost (ErrLeadershipLost).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	log := newLogger(&cfg)
	if setMemoryLimit(cfg.MemoryLimit, os.Getenv("GOMEMLIMIT"), log) {
		memCtx, stop := context.WithCancel(ctx)
		defer stop()
		go keepMemoryLimit(memCtx, cfg.MemoryLimit, fileCheck, residentFile, log)
	}

	restCfg, err := restConfig(&cfg)
	if err != nil {
		return err
	}
	rateLimit(ctx, restCfg, &cfg, log)
	// Every client made from restCfg counts its requests.
	m := metrics.New()
	restCfg.Wrap(m.InstrumentTransport)
	cl, err := newClients(restCfg, &cfg, gateObservers{held: m.ObserveHeld, window: m.BackgroundWindow, writeWindow: m.WriteWindow, writeWait: m.ObserveWriteWait})
	if err != nil {
		return err
	}
	return run(ctx, cfg, log, cl, m)
}

// restConfig loads the kubeconfig, or the in-cluster configuration when
// none is given.
func restConfig(cfg *Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig == "" {
		rc, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no kubeconfig given (--kubeconfig, $KUBECONFIG) and not running in a pod: %w", err)
		}
	} else {
		rules := &clientcmd.ClientConfigLoadingRules{}
		if paths := filepath.SplitList(cfg.Kubeconfig); len(paths) > 1 {
			rules.Precedence = paths
		} else {
			rules.ExplicitPath = cfg.Kubeconfig
		}
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	}
	rc.UserAgent = "pgloop/" + version.Version
	return rc, nil
}

// gateObservers are told what the request gate does: how long each held
// request waited, and the pacer's window when it changes.
type gateObservers struct {
	held   func(time.Duration)
	window func(float64)
	// writeWindow is told a kind's write window when it changes.
	writeWindow func(verb, resource, class string, window float64)
	// writeWait is told how long each windowed write waited for its place.
	writeWait func(verb, resource, class string, urgent bool, waited time.Duration)
}

func newClients(rc *rest.Config, cfg *Config, obs gateObservers) (clients, error) {
	fence := &traffic.Fence{}
	wc := rest.CopyConfig(rc)
	wc.Wrap(fence.Wrap)
	if cfg.FairWrites {
		// Inside the gate: a background write it holds takes no place.
		wc.Wrap(traffic.NewWriteWindows(obs.writeWindow, obs.writeWait).Wrap)
	}
	if cfg.BackgroundWhileUrgent >= 0 || cfg.BackgroundRequests > 0 || cfg.PaceBackground {
		// Outside the fence: a request held a while is fenced when it goes.
		g := traffic.NewGate(cfg.BackgroundWhileUrgent, cfg.BackgroundRequests, obs.held)
		if cfg.PaceBackground {
			g.Pacing(obs.window)
		}
		wc.Wrap(g.Wrap)
	}
	kube, err := kubernetes.NewForConfig(wc)
	if err != nil {
		return clients{}, fmt.Errorf("create kubernetes client: %w", err)
	}
	pg, err := pgclient.NewForConfig(wc)
	if err != nil {
		return clients{}, fmt.Errorf("create pgloop.dev client: %w", err)
	}
	// As client-go's resourcelock.NewFromKubeconfig does.
	ec := rest.CopyConfig(rc)
	ec.Timeout = max(time.Second, cfg.RenewDeadline/2)
	ec.UserAgent = rc.UserAgent + " leader-election"
	election, err := kubernetes.NewForConfig(ec)
	if err != nil {
		return clients{}, fmt.Errorf("create leader election client: %w", err)
	}
	return clients{kube: kube, pg: pg, election: election, fence: fence}, nil
}

// run is Run once the clients and the metrics exist.
func run(ctx context.Context, cfg Config, log *logrus.Logger, cl clients, m *metrics.Metrics) error {
	entry := logrus.NewEntry(log)
	h := &health{}
	if cfg.LeaderElect {
		h.watchdog = leaderelection.NewLeaderHealthzAdaptor(cfg.RenewDeadline)
		h.set(phaseStandby)
	}
	srv, err := serve(cfg.HealthAddr, h.handler(m.Handler(), cfg.Profiling))
	if err != nil {
		return err
	}
	defer srv.shutdown()
	entry.WithField("addr", srv.addr).Info("serving /healthz, /readyz and /metrics")
	if cfg.OnListen != nil {
		cfg.OnListen(srv.addr)
	}
	entry.WithFields(logrus.Fields{
		"version":                       version.Version,
		"namespaces":                    namespacesField(cfg.Namespaces),
		"leaderElect":                   cfg.LeaderElect,
		"workers":                       cfg.Workers,
		"urgentWorkers":                 cfg.UrgentWorkers,
		"backgroundRequestsWhileUrgent": cfg.BackgroundWhileUrgent,
		"stepTimeout":                   cfg.StepTimeout.String(),
		"slowAfter":                     cfg.SlowAfter.String(),
		"hungWorkers":                   cfg.HungWorkers,
		"resyncPeriod":                  cfg.ResyncPeriod.String(),
	}).Info("pgloop operator starting")

	// pgloop's own recorder, not client-go's broadcaster, which drops
	// whatever arrives while its queue is full, transitions included
	// (pkg/events, docs/scale.md). It logs each Event at debug level, as
	// the broadcaster's StartLogging did, and what it still holds is
	// written, for EventFlushTimeout at most, once the leader's work and
	// the elector have stopped.
	rec := events.New(events.KubeSink(cl.kube.CoreV1()), events.Options{
		Scheme:     eventScheme,
		Source:     corev1.EventSource{Component: EventComponent},
		Transition: fsm.KnownState, // a transition's Event has its new state for reason
		Workers:    cfg.EventWorkers,
		Log:        entry,
		Dropped:    m.EventDropped,
		Written:    m.EventWritten,
	})
	defer rec.Shutdown(EventFlushTimeout)

	lead := func(ctx context.Context) error { return runLeader(ctx, &cfg, entry, cl, rec, m, h) }

	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		if cfg.LeaderElect {
			done <- elect(workCtx, &cfg, entry, cl, rec, m, h, lead)
			return
		}
		m.SetLeader(true)
		done <- lead(workCtx)
	}()

	select {
	case err = <-done:
	case err = <-srv.errc:
		stop()
		<-done
		err = fmt.Errorf("health server on %s: %w", srv.addr, err)
	}
	h.set(phaseStopping)
	m.SetLeader(false)
	if err != nil {
		entry.WithError(err).Error("pgloop operator stopped")
	} else {
		entry.Info("pgloop operator stopped")
	}
	return err
}

func namespacesField(ns []string) string {
	if len(ns) == 0 {
		return "(all)"
	}
	return strings.Join(ns, ",")
}

// elect runs lead while this replica holds the Lease. It returns nil once
// ctx is done, lead's error when lead fails on its own, and
// ErrLeadershipLost when the Lease is lost.
//
// The Lease is released only after lead has returned: with ReleaseOnCancel
// a successor may start at once, so nothing done under the Lease may still
// be running. That is why the elector runs on a context of its own, cancelled
// after lead's.
func elect(ctx context.Context, cfg *Config, log *logrus.Entry, cl clients, rec record.EventRecorder,
	m *metrics.Metrics, h *health, lead func(context.Context) error) error {
	id, err := identity()
	if err != nil {
		return err
	}
	log = log.WithFields(logrus.Fields{"lease": cfg.LeaderElectionNamespace + "/" + cfg.LeaderElectionID, "identity": id})
	var (
		mu       sync.Mutex
		stopping bool
		leading  sync.WaitGroup
		leadErr  = make(chan error, 1)
	)
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	// stop ends the leader's work, or makes sure it never starts, and
	// waits for it.
	stop := func() {
		stopWork()
		mu.Lock()
		stopping = true
		mu.Unlock()
		leading.Wait()
	}
	lease, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.LeaderElectionNamespace, cfg.LeaderElectionID,
		cl.election.CoreV1(), cl.election.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id, EventRecorder: rec})
	if err != nil {
		return fmt.Errorf("create leader election lock: %w", err)
	}
	lock := newFencedLock(lease, stop)
	if cl.fence != nil {
		cl.fence.Arm(func() bool { return lock.held(cfg.RenewDeadline) })
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            cfg.LeaderElectionID,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        h.watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if stopping {
					mu.Unlock()
					return
				}
				leading.Add(1)
				mu.Unlock()
				defer leading.Done()
				log.Info("leading: starting the clusters")
				m.SetLeader(true)
				// lctx ends when the Lease is lost; workCtx when Run
				// is asked to stop.
				wctx, cancel := context.WithCancel(lctx)
				defer cancel()
				defer context.AfterFunc(workCtx, cancel)()
				// The work stops once the renew deadline has passed
				// since the last renewal, before the Lease can expire
				// for the other replicas (fencedLock).
				go watchRenewals(wctx, lock, cfg.RenewDeadline, max(cfg.RetryPeriod/4, 10*time.Millisecond), func() {
					log.WithField("renewDeadline", cfg.RenewDeadline).Warn("the Lease was not renewed within the renew deadline: stopping the leader's work before another replica may take over")
					cancel()
				})
				leadErr <- lead(wctx)
			},
			OnStoppedLeading: func() { m.SetLeader(false) },
			OnNewLeader: func(leader string) {
				if leader != id {
					log.WithField("leader", leader).Info("standing by: another replica leads")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}

	electCtx, stopElect := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElect()
	electorDone := make(chan struct{})
	log.Info("waiting to lead")
	go func() {
		defer close(electorDone)
		le.Run(electCtx)
	}()

	var workErr error
	select {
	case <-ctx.Done():
	case workErr = <-leadErr:
	case <-electorDone:
	}
	// 1. Stop the leader's work and wait for it (or make sure it never
	//    starts), 2. then release the Lease (the lock stops the work
	//    before a release anyway, also when the elector gives up alone).
	stop()
	select {
	case err := <-leadErr:
		workErr = err
	default:
	}
	stopElect()
	<-electorDone

	switch {
	case ctx.Err() != nil:
		return nil
	case workErr != nil:
		return workErr
	}
	return fmt.Errorf("%w of lease %s/%s (could not renew it within %s)", ErrLeadershipLost,
		cfg.LeaderElectionNamespace, cfg.LeaderElectionID, cfg.RenewDeadline)
}

// identity names this replica in the Lease: the pod's hostname, and a
// random suffix so that a restarted container is not mistaken for the one
// that held the Lease before.
func identity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	return host + "_" + hex.EncodeToString(b), nil
}

// loopNotifier forwards the informers' notifications to the loop. The
// informers need a Notifier when they are built, the loop needs the
// controller, and the controller the informers (its Observer reads them):
// the loop is set here before the informers start, so no notification can
// miss it.
type loopNotifier struct{ loop *eventloop.Loop }

func (n *loopNotifier) Notify(key, signal string) { n.loop.Notify(key, signal) }

func (n *loopNotifier) NotifyUrgent(key, signal string) { n.loop.NotifyUrgent(key, signal) }

// runLeader runs the clusters until ctx is done: it checks the API and the
// CRD, starts the informers, waits for their caches, enqueues every
// cluster so that each resumes from its status, and runs the loop.
func runLeader(ctx context.Context, cfg *Config, log *logrus.Entry, cl clients, rec record.EventRecorder,
	m *metrics.Metrics, h *health) error {
	h.set(phaseSyncing)
	if err := checkAPI(ctx, cfg, cl.pg); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	clk := clock.RealClock{}
	notifier := &loopNotifier{}
	inf := informers.New(cl.kube, cl.pg, informers.Options{
		Namespaces: cfg.Namespaces,
		Log:        log,
	}, notifier)
	// One builder configuration for the facts and the effects: the facts
	// compare the StatefulSet with the one the effects would build.
	build := cfg.clusterOptions()
	// The one way into the clusters' PostgreSQL, Patroni and PgBouncer:
	// the plans' steps there, and the archive checks' reads (pkg/indb).
	db := indb.New(cl.kube, cl.pg, indb.Options{Build: build, Log: log, Cache: inf,
		SQL:            pgsql.Options{ConnectTimeout: cfg.SQLConnectTimeout, StatementTimeout: cfg.SQLStatementTimeout},
		ObserveSQL:     m.ObserveSQL,
		Patroni:        &patroni.Client{Timeout: cfg.PatroniTimeout, Observe: m.ObservePatroni},
		RestartTimeout: cfg.RestartTimeout,
	})
	// The archive checks read the caches and the primaries, and publish
	// what they find to the facts (pkg/archiving).
	arch := archiving.New(inf, db, notifier, archiving.Options{
		Period: cfg.ArchiveCheckPeriod, StatusPeriod: cfg.ArchiveStatusPeriod, Timeout: cfg.InDatabaseTimeout,
		Build: build, Log: log, Observe: m.ObserveArchiveCheck,
	})
	deriver := facts.NewDeriver(build, cfg.Switchover)
	obs := facts.NewObserver(arch, deriver, clk.Now)
	// The effects read the informers' caches and only write to the API.
	eff := effects.New(cl.kube, cl.pg, rec, effects.Options{Build: build, Log: log, Cache: inf, Desired: deriver,
		VolumeRetention: v1.VolumeRetention(cfg.VolumeRetention),
	})
	steps := controller.NewStepBuilder(eff, db, controller.Timeouts{
		InDatabase: cfg.InDatabaseTimeout,
		// Patroni answers a restart once PostgreSQL is up again, within
		// its own timeout; the step allows a little more for the call.
		Restart:    cfg.RestartTimeout + cfg.PatroniTimeout,
		Switchover: cfg.SwitchoverTimeout,
	})
	ctrl := controller.New(cfg.fsmConfig(), obs, timeSteps(steps, m.StepObserver), clk, log)
	// The budget wakes a waiting cluster through the loop, once it is set.
	ctrl.SetRolloutBudget(cfg.MaxRollingClusters, notifier.Notify)
	instrument(ctrl, m)
	loop := eventloop.New(ctrl, eventloop.Options{
		Clock:         clk,
		Workers:       cfg.Workers,
		UrgentWorkers: cfg.UrgentWorkers,
		StepTimeout:   cfg.StepTimeout,
		SlowAfter:     cfg.loopSlowAfter(),
		HungWorkers:   cfg.HungWorkers,
		Log:           log,
		Observe:       m.ObserveLag,
	})
	notifier.loop = loop
	m.WatchLoop(loop.Stats)
	m.WatchBackups(func() []*v1.Postgresql {
		var out []*v1.Postgresql
		for _, key := range inf.Keys() {
			if pg, ok := inf.Postgresql(key); ok {
				out = append(out, pg)
			}
		}
		return out
	})

	infCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	inf.Start(infCtx)
	syncCtx, cancel := context.WithTimeout(ctx, cfg.CacheSyncTimeout)
	err := inf.WaitForCacheSync(syncCtx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		// The reflectors retry on their own and only log why: ask the
		// API once more to say it.
		if cerr := checkAPI(ctx, cfg, cl.pg); cerr != nil {
			err = cerr
		} else if cerr := checkOwned(ctx, cfg, cl.kube); cerr != nil {
			err = cerr
		}
		return fmt.Errorf("informer caches did not sync within %s: %w", cfg.CacheSyncTimeout, err)
	}
	keys := inf.Keys()
	ctrl.Resuming(keys)
	for _, key := range keys {
		loop.Notify(key, informers.SignalSpec)
	}
	log.WithField("clusters", len(keys)).Info("caches synced: resuming every cluster")
	go arch.Run(infCtx)
	h.set(phaseRunning)
	return loop.Run(ctx)
}

// checkAPI lists the Postgresql resources of each watched namespace (one
// item at most) within cfg.CacheSyncTimeout, to fail at once with a clear
// cause instead of waiting for caches that cannot sync: the API server is
// unreachable, the CRD is not installed, or RBAC forbids the list.
func checkAPI(ctx context.Context, cfg *Config, pg pgclient.Interface) error {
	return checkLists(ctx, cfg, []watchedKind{{name: crdName, list: func(ctx context.Context, ns string) error {
		_, err := pg.PgloopV1().Postgresqls(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	}}})
}

// checkOwned lists each kind of object the informers watch besides the
// Postgresql resources (watchedKinds) within cfg.CacheSyncTimeout, to name
// the one the operator may not list when the caches do not sync: usually
// RBAC.
func checkOwned(ctx context.Context, cfg *Config, kube kubernetes.Interface) error {
	return checkLists(ctx, cfg, watchedKinds(kube))
}

// checkLists lists one item at most of each kind, in each watched
// namespace or once for a cluster-scoped kind, within
// cfg.CacheSyncTimeout, and says why the first list that fails did:
//  1. the CRD is not installed (only the Postgresql resource can be
//     missing: the others are built in);
//  2. RBAC forbids the list;
//  3. the API did not answer in time;
//  4. anything else, as the API said it.
func checkLists(ctx context.Context, cfg *Config, kinds []watchedKind) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.CacheSyncTimeout)
	defer cancel()
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, k := range kinds {
		in := namespaces
		if k.clusterScoped {
			in = []string{metav1.NamespaceAll}
		}
		for _, ns := range in {
			err := k.list(ctx, ns)
			if err == nil {
				continue
			}
			where := "in all namespaces"
			switch {
			case k.clusterScoped:
				where = "(cluster-scoped)"
			case ns != metav1.NamespaceAll:
				where = "in namespace " + ns
			}
			switch {
			case k.name == crdName && apierrors.IsNotFound(err):
				return fmt.Errorf("CRD %s not installed (kubectl apply -f manifests/crds/): %w", crdName, err)
			case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
				return fmt.Errorf("not allowed to list %s %s: check the operator's RBAC (manifests/operator/): %w", k.name, where, err)
			case ctx.Err() != nil:
				return fmt.Errorf("the Kubernetes API did not answer a list of %s %s within %s: %w", k.name, where, cfg.CacheSyncTimeout, err)
			}
			return fmt.Errorf("list %s %s: %w", k.name, where, err)
		}
	}
	return nil
}

// watchedKind is a kind of object the informers watch, for checkLists.
type watchedKind struct {
	// name is resource.group, as RBAC rules and the API's errors name it.
	name          string
	clusterScoped bool
	// list lists one item at most in namespace ns (all when empty, and
	// for a cluster-scoped kind).
	list func(ctx context.Context, ns string) error
}

// watchedKinds are the kinds pkg/informers watches besides the Postgresql
// resources (its New and newScope), listed with kube.
// TestWatchedKindsAreWhatTheInformersList keeps the two in step.
func watchedKinds(kube kubernetes.Interface) []watchedKind {
	one := metav1.ListOptions{Limit: 1}
	return []watchedKind{
		{name: "pods", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().Pods(ns).List(ctx, one)
			return err
		}},
		{name: "statefulsets.apps", list: func(ctx context.Context, ns string) error {
			_, err := kube.AppsV1().StatefulSets(ns).List(ctx, one)
			return err
		}},
		{name: "services", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().Services(ns).List(ctx, one)
			return err
		}},
		{name: "secrets", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().Secrets(ns).List(ctx, one)
			return err
		}},
		{name: "poddisruptionbudgets.policy", list: func(ctx context.Context, ns string) error {
			_, err := kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, one)
			return err
		}},
		{name: "persistentvolumeclaims", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, one)
			return err
		}},
		{name: "configmaps", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().ConfigMaps(ns).List(ctx, one)
			return err
		}},
		{name: "endpoints", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().Endpoints(ns).List(ctx, one)
			return err
		}},
		{name: "events", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().Events(ns).List(ctx, one)
			return err
		}},
		{name: "deployments.apps", list: func(ctx context.Context, ns string) error {
			_, err := kube.AppsV1().Deployments(ns).List(ctx, one)
			return err
		}},
		{name: "cronjobs.batch", list: func(ctx context.Context, ns string) error {
			_, err := kube.BatchV1().CronJobs(ns).List(ctx, one)
			return err
		}},
		{name: "resourcequotas", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().ResourceQuotas(ns).List(ctx, one)
			return err
		}},
		{name: "serviceaccounts", list: func(ctx context.Context, ns string) error {
			_, err := kube.CoreV1().ServiceAccounts(ns).List(ctx, one)
			return err
		}},
		{name: "roles.rbac.authorization.k8s.io", list: func(ctx context.Context, ns string) error {
			_, err := kube.RbacV1().Roles(ns).List(ctx, one)
			return err
		}},
		{name: "rolebindings.rbac.authorization.k8s.io", list: func(ctx context.Context, ns string) error {
			_, err := kube.RbacV1().RoleBindings(ns).List(ctx, one)
			return err
		}},
		{name: "storageclasses.storage.k8s.io", clusterScoped: true, list: func(ctx context.Context, _ string) error {
			_, err := kube.StorageV1().StorageClasses().List(ctx, one)
			return err
		}},
	}
}
