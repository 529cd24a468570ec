package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// logTap is where a pool's log goes: it keeps every byte written.
type logTap struct{ syncbuf.Buffer }

// lines are the JSON log lines written so far.
func (l *logTap) lines(t testing.TB) []map[string]any {
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(l.String())), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// byForm answers each message by the form its endpoint serves: an
// endpoint whose URL ends in /fail answers 503, any other accepts it.
type byForm struct{}

func (byForm) Send(_ context.Context, _ string, msg transport.Message, _ time.Time) transport.Outcome {
	if strings.HasSuffix(msg.Endpoint.URL, "/fail") {
		return transport.Outcome{Kind: transport.OutcomeRetryable, StatusCode: 503, Error: "the receiver answered 503"}
	}
	return transport.Outcome{Kind: transport.OutcomeDelivered, StatusCode: 204}
}

func addEndpoint(t testing.TB, store storage.Store, form, url string) {
	t.Helper()
	if _, err := store.EndpointCreate(context.Background(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: url, FormIDs: []string{form},
		Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)}}}); err != nil {
		t.Fatal(err)
	}
}

func submitTo(t testing.TB, store storage.Store, form string) storage.Delivery {
	t.Helper()
	ev, err := event.Submission(form, []byte(`{"email":"a@example.com"}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.EventCreate(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	return res.Deliveries[0]
}

// runLoggedPool runs a pool logging JSON at level into the returned tap
// until stop is called.
func runLoggedPool(t testing.TB, store storage.Store, cfg worker.Config, level slog.Level) (tap *logTap, stop func()) {
	return runPoolLoggingTo(t, store, cfg, func(w io.Writer) slog.Handler {
		return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	})
}

// runPoolLoggingTo runs a pool whose log is the handler newHandler makes
// writing to the returned tap, until stop is called.
func runPoolLoggingTo(t testing.TB, store storage.Store, cfg worker.Config, newHandler func(io.Writer) slog.Handler) (tap *logTap, stop func()) {
	t.Helper()
	tap = &logTap{}
	pool, err := worker.New(store, byForm{}, cfg, slog.New(newHandler(tap)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pool.Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return tap, stop
}

// A delivered attempt writes nothing at the default level, info: at a
// million deliveries a day its line was most of the log. A failed attempt,
// and the state it leaves the delivery in, still has its info line, and
// at debug the delivered one is there too.
func TestADeliveredAttemptLogsNothingAtInfo(t *testing.T) {
	t.Parallel()
	for backend, open := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
				store := open(t)
				addEndpoint(t, store, "form_ok", "https://receiver.example/ok")
				addEndpoint(t, store, "form_bad", "https://receiver.example/fail")
				ok, bad := submitTo(t, store, "form_ok"), submitTo(t, store, "form_bad")
				tap, stop := runLoggedPool(t, store, fastConfig(1), level)
				testwait.For(t, 20*time.Second, func() error {
					a, _ := store.DeliveryGet(t.Context(), ok.ID)
					b, _ := store.DeliveryGet(t.Context(), bad.ID)
					if a.State != storage.StateDelivered || b.State != storage.StateFailed {
						return fmt.Errorf("the deliveries are %s and %s, want delivered and failed", a.State, b.State)
					}
					return nil
				})
				stop()
				recorded := map[string][]map[string]any{}
				for _, l := range tap.lines(t) {
					if l["msg"] == "attempt recorded" {
						id, _ := l["delivery_id"].(string)
						recorded[id] = append(recorded[id], l)
					}
				}
				if fails := recorded[bad.ID]; len(fails) != 1 || fails[0]["level"] != "INFO" || fails[0]["outcome"] != "permanent" && fails[0]["outcome"] != "retryable" || fails[0]["state"] != "failed" {
					t.Fatalf("at %s the failed attempt logged %v, want one INFO line with its outcome and the state failed", level, fails)
				}
				switch oks := recorded[ok.ID]; {
				case level == slog.LevelInfo && len(oks) != 0:
					t.Fatalf("at info the delivered attempt logged %v, want nothing", oks)
				case level == slog.LevelDebug && (len(oks) != 1 || oks[0]["level"] != "DEBUG" || oks[0]["state"] != "delivered"):
					t.Fatalf("at debug the delivered attempt logged %v, want one DEBUG line", oks)
				}
			}
		})
	}
}

// BenchmarkAttemptLogBytes counts the bytes the pool logs at info, the
// default level, in each log.format (text, the default, and json), while
// it delivers 20,000 deliveries (10 endpoints on SQLite, a sender that
// accepts every message at once), and reports them per 100,000. Run it
// with
//
//	go test -run '^$' -bench AttemptLogBytes -benchtime 1x ./server/worker/
func BenchmarkAttemptLogBytes(b *testing.B) {
	const endpoints, deliveries = 10, 20_000
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	for _, format := range []struct {
		name       string
		newHandler func(io.Writer) slog.Handler
	}{
		{"text", func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, opts) }},
		{"json", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, opts) }},
	} {
		b.Run("format="+format.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ctx := b.Context()
				store, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "hymical.db"))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := store.Migrate(ctx, storage.MigrateParams{}); err != nil {
					b.Fatal(err)
				}
				for i := range endpoints {
					addEndpoint(b, store, fmt.Sprintf("form_%d", i), fmt.Sprintf("https://receiver.example/%d", i))
				}
				for i := range deliveries {
					submitTo(b, store, fmt.Sprintf("form_%d", i%endpoints))
				}
				cfg := worker.DefaultConfig()
				cfg.PollInterval = 10 * time.Millisecond
				b.StartTimer()
				tap, stop := runPoolLoggingTo(b, store, cfg, format.newHandler)
				for {
					st, err := store.DeliveryStats(ctx, time.Now())
					if err != nil {
						b.Fatal(err)
					}
					if st.ByState[storage.StateDelivered] == deliveries {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				stop()
				b.StopTimer()
				per := 100_000.0 / deliveries
				written := tap.String()
				size, lines := len(written), strings.Count(written, "\n")
				b.ReportMetric(float64(size)*per, "log-bytes/100k-deliveries")
				b.ReportMetric(float64(lines)*per, "log-lines/100k-deliveries")
				store.Close()
			}
		})
	}
}
