package status

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// fakeClock is the wall clock of Watch's lines that are not transitions;
// the test sets it before each event it sends.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func withRV(p *v1.Postgresql, rv string) *v1.Postgresql {
	p = p.DeepCopy()
	p.ResourceVersion = rv
	return p
}

// lineWriter collects Watch's output and signals every line written, so a
// test can wait for the line of one event before it moves the clock for
// the next.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan struct{}
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range bytes.Count(b, []byte("\n")) {
		w.lines <- struct{}{}
	}
	return w.buf.Write(b)
}

// wait blocks until n more lines were written.
func (w *lineWriter) wait(n int) {
	for range n {
		<-w.lines
	}
}

// runWatch runs Watch over pg until the fake runs out of watchers, while
// feed sends events; it returns the output and Watch's error.
func runWatch(t *testing.T, pg *fakeAPI, o WatchOptions, feed func(*lineWriter)) (string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pg.exhausted = cancel
	out := &lineWriter{lines: make(chan struct{}, 100)}
	done := make(chan struct{})
	go func() { defer close(done); feed(out) }()
	err := Watch(ctx, pg.client(), out, o)
	cancel()
	<-done
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.buf.String(), err
}

func TestWatchGolden(t *testing.T) {
	running := clusters()[3]
	old := newPG("default", "db-old", 1, time.Hour)
	setStatus(old, fsm.Running, time.Hour, 2, fsm.ReasonReady, "1/1 instances ready, primary db-old-0", 1, 1, "db-old-0")
	w := watch.NewFake()
	pg := &fakeAPI{items: items([]*v1.Postgresql{running, old}), rv: "10", watchers: []watch.Interface{w}}
	clock := &fakeClock{t: now}
	min := func(m int) time.Time { return now.Add(time.Duration(m) * time.Minute) }

	out, err := runWatch(t, pg, WatchOptions{Namespace: "default", Now: clock.now}, func(out *lineWriter) {
		out.wait(2) // the clusters as listed

		// Scaled to 4: Running -> Updating.
		p := withRV(running, "11")
		p.Generation = 2
		p.Status.State, p.Status.StateSince, p.Status.Epoch = fsm.Updating, &metav1.Time{Time: min(1)}, 3
		p.Status.Reason, p.Status.Message = fsm.ReasonUpdating, "applying generation 2"
		p.Status.DesiredInstances = 4
		p.Status.Timers = []v1.Timer{{Name: fsm.TimerTimeout, Deadline: metav1.NewTime(min(11)), Epoch: 3}}
		p.Status.History = append(p.Status.History, v1.Transition{From: fsm.Running, To: fsm.Updating, Event: fsm.EventSpecChanged, Reason: fsm.ReasonUpdating, Time: metav1.NewTime(min(1))})
		clock.set(min(1))
		w.Modify(p)
		out.wait(1)

		// Only a condition changed: no line.
		p = withRV(p, "12")
		p.Status.Conditions = conds(fsm.Updating, fsm.ReasonUpdating, "applying generation 2", 0)
		clock.set(min(2))
		w.Modify(p)

		// Same state, new message: a line at the wall clock.
		p = withRV(p, "13")
		p.Status.Message = "pod db-running-3: waiting to be scheduled"
		clock.set(min(3))
		w.Modify(p)
		out.wait(1)

		// Two transitions between two events, and a failover: a line each.
		p = withRV(p, "14")
		p.Status.State, p.Status.StateSince, p.Status.Epoch = fsm.Running, &metav1.Time{Time: min(12)}, 5
		p.Status.Reason, p.Status.Message = fsm.ReasonReady, "4/4 instances ready, primary db-running-1"
		p.Status.ReadyInstances, p.Status.Primary = 4, "db-running-1"
		p.Status.History = append(p.Status.History,
			v1.Transition{From: fsm.Updating, To: fsm.Degraded, Event: fsm.EventTimeout, Reason: fsm.ReasonTimeout, Time: metav1.NewTime(min(11))},
			v1.Transition{From: fsm.Degraded, To: fsm.Degraded, Event: fsm.EventPrimaryChanged, Reason: fsm.ReasonPrimaryChanged,
				Message: "primary changed from db-running-0 to db-running-1", Time: metav1.NewTime(min(11).Add(30 * time.Second))},
			v1.Transition{From: fsm.Degraded, To: fsm.Running, Event: fsm.EventPodsReady, Reason: fsm.ReasonReady, Time: metav1.NewTime(min(12))})
		clock.set(min(12))
		w.Modify(p)
		out.wait(3)
		latest := p

		clock.set(min(13))
		w.Add(withRV(newPG("default", "db-new", 1, 0), "15"))
		out.wait(1)
		clock.set(min(14))
		w.Delete(withRV(newPG("default", "db-new", 1, 0), "16"))
		w.Action(watch.Bookmark, &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "17"}})

		// The watch expires; meanwhile db-old went and db-late came.
		late := newPG("default", "db-late", 2, 0)
		setStatus(late, fsm.Creating, 0, 1, fsm.ReasonCreating, "creating 2 instances", 0, 2, "")
		pg.items = items([]*v1.Postgresql{latest, late})
		pg.rv = "20"
		clock.set(min(20))
		w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "watch.golden", []byte(out))

	var rvs []string
	for _, o := range pg.watchOpts {
		if !o.AllowWatchBookmarks {
			t.Error("watch without bookmarks")
		}
		rvs = append(rvs, o.ResourceVersion)
	}
	if got, want := strings.Join(rvs, ","), "10,20"; got != want {
		t.Errorf("watched from resourceVersions %s, want %s (the first list's, then the relist's)", got, want)
	}
}

// TestWatchResumes: a watch the server closes is resumed from the last
// resourceVersion seen, without listing again.
func TestWatchResumes(t *testing.T) {
	running := clusters()[3]
	w1, w2 := watch.NewFake(), watch.NewFake()
	pg := &fakeAPI{items: items([]*v1.Postgresql{running}), rv: "10", watchers: []watch.Interface{w1, w2}}
	out, err := runWatch(t, pg, WatchOptions{Namespace: "default", Name: "db-running", Now: func() time.Time { return now }}, func(*lineWriter) {
		p := withRV(running, "11")
		p.Status.ReadyInstances = 2
		w1.Modify(p)
		w1.Stop()
		p = withRV(p, "12")
		p.Status.ReadyInstances = 3
		w2.Modify(p)
		w2.Stop()
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"12:00:00 default/db-running Running ready 3/3 primary db-running-0  AllInstancesReady: 3/3 instances ready, primary db-running-0\n" +
		"12:00:00 default/db-running Running ready 2/3  AllInstancesReady: 3/3 instances ready, primary db-running-0\n" +
		"12:00:00 default/db-running Running ready 3/3  AllInstancesReady: 3/3 instances ready, primary db-running-0\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	var rvs []string
	for _, o := range pg.watchOpts {
		rvs = append(rvs, o.ResourceVersion)
		if o.FieldSelector != "metadata.name=db-running" {
			t.Errorf("watch selector %q, want metadata.name=db-running", o.FieldSelector)
		}
	}
	if got, want := strings.Join(rvs, ","), "10,11,12"; got != want {
		t.Errorf("watched from %s, want %s", got, want)
	}
	if len(pg.listOpts) != 1 || pg.listOpts[0].FieldSelector != "metadata.name=db-running" {
		t.Errorf("lists %+v, want one for db-running", pg.listOpts)
	}
}

func TestWatchErrorEvent(t *testing.T) {
	w := watch.NewFake()
	pg := &fakeAPI{rv: "1", watchers: []watch.Interface{w}}
	_, err := runWatch(t, pg, WatchOptions{Namespace: "x", Now: func() time.Time { return now }}, func(*lineWriter) {
		w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Details: &metav1.StatusDetails{Group: v1.GroupName, Kind: v1.PostgresqlResource}})
	})
	want := `cannot watch postgresqls.pgloop.dev in namespace "x": ask for watch on postgresqls (API group pgloop.dev)`
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

func TestNewTransitions(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(now.Add(time.Duration(s) * time.Second)) }
	tr := func(from, to, event string, s int) v1.Transition {
		return v1.Transition{From: from, To: to, Event: event, Time: at(s)}
	}
	lost := tr(fsm.Running, fsm.Degraded, fsm.EventPodsLost, 1)
	moved := tr(fsm.Degraded, fsm.Degraded, fsm.EventPrimaryChanged, 2)
	moved.Message = "primary changed from c-0 to c-1"
	back := tr(fsm.Degraded, fsm.Running, fsm.EventPodsReady, 3)
	switched := tr(fsm.Running, fsm.Running, fsm.EventPrimaryChanged, 4)
	// Within one second: lost again, the same entry as lost but for the time.
	lostAgain := tr(fsm.Running, fsm.Degraded, fsm.EventPodsLost, 1)
	backAgain := tr(fsm.Degraded, fsm.Running, fsm.EventPodsReady, 1)
	tests := []struct {
		name      string
		prev, cur []v1.Transition
		epochs    int64
		want      []v1.Transition
	}{
		{"nothing new", []v1.Transition{lost}, []v1.Transition{lost}, 0, nil},
		{"a change of the primary in the same epoch", []v1.Transition{lost, moved, back}, []v1.Transition{lost, moved, back, switched}, 0,
			[]v1.Transition{switched}},
		{"the changes of state and the primary's between them", []v1.Transition{lost}, []v1.Transition{lost, moved, back}, 1,
			[]v1.Transition{moved, back}},
		{"prev's newest entry fell off: back to the epochs-th change of state", []v1.Transition{tr("x", "y", "z", 0)},
			[]v1.Transition{lost, moved, back}, 2, []v1.Transition{lost, moved, back}},
		{"an equal entry later in the same second is told apart by the epochs", []v1.Transition{lost},
			[]v1.Transition{lost, backAgain, lostAgain}, 2, []v1.Transition{backAgain, lostAgain}},
		{"no history before: all of it", nil, []v1.Transition{lost, moved}, 1, []v1.Transition{lost, moved}},
		{"no history at all", nil, nil, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTransitions(tt.prev, tt.cur, tt.epochs)
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if !sameTransition(&got[i], &tt.want[i]) {
					t.Errorf("entry %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
