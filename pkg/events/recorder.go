// Package events records Kubernetes Events without losing the ones users
// need during a burst.
//
// client-go's Event broadcaster queues 1,000 Events and drops whatever
// arrives while its queue is full, then writes them one at a time, sleeping
// 10s between retries: under a slow API server it dropped two thirds of a
// fleet's burst (docs/scale.md), a cluster's "Running -> Degraded" as
// readily as a routine one. Recorder replaces it:
//
//  1. Recording never blocks and never does I/O: the Event goes into its
//     object's queue, under one mutex.
//  2. Each object (a cluster's resource, the Lease) has a queue of at most
//     PerObject Events; all queues together hold at most MaxQueued. When a
//     bound is hit an Event that is not a transition's (Options.Transition)
//     is dropped first: the object's oldest one, or any object's for the
//     global bound; only then the object's oldest transition Event. So a
//     cluster keeps at least its latest transitions whatever the burst,
//     unless MaxQueued is smaller than the clusters that have one queued.
//  3. Workers (Options.Workers) write in parallel, one object at a time
//     each, so an object's Events reach the API in order and the objects
//     take turns. A write has a deadline (Timeout) and is retried at most
//     Retries times after a short backoff; then the Event is dropped.
//  4. The same Event (object, type, reason, message) again, while the first
//     is queued, only increments its count; once written, within Window, it
//     is written as a patch of that Event's count, as client-go's correlator
//     does for identical Events (its grouping of similar Events is not kept:
//     pgloop's messages say what changed, so they are rarely similar).
//  5. Every drop is counted (Options.Dropped, by kind) and logged at debug;
//     every write is counted (Options.Written).
//  6. Shutdown stops recording and flushes what it can within a bound.
//
// The writes carry no plan's priority, so the request gate (pkg/traffic)
// counts them as background requests, as it did the broadcaster's.
package events

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	ref "k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	DefaultWorkers   = 4
	DefaultPerObject = 16
	DefaultMaxQueued = 10000
	DefaultTimeout   = 10 * time.Second
	DefaultRetries   = 3
	DefaultBackoff   = 500 * time.Millisecond
	DefaultWindow    = 10 * time.Minute
	// DefaultMaxCached bounds the written Events remembered for
	// aggregation, as client-go's correlator's LRU cache does.
	DefaultMaxCached = 4096
)

// Sink writes Events. KubeSink is the API's; tests pass slow ones.
type Sink interface {
	Create(ctx context.Context, ev *corev1.Event) error
	// Patch sets the count, last timestamp and message of the Event
	// namespace/name.
	Patch(ctx context.Context, namespace, name string, data []byte) error
}

// KubeSink writes Events with a client-go Events client.
func KubeSink(c typedcorev1.EventsGetter) Sink { return kubeSink{c} }

type kubeSink struct{ c typedcorev1.EventsGetter }

func (s kubeSink) Create(ctx context.Context, ev *corev1.Event) error {
	_, err := s.c.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

func (s kubeSink) Patch(ctx context.Context, namespace, name string, data []byte) error {
	_, err := s.c.Events(namespace).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
	return err
}

// Options configure a Recorder; zero values take the defaults.
type Options struct {
	Scheme *runtime.Scheme
	Source corev1.EventSource
	// Transition reports whether an Event of this reason records a
	// transition, kept in preference to the others.
	Transition func(reason string) bool
	// Workers write at once, one object's Events at a time each.
	Workers int
	// PerObject bounds one object's queue, the Event in flight included;
	// MaxQueued all queues together (at about 1 KiB an Event, 10 MiB).
	PerObject int
	MaxQueued int
	Timeout   time.Duration // of one write
	Retries   int           // after the first attempt
	Backoff   time.Duration // before the first retry, doubled after each
	Window    time.Duration // of aggregation
	MaxCached int
	Clock     clock.Clock // of timestamps, backoffs and the flush's bound
	Log       *logrus.Entry
	// Dropped and Written count drops and writes (pkg/metrics).
	Dropped func(transition bool)
	Written func()
}

// item is one Event waiting to be written.
type item struct {
	ev         *corev1.Event
	key        string // aggregation key
	transition bool
}

// object is one involved object's queue. busy: a worker writes its head;
// ready: it is in Recorder.ready.
type object struct {
	key         string
	items       []*item
	busy, ready bool
}

func (o *object) others() int {
	n := 0
	for _, it := range o.items {
		if !it.transition {
			n++
		}
	}
	return n
}

// written is an Event written, for aggregation.
type written struct {
	namespace, name string
	count           int32
	last            time.Time
}

// Recorder is a record.EventRecorder that writes Events in the background;
// see the package comment.
type Recorder struct {
	opts Options
	sink Sink

	mu      sync.Mutex
	wake    *sync.Cond
	objects map[string]*object
	ready   []string // objects with items and no write in flight, oldest first
	others  []string // objects that may hold a non-transition Event (lazy)
	queued  int
	cache   map[string]*written
	stopped bool

	ctx    context.Context // ends when the flush's time is up
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Recorder with its workers started; Shutdown stops them.
func New(sink Sink, opts Options) *Recorder {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opts.Workers, DefaultWorkers)
	def(&opts.PerObject, DefaultPerObject)
	def(&opts.MaxQueued, DefaultMaxQueued)
	def(&opts.MaxCached, DefaultMaxCached)
	if opts.Retries < 0 {
		opts.Retries = 0
	}
	defd(&opts.Timeout, DefaultTimeout)
	defd(&opts.Backoff, DefaultBackoff)
	defd(&opts.Window, DefaultWindow)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		l := logrus.New()
		l.SetLevel(logrus.PanicLevel)
		opts.Log = logrus.NewEntry(l)
	}
	if opts.Transition == nil {
		opts.Transition = func(string) bool { return false }
	}
	if opts.Dropped == nil {
		opts.Dropped = func(bool) {}
	}
	if opts.Written == nil {
		opts.Written = func() {}
	}
	if opts.Scheme == nil {
		opts.Scheme = runtime.NewScheme()
	}
	r := &Recorder{opts: opts, sink: sink, objects: map[string]*object{}, cache: map[string]*written{}}
	r.wake = sync.NewCond(&r.mu)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	for range opts.Workers {
		r.wg.Add(1)
		go r.work()
	}
	return r
}

// Event records an Event on obj.
func (r *Recorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.record(obj, nil, eventtype, reason, message)
}

// Eventf is Event with a formatted message.
func (r *Recorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.record(obj, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf is Eventf with annotations on the Event.
func (r *Recorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.record(obj, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *Recorder) record(obj runtime.Object, annotations map[string]string, typ, reason, message string) {
	log := r.opts.Log
	or, err := ref.GetReference(r.opts.Scheme, obj)
	if err != nil {
		log.WithError(err).WithField("reason", reason).Error("could not record an Event: no reference to its object")
		return
	}
	now := metav1.NewTime(r.opts.Clock.Now())
	ns := or.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("%v.%x", or.Name, now.UnixNano()),
			Namespace:   ns,
			Annotations: annotations,
		},
		InvolvedObject: *or, Reason: reason, Message: message, Type: typ,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Source: r.opts.Source,
	}
	objKey := or.Kind + "/" + ns + "/" + or.Name + "/" + string(or.UID)
	it := &item{ev: ev, key: objKey + "\x00" + typ + "\x00" + reason + "\x00" + message, transition: r.opts.Transition(reason)}
	// As the broadcaster's StartLogging did; the fields are built only
	// for a debug log, as a burst records thousands.
	if log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		log = log.WithFields(logrus.Fields{"object": ns + "/" + or.Name, "kind": or.Kind, "type": typ, "reason": reason})
		log.WithField("message", message).Debug("event")
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		r.drop(log, it, "the operator is stopping")
		return
	}
	o := r.objects[objKey]
	if o == nil {
		o = &object{key: objKey}
		r.objects[objKey] = o
	}
	// The same Event queued already, and not in flight: count it there.
	for i, q := range o.items {
		if q.key == it.key && !(o.busy && i == 0) {
			q.ev.Count++
			q.ev.LastTimestamp = now
			return
		}
	}
	if len(o.items) >= r.opts.PerObject {
		r.evict(log, o, it)
	} else if r.queued >= r.opts.MaxQueued {
		if !r.evictOther(log) {
			r.evict(log, o, it)
		}
	}
	if it.ev == nil { // evict dropped it
		r.forget(o)
		return
	}
	o.items = append(o.items, it)
	r.queued++
	if !it.transition {
		r.others = append(r.others, objKey)
		r.compactOthers()
	}
	if !o.busy && !o.ready {
		o.ready = true
		r.ready = append(r.ready, objKey)
		r.wake.Signal()
	}
}

// evict makes room in o for it, or drops it: o's oldest non-transition
// Event; else it, if it is not a transition's; else o's oldest transition
// Event; else (o holds nothing but the one in flight) it.
func (r *Recorder) evict(log *logrus.Entry, o *object, it *item) {
	first := 0
	if o.busy {
		first = 1 // in flight: not ours to drop
	}
	for i := first; i < len(o.items); i++ {
		if !o.items[i].transition {
			r.remove(log, o, i, "bound reached")
			return
		}
	}
	if !it.transition || first >= len(o.items) {
		r.drop(log, it, "bound reached")
		it.ev = nil
		return
	}
	r.remove(log, o, first, "bound reached")
}

// evictOther drops the oldest non-transition Event of the object that has
// waited longest to be found holding one; false if none is queued.
func (r *Recorder) evictOther(log *logrus.Entry) bool {
	for len(r.others) > 0 {
		key := r.others[0]
		r.others = r.others[1:]
		o := r.objects[key]
		if o == nil {
			continue
		}
		for i, q := range o.items {
			if !q.transition && !(o.busy && i == 0) {
				r.remove(log, o, i, "global bound reached")
				return true
			}
		}
	}
	return false
}

// compactOthers keeps r.others within twice the queue's bound, dropping
// entries of objects without a non-transition Event and duplicates.
func (r *Recorder) compactOthers() {
	if len(r.others) <= 2*r.opts.MaxQueued {
		return
	}
	seen := map[string]int{}
	out := r.others[:0]
	for _, key := range r.others {
		if o := r.objects[key]; o != nil && seen[key] < o.others() {
			seen[key]++
			out = append(out, key)
		}
	}
	clear(r.others[len(out):])
	r.others = out
}

func (r *Recorder) remove(log *logrus.Entry, o *object, i int, why string) {
	it := o.items[i]
	o.items = append(o.items[:i], o.items[i+1:]...)
	r.queued--
	r.drop(log, it, why)
}

func (r *Recorder) drop(log *logrus.Entry, it *item, why string) {
	r.opts.Dropped(it.transition)
	if !log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	log.WithFields(logrus.Fields{"transition": it.transition, "count": it.ev.Count, "message": it.ev.Message}).
		Debugf("event dropped: %s", why)
}

// forget removes an object with nothing queued or in flight.
func (r *Recorder) forget(o *object) {
	if len(o.items) == 0 && !o.busy && !o.ready {
		delete(r.objects, o.key)
	}
}

// work writes the head of the longest ready object until Shutdown.
func (r *Recorder) work() {
	defer r.wg.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for len(r.ready) == 0 && !(r.stopped && r.queued == 0) && r.ctx.Err() == nil {
			r.wake.Wait()
		}
		if len(r.ready) == 0 || r.ctx.Err() != nil {
			return // stopped and flushed, or out of time: Shutdown drops the rest
		}
		key := r.ready[0]
		r.ready[0] = ""
		r.ready = r.ready[1:]
		o := r.objects[key]
		o.ready = false
		if len(o.items) == 0 {
			r.forget(o)
			continue
		}
		o.busy = true
		it := o.items[0]
		r.mu.Unlock()
		err := r.write(it)
		r.mu.Lock()
		o.busy = false
		o.items = o.items[1:]
		r.queued--
		if err != nil {
			r.drop(r.opts.Log.WithError(err).WithField("object", it.ev.InvolvedObject.Namespace+"/"+it.ev.InvolvedObject.Name), it, "write failed")
		}
		if len(o.items) > 0 {
			o.ready = true
			r.ready = append(r.ready, key)
		} else {
			r.forget(o)
		}
		if r.stopped && r.queued == 0 {
			r.wake.Broadcast()
		}
	}
}

// write writes it, as a patch of the same Event written within the
// window, retrying with backoff. It runs without the lock.
func (r *Recorder) write(it *item) error {
	var err error
	backoff := r.opts.Backoff
	for attempt := 0; ; attempt++ {
		err = r.writeOnce(it)
		if err == nil {
			r.opts.Written()
			return nil
		}
		if attempt >= r.opts.Retries || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || r.ctx.Err() != nil {
			return err
		}
		select {
		case <-r.opts.Clock.After(backoff):
		case <-r.ctx.Done():
			return err
		}
		backoff *= 2
	}
}

func (r *Recorder) writeOnce(it *item) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.Timeout)
	defer cancel()

	now := r.opts.Clock.Now()
	r.mu.Lock()
	prev := r.cache[it.key]
	if prev != nil && now.Sub(prev.last) > r.opts.Window {
		delete(r.cache, it.key)
		prev = nil
	}
	count := it.ev.Count
	last := it.ev.LastTimestamp
	r.mu.Unlock()

	if prev != nil {
		data, _ := json.Marshal(map[string]any{"count": prev.count + count, "lastTimestamp": last, "message": it.ev.Message})
		err := r.sink.Patch(ctx, prev.namespace, prev.name, data)
		if err == nil {
			r.remember(it, prev.namespace, prev.name, prev.count+count, now)
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		// Gone (expired): create it anew.
	}
	ev := it.ev.DeepCopy()
	if err := r.sink.Create(ctx, ev); err != nil {
		return err
	}
	r.remember(it, ev.Namespace, ev.Name, count, now)
	return nil
}

func (r *Recorder) remember(it *item, namespace, name string, count int32, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cache[it.key]; !ok && len(r.cache) >= r.opts.MaxCached {
		for k, w := range r.cache {
			if now.Sub(w.last) > r.opts.Window {
				delete(r.cache, k)
			}
		}
		for k := range r.cache {
			if len(r.cache) < r.opts.MaxCached {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[it.key] = &written{namespace: namespace, name: name, count: count, last: now}
}

// Queued returns how many Events wait to be written, in flight included.
func (r *Recorder) Queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queued
}

// Shutdown stops recording (later Events are dropped and counted) and
// writes what is queued for at most flush; then it cancels the writes in
// flight and drops the rest. It returns once every worker has stopped.
func (r *Recorder) Shutdown(flush time.Duration) {
	r.mu.Lock()
	r.stopped = true
	r.wake.Broadcast()
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-r.opts.Clock.After(flush):
		r.cancel()
		r.mu.Lock()
		r.wake.Broadcast()
		r.mu.Unlock()
		<-done
	}
	r.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	log := r.opts.Log
	for _, o := range r.objects {
		for _, it := range o.items {
			r.drop(log, it, "the operator stopped before it was written")
			r.queued--
		}
		o.items = nil
	}
	r.ready = nil
	r.others = nil
}
