package main_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/redistest"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// End to end: a real store, the real plugin host launching the real
// hymical-plugin-redis process, the real worker pool, and a real
// redis-server that is killed mid-run and started again.

// pluginDir holds the plugin binary, built once in TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"redis": "github.com/hymical/hymical/plugins/redis"}, &pluginDir)
}

// fastConfig retries quickly, and often enough to outlast the broker's
// outage in these tests (about a second) many times over.
func fastConfig() worker.Config {
	return worker.Config{
		Concurrency:      4,
		BatchSize:        4,
		Lease:            8 * time.Second,
		SendTimeout:      2 * time.Second,
		PollInterval:     20 * time.Millisecond,
		MaxCycleAttempts: 30,
		Retry: worker.RetrySchedule{Delays: []time.Duration{
			50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		}},
	}
}

func TestDeliveryThroughTheRealPlugin(t *testing.T) {
	for name, open := range e2etest.Backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			store := open(t)
			const password = "e2e-PASSWORD-MUST-NOT-LEAK"
			broker := redistest.Start(t, redistest.Options{Password: password})
			url := fmt.Sprintf("redis://:%s@%s/0", password, broker.Addr())

			host, err := pluginhost.New(ctx, pluginhost.Config{
				Dir: pluginDir,
				Plugins: []pluginhost.PluginConfig{{Name: "redis", Settings: map[string]string{
					"connect_timeout": "1s",
					// The broker listens on loopback, which the guard refuses
					// unless it is allowed.
					"allowed_networks": "127.0.0.1",
				}}},
			}, e2etest.Logger())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(host.Close)

			// Endpoint creation asks the plugin process; a bad maxlen is
			// refused there, before any delivery is made, and the refusal
			// does not repeat the password.
			err = host.Validate(ctx, "redis", transport.Endpoint{Config: map[string]string{"stream": "forms", "url": url, "maxlen": "0"}})
			if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), "maxlen") || strings.Contains(err.Error(), password) {
				t.Fatalf("Validate of maxlen 0 = %v, want a refusal naming maxlen", err)
			}
			epCfg := map[string]string{"stream": "forms:submissions", "url": url, "maxlen": "100000"}
			if err := host.Validate(ctx, "redis", transport.Endpoint{Config: epCfg}); err != nil {
				t.Fatalf("Validate of a good endpoint: %v", err)
			}
			secret, err := webhook.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.EndpointCreate(ctx, storage.Endpoint{
				Transport: "redis", Config: epCfg, Secrets: []storage.Secret{storage.NewSecret(secret, nil)},
			}); err != nil {
				t.Fatal(err)
			}
			e2etest.RunPool(t, store, host, fastConfig())

			all, retried := e2etest.DeliverAcrossOutage(t, store, broker, broker.Addr(), password)

			// Read everything back from the stream and verify each entry
			// as a consumer would.
			opts, err := redis.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			opts.DisableIdentity = true
			rdb := redis.NewClient(opts)
			defer rdb.Close()
			entries, err := rdb.XRange(ctx, "forms:submissions", "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, e := range entries {
				id, _ := e.Values["id"].(string)
				ts, _ := e.Values["timestamp"].(string)
				sig, _ := e.Values["signature"].(string)
				body, _ := e.Values["body"].(string)
				ev, ok := all[id]
				if !ok {
					t.Errorf("entry %s carries id %q, which is no delivery of this test", e.ID, id)
					continue
				}
				got[id]++
				h := http.Header{}
				h.Set(webhook.HeaderID, id)
				h.Set(webhook.HeaderTimestamp, ts)
				h.Set(webhook.HeaderSignature, sig)
				if err := webhook.Verify(h, []byte(body), secret); err != nil {
					t.Errorf("delivery %s: signature does not verify: %v", id, err)
				}
				if body != string(ev.Payload) {
					t.Errorf("delivery %s: body %s, want %s", id, body, ev.Payload)
				}
			}
			repeats := 0
			for id := range all {
				if got[id] == 0 {
					t.Errorf("delivery %s never reached the stream", id)
				}
				repeats += max(got[id]-1, 0)
			}
			t.Logf("%d deliveries, %d retried across the outage, all in the stream, %d stored more than once", len(all), retried, repeats)
		})
	}
}
