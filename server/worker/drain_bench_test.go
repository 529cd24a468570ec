package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// BenchmarkDrainPools drains a backlog of 10,000 deliveries over 10
// endpoints with three pools, each on a Store of its own (three server
// processes on one PostgreSQL), through a sender that accepts every
// message at once, so what it measures is claiming and recording. share=on
// is the default fair share, share=off the oldest due whoever they go to:
// a share claim that comes back short while rows are due (because another
// pool's claim holds what it picked) shows as a lower rate with the share.
// Run it with
//
//	go test -run '^$' -bench DrainPools -benchtime 1x -count 2 ./server/worker/
func BenchmarkDrainPools(b *testing.B) {
	for _, share := range []struct {
		name     string
		fraction float64
	}{{"on", worker.DefaultEndpointShare}, {"off", 1}} {
		b.Run("share="+share.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				rate := drainPools(b, share.fraction)
				b.StartTimer()
				b.ReportMetric(rate, "deliveries/s")
			}
		})
	}
}

// acceptAll is a Sender whose every receiver accepts at once.
type acceptAll struct{}

func (acceptAll) Send(context.Context, string, transport.Message, time.Time) transport.Outcome {
	return transport.Outcome{Kind: transport.OutcomeDelivered, StatusCode: 204}
}

func drainPools(b *testing.B, share float64) float64 {
	const pools, endpoints, deliveries = 3, 10, 10000
	ctx := b.Context()
	dsn := pgtest.NewDatabase(b)
	open := func() *postgres.Store {
		s, err := postgres.Open(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	store := open()
	if _, err := store.Migrate(ctx, storage.MigrateParams{}); err != nil {
		b.Fatal(err)
	}
	for i := range endpoints {
		if _, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: fmt.Sprintf("https://receiver.example/%d", i),
			FormIDs: []string{fmt.Sprintf("form_%d", i)},
			Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)}}}); err != nil {
			b.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < deliveries; i += 16 {
				ev, err := event.Submission(fmt.Sprintf("form_%d", i%endpoints), []byte(`{"n":1}`), time.Now())
				if err == nil {
					_, err = store.EventCreate(ctx, ev)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}

	run, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	var running sync.WaitGroup
	for range pools {
		cfg := worker.DefaultConfig()
		cfg.EndpointShare = share
		p, err := worker.New(open(), acceptAll{}, cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		running.Go(func() { _ = p.Run(run) })
	}
	defer running.Wait()
	defer stop()
	for {
		st, err := store.DeliveryStats(ctx, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if st.ByState[storage.StateDelivered] == deliveries {
			return deliveries / time.Since(start).Seconds()
		}
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("after 5 minutes, %d of %d delivered", st.ByState[storage.StateDelivered], deliveries)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
