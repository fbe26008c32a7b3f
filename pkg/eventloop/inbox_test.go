package eventloop

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func sig(key, name string) Event { return Event{Key: key, Kind: Signal, Name: name} }

func fired(key, name string) Event { return Event{Key: key, Kind: TimerFired, Name: name} }

func done(key string, id uint64) Event { return Event{Key: key, Kind: PlanDone, PlanID: id} }

func urgentSig(key, name string) Event {
	ev := sig(key, name)
	ev.Urgent = true
	return ev
}

func render(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%s %s %s%d", ev.Key, ev.Kind, ev.Name, ev.PlanID)
	}
	return out
}

func TestInbox(t *testing.T) {
	tests := []struct {
		name       string
		posts      []Event
		want       []Event
		wantMerged uint64
	}{{
		name:       "signals of one name are merged while waiting",
		posts:      []Event{sig("a", "spec"), sig("a", "spec"), sig("a", "spec")},
		want:       []Event{sig("a", "spec")},
		wantMerged: 2,
	}, {
		name:       "signals of different names are kept, the merged one keeps its place",
		posts:      []Event{sig("a", "spec"), sig("a", "pods"), sig("a", "spec")},
		want:       []Event{sig("a", "spec"), sig("a", "pods")},
		wantMerged: 1,
	}, {
		name:  "signals of different clusters are not merged",
		posts: []Event{sig("a", "spec"), sig("b", "spec")},
		want:  []Event{sig("a", "spec"), sig("b", "spec")},
	}, {
		name:  "timer firings are never merged",
		posts: []Event{fired("a", "t"), fired("a", "t")},
		want:  []Event{fired("a", "t"), fired("a", "t")},
	}, {
		name:  "plan results are never merged",
		posts: []Event{done("a", 1), done("a", 1)},
		want:  []Event{done("a", 1), done("a", 1)},
	}, {
		name:  "a timer of the same name as a signal is not merged",
		posts: []Event{sig("a", "x"), fired("a", "x"), sig("a", "y")},
		want:  []Event{sig("a", "x"), fired("a", "x"), sig("a", "y")},
	}, {
		name: "clusters take turns",
		posts: []Event{
			sig("a", "1"), sig("a", "2"), sig("a", "3"),
			sig("b", "1"), sig("c", "1"), sig("c", "2"),
		},
		want: []Event{
			sig("a", "1"), sig("b", "1"), sig("c", "1"),
			sig("a", "2"), sig("c", "2"), sig("a", "3"),
		},
	}, {
		name: "an urgent signal goes ahead of the other clusters' events",
		posts: []Event{
			sig("a", "1"), sig("b", "1"), sig("c", "1"), urgentSig("d", "spec"), sig("a", "2"),
		},
		want: []Event{
			urgentSig("d", "spec"), sig("a", "1"), sig("b", "1"), sig("c", "1"), sig("a", "2"),
		},
	}, {
		name: "its cluster's earlier events go with it, in order; later ones wait their turn",
		posts: []Event{
			sig("a", "1"), sig("b", "1"), fired("b", "t"), urgentSig("b", "spec"), sig("b", "2"),
		},
		want: []Event{
			sig("b", "1"), fired("b", "t"), urgentSig("b", "spec"), sig("a", "1"), sig("b", "2"),
		},
	}, {
		name: "urgent clusters take turns among themselves",
		posts: []Event{
			sig("a", "1"), urgentSig("b", "1"), urgentSig("b", "2"), urgentSig("c", "1"),
		},
		want: []Event{
			urgentSig("b", "1"), urgentSig("c", "1"), urgentSig("b", "2"), sig("a", "1"),
		},
	}, {
		name:       "an urgent signal merged into a waiting one makes it urgent",
		posts:      []Event{sig("a", "1"), sig("b", "spec"), urgentSig("b", "spec")},
		want:       []Event{sig("b", "spec"), sig("a", "1")},
		wantMerged: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newInbox()
			for _, ev := range tt.posts {
				in.post(ev)
			}
			var got []Event
			for in.take(&got, 2) > 0 { // small batches: turns span takes
			}
			if !slices.Equal(render(got), render(tt.want)) {
				t.Errorf("took %q, want %q", render(got), render(tt.want))
			}
			depth, merged := in.stats()
			if depth != 0 || merged != tt.wantMerged {
				t.Errorf("depth %d merged %d, want 0 and %d", depth, merged, tt.wantMerged)
			}
		})
	}
}

func TestInboxSignalTakenIsNotMergedInto(t *testing.T) {
	in := newInbox()
	in.post(sig("a", "spec"))
	var got []Event
	in.take(&got, 10)
	in.post(sig("a", "spec")) // news after the first was taken
	in.take(&got, 10)
	if len(got) != 2 {
		t.Fatalf("took %q, want the signal twice", render(got))
	}
}

func TestInboxWakesOnlyOnEmptyToNonEmpty(t *testing.T) {
	in := newInbox()
	in.post(sig("a", "1"))
	in.post(sig("b", "1"))
	in.post(Event{Key: "c", Kind: PlanDone, Err: errors.New("x")})
	if n := len(in.wake); n != 1 {
		t.Fatalf("wake tokens %d, want 1", n)
	}
	<-in.wake
	var got []Event
	in.take(&got, 10)
	in.post(sig("a", "2"))
	if n := len(in.wake); n != 1 {
		t.Fatalf("after draining, wake tokens %d, want 1", n)
	}
}

func TestInboxReusesQueues(t *testing.T) {
	in := newInbox()
	var got []Event
	in.post(sig("a", "1"))
	in.take(&got, 1)
	if len(in.queues) != 1 || in.idle.len() != 1 {
		t.Fatalf("queues %d idle %d, want the drained queue kept", len(in.queues), in.idle.len())
	}
	allocs := testing.AllocsPerRun(100, func() {
		in.post(sig("a", "1"))
		got = got[:0]
		in.take(&got, 1)
	})
	if allocs != 0 {
		t.Errorf("post+take allocates %v times, want 0", allocs)
	}
}

// Drained queues beyond maxIdleQueues are evicted, oldest first, and a
// queue refilled since it was listed is not.
func TestInboxEvictsIdleQueues(t *testing.T) {
	in := newInbox()
	var got []Event
	in.post(sig("first", "x"))
	in.take(&got, 1) // "first" is listed idle
	for i := range maxIdleQueues {
		in.post(sig(fmt.Sprint(i), "x"))
	}
	in.post(sig("first", "x")) // refilled, behind the others
	in.take(&got, maxIdleQueues)
	if _, ok := in.queues["first"]; !ok {
		t.Fatal("a queue with an event waiting was evicted")
	}
	in.take(&got, 1) // drains "first", listing it again; evicts "0"
	if _, ok := in.queues["0"]; ok {
		t.Error("the oldest drained queue was not evicted")
	}
	if n := len(in.queues); n != maxIdleQueues {
		t.Errorf("%d queues kept, want %d", n, maxIdleQueues)
	}
	if in.n != 0 || len(got) != maxIdleQueues+2 {
		t.Errorf("depth %d, took %d", in.n, len(got))
	}
	evicted := in.free[len(in.free)-1]
	in.post(sig("new", "x"))
	if in.queues["new"] != evicted {
		t.Error("the evicted queue was not reused")
	}
}

// Past maxSignalScan names the waiting names move to a map, and back.
func TestInboxManySignalNames(t *testing.T) {
	in := newInbox()
	const names = 3 * maxSignalScan
	for range 2 {
		for i := range names {
			in.post(sig("a", fmt.Sprint(i)))
		}
	}
	q := in.queues["a"]
	if q.signalSet == nil {
		t.Fatal("names not moved to a map")
	}
	var got []Event
	for in.take(&got, 5) > 0 {
	}
	if len(got) != names || q.signalSet != nil || len(q.signals) != 0 {
		t.Errorf("took %d, want %d; set %v, slice %v: want both empty", len(got), names, q.signalSet, q.signals)
	}
	if _, merged := in.stats(); merged != names {
		t.Errorf("merged %d, want %d", merged, names)
	}
}

// Under a stream of urgent events, a cluster without one still gets a turn
// within maxUrgentTakes+1 takes.
func TestInboxUrgentDoesNotStarve(t *testing.T) {
	in := newInbox()
	in.post(sig("bg", "1"))
	for i := range 3 * maxUrgentTakes {
		in.post(urgentSig(fmt.Sprintf("u%02d", i), "spec"))
	}
	var got []Event
	for in.take(&got, 3) > 0 {
	}
	at := slices.IndexFunc(got, func(ev Event) bool { return ev.Key == "bg" })
	if at != maxUrgentTakes {
		t.Errorf("the background event was taken %dth, want after exactly %d urgent ones", at, maxUrgentTakes)
	}
}

// Random posts and takes, urgent or not, over more clusters than the inbox
// keeps idle queues for (queues are evicted and reused while the urgent
// ring may still hold them): every event is taken exactly once, each
// cluster's in the order posted, and both rings are empty at the end.
func TestInboxUrgentRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	in := newInbox()
	next := map[string]int{} // per cluster, the seq of the next event expected
	sent := map[string]int{}
	const keys = maxIdleQueues + 500
	total, taken := 0, 0
	for round := range 200 {
		for range r.IntN(300) {
			key := fmt.Sprintf("c%d", r.IntN(keys))
			ev := Event{Key: key, Kind: TimerFired, Name: "t", Epoch: int64(sent[key]), Urgent: r.IntN(20) == 0}
			sent[key]++
			in.post(ev)
			total++
		}
		var got []Event
		in.take(&got, r.IntN(400))
		if round == 199 {
			for in.take(&got, 64) > 0 {
			}
		}
		for _, ev := range got {
			if int(ev.Epoch) != next[ev.Key] {
				t.Fatalf("cluster %s: took event %d, want %d", ev.Key, ev.Epoch, next[ev.Key])
			}
			next[ev.Key]++
			taken++
		}
	}
	if taken != total {
		t.Errorf("took %d events, posted %d", taken, total)
	}
	if depth, _ := in.stats(); depth != 0 {
		t.Errorf("depth %d after taking everything", depth)
	}
	if in.ready.len() != 0 || in.urgent.len() != 0 {
		t.Errorf("rings hold %d and %d queues once empty", in.ready.len(), in.urgent.len())
	}
}
