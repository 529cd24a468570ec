package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// TestPluginWordsAreMaskedBeforeTheyAreKept runs a real plugin that is
// careless with its endpoint's URL (testdata/leaky): it prints the URL to
// its stderr, and its outcome's error quotes the whole URL and the token
// alone. Neither the credentials nor the token reach the attempt history,
// the unsent reason, the server's log or the attempt's spans, while what
// is not secret (x=1) and the rest of the plugin's words still do.
func TestPluginWordsAreMaskedBeforeTheyAreKept(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := open(t)
			logs := &syncbuf.Buffer{}
			logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			host, err := pluginhost.New(ctx, pluginhost.Config{Dir: pluginDir, TracerProvider: tp}, logger)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(host.Close)
			const target = "https://carol:pw@127.0.0.1:9/hook?token=SECRET123&x=1"
			for form, mode := range map[string]string{"form_retry": "retry", "form_refuse": "refuse"} {
				secret, err := webhook.NewSecret()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "leaky", URL: target, FormIDs: []string{form},
					Config: map[string]string{"mode": mode}, Secrets: []storage.Secret{storage.NewSecret(secret, nil)}}}); err != nil {
					t.Fatal(err)
				}
			}
			retried, refused := only(e2etest.Submit(t, store, "form_retry", 1)), only(e2etest.Submit(t, store, "form_refuse", 1))
			cfg := fastConfig(2)
			cfg.TracerProvider = tp
			pool, err := worker.New(store, host, cfg, logger)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- pool.Run(runCtx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("pool.Run: %v", err)
				}
			}()

			var kept []string
			testwait.For(t, 20*time.Second, func() error {
				kept = kept[:0]
				for _, id := range []string{retried, refused} {
					d, err := store.DeliveryGet(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if d.State != storage.StateFailed {
						return fmt.Errorf("delivery %s is %s, want failed", id, d.State)
					}
					kept = append(kept, d.UnsentReason)
					as, err := store.AttemptList(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					for _, a := range as {
						kept = append(kept, a.Error)
					}
				}
				if l := logs.String(); !strings.Contains(l, "leaky: sending") || !strings.Contains(l, "leaky sends to") {
					return fmt.Errorf("the plugin's log lines have not all arrived:\n%s", l)
				}
				return nil
			})
			const shown = "https://[redacted]@127.0.0.1:9/hook?token=[redacted]&x=1"
			history := strings.Join(kept, "\n")
			for _, want := range []string{`Post "` + shown + `": dial tcp: connection refused (token [redacted])`, "refused " + shown + " (token [redacted])"} {
				if !strings.Contains(history, want) {
					t.Errorf("the history lacks %q:\n%s", want, history)
				}
			}
			cancel()
			if err := tp.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
			var traced strings.Builder
			for _, s := range spans.GetSpans() {
				fmt.Fprintf(&traced, "%s %v %s %v %v\n", s.Name, s.Attributes, s.Status.Description, s.Events, s.Links)
			}
			if !strings.Contains(traced.String(), shown) {
				t.Errorf("no span says what the plugin said, masked:\n%s", traced.String())
			}
			for what, text := range map[string]string{"the history": history, "the log": logs.String(), "the trace": traced.String()} {
				for _, leak := range []string{"SECRET123", "carol", ":pw"} {
					if strings.Contains(text, leak) {
						t.Errorf("%s shows %q:\n%s", what, leak, text)
					}
				}
			}
		})
	}
}

// only is the one delivery id of a Submit.
func only(m map[string]storage.Event) string {
	for id := range m {
		return id
	}
	return ""
}
