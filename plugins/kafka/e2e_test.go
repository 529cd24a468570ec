package main_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// End to end: a real store, the real plugin host launching the real
// hymical-plugin-kafka process, the real worker pool, and a kfake cluster
// (franz-go's in-process Kafka, on loopback; no Kafka broker is packaged
// here) that is stopped mid-run and started again on its data directory.

// pluginDir holds the plugin binary, built once in TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"kafka": "github.com/hymical/hymical/plugins/kafka"}, &pluginDir)
}

func fastConfig() worker.Config {
	return worker.Config{
		Concurrency:      4,
		BatchSize:        4,
		Lease:            8 * time.Second,
		SendTimeout:      2 * time.Second,
		PollInterval:     20 * time.Millisecond,
		MaxCycleAttempts: 200,
		Retry: worker.RetrySchedule{Delays: []time.Duration{
			50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		}},
	}
}

// broker is a kfake cluster that can be stopped and started again on the
// same port and data directory.
type broker struct {
	t     *testing.T
	port  int
	dir   string
	topic string
	c     *kfake.Cluster
}

func startBroker(t *testing.T, topic string) *broker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, port: ln.Addr().(*net.TCPAddr).Port, dir: t.TempDir(), topic: topic}
	ln.Close()
	b.Restart()
	t.Cleanup(func() { b.Stop() })
	return b
}

func (b *broker) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

func (b *broker) Stop() {
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

func (b *broker) Restart() {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(b.port), kfake.DataDir(b.dir), kfake.SeedTopics(3, b.topic))
	if err != nil {
		b.t.Fatal(err)
	}
	b.c = c
}

func TestDeliveryThroughTheRealPlugin(t *testing.T) {
	for name, open := range e2etest.Backends() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := open(t)
			topic := "forms." + name
			b := startBroker(t, topic)

			host, err := pluginhost.New(ctx, pluginhost.Config{
				Dir: pluginDir,
				Plugins: []pluginhost.PluginConfig{{Name: "kafka", Settings: map[string]string{
					"brokers":         b.addr(),
					"dial_timeout":    "200ms",
					"produce_timeout": "400ms",
					// Short, so the outage costs a fraction of a second per attempt.
					// kfake listens on loopback, which the guard refuses
					// unless it is allowed.
					"allowed_networks": "127.0.0.1",
				}}},
			}, e2etest.Logger())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(host.Close)

			err = host.Validate(ctx, "kafka", transport.Endpoint{Config: map[string]string{"topic": "forms/bad"}})
			if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), "invalid topic name") {
				t.Fatalf("Validate of a bad topic = %v, want a refusal naming the topic", err)
			}
			epCfg := map[string]string{"topic": topic}
			if err := host.Validate(ctx, "kafka", transport.Endpoint{Config: epCfg}); err != nil {
				t.Fatalf("Validate of a good endpoint: %v", err)
			}
			secret, err := webhook.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.EndpointCreate(ctx, storage.Endpoint{
				Transport: "kafka", Config: epCfg, Secrets: []storage.Secret{storage.NewSecret(secret, nil)},
			}); err != nil {
				t.Fatal(err)
			}
			e2etest.RunPool(t, store, host, fastConfig())

			all, retried := e2etest.DeliverAcrossOutage(t, store, b, b.addr(), secret)

			// Read the topic back and verify each record as a consumer
			// would: key, the three headers, the value.
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr()), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			got := map[string]int{}
			pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			for len(got) < len(all) && pctx.Err() == nil {
				cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
					h := http.Header{}
					for _, rh := range r.Headers {
						h.Add(rh.Key, string(rh.Value))
					}
					id := h.Get(webhook.HeaderID)
					ev, known := all[id]
					if !known {
						t.Errorf("record carries webhook-id %q, which is no delivery of this test", id)
						return
					}
					got[id]++
					if err := webhook.Verify(h, r.Value, secret); err != nil {
						t.Errorf("delivery %s: signature does not verify: %v", id, err)
					}
					if string(r.Value) != string(ev.Payload) {
						t.Errorf("delivery %s: value %s, want %s", id, r.Value, ev.Payload)
					}
					if string(r.Key) != ev.SubmissionID {
						t.Errorf("delivery %s: key %q, want the submission id %q", id, r.Key, ev.SubmissionID)
					}
				})
			}
			repeats := 0
			for id := range all {
				if got[id] == 0 {
					t.Errorf("delivery %s never reached the topic", id)
				}
				repeats += max(got[id]-1, 0)
			}
			t.Logf("%d deliveries, %d retried across the outage, all in the topic, %d stored more than once", len(all), retried, repeats)
		})
	}
}
