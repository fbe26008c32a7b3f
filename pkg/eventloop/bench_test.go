package eventloop

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

type handlerFunc func(Event) Outcome

func (f handlerFunc) Handle(ev Event) Outcome { return f(ev) }

// benchSignals are 4096 clusters x 8 signal names: a producer cycling
// through them is merged only if the loop falls 32768 events behind.
func benchSignals() (keys, names []string) {
	for i := range 4096 {
		keys = append(keys, fmt.Sprintf("ns/cluster-%d", i))
	}
	for i := range 8 {
		names = append(names, fmt.Sprintf("signal%d", i))
	}
	return keys, names
}

// BenchmarkInbox measures the inbox alone (post, then take in batches) and
// the loop's hot path: Notify, dispatch, Handle, apply the Outcome, with a
// Handler that does nothing.
//
//   - notify+dispatch: bursts of 1024 distinct signals, then WaitIdle, so
//     every Notify is dispatched (dispatched/op is 1): the whole cost of an
//     event, producer and loop together.
//   - flood-parallel: producers on every core Notify as fast as they can;
//     the loop falls behind and signals merge (dispatched/op below 1). This
//     is the producer's cost under contention, not the loop's throughput.
func BenchmarkInbox(b *testing.B) {
	keys, names := benchSignals()

	b.Run("post+take", func(b *testing.B) {
		in := newInbox()
		batch := make([]Event, 0, batchSize)
		now := time.Now()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			in.post(Event{Key: keys[i%len(keys)], Kind: Signal, Name: names[i%len(names)], At: now})
			if i%batchSize == batchSize-1 {
				batch = batch[:0]
				in.take(&batch, batchSize)
			}
		}
	})

	handlers := []struct {
		name string
		h    Handler
	}{
		{"noop", handlerFunc(func(Event) Outcome { return Outcome{} })},
		// A steady cluster: the loop keeps a record with its epoch.
		{"epoch", handlerFunc(func(Event) Outcome { return Outcome{Epoch: 1} })},
	}
	const burst = 1024
	for _, hh := range handlers {
		b.Run("notify+dispatch/"+hh.name, func(b *testing.B) {
			l, stop := benchLoop(b, hh.h)
			defer stop()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				l.Notify(keys[i%len(keys)], names[(i/len(keys))%len(names)])
				if i%burst == burst-1 {
					waitIdleB(b, l)
				}
			}
			waitIdleB(b, l)
			reportDispatch(b, l, start)
		})
	}
	b.Run("flood-parallel", func(b *testing.B) {
		l, stop := benchLoop(b, handlers[0].h)
		defer stop()
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				l.Notify(keys[i%len(keys)], names[i%len(names)])
			}
		})
		waitIdleB(b, l)
		reportDispatch(b, l, start)
	})
}

func benchLoop(b *testing.B, h Handler) (*Loop, func()) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	l := New(h, Options{Log: log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	waitIdleB(b, l)
	return l, func() { cancel(); <-done }
}

func waitIdleB(b *testing.B, l *Loop) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := l.WaitIdle(ctx); err != nil {
		b.Fatal(err)
	}
}

func reportDispatch(b *testing.B, l *Loop, start time.Time) {
	st := l.Stats()
	b.ReportMetric(float64(st.Dispatched)/float64(b.N), "dispatched/op")
	b.ReportMetric(float64(st.Dispatched)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkRunQueue measures a push and a pop of the run queue holding
// 5,000 clusters of 50 namespaces, a tenth of them promoted while queued
// (their stale entries skipped later): the loop's cost of a plan's turn.
func BenchmarkRunQueue(b *testing.B) {
	recs := make([]*clusterState, 5000)
	for i := range recs {
		recs[i] = &clusterState{key: fmt.Sprintf("ns-%d/cluster-%d", i%50, i)}
	}
	var q runQueue
	for i, rec := range recs {
		q.push(rec, false)
		if i%10 == 0 {
			q.promote(rec)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		rec, _ := q.pop()
		q.push(rec, false)
		if i%10 == 0 {
			q.promote(rec)
		}
	}
}
