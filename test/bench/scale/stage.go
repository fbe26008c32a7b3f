package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/labeller"
	"github.com/pgloop/pgloop/test/testbed"
)

// stage is one plane of the run, with the bench's clients and watches, the
// labeller, and the operator once started. Its methods use ctx, which ends
// with the run's, or when the operator exits unasked.
type stage struct {
	b    *bench
	name string // in the logs' names
	ctx  context.Context
	// fail ends ctx with a cause.
	fail context.CancelCauseFunc

	plane *testbed.Plane
	rc    *rest.Config
	env   benchkit.Env
	// probeNS holds the probes; burstNS the burst's clusters, PerNamespace
	// in each.
	probeNS string
	burstNS []string

	op *benchkit.Operator
	// ops counts the operator processes started, for their logs' names;
	// killing marks an exit the bench asked for.
	ops     int
	killing atomic.Bool

	// stops are undone in reverse order by stop.
	stops []func() error
}

// nodesFor is how many nodes of podsPerNode pods hold pods pods, with room
// for a few more.
func nodesFor(pods, podsPerNode int) int {
	return (pods + 10 + podsPerNode - 1) / podsPerNode
}

// startStage starts a plane with nodes for pods pods, the bench's clients
// and watches, and with withLabeller the labeller; namespaces for the
// probes and for burst clusters (PerNamespace in each). The stage must be
// stopped, also when startStage fails.
func (b *bench) startStage(ctx context.Context, name string, pods, burst int, withLabeller bool) (*stage, error) {
	s := &stage{b: b, name: name}
	s.ctx, s.fail = context.WithCancelCause(ctx)
	s.stops = append(s.stops, func() error { s.fail(errors.New("stage stopped")); return nil })
	nodes := nodesFor(pods, b.cfg.PodsPerNode)
	opts := testbed.Options{
		Nodes: nodes,
		// Room in CPU and memory for every pod: only the pod count limits.
		NodeCapacity: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("64"),
			corev1.ResourceMemory: resource.MustParse("256Gi"),
			corev1.ResourcePods:   *resource.NewQuantity(int64(b.cfg.PodsPerNode), resource.DecimalSI),
		},
		ControllerQPS: b.cfg.PlaneQPS, ControllerBurst: b.cfg.PlaneBurst,
		// The plane's provisioner, or kwok's volume stages.
		VolumeWorkers: b.cfg.VolumeWorkers,
		TempDir:       b.workDir, KeepDir: b.cfg.WorkDir != "",
		StartTimeout: 5 * time.Minute,
	}
	plane, err := testbed.Start(ctx, opts)
	if err != nil {
		return s, fmt.Errorf("while starting the control plane: %w", err)
	}
	s.plane = plane
	s.stops = append(s.stops, func() error {
		var errs []error
		if herr := plane.Healthy(); herr != nil {
			errs = append(errs, fmt.Errorf("a process of the plane died during the run: %w", herr))
		}
		if serr := plane.Stop(); serr != nil {
			errs = append(errs, fmt.Errorf("while stopping the plane: %w", serr))
		}
		b.logf("%s: plane stopped", name)
		return errors.Join(errs...)
	})
	b.logf("%s: plane up in %v (%s of %d pods; volumes by %s)", name, benchkit.Ms(plane.StartupTime), plural(nodes, "node"), b.cfg.PodsPerNode, volumesText(b.cfg))

	rc, kube, pg, err := benchkit.Clients(plane.Config)
	if err != nil {
		return s, err
	}
	s.rc = rc
	s.env = benchkit.Env{Kube: kube, PG: pg, Tracker: benchkit.NewTracker(), Began: b.began}
	if err := benchkit.ApplyCRDs(s.ctx, rc, b.cfg.Repo); err != nil {
		return s, err
	}
	if s.probeNS, err = testbed.CreateNamespace(s.ctx, kube, "probe"); err != nil {
		return s, err
	}
	for i := 0; i < burst; i += b.cfg.PerNamespace {
		ns, err := testbed.CreateNamespace(s.ctx, kube, fmt.Sprintf("burst-%03d", i/b.cfg.PerNamespace))
		if err != nil {
			return s, err
		}
		s.burstNS = append(s.burstNS, ns)
	}

	// The bench's watches, and the labeller on a client of its own.
	watchCtx, stopWatches := context.WithCancel(context.Background())
	var watchers sync.WaitGroup
	var labellerErr error
	s.stops = append(s.stops, func() error {
		stopWatches()
		watchers.Wait()
		if labellerErr != nil {
			return fmt.Errorf("labeller: %w", labellerErr)
		}
		return nil
	})
	if withLabeller {
		lc := rest.CopyConfig(plane.Config)
		lc.QPS, lc.Burst = b.cfg.LabellerQPS, b.cfg.LabellerBurst
		lkube, err := kubernetes.NewForConfig(lc)
		if err != nil {
			return s, err
		}
		quiet := logrus.New()
		quiet.SetOutput(io.Discard)
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			labellerErr = labeller.Run(watchCtx, lkube, metav1.NamespaceAll, quiet)
		}()
	}
	syncCtx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	if err := s.env.Tracker.Start(watchCtx, syncCtx, kube, pg, metav1.NamespaceAll); err != nil {
		return s, err
	}
	return s, nil
}

// stop stops what the stage started, the operator first, the plane last.
func (s *stage) stop() error {
	var errs []error
	for i := len(s.stops) - 1; i >= 0; i-- {
		errs = append(errs, s.stops[i]())
	}
	return errors.Join(errs...)
}

// startOperator starts an operator with the bench's flags and extra ones
// after them, and waits until it is ready. An operator still running is
// the caller's to stop or kill first.
func (s *stage) startOperator(extra ...string) (ready time.Duration, err error) {
	s.ops++
	// The bench's own flags, then the user's, then extra: a later flag
	// wins.
	args := append([]string{"operator", "--kubeconfig", s.plane.Kubeconfig}, operatorFlags()...)
	args = append(append(args, s.b.cfg.OperatorArgs...), extra...)
	began := time.Now()
	op, err := benchkit.StartOperator(s.b.bin, args, filepath.Join(s.b.workDir, fmt.Sprintf("%s-operator-%d.log", s.name, s.ops)))
	if err != nil {
		return 0, err
	}
	s.op = op
	s.killing.Store(false)
	s.stops = append(s.stops, func() error { s.killing.Store(true); return op.StopNamed() })
	// The stage fails when the operator exits unasked.
	go func() {
		select {
		case <-op.Exited():
			if !s.killing.Load() {
				s.fail(fmt.Errorf("the operator exited: %v\n%s", op.Err(), op.Tail()))
			}
		case <-s.ctx.Done():
		}
	}()
	readyCtx, cancel := context.WithTimeout(s.ctx, s.b.cfg.RestoreTimeout)
	defer cancel()
	addr, err := op.WaitReady(readyCtx)
	if err != nil {
		return 0, err
	}
	s.env.Metrics = benchkit.NewScraper(addr)
	return time.Since(began), nil
}

// kill SIGKILLs the operator, a crash, or with term stops it with SIGTERM.
func (s *stage) kill(term bool) error {
	s.killing.Store(true)
	if term {
		return s.op.StopNamed()
	}
	s.op.Kill()
	return nil
}

// operatorUp starts the operator and waits until it is quiet.
func (s *stage) operatorUp() error {
	if _, err := s.startOperator(); err != nil {
		return err
	}
	return s.quiet("after its start")
}

// quiet waits until the operator is quiet, and says so, with the loop's
// events while it waited: what keeps an operator that is not quiet busy.
func (s *stage) quiet(what string) error {
	before, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return err
	}
	took, quiet, err := benchkit.WaitQuiet(s.ctx, s.env.Metrics, s.b.cfg.QuietTimeout)
	if err != nil {
		return err
	}
	after, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return err
	}
	events := LoopEventsOf(benchkit.Delta(before, after))
	if !quiet {
		s.b.logf("%s: operator NOT quiet %v %s (the loop's events meanwhile: %s); going on", s.name, benchkit.Ms(took), what, events)
		return nil
	}
	s.b.logf("%s: operator quiet %v %s (the loop's events meanwhile: %s)", s.name, benchkit.Ms(took), what, events)
	return nil
}

// burstNamespace returns the namespace of the i-th burst cluster.
func (s *stage) burstNamespace(i int) string { return s.burstNS[i/s.b.cfg.PerNamespace] }

// burstName names the i-th burst cluster.
func (s *stage) burstName(i int) string { return fmt.Sprintf("burst-%05d", i) }

// err is the stage's error for err: the cause of the stage's end when it
// ended (the operator exited), else err.
func (s *stage) err(err error) error {
	if cause := context.Cause(s.ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) && !strings.Contains(err.Error(), cause.Error()) {
		return fmt.Errorf("%w (%v)", err, cause)
	}
	return err
}
