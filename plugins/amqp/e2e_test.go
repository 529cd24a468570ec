package main_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hymical/hymical/harness/brokertest"
	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/rabbitmqtest"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
)

// End to end: a real store, the real plugin host launching the real
// hymical-plugin-amqp process, the real worker pool, and a real RabbitMQ
// that the plugin loses mid-run and finds again.
//
// The outage is a cut route (brokertest.Cut resets every connection and
// refuses new ones), not a killed broker as for the other brokers' tests:
// after a SIGKILL, RabbitMQ 3.10's dirty recovery left the durable queue
// unroutable (every publish returned 312 NO_ROUTE) for over three minutes
// in a loaded CI run, while the plugin had long reconnected. That is the
// broker's recovery, not the plugin's; the plugin sees the same resets
// and refused dials either way.

// pluginDir holds the plugin binary, built once in TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"amqp": "github.com/hymical/hymical/plugins/amqp"}, &pluginDir)
}

// maxAttempts lets the retries outlast the outage in these tests with
// room to spare: the fast schedule makes two to three attempts a second.
const maxAttempts = 1000

func TestDeliveryThroughTheRealPlugin(t *testing.T) {
	// One broker for both backends, one after the other: it boots slowly.
	const password = "e2e-PASSWORD-MUST-NOT-LEAK"
	broker := rabbitmqtest.Start(t, rabbitmqtest.Options{Password: password})
	route := brokertest.NewCut(t, broker.Addr())
	routeURL := "amqp://" + url.UserPassword(rabbitmqtest.AdminUser, password).String() + "@" + route.Addr() + "/"
	for name, open := range e2etest.Backends() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := open(t)
			queue := "forms." + name

			// The topology is the operator's: a durable exchange and queue.
			ac, err := amqp.Dial(broker.AdminURL())
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			ch, err := ac.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.ExchangeDeclare("forms", "direct", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.QueueBind(queue, queue, "forms", false, nil); err != nil {
				t.Fatal(err)
			}
			ac.Close()

			// The password is in the plugin's settings, not the endpoint.
			host := e2etest.StartHost(t, pluginDir, "amqp", map[string]string{
				"url":                routeURL,
				"connect_timeout":    "1s",
				"reconnect_wait":     "100ms",
				"reconnect_wait_max": "500ms",
				// The broker listens on loopback, which the guard refuses
				// unless it is allowed.
				"allowed_networks": "127.0.0.1",
			})

			// Endpoint creation asks the plugin process; a config it could
			// never send to is refused there, before any delivery is made.
			err = host.Validate(ctx, "amqp", transport.Endpoint{Config: map[string]string{"exchange": "forms"}})
			if !errors.Is(err, transport.ErrRejected) || !strings.Contains(err.Error(), "routing_key") {
				t.Fatalf("Validate without a routing key = %v, want a refusal naming routing_key", err)
			}
			epCfg := map[string]string{"exchange": "forms", "routing_key": queue}
			if err := host.Validate(ctx, "amqp", transport.Endpoint{Config: epCfg}); err != nil {
				t.Fatalf("Validate of a good endpoint: %v", err)
			}
			secret := e2etest.CreateEndpoint(t, store, "amqp", epCfg)
			e2etest.RunPool(t, store, host, e2etest.FastConfig(maxAttempts))

			all, retried := e2etest.DeliverAcrossOutage(t, store, route, route.Addr(), password)

			// Read everything back from the queue and verify each message
			// as a consumer would: the three headers and the body.
			ac, err = amqp.Dial(broker.AdminURL())
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			ch, err = ac.Channel()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for {
				d, ok, err := ch.Get(queue, true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				ev, known := all[d.MessageId]
				if !known {
					t.Errorf("message carries id %q, which is no delivery of this test", d.MessageId)
					continue
				}
				got[d.MessageId]++
				h := http.Header{}
				for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
					v, _ := d.Headers[strings.ToLower(name)].(string)
					h.Set(name, v)
				}
				if err := webhook.Verify(h, d.Body, secret); err != nil {
					t.Errorf("delivery %s: signature does not verify: %v", d.MessageId, err)
				}
				if string(d.Body) != string(ev.Payload) {
					t.Errorf("delivery %s: body %s, want %s", d.MessageId, d.Body, ev.Payload)
				}
			}
			repeats := 0
			for id := range all {
				if got[id] == 0 {
					t.Errorf("delivery %s never reached the queue", id)
				}
				repeats += max(got[id]-1, 0)
			}
			t.Logf("%d deliveries, %d retried across the outage, all in the queue, %d stored more than once (deduped on the message id)", len(all), retried, repeats)
		})
	}
}
