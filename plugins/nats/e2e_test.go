package main_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/natstest"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
)

// End to end: a real store, the real plugin host launching the real
// hymical-plugin-nats process, the real worker pool, and a real nats-server
// with JetStream that is killed mid-run and started again.

// pluginDir holds the plugin binary, built once in TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"nats": "github.com/hymical/hymical/plugins/nats"}, &pluginDir)
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
			broker := natstest.Start(t, natstest.Options{})
			createStream(t, broker.URL())

			host := e2etest.StartHost(t, pluginDir, "nats", map[string]string{
				"url": broker.URL(), "connect_timeout": "1s", "reconnect_wait": "50ms",
				// The broker listens on loopback, which the guard refuses
				// unless it is allowed.
				"allowed_networks": "127.0.0.1",
			})

			// Endpoint creation asks the plugin process; a bad subject is
			// refused there, before any delivery is made.
			err := host.Validate(ctx, "nats", transport.Endpoint{Config: map[string]string{"subject": "forms.*"}})
			if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), "wildcards") {
				t.Fatalf("Validate of a wildcard subject = %v, want a refusal naming wildcards", err)
			}
			epCfg := map[string]string{"subject": "forms.submissions"}
			if err := host.Validate(ctx, "nats", transport.Endpoint{Config: epCfg}); err != nil {
				t.Fatalf("Validate of a good endpoint: %v", err)
			}
			secret := e2etest.CreateEndpoint(t, store, "nats", epCfg)
			e2etest.RunPool(t, store, host, e2etest.FastConfig(maxAttempts))

			all, retried := e2etest.DeliverAcrossOutage(t, store, broker, broker.URL(), secret)

			got := readStream(t, broker.URL(), len(all))
			repeats := 0
			for id, ev := range all {
				repeats += max(len(got[id])-1, 0)
				msgs := got[id]
				if len(msgs) == 0 {
					t.Errorf("delivery %s never reached the stream", id)
					continue
				}
				for _, m := range msgs {
					h := http.Header(m.Headers())
					if err := webhook.Verify(h, m.Data(), secret); err != nil {
						t.Errorf("delivery %s: signature does not verify: %v", id, err)
					}
					if string(m.Data()) != string(ev.Payload) || m.Headers().Get("Nats-Msg-Id") != id {
						t.Errorf("delivery %s: data %s, Nats-Msg-Id %q; want the event's payload and the delivery id", id, m.Data(), m.Headers().Get("Nats-Msg-Id"))
					}
				}
			}
			if extra := len(got) - len(all); extra != 0 {
				t.Errorf("the stream holds %d messages for deliveries nobody made", extra)
			}
			t.Logf("%d deliveries, %d retried across the outage, all in the stream, %d stored more than once", len(all), retried, repeats)
		})
	}
}

func createStream(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FORMS", Subjects: []string{"forms.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
}

// readStream reads the whole stream through a JetStream consumer, grouped
// by webhook-id, until it has want distinct ids or nothing more comes.
func readStream(t *testing.T, url string, want int) map[string][]jetstream.Msg {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, "FORMS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]jetstream.Msg{}
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			id := m.Headers().Get(webhook.HeaderID)
			got[id] = append(got[id], m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatal(err)
		}
		if n == 0 || len(got) >= want && n < 100 {
			return got
		}
	}
}
