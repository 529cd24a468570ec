package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
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
// over them, sent
// by the default pool through the real http plugin. It reports the rate
// at which the healthy endpoints' deliveries arrive; compare hung=10 with
// hung=0. Run it with
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
					rate := fairShareRun(b, store, hung)
					store.Close()
					b.StartTimer()
					b.ReportMetric(rate, "healthy_deliveries/s")
				}
			})
		}
	}
}

func fairShareRun(b *testing.B, store storage.Store, hung int) float64 {
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
		if _, err := store.EndpointCreate(ctx, storage.Endpoint{Transport: "http", URL: fmt.Sprintf("%s/hook/%d", srv.URL, i),
			FormIDs: []string{fmt.Sprintf("form_%d", i)}, Secrets: []storage.Secret{storage.NewSecret(secret, nil)}}); err != nil {
			b.Fatal(err)
		}
	}
	healthy := int64(0)
	for i := range deliveries {
		ev, err := event.Submission(fmt.Sprintf("form_%d", i%endpoints), []byte(`{"n":1}`), time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.EventCreate(ctx, ev); err != nil {
			b.Fatal(err)
		}
		if e := i % endpoints; hung == 0 || e%(endpoints/hung) != 0 {
			healthy++
		}
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
	for got.Load() < healthy {
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("%d of %d healthy deliveries after 2 minutes", got.Load(), healthy)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return float64(healthy) / time.Since(start).Seconds()
}
