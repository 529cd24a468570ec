package main_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/mosquittotest"
	"github.com/hymical/hymical/plugins/mqtt/mqtttransport"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// End to end: a real store, the real plugin host launching the real
// hymical-plugin-mqtt process, the real worker pool, and a real mosquitto
// that is killed mid-run and started again.

// pluginDir holds the plugin binary, built once in TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"mqtt": "github.com/hymical/hymical/plugins/mqtt"}, &pluginDir)
}

// fastConfig retries quickly, and often enough to outlast the broker's
// outage in these tests.
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

// consumer is a QoS 1 subscriber that reconnects and subscribes again
// after the broker's restart, as a real consumer would.
type consumer struct {
	mu  sync.Mutex
	got []mqtttransport.Envelope
	// subscribed gets a value each time the subscription is (re)made.
	subscribed chan struct{}
}

func subscribe(t *testing.T, broker *mosquittotest.Server, user, password, topic string) *consumer {
	t.Helper()
	c := &consumer{subscribed: make(chan struct{}, 8)}
	opts := mqtt.NewClientOptions().AddBroker(broker.URL("", "")).SetClientID("e2e-consumer-" + strings.ReplaceAll(t.Name(), "/", "-")).
		SetUsername(user).SetPassword(password).
		SetAutoReconnect(true).SetMaxReconnectInterval(100 * time.Millisecond).
		SetOnConnectHandler(func(cl mqtt.Client) {
			// A clean session forgets the subscription with the broker.
			cl.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) {
				var env mqtttransport.Envelope
				if err := json.Unmarshal(m.Payload(), &env); err != nil {
					t.Errorf("payload %q is not the envelope: %v", m.Payload(), err)
					return
				}
				c.mu.Lock()
				c.got = append(c.got, env)
				c.mu.Unlock()
			}).Wait()
			c.subscribed <- struct{}{}
		})
	cl := mqtt.NewClient(opts)
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("consumer connect: %v", tok.Error())
	}
	t.Cleanup(func() { cl.Disconnect(100) })
	<-c.subscribed
	return c
}

func (c *consumer) envelopes() []mqtttransport.Envelope {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]mqtttransport.Envelope(nil), c.got...)
}

func TestDeliveryThroughTheRealPlugin(t *testing.T) {
	const password = "e2e-PASSWORD-MUST-NOT-LEAK"
	broker := mosquittotest.Start(t, mosquittotest.Options{Users: map[string]string{"hymical": password}})
	for name, open := range e2etest.Backends() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := open(t)
			topic := "forms/" + name
			sub := subscribe(t, broker, "hymical", password, topic)

			// The password is in the plugin's settings, not the endpoint.
			host, err := pluginhost.New(ctx, pluginhost.Config{
				Dir: pluginDir,
				Plugins: []pluginhost.PluginConfig{{Name: "mqtt", Settings: map[string]string{
					"url":                broker.URL("", ""),
					"username":           "hymical",
					"password":           password,
					"connect_timeout":    "1s",
					"reconnect_wait":     "100ms",
					"reconnect_wait_max": "500ms",
					// The broker listens on loopback, which the guard refuses
					// unless it is allowed.
					"allowed_networks": "127.0.0.1",
				}}},
			}, e2etest.Logger())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(host.Close)

			// Endpoint creation asks the plugin process; a config it could
			// never send to is refused there, before any delivery is made.
			err = host.Validate(ctx, "mqtt", transport.Endpoint{Config: map[string]string{"topic": "forms/#"}})
			if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), "wildcard") {
				t.Fatalf("Validate of a wildcard topic = %v, want a refusal naming the wildcard", err)
			}
			epCfg := map[string]string{"topic": topic}
			if err := host.Validate(ctx, "mqtt", transport.Endpoint{Config: epCfg}); err != nil {
				t.Fatalf("Validate of a good endpoint: %v", err)
			}
			secret, err := webhook.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.EndpointCreate(ctx, storage.Endpoint{
				Transport: "mqtt", Config: epCfg, Secrets: []storage.Secret{storage.NewSecret(secret, nil)},
			}); err != nil {
				t.Fatal(err)
			}
			e2etest.RunPool(t, store, host, fastConfig())

			all, retried := e2etest.DeliverAcrossOutage(t, store, broker, broker.Addr(), password)

			// mosquitto keeps no messages for a subscriber that is away
			// (and none across its own kill), so only deliveries made once
			// the consumer has subscribed again must all arrive.
			select {
			case <-sub.subscribed:
			case <-time.After(20 * time.Second):
				t.Fatal("the consumer did not subscribe again after the restart")
			}
			after := e2etest.Submit(t, store, "form_1", 10)
			e2etest.WaitUntil(t, 20*time.Second, "the deliveries after the outage received", func() (bool, string) {
				got := map[string]bool{}
				for _, env := range sub.envelopes() {
					got[env.WebhookID] = true
				}
				n := 0
				for id := range after {
					if got[id] {
						n++
					}
				}
				return n == len(after), ""
			})
			for id, ev := range after {
				all[id] = ev
			}

			// Every message received verifies as a consumer would check
			// it: the three headers from the envelope and its body.
			envs := sub.envelopes()
			for _, env := range envs {
				ev, known := all[env.WebhookID]
				if !known {
					t.Errorf("message carries id %q, which is no delivery of this test", env.WebhookID)
					continue
				}
				h := http.Header{}
				h.Set(webhook.HeaderID, env.WebhookID)
				h.Set(webhook.HeaderTimestamp, env.WebhookTimestamp)
				h.Set(webhook.HeaderSignature, env.WebhookSignature)
				if err := webhook.Verify(h, []byte(env.Body), secret); err != nil {
					t.Errorf("delivery %s: signature does not verify: %v", env.WebhookID, err)
				}
				if env.Body != string(ev.Payload) {
					t.Errorf("delivery %s: body %s, want %s", env.WebhookID, env.Body, ev.Payload)
				}
			}
			t.Logf("%d deliveries, %d retried across the outage, %d messages received and verified", len(all), retried, len(envs))
		})
	}
}
