package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
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

// The custom header values the tests send: found in a log line, a span or
// an attempt's error, they leaked.
const (
	headerToken  = "hdr-token-5c81e0d2"
	headerTenant = "tenant-acme-0042"
)

// TestCustomHeaders delivers through the real http plugin to a loopback
// receiver: an endpoint's custom headers arrive on every attempt, after the
// signature headers and in their order, the signature still verifies, and
// their values appear in no log line, span or attempt error. A plugin that
// quotes the values in its error (testdata/leaky) has them masked before
// the error is kept, logged or traced.
func TestCustomHeaders(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := open(t)
			logs := &syncbuf.Buffer{}
			logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			host, err := pluginhost.New(ctx, pluginhost.Config{
				Dir:            pluginDir,
				TracerProvider: tp,
				Plugins: []pluginhost.PluginConfig{
					{Name: "http", Settings: map[string]string{"allowed_networks": "127.0.0.0/8", "connect_timeout": "1s", "read_timeout": "2s"}},
				},
			}, logger)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(host.Close)
			// 503 first, so an attempt with an error is recorded, then 204.
			recv := newReceiver(t, func(n int, _ *http.Request) int {
				if n == 1 {
					return http.StatusServiceUnavailable
				}
				return http.StatusNoContent
			})
			headers := []storage.Header{
				storage.NewHeader("Authorization", "Bearer "+headerToken),
				storage.NewHeader("X-Tenant", headerTenant),
			}
			if _, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
				Transport: "http", URL: recv.URL + "/hook", FormIDs: []string{"form_http"},
				// The API refuses a webhook-* header; one written to the
				// store another way must still not reach the receiver.
				Headers: append(headers, storage.NewHeader("Webhook-Signature", "v1,forged")),
				Secrets: []storage.Secret{storage.NewSecret(recv.secret, nil)},
			}}); err != nil {
				t.Fatal(err)
			}
			leakySecret, err := webhook.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
				Transport: "leaky", URL: "https://127.0.0.1:9/hook", FormIDs: []string{"form_leaky"}, Headers: headers,
				Config:  map[string]string{"mode": "echo-headers"},
				Secrets: []storage.Secret{storage.NewSecret(leakySecret, nil)},
			}}); err != nil {
				t.Fatal(err)
			}
			sent, echoed := only(e2etest.Submit(t, store, "form_http", 1)), only(e2etest.Submit(t, store, "form_leaky", 1))
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
				for id, want := range map[string]storage.DeliveryState{sent: storage.StateDelivered, echoed: storage.StateFailed} {
					d, err := store.DeliveryGet(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if d.State != want {
						return fmt.Errorf("delivery %s is %s, want %s", id, d.State, want)
					}
					as, err := store.AttemptList(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					for _, a := range as {
						kept = append(kept, a.Error)
					}
				}
				return nil
			})

			reqs := recv.requests()
			if len(reqs) != 2 {
				t.Fatalf("receiver got %d requests, want 2", len(reqs))
			}
			for i, r := range reqs {
				if r.err != nil || r.indep != nil {
					t.Fatalf("request %d: the signature does not verify: %v / %v", i+1, r.err, r.indep)
				}
				if got := r.header.Get("Authorization"); got != "Bearer "+headerToken {
					t.Errorf("request %d: Authorization = %q, want the endpoint's", i+1, got)
				}
				if got := r.header.Values("X-Tenant"); len(got) != 1 || got[0] != headerTenant {
					t.Errorf("request %d: X-Tenant = %q, want the endpoint's one value", i+1, got)
				}
				if got := r.header.Values("Webhook-Signature"); len(got) != 1 || strings.Contains(got[0], "forged") {
					t.Errorf("request %d: webhook-signature = %q, want the server's one", i+1, got)
				}
			}
			history := strings.Join(kept, "\n")
			if !strings.Contains(history, "the receiver said: bad credentials") {
				t.Errorf("the leaky plugin's words are not in the history:\n%s", history)
			}
			cancel()
			if err := tp.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
			var traced strings.Builder
			for _, s := range spans.GetSpans() {
				fmt.Fprintf(&traced, "%s %v %s %v %v\n", s.Name, s.Attributes, s.Status.Description, s.Events, s.Links)
			}
			if traced.Len() == 0 {
				t.Fatal("no span was recorded")
			}
			for what, text := range map[string]string{"the attempt history": history, "the log": logs.String(), "the trace": traced.String()} {
				for _, leak := range []string{headerToken, headerTenant} {
					if strings.Contains(text, leak) {
						t.Errorf("%s shows the header value %q:\n%s", what, leak, text)
					}
				}
			}
		})
	}
}
