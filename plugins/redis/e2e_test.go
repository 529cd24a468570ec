package main_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/redistest"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
)

// End to end: a real store, the real plugin host launching the real
// hymical-plugin-redis process, the real worker pool, and a real
// redis-server that is killed mid-run and started again.

// pluginDir holds the plugin binary, built once in TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"redis": "github.com/hymical/hymical/plugins/redis"}, &pluginDir)
}

// maxAttempts lets the retries outlast the broker's outage in these
// tests (about a second) many times over.
const maxAttempts = 30

func TestDeliveryThroughTheRealPlugin(t *testing.T) {
	for name, open := range e2etest.Backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			store := open(t)
			const password = "e2e-PASSWORD-MUST-NOT-LEAK"
			broker := redistest.Start(t, redistest.Options{Password: password})
			url := fmt.Sprintf("redis://:%s@%s/0", password, broker.Addr())

			host := e2etest.StartHost(t, pluginDir, "redis", map[string]string{
				"connect_timeout": "1s",
				// The broker listens on loopback, which the guard refuses
				// unless it is allowed.
				"allowed_networks": "127.0.0.1",
			})

			// Endpoint creation asks the plugin process; a bad maxlen is
			// refused there, before any delivery is made, and the refusal
			// does not repeat the password.
			err := host.Validate(ctx, "redis", transport.Endpoint{Config: map[string]string{"stream": "forms", "url": url, "maxlen": "0"}})
			if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), "maxlen") || strings.Contains(err.Error(), password) {
				t.Fatalf("Validate of maxlen 0 = %v, want a refusal naming maxlen", err)
			}
			epCfg := map[string]string{"stream": "forms:submissions", "url": url, "maxlen": "100000"}
			if err := host.Validate(ctx, "redis", transport.Endpoint{Config: epCfg}); err != nil {
				t.Fatalf("Validate of a good endpoint: %v", err)
			}
			secret := e2etest.CreateEndpoint(t, store, "redis", epCfg)
			e2etest.RunPool(t, store, host, e2etest.FastConfig(maxAttempts))

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
