package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/sqlite"
)

// BenchmarkFairShareManyEndpoints measures what receivers that hang cost
// the others: 1,000 endpoints, of which 0 or 10 (every hundredth) accept
// and never answer (read timeout 3 s), and 20,000 deliveries spread evenly
// over them, sent by the default pool through the real http plugin. It
// reports the rate at which the healthy endpoints' deliveries arrive over
// the whole run, and from 4 s on: by then the hung endpoints' first sends
// have timed out and they are known to be slow, while in the first
// seconds each of them, new, holds a sender until its read timeout.
// Compare hung=10 with hung=0. Run it with
//
//	go test -run '^$' -bench FairShare -benchtime 1x ./server/worker/
func BenchmarkFairShareManyEndpoints(b *testing.B) {
	stores := map[string]func(b *testing.B) storage.Store{
		"sqlite": func(b *testing.B) storage.Store {
			s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "hymical.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"postgres": func(b *testing.B) storage.Store {
			s, err := postgres.Open(b.Context(), pgtest.NewDatabase(b))
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
	for name, open := range stores {
		for _, hung := range []int{0, 10} {
			b.Run(fmt.Sprintf("%s/hung=%d", name, hung), func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					store := open(b)
					if _, err := store.Migrate(b.Context(), storage.MigrateParams{}); err != nil {
						b.Fatal(err)
					}
					rate, settled := fairShareRun(b, store, hung)
					store.Close()
					b.StartTimer()
					b.ReportMetric(rate, "healthy_deliveries/s")
					b.ReportMetric(settled, "healthy_deliveries/s_from_4s")
				}
			})
		}
	}
}

func fairShareRun(b *testing.B, store storage.Store, hung int) (whole, settled float64) {
	const endpoints, deliveries = 1000, 20000
	ctx := b.Context()
	host, err := pluginhost.New(ctx, pluginhost.Config{
		Dir: pluginDir,
		Plugins: []pluginhost.PluginConfig{
			{Name: "http", Settings: map[string]string{"allowed_networks": "127.0.0.0/8", "connect_timeout": "1s", "read_timeout": "3s"}},
		},
	}, e2etest.Logger())
	if err != nil {
		b.Fatal(err)
	}
	defer host.Close()
	release := make(chan struct{})
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hook/"))
		if hung > 0 && i%(endpoints/hung) == 0 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	// Before Close, which waits for the hung handlers.
	defer close(release)
	secret, err := webhook.NewSecret()
	if err != nil {
		b.Fatal(err)
	}
	for i := range endpoints {
		if _, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: fmt.Sprintf("%s/hook/%d", srv.URL, i),
			FormIDs: []string{fmt.Sprintf("form_%d", i)}, Secrets: []storage.Secret{storage.NewSecret(secret, nil)}}}); err != nil {
			b.Fatal(err)
		}
	}
	// Created by several callers at once, so the store's group commit
	// shares each batch's read of the 1,000 endpoints.
	var (
		healthy atomic.Int64
		wg      sync.WaitGroup
		failed  atomic.Value
	)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < deliveries; i += 8 {
				ev, err := event.Submission(fmt.Sprintf("form_%d", i%endpoints), []byte(`{"n":1}`), time.Now())
				if err == nil {
					_, err = store.EventCreate(ctx, ev)
				}
				if err != nil {
					failed.Store(err)
					return
				}
				if e := i % endpoints; hung == 0 || e%(endpoints/hung) != 0 {
					healthy.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	pool, err := worker.New(store, host, shareConfig(), e2etest.Logger())
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- pool.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	const settle = 4 * time.Second
	var atSettle int64 = -1
	for got.Load() < healthy.Load() {
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("%d of %d healthy deliveries after 2 minutes", got.Load(), healthy.Load())
		}
		if atSettle < 0 && time.Since(start) >= settle {
			atSettle = got.Load()
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	whole = float64(healthy.Load()) / took.Seconds()
	if atSettle < 0 || took <= settle {
		b.Fatalf("the run took %s, too short to see it settle: raise deliveries", took)
	}
	return whole, float64(healthy.Load()-atSettle) / (took - settle).Seconds()
}
