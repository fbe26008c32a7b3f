package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	pgclientv1 "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/typed/pgloop/v1"
)

// Finalizer keeps a Postgresql in the apiserver until pgloop has cleaned up
// what the garbage collector would not: Patroni's ConfigMaps, which carry no
// owner reference, and the cluster's reference on the shared RBAC objects.
// The ensure effect adds it; the cleanup effect removes it last.
const Finalizer = "pgloop.dev/cleanup"

// Names of the steps Effects.Steps returns, for logs, metrics and tests.
const (
	StepStatus     = "status"
	StepEnsure     = "ensure"
	StepReplacePod = "replacePod"
	StepNudge      = "nudge"
	StepCleanup    = "cleanup"
	StepEvents     = "events"
)

// maxAttempts bounds the fresh-read-and-retry rounds of one write that meets
// a conflict. Retries are immediate: a conflict means another writer got
// there first, and a new read is all it takes; the step's deadline bounds
// the whole.
const maxAttempts = 5

// ErrNotControlled is returned, wrapped, when the StatefulSet, a Service or
// the PodDisruptionBudget of a cluster already exists and is not controlled
// by that cluster: pgloop never takes over an object someone else made. (A
// Secret that exists is used as it is, whoever made it.)
var ErrNotControlled = errors.New("exists and is not controlled by postgresql")

// ErrPodsTerminating is returned, wrapped, by the cleanup step while pods of
// the cluster still exist. Patroni re-creates its ConfigMaps as long as it
// runs, so they are deleted, and the finalizer removed, only once the pods
// are gone; until then the cleanup is retried.
var ErrPodsTerminating = fmt.Errorf("pods still terminating (%w)", fsm.ErrWaiting)

// EffectsOptions configure Effects.
type EffectsOptions struct {
	// Build are the builders' options (image, default resources).
	Build Options
	// Random is the source of new passwords; nil means crypto/rand.Reader.
	// Plans of several clusters run at once: reads are serialised, so
	// any reader will do (tests pass a seeded one).
	Random io.Reader
	// Log is the entry effects log to; nil means the standard logger.
	Log *logrus.Entry
	// Cache is where the effects read the resources and the objects of
	// the clusters: the informers' caches. Nil means every read is a GET
	// or LIST from the API.
	Cache Cache
}

// Effects turns the plans of the state machine into client-go calls: it
// implements controller.Effects. Every step is idempotent and writes only
// what differs, so that a periodic resync of a cluster that did not change
// writes nothing. With a Cache it reads nothing from the API either, as
// long as the cache is current. It is safe for concurrent use: plans of
// different clusters run at once.
type Effects struct {
	kube   kubernetes.Interface
	pg     pgclient.Interface
	rec    record.EventRecorder
	build  Options
	random io.Reader
	log    *logrus.Entry
	// cache is nil when every read goes to the API; shared and statuses
	// are used only with a cache.
	cache    Cache
	shared   sharedMemo
	statuses statusMemo
	now      func() time.Time
}

// NewEffects returns the Effects that act through kube (built-in objects),
// pg (Postgresql resources) and rec (Kubernetes Events on the resources).
func NewEffects(kube kubernetes.Interface, pg pgclient.Interface, rec record.EventRecorder, opts EffectsOptions) *Effects {
	log := opts.Log
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	var random io.Reader = rand.Reader
	if opts.Random != nil {
		random = &lockedReader{r: opts.Random}
	}
	return &Effects{kube: kube, pg: pg, rec: rec, build: opts.Build, random: random, log: log,
		cache: opts.Cache, now: time.Now}
}

// lockedReader serialises the reads of a random source shared by the
// workers that run plans: crypto/rand.Reader is safe for concurrent use, an
// arbitrary io.Reader is not.
type lockedReader struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}

// Steps returns the steps that carry out plan for the cluster key
// ("namespace/name"), in this order: status, ensure, replacePod, nudge,
// cleanup, events. Only the steps the plan asks for are returned. status and events
// are Always: the state machine's record and the user's Events are written
// even when an effect failed.
func (e *Effects) Steps(key string, plan *fsm.Plan) []eventloop.Step {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err == nil && (ns == "" || name == "") {
		err = errors.New("want namespace/name")
	}
	if err != nil {
		return []eventloop.Step{{Name: "key", Run: func(context.Context) error {
			return fmt.Errorf("cluster key %q: %w", key, err)
		}}}
	}
	r := &run{Effects: e, key: key, ns: ns, name: name, log: e.log.WithField("cluster", key)}
	var steps []eventloop.Step
	if plan.Status != nil {
		status := plan.Status
		steps = append(steps, eventloop.Step{Name: StepStatus, Always: true,
			Run: func(ctx context.Context) error { return r.writeStatus(ctx, status) }})
	}
	if plan.Ensure {
		steps = append(steps, eventloop.Step{Name: StepEnsure, Run: r.ensure})
	}
	if len(plan.ReplacePods) > 0 {
		pods := plan.ReplacePods
		steps = append(steps, eventloop.Step{Name: StepReplacePod,
			Run: func(ctx context.Context) error { return r.replacePods(ctx, pods) }})
	}
	if plan.Nudge != "" {
		version := plan.Nudge
		steps = append(steps, eventloop.Step{Name: StepNudge,
			Run: func(ctx context.Context) error { return r.nudge(ctx, version) }})
	}
	if plan.Cleanup {
		steps = append(steps, eventloop.Step{Name: StepCleanup, Run: r.cleanup})
	}
	if len(plan.Events) > 0 {
		events := plan.Events
		steps = append(steps, eventloop.Step{Name: StepEvents, Always: true,
			Run: func(ctx context.Context) error { r.recordEvents(ctx, events); return nil }})
	}
	return steps
}

// run is one plan of one cluster. Its steps run one after another on one
// goroutine, so it needs no lock.
type run struct {
	*Effects
	key, ns, name string
	log           *logrus.Entry
	// uid is the resource's UID once a step has read it, for the Events.
	uid types.UID
}

// postgresqls is the client of the resources of the cluster's namespace.
func (r *run) postgresqls() pgclientv1.PostgresqlInterface {
	return r.pg.PgloopV1().Postgresqls(r.ns)
}

// getCluster reads the resource: from the cache, or from the API when
// there is none, when fresh (after a Conflict: the cache is stale) or when
// the cache does not have it. It returns the caller's own copy, and nil and
// no error when the resource is gone, which every step takes as success.
func (r *run) getCluster(ctx context.Context, fresh bool) (*v1.Postgresql, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.cache != nil && !fresh {
		if pg, ok := r.cache.Postgresql(r.key); ok {
			r.uid = pg.UID
			return pg.DeepCopy(), nil
		}
	}
	pg, err := r.postgresqls().Get(ctx, r.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.log.Debug("resource gone")
		r.statuses.remember(r.key, "", nil)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get postgresql %s: %w", r.key, err)
	}
	r.uid = pg.UID
	return pg, nil
}

// replacePods deletes pods so the StatefulSet controller re-creates them
// from the current template, each with the claim named with it (one that
// never bound). Every pod is tried; the first error is returned.
func (r *run) replacePods(ctx context.Context, pods []fsm.PodRef) error {
	var first error
	for _, pod := range pods {
		if err := r.replacePod(ctx, pod); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// replacePod deletes one pod, then its claim when one is named. The UID
// preconditions make sure they are those very objects: when one is gone
// (NotFound) or already replaced by a successor of the same name
// (Conflict), the work is done. The claim's deletion completes once the
// pod is gone (the apiserver's claim protection); the StatefulSet
// controller waits for it before it creates the claim anew.
func (r *run) replacePod(ctx context.Context, pod fsm.PodRef) error {
	if err := r.deleteReplaced(ctx, "pod", pod.Name, pod.UID, r.kube.CoreV1().Pods(r.ns).Delete); err != nil {
		return err
	}
	if pod.Claim == "" {
		return nil
	}
	return r.deleteReplaced(ctx, "persistentvolumeclaim", pod.Claim, pod.ClaimUID,
		r.kube.CoreV1().PersistentVolumeClaims(r.ns).Delete)
}

func (r *run) deleteReplaced(ctx context.Context, kind, name, uid string, del deleteFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var opts metav1.DeleteOptions
	if uid != "" {
		u := types.UID(uid)
		opts.Preconditions = &metav1.Preconditions{UID: &u}
	}
	err := del(ctx, name, opts)
	switch {
	case err == nil:
		r.log.WithField(kind, name).Info("deleted " + kind + " for replacement")
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		r.log.WithField(kind, name).Debug(kind + " already replaced")
		return nil
	}
	return fmt.Errorf("delete %s %s: %w", kind, name, err)
}

// nudge records the namespace's quota version on the StatefulSet (a merge
// patch of one annotation). Any update of a StatefulSet makes its controller
// sync it at once, so a pod creation a ResourceQuota refused is tried again
// now, not after the controller's backoff. The annotation is also how the
// facts know this version was told (a restart does not nudge again).
func (r *run) nudge(ctx context.Context, version string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name := StatefulSetName(r.name)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationQuotaSeen, version)
	_, err := r.kube.AppsV1().StatefulSets(r.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	switch {
	case err == nil:
		r.log.WithField("quotas", version).Info("nudged the statefulset: the namespace's quotas changed")
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	return fmt.Errorf("nudge statefulset %s: %w", name, err)
}

// recordEvents records the plan's Kubernetes Events on the resource. The
// recorder sends them asynchronously, so this never blocks and never fails.
// Events are facts of transitions already made, so they are recorded even
// when the plan was cancelled. The resource's UID lets `kubectl describe`
// find them; when no earlier step read it, one read is tried.
func (r *run) recordEvents(ctx context.Context, events []fsm.KubeEvent) {
	if r.uid == "" && ctx.Err() == nil {
		if _, err := r.getCluster(ctx, false); err != nil {
			r.log.WithError(err).Debug("events recorded without the resource's UID")
		}
	}
	ref := &v1.Postgresql{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.PostgresqlKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.name, UID: r.uid},
	}
	for _, ev := range events {
		typ := corev1.EventTypeNormal
		if ev.Warning {
			typ = corev1.EventTypeWarning
		}
		r.rec.Event(ref, typ, ev.Reason, ev.Message)
	}
}
