package effects

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
	"k8s.io/client-go/tools/record"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	pgclientv1 "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/typed/pgloop/v1"
)

// HeadlessClass is the write class (reqclass.WithWriteClass) of a
// headless Service's writes.
const HeadlessClass = "headless"

// maxAttempts bounds the fresh-read-and-retry rounds of one write that meets
// a conflict. Retries are immediate: a conflict means another writer got
// there first, and a new read is all it takes; ctx's deadline bounds the
// whole.
const maxAttempts = 5

// ErrNotControlled is returned, wrapped, when the StatefulSet, a Service or
// the PodDisruptionBudget of a cluster already exists and is not controlled
// by that cluster: pgloop never takes over an object someone else made. (A
// Secret that exists is used as it is, whoever made it.)
var ErrNotControlled = errors.New("exists and is not controlled by postgresql")

// ErrPodsTerminating is returned, wrapped, by Cleanup while pods of the
// cluster still exist. Patroni re-creates its ConfigMaps (or Endpoints)
// as long as it runs, so they are deleted, and the finalizer removed, only once the pods
// are gone; until then the cleanup is retried. It wraps act.ErrWaiting.
var ErrPodsTerminating = fmt.Errorf("pods still terminating (%w)", act.ErrWaiting)

// Options configure Effects.
type Options struct {
	// Build are the builders' options (image, default resources).
	Build cluster.Options
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
	// Desired tells, where it is known already, what the StatefulSet of
	// a resource's spec is (the facts build it once per generation): an
	// ensure that finds the cached StatefulSet matching it builds none.
	// Nil means every ensure builds it. It must build with Build.
	Desired DesiredStatefulSets
	// Now tells the time the memo of the shared objects ages by; nil
	// means time.Now. The simulation (test/sim) passes its clock, on which
	// hours pass in a second.
	Now func() time.Time
	// Serial makes an effect's independent writes (the Secrets, Services
	// and PodDisruptionBudget of an ensure) one after another rather than
	// at once: the simulation (test/sim) needs its calls in an order its
	// seed decides.
	Serial bool
	// VolumeRetention is what a deleted cluster whose spec.volume.retention
	// is empty leaves of its data: its volume claims and credentials
	// Secrets kept (v1.RetainVolumes, the default when empty) or deleted.
	VolumeRetention v1.VolumeRetention
}

// DesiredStatefulSets tells what cluster.Compare reads of the StatefulSet
// a resource's spec asks for, when that is known without building it
// (facts.Deriver.KnownStatefulSet).
type DesiredStatefulSets interface {
	KnownStatefulSet(pg *v1.Postgresql) (cluster.StatefulSetSummary, bool)
}

// Effects are the calls that carry out the state machine's plans in the
// Kubernetes API, one method per effect, each for
// the cluster key ("namespace/name"). The effects that bring something to
// the spec write only what differs, so that a periodic resync of a cluster
// that did not change writes nothing; with a Cache they read nothing from
// the API either, as long as the cache is current. RecordEvents acts
// rather than converges (see the package comment). It is safe for concurrent use: plans of different clusters run
// at once.
type Effects struct {
	kube   kubernetes.Interface
	pg     pgclient.Interface
	rec    record.EventRecorder
	build  cluster.Options
	random io.Reader
	log    *logrus.Entry
	// cache is nil when every read goes to the API; shared and statuses
	// are used only with a cache.
	cache    Cache
	desired  DesiredStatefulSets
	shared   sharedMemo
	statuses statusMemo
	now      func() time.Time
	serial   bool
	// retain is Options.VolumeRetention.
	retain v1.VolumeRetention
}

// New returns the Effects that act through kube (built-in objects),
// pg (Postgresql resources) and rec (Kubernetes Events on the resources).
func New(kube kubernetes.Interface, pg pgclient.Interface, rec record.EventRecorder, opts Options) *Effects {
	log := opts.Log
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	var random io.Reader = rand.Reader
	if opts.Random != nil {
		random = &lockedReader{r: opts.Random}
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Effects{kube: kube, pg: pg, rec: rec, build: opts.Build, random: random, log: log,
		cache: opts.Cache, desired: opts.Desired, now: now, serial: opts.Serial, retain: opts.VolumeRetention}
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

// WriteStatus writes status, the state machine's record, to the status
// subresource of the cluster's resource, unless it is there already.
func (e *Effects) WriteStatus(ctx context.Context, key string, status *v1.PostgresqlStatus) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	return r.writeStatus(ctx, status)
}

// EnsureOptions are what an ensure leaves as it is.
type EnsureOptions struct {
	// KeepPodTemplate keeps the StatefulSet's pod template (and with it
	// every pod up to date) while the rest of it is brought in line: the
	// cluster waits for a slot of the fleet's rollout budget
	// (fsm.Plan.KeepPodTemplate).
	KeepPodTemplate bool
}

// Ensure creates the cluster's objects that are missing and updates those
// that differ from its spec (see ensure), but for what opts keeps.
func (e *Effects) Ensure(ctx context.Context, key string, opts EnsureOptions) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	r.keepTemplate = opts.KeepPodTemplate
	return r.ensure(ctx)
}

// ReplacePods deletes pods of the cluster, each with its claim when one is
// named, for the StatefulSet controller to re-create them from the current
// template.
func (e *Effects) ReplacePods(ctx context.Context, key string, pods []act.Pod) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	return r.replacePods(ctx, pods)
}

// Nudge records the namespace's quota version on the cluster's StatefulSet,
// so its controller tries again a pod creation a ResourceQuota refused.
func (e *Effects) Nudge(ctx context.Context, key, version string) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	return r.nudge(ctx, version)
}

// Cleanup deletes what the cluster of a resource being deleted is made of,
// then removes the finalizer (see cleanup).
func (e *Effects) Cleanup(ctx context.Context, key string) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	return r.cleanup(ctx)
}

// RecordEvents records events on the cluster's resource. Recording never
// fails, even with ctx done: it fails only for a key that is not
// "namespace/name".
func (e *Effects) RecordEvents(ctx context.Context, key string, events []act.Record) error {
	r, err := e.run(key)
	if err != nil {
		return err
	}
	r.recordEvents(ctx, events)
	return nil
}

// run returns the run of one effect on the cluster key.
func (e *Effects) run(key string) (*run, error) {
	ns, name, err := act.SplitKey(key)
	if err != nil {
		return nil, err
	}
	return &run{Effects: e, key: key, ns: ns, name: name, log: e.log.WithField("cluster", key)}, nil
}

// run is one effect on one cluster, on one goroutine but for the writes
// it makes at once (together), which only read it.
type run struct {
	*Effects
	key, ns, name string
	log           *logrus.Entry
	// uid is the resource's UID once the effect has read it, for Events.
	uid types.UID
	// keepTemplate is EnsureOptions.KeepPodTemplate.
	keepTemplate bool
}

// postgresqls is the client of the resources of the cluster's namespace.
func (r *run) postgresqls() pgclientv1.PostgresqlInterface {
	return r.pg.PgloopV1().Postgresqls(r.ns)
}

// getCluster reads the resource: from the cache, or from the API when
// there is none, when fresh (after a Conflict: the cache is stale) or when
// the cache does not have it. It returns the caller's own copy, and nil and
// no error when the resource is gone, which every effect takes as success.
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
func (r *run) replacePods(ctx context.Context, pods []act.Pod) error {
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
func (r *run) replacePod(ctx context.Context, pod act.Pod) error {
	core := r.kube.CoreV1()
	if err := r.deleteObject(ctx, "pod", pod.Name, core.Pods(r.ns).Delete, withUID(pod.UID)); err != nil {
		return err
	}
	if pod.Claim == "" {
		return nil
	}
	return r.deleteObject(ctx, "persistentvolumeclaim", pod.Claim, core.PersistentVolumeClaims(r.ns).Delete, withUID(pod.ClaimUID))
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
	name := cluster.StatefulSetName(r.name)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cluster.AnnotationQuotaSeen, version)
	_, err := r.kube.AppsV1().StatefulSets(r.ns).Patch(ctx, name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: act.FieldManager})
	switch {
	case err == nil:
		r.log.WithField("quotas", version).Info("nudged the statefulset: the namespace's quotas changed")
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	return fmt.Errorf("nudge statefulset %s: %w", name, err)
}

// recordEvents records Kubernetes Events on the resource. The recorder
// sends them asynchronously, so this never blocks and never fails. Events
// are facts of transitions already made, so they are recorded even when
// the plan was cancelled. The resource's UID lets `kubectl describe` find
// them: one read (of the cache, when there is one) is tried for it.
func (r *run) recordEvents(ctx context.Context, events []act.Record) {
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
