package status

import (
	"context"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
)

// WatchOptions say what Watch follows and how it prints.
type WatchOptions struct {
	// Namespace is where clusters are watched; AllNamespaces watches all.
	Namespace     string
	AllNamespaces bool
	// Name, when set, follows that one cluster.
	Name  string
	Color bool
	// Now is the clock of lines that are not transitions; a transition is
	// printed at the time the operator recorded it. time.Now when nil.
	Now func() time.Time
	// RewatchDelay is the pause before watching again after the API
	// server closed a watch that delivered nothing, so a server that
	// closes watches at once is not hammered. One second when zero.
	RewatchDelay time.Duration
}

// Watch prints the clusters as they are, then one line per change until
// ctx is done: a line per state transition (12:01:02 default/db Running ->
// Updating (specChanged) ready 2/3), a line when the ready count, primary,
// reason or message changes, and one when a cluster is deleted. Changes
// come from a watch, never from polling; a watch the server closes is
// resumed from the last resourceVersion, and an expired one (410 Gone)
// starts over from a fresh list.
func Watch(ctx context.Context, pg pgclient.Interface, w io.Writer, o WatchOptions) error {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RewatchDelay == 0 {
		o.RewatchDelay = time.Second
	}
	ns := o.Namespace
	if o.AllNamespaces {
		ns = metav1.NamespaceAll
	}
	var sel string
	if o.Name != "" {
		sel = fields.OneTermEqualSelector("metadata.name", o.Name).String()
	}
	s := &watchState{w: w, o: o, ns: ns, loc: o.Now().Location(), seen: map[string]*v1.Postgresql{}}

	rv, err := s.list(ctx, pg, ns, sel)
	for err == nil {
		var wi watch.Interface
		wi, err = pg.PgloopV1().Postgresqls(ns).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			err = explain(err, pgRequest("watch", ns, ""))
			break
		}
		var expired, delivered bool
		rv, expired, delivered, err = s.consume(ctx, wi, rv)
		wi.Stop()
		switch {
		case err != nil || ctx.Err() != nil:
		case expired:
			rv, err = s.list(ctx, pg, ns, sel)
		case !delivered:
			select {
			case <-ctx.Done():
			case <-time.After(o.RewatchDelay):
			}
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// watchState is what Watch has printed: the last version of every cluster.
type watchState struct {
	w    io.Writer
	o    WatchOptions
	ns   string // "" for every namespace
	loc  *time.Location
	seen map[string]*v1.Postgresql
}

// list prints every cluster that is new or changed since last seen, and
// every one that disappeared, and returns the list's resourceVersion to
// watch from.
func (s *watchState) list(ctx context.Context, pg pgclient.Interface, ns, sel string) (string, error) {
	list, err := pg.PgloopV1().Postgresqls(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return "", explain(err, pgRequest("list", ns, ""))
	}
	if s.o.Name != "" && len(list.Items) == 0 && len(s.seen) == 0 {
		return "", clusterNotFound(nil, s.o.Namespace, s.o.Name)
	}
	rows := make([]Row, 0, len(list.Items))
	present := map[string]bool{}
	byKey := map[string]*v1.Postgresql{}
	for i := range list.Items {
		p := &list.Items[i]
		rows = append(rows, RowFor(p))
		present[key(p)] = true
		byKey[key(p)] = p
	}
	sortRows(rows)
	for _, r := range rows {
		if err := s.update(byKey[r.Namespace+"/"+r.Name]); err != nil {
			return "", err
		}
	}
	for k, p := range s.seen {
		if !present[k] {
			if err := s.remove(p); err != nil {
				return "", err
			}
		}
	}
	return list.ResourceVersion, nil
}

// consume prints the events of one watch until it closes or ctx is done.
// It returns the resourceVersion to resume from, whether the watch
// expired, and whether it delivered any event.
func (s *watchState) consume(ctx context.Context, wi watch.Interface, rv string) (string, bool, bool, error) {
	delivered := false
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, false, delivered, nil
		case ev, ok = <-wi.ResultChan():
		}
		if !ok {
			return rv, false, delivered, nil
		}
		delivered = true
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return rv, true, delivered, nil
			}
			return rv, false, delivered, explain(err, pgRequest("watch", s.ns, ""))
		}
		if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
			rv = m.GetResourceVersion()
		}
		p, isPG := ev.Object.(*v1.Postgresql)
		if !isPG {
			continue
		}
		var err error
		switch ev.Type {
		case watch.Added, watch.Modified:
			err = s.update(p)
		case watch.Deleted:
			err = s.remove(p)
		}
		// A bookmark carries only its resourceVersion, taken above.
		if err != nil {
			return rv, false, delivered, err
		}
	}
}

func key(p *v1.Postgresql) string { return p.Namespace + "/" + p.Name }

// update prints what changed in p since it was last seen.
//  1. First seen: its state.
//  2. New history entries (a transition, a change of the primary): one
//     line each, the last one with the ready count and reason.
//  3. The epoch moved without a history to show: the states alone.
//  4. Otherwise: a line only when something the user reads changed.
func (s *watchState) update(p *v1.Postgresql) error {
	prev := s.seen[key(p)]
	s.seen[key(p)] = p
	cur := RowFor(p)
	if prev == nil {
		return s.printf("%s %s %s%s\n", s.clock(s.o.Now()), key(p), paint(cur.State, s.o.Color), s.tail(nil, cur))
	}
	old := RowFor(prev)
	if h := newTransitions(prev.Status.History, p.Status.History, cur.Epoch-old.Epoch); len(h) > 0 {
		for i, t := range h {
			tail := ""
			switch {
			case i == len(h)-1:
				tail = s.tail(&old, cur)
			case t.Reason != "":
				tail = "  " + join(t.Reason, t.Message)
			}
			states := paint(t.From, s.o.Color) + " -> " + paint(t.To, s.o.Color)
			if t.From == t.To {
				// No change of state (primaryChanged).
				states = paint(t.From, s.o.Color)
			}
			if err := s.printf("%s %s %s (%s)%s\n", s.clock(t.Time.Time), key(p), states, t.Event, tail); err != nil {
				return err
			}
		}
		return nil
	}
	if cur.Epoch > old.Epoch {
		// No history to show: the states alone.
		return s.printf("%s %s %s -> %s%s\n", s.clock(s.o.Now()), key(p),
			paint(old.State, s.o.Color), paint(cur.State, s.o.Color), s.tail(&old, cur))
	}
	if cur.State == old.State && cur.Ready == old.Ready && cur.Desired == old.Desired &&
		cur.Primary == old.Primary && cur.Reason == old.Reason && cur.Message == old.Message {
		return nil // timers, conditions or the spec: nothing the line shows
	}
	return s.printf("%s %s %s%s\n", s.clock(s.o.Now()), key(p), paint(cur.State, s.o.Color), s.tail(&old, cur))
}

// newTransitions returns the entries of the history cur that were not in
// prev, oldest first, given that the epoch moved by epochs in between.
// Every change of state starts a new epoch and adds one entry; a change of
// the primary adds one (fsm.EventPrimaryChanged) without a new epoch.
//  1. The newest entry of prev is found in cur, with as many changes of
//     state after it as epochs: what follows it is new.
//  2. Otherwise (prev's entries fell off the bounded history, or prev had
//     none): the newest entries back to the epochs-th change of state,
//     with the changes of the primary between them; all of cur when prev
//     had no history.
func newTransitions(prev, cur []v1.Transition, epochs int64) []v1.Transition {
	changes := func(h []v1.Transition) int64 {
		var n int64
		for _, t := range h {
			if t.Event != fsm.EventPrimaryChanged {
				n++
			}
		}
		return n
	}
	if n := len(prev); n > 0 {
		last := prev[n-1]
		for i := len(cur) - 1; i >= 0; i-- {
			if sameTransition(&cur[i], &last) && changes(cur[i+1:]) == max(epochs, 0) {
				return cur[i+1:]
			}
		}
	} else {
		return cur
	}
	if epochs <= 0 {
		return nil
	}
	for i := len(cur) - 1; i >= 0; i-- {
		if cur[i].Event != fsm.EventPrimaryChanged {
			if epochs--; epochs == 0 {
				return cur[i:]
			}
		}
	}
	return cur
}

func sameTransition(a, b *v1.Transition) bool {
	return a.From == b.From && a.To == b.To && a.Event == b.Event && a.Reason == b.Reason &&
		a.Message == b.Message && a.Time.Equal(&b.Time)
}

func (s *watchState) remove(p *v1.Postgresql) error {
	delete(s.seen, key(p))
	return s.printf("%s %s deleted\n", s.clock(s.o.Now()), key(p))
}

// tail is the end of a line: the ready count, the primary when it
// changed, and the reason with the start of the message.
func (s *watchState) tail(old *Row, cur Row) string {
	out := fmt.Sprintf(" ready %d/%d", cur.Ready, cur.Desired)
	if old == nil || old.Primary != cur.Primary {
		if cur.Primary != "" {
			out += " primary " + cur.Primary
		} else if old != nil {
			out += " no primary"
		}
	}
	if r := join(cur.Reason, truncate(firstLine(cur.Message), shortMessage)); r != "" {
		out += "  " + r
	}
	return out
}

func (s *watchState) clock(t time.Time) string {
	return t.In(s.loc).Format(time.TimeOnly)
}

func (s *watchState) printf(format string, a ...any) error {
	_, err := fmt.Fprintf(s.w, format, a...)
	return err
}
