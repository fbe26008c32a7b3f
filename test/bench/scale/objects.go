package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/events"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	"github.com/pgloop/pgloop/pkg/generated/clientset/versioned/scheme"
	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/pgtest"
)

// ObjectsBaseline is the objects baseline (phase "objects"): on a plane of its
// own, with the labeller and no operator, N clusters created by Workers
// workers of a bare client that writes, for each, exactly what pgloop
// writes to create it (objectWriter).
type ObjectsBaseline struct {
	// Created is how long the N clusters' writes up to their objects took
	// (the Postgresql, its status, its objects, the second status);
	// AllRunning is from the first Create until every Running status
	// write returned: the bound of pgloop's work for N clusters.
	Created, AllRunning time.Duration
	// Requests are the bare client's, Events included, until its Event
	// recorder was flushed after the last Running.
	Requests Requests
}

// objectsBaseline measures the objects baseline at the row's N on a plane
// of its own: the same nodes, provisioner and labeller as the burst's, no
// operator.
func (b *bench) objectsBaseline(ctx context.Context, row *Row) (err error) {
	n := row.N
	began := time.Now()
	s, err := b.startStage(ctx, fmt.Sprintf("objects-n%d", n), n+b.cfg.Probes+1, n, true)
	defer func() { err = errors.Join(s.err(err), s.stop()) }()
	if err != nil {
		return err
	}
	for i := range n {
		s.env.Tracker.Expect(s.burstNamespace(i)+"/"+s.burstName(i), 1)
	}
	counter := &requestCounter{counts: Requests{}}
	rc := rest.CopyConfig(s.rc)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counter.wrap(rt) })
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	pg, err := pgclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	rec := newRecorder(kube)
	w := newObjectWriter(kube, pg, cluster.Options{Image: b.image}, rec)
	b.wall(&row.Walls, "objects baseline: plane up", began)

	o := &ObjectsBaseline{}
	began = time.Now()
	if o.Created, o.AllRunning, err = s.writeObjects(w, n); err != nil {
		rec.Shutdown(0)
		return err
	}
	rec.Shutdown(time.Minute)
	o.Requests = counter.snapshot()
	row.ObjectsBaseline = o
	b.logf("objects-n%d: %d clusters' objects written in %v, all Running written %v after the first Create; writes: %s",
		n, n, benchkit.Ms(o.Created), benchkit.Ms(o.AllRunning), o.Requests.Writes())
	b.wall(&row.Walls, "objects baseline: burst", began)
	return nil
}

// writeObjects creates n clusters with w, on Workers workers, and writes
// each one's Running status once the labeller labelled its pod master, on
// Workers more (as the operator's executor runs Running plans beside the
// creates). It returns how long the creates took and how long until the
// last Running write returned.
func (s *stage) writeObjects(w *objectWriter, n int) (created, allRunning time.Duration, err error) {
	cfg := s.b.cfg
	ctx, cancel := context.WithTimeoutCause(s.ctx, cfg.BurstTimeout, fmt.Errorf("not all %d clusters Running within %v", n, cfg.BurstTimeout))
	defer cancel()
	ready := make(chan *creation, n)
	labelled := &labelWaiter{tracker: s.env.Tracker, namespaces: s.burstNS, ready: ready, pending: map[string]*creation{}}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() { _ = labelled.run(waitCtx) }()

	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	running := make(chan error, n)
	for range min(cfg.Workers, n) {
		go func() {
			for {
				select {
				case c := <-ready:
					running <- w.running(ctx, c)
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	began := time.Now()
	creates := make(chan error, 1)
	go func() {
		creates <- createAll(ctx, n, cfg.Workers, func(ctx context.Context, i int) error {
			c, err := w.create(ctx, pgtest.Cluster(s.burstNamespace(i), s.burstName(i), 1))
			if err != nil {
				return err
			}
			labelled.add(c)
			return nil
		})
	}()
	for done := 0; done < n; {
		select {
		case err := <-creates:
			if err != nil {
				return 0, 0, err
			}
			created = time.Since(began)
			s.b.logf("%s: %d clusters and their objects written in %v (%.0f/s)", s.name, n, benchkit.Ms(created), float64(n)/created.Seconds())
		case err := <-running:
			if err != nil {
				return 0, 0, err
			}
			done++
		case <-progress.C:
			c := s.env.Tracker.Count(s.burstNS...)
			s.b.logf("%s: %d of %d Running written (%d pods Ready, %d labelled)", s.name, done, n, c.AllReady, c.Labelled)
		case <-ctx.Done():
			c := s.env.Tracker.Count(s.burstNS...)
			return 0, 0, fmt.Errorf("%w: %d pods Ready, %d labelled, %d Running written", context.Cause(ctx), c.AllReady, c.Labelled, done)
		}
	}
	return created, time.Since(began), nil
}

// eventComponent is the source component of pgloop's Events
// (operator.EventComponent, not imported: the bench's module does not
// build the operator's metrics).
const eventComponent = "pgloop"

// newRecorder returns pgloop's own Event recorder as the operator sets it
// up (pkg/operator), writing through kube.
func newRecorder(kube kubernetes.Interface) *events.Recorder {
	return events.New(events.KubeSink(kube.CoreV1()), events.Options{
		Scheme:     scheme.Scheme,
		Source:     corev1.EventSource{Component: eventComponent},
		Transition: fsm.KnownState,
		Workers:    events.DefaultWorkers,
	})
}

// objectWriter writes, for one cluster, exactly what pgloop writes to
// create it, with pgloop's own parts: its state machine (pkg/fsm) decides
// the plans and the statuses from the facts a create goes through, its
// builders (pkg/cluster) make the objects, its recorder (pkg/events)
// writes the Events. What it does not share with pgloop is the loop, the
// caches and the informers: it reads nothing from the API, knowing what
// a fresh plane holds.
type objectWriter struct {
	kube   kubernetes.Interface
	pg     pgclient.Interface
	build  cluster.Options
	rec    *events.Recorder
	engine *engine
	shared *sharedObjects
}

func newObjectWriter(kube kubernetes.Interface, pg pgclient.Interface, build cluster.Options, rec *events.Recorder) *objectWriter {
	return &objectWriter{kube: kube, pg: pg, build: build, rec: rec,
		engine: &engine{e: fsm.NewEngine(fsm.DefaultConfig())}, shared: &sharedObjects{byNamespace: map[string]*sharedWrite{}}}
}

// engine is one fsm.Engine for the machines of every worker: an Engine
// runs one machine's input at a time.
type engine struct {
	mu sync.Mutex
	e  *fsm.Engine
}

func (e *engine) handle(m *fsm.Machine, in fsm.Input, f fsm.Facts) fsm.Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	return m.Handle(in, f, time.Now())
}

// creation is one cluster being created: its resource as last written,
// its machine, and the facts the machine was last given.
type creation struct {
	key     string
	pg      *v1.Postgresql
	machine *fsm.Machine
	facts   fsm.Facts
}

// create creates the resource pg, then runs its machine as pgloop's loop
// does for a new cluster: the create's plan (its status, the objects, the
// Creating Event), then the plans that follow its result (the status with
// the create's timeout) until there is none.
func (w *objectWriter) create(ctx context.Context, pg *v1.Postgresql) (*creation, error) {
	out, err := w.pg.PgloopV1().Postgresqls(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("while creating cluster %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	c := &creation{key: pg.Namespace + "/" + pg.Name, pg: out, machine: w.engine.e.New(nil),
		facts: fsm.Facts{Generation: out.Generation, Desired: out.Spec.NumberOfInstances}}
	return c, w.run(ctx, c, fsm.Input{Kind: fsm.Signal})
}

// running tells the machine of c that its pod is Ready and labelled master
// (the facts pgloop derives from them: one Ready, the pod as primary), and
// runs the plans that follow: the Running status and Event.
func (w *objectWriter) running(ctx context.Context, c *creation) error {
	c.facts.Ready = c.facts.Desired
	c.facts.Primary = cluster.StatefulSetName(c.pg.Name) + "-0"
	return w.run(ctx, c, fsm.Input{Kind: fsm.Signal})
}

// run hands in to c's machine, then each plan's result, and does each plan
// as pgloop's executor does: the status first, then the objects, then the
// Events (which the recorder writes in the background).
func (w *objectWriter) run(ctx context.Context, c *creation, in fsm.Input) error {
	for res := w.engine.handle(c.machine, in, c.facts); res.Plan != nil; res = w.engine.handle(c.machine, in, c.facts) {
		p := res.Plan
		if p.Cleanup || p.Nudge != "" || p.InDatabase != nil || p.ResumePoolers || p.Switchover != nil || len(p.ReplacePods)+len(p.Restart) > 0 {
			return fmt.Errorf("cluster %s: plan %d asks for more than a create's writes", c.key, p.ID)
		}
		if p.Status != nil {
			if err := w.writeStatus(ctx, c, p.Status); err != nil {
				return err
			}
		}
		if p.Ensure {
			if err := w.ensure(ctx, c); err != nil {
				return err
			}
			c.facts.ObjectsCurrent = true
		}
		ref := &v1.Postgresql{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.PostgresqlKind},
			ObjectMeta: metav1.ObjectMeta{Namespace: c.pg.Namespace, Name: c.pg.Name, UID: c.pg.UID},
		}
		for _, r := range p.Records {
			typ := corev1.EventTypeNormal
			if r.Warning {
				typ = corev1.EventTypeWarning
			}
			w.rec.Event(ref, typ, r.Reason, r.Message)
		}
		in = fsm.Input{Kind: fsm.PlanDone, PlanID: p.ID}
	}
	return nil
}

// writeStatus writes status through the status subresource, with the
// resource as last written (no read: nobody else writes it).
func (w *objectWriter) writeStatus(ctx context.Context, c *creation, status *v1.PostgresqlStatus) error {
	pg := c.pg.DeepCopy()
	pg.Status = *status.DeepCopy()
	out, err := w.pg.PgloopV1().Postgresqls(pg.Namespace).UpdateStatus(ctx, pg, metav1.UpdateOptions{FieldManager: act.FieldManager})
	if err != nil {
		return fmt.Errorf("update status of postgresql %s: %w", c.key, err)
	}
	c.pg = out
	return nil
}

// ensure creates the objects of a new cluster in pgloop's order
// (effects.run.ensure, with its caches): at once the finalizer's patch,
// the Services, the PodDisruptionBudget, and the namespace's shared
// objects (the first cluster of the namespace only) followed by the
// Secrets, both at once; the StatefulSet once those and the finalizer
// are written.
func (w *objectWriter) ensure(ctx context.Context, c *creation) error {
	objs, err := cluster.Build(c.pg, w.build, nil)
	if err != nil {
		return fmt.Errorf("build objects of postgresql %s: %w", c.key, err)
	}
	ns := c.pg.Namespace
	core := w.kube.CoreV1()
	var finalized *v1.Postgresql
	done := make(chan struct{})
	writes := []func() error{func() (err error) {
		defer close(done)
		finalized, err = w.addFinalizer(ctx, c.pg)
		return err
	}}
	for _, s := range objs.Services {
		writes = append(writes, func() error {
			return createErr("service", s.Name, errOf(core.Services(ns).Create(ctx, s, createOptions)))
		})
	}
	writes = append(writes, func() error {
		pdb := objs.PodDisruptionBudget
		return createErr("poddisruptionbudget", pdb.Name, errOf(w.kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, createOptions)))
	}, func() error {
		if err := w.shared.ensure(ns, func() error { return w.createShared(ctx, objs) }); err != nil {
			return err
		}
		var secrets []func() error
		for _, s := range objs.Secrets {
			secrets = append(secrets, func() error {
				return createErr("secret", s.Name, errOf(core.Secrets(ns).Create(ctx, s, createOptions)))
			})
		}
		if err := together(secrets); err != nil {
			return err
		}
		<-done
		if finalized == nil {
			return nil // the finalizer's error says why
		}
		sts := objs.StatefulSet
		return createErr("statefulset", sts.Name, errOf(w.kube.AppsV1().StatefulSets(ns).Create(ctx, sts, createOptions)))
	})
	if err := together(writes); err != nil {
		return err
	}
	c.pg = finalized
	return nil
}

// createOptions are pgloop's options of a create.
var createOptions = metav1.CreateOptions{FieldManager: act.FieldManager}

// errOf is the error of a write, its object apart.
func errOf[T any](_ T, err error) error { return err }

// createErr is err of the create of the object name of kind, with the
// object named.
func createErr(kind, name string, err error) error {
	if err != nil {
		return fmt.Errorf("create %s %s: %w", kind, name, err)
	}
	return nil
}

// createShared creates the namespace's ServiceAccount, Role and
// RoleBinding, one after another, as pgloop does for a new namespace.
func (w *objectWriter) createShared(ctx context.Context, objs *cluster.Objects) error {
	ns := objs.ServiceAccount.Namespace
	if err := createErr("serviceaccount", objs.ServiceAccount.Name, errOf(w.kube.CoreV1().ServiceAccounts(ns).Create(ctx, objs.ServiceAccount, createOptions))); err != nil {
		return err
	}
	if err := createErr("role", objs.Role.Name, errOf(w.kube.RbacV1().Roles(ns).Create(ctx, objs.Role, createOptions))); err != nil {
		return err
	}
	return createErr("rolebinding", objs.RoleBinding.Name, errOf(w.kube.RbacV1().RoleBindings(ns).Create(ctx, objs.RoleBinding, createOptions)))
}

// addFinalizer adds cluster.Finalizer to pg with pgloop's JSON patch (a
// test of the finalizers read, then an add of the list with ours), and
// returns the resource as written.
func (w *objectWriter) addFinalizer(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error) {
	var was any
	if len(pg.Finalizers) > 0 {
		was = pg.Finalizers
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": was},
		{"op": "add", "path": "/metadata/finalizers", "value": append(slices.Clone(pg.Finalizers), cluster.Finalizer)},
	})
	if err != nil {
		return nil, err
	}
	out, err := w.pg.PgloopV1().Postgresqls(pg.Namespace).Patch(ctx, pg.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: act.FieldManager})
	if err != nil {
		return nil, fmt.Errorf("add finalizer to postgresql %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return out, nil
}

// together runs writes at once and returns the first error in their
// order, as pgloop's ensure does.
func together(writes []func() error) error {
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, write := range writes {
		wg.Go(func() { errs[i] = write() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sharedObjects are the namespaces whose shared objects were written: the
// first cluster of a namespace writes them, the others of the namespace
// wait for that, as pgloop's memo of them has the later clusters write
// none.
type sharedObjects struct {
	mu          sync.Mutex
	byNamespace map[string]*sharedWrite
}

type sharedWrite struct {
	once sync.Once
	err  error
}

// ensure runs write once for namespace ns and returns its error.
func (s *sharedObjects) ensure(ns string, write func() error) error {
	s.mu.Lock()
	sw := s.byNamespace[ns]
	if sw == nil {
		sw = &sharedWrite{}
		s.byNamespace[ns] = sw
	}
	s.mu.Unlock()
	sw.once.Do(func() { sw.err = write() })
	return sw.err
}

// labelWaiter hands each creation added to it to ready once the tracker
// saw its pod Ready and labelled master, what pgloop waits for before a
// cluster is Running. It looks at the waiting ones only when the count of
// labelled clusters grows, so the wait costs nothing per watch event.
type labelWaiter struct {
	tracker    *benchkit.Tracker
	namespaces []string
	ready      chan<- *creation

	mu      sync.Mutex
	pending map[string]*creation
}

// add makes c wait for its label; one labelled already goes at once.
func (l *labelWaiter) add(c *creation) {
	l.mu.Lock()
	l.pending[c.key] = c
	l.mu.Unlock()
	if !l.tracker.Snapshot(c.key).Labelled.IsZero() {
		l.take(c.key)
	}
}

// take hands the creation of key to ready, unless another call did.
func (l *labelWaiter) take(key string) {
	l.mu.Lock()
	c, ok := l.pending[key]
	delete(l.pending, key)
	l.mu.Unlock()
	if ok {
		l.ready <- c
	}
}

// run hands the waiting creations over as they are labelled, until ctx
// ends.
func (l *labelWaiter) run(ctx context.Context) error {
	seen := 0
	for {
		if err := l.tracker.WaitCounts(ctx, l.namespaces, func(c Counts) bool { return c.Labelled > seen }); err != nil {
			return err
		}
		seen = l.tracker.Count(l.namespaces...).Labelled
		l.mu.Lock()
		keys := make([]string, 0, len(l.pending))
		for key := range l.pending {
			keys = append(keys, key)
		}
		l.mu.Unlock()
		for _, key := range keys {
			if !l.tracker.Snapshot(key).Labelled.IsZero() {
				l.take(key)
			}
		}
	}
}

// requestCounter counts a client's requests by verb, resource and
// failure, as pgloop's pgloop_api_requests_total does for its own.
type requestCounter struct {
	mu     sync.Mutex
	counts Requests
}

func (r *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		r.add(callOf(req, code))
		return resp, err
	})
}

func (r *requestCounter) add(c Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[c]++
}

// snapshot returns a copy of the counts.
func (r *requestCounter) snapshot() Requests {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(Requests, len(r.counts))
	for c, n := range r.counts {
		out[c] = n
	}
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// callOf names a request as pgloop's metric does: its verb (create,
// update, patch, delete, get, list, watch), its resource with its
// subresource ("postgresqls/status"), and its answer's code unless a
// success.
func callOf(req *http.Request, code string) Call {
	// /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]] or
	// /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME[/SUB]].
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) > 0 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	resource, named := "", len(parts) > 1
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	verb := strings.ToLower(req.Method)
	switch req.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	}
	if strings.HasPrefix(code, "2") {
		code = ""
	}
	return Call{Verb: verb, Resource: resource, Code: code}
}
