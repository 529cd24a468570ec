package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/pluginhost"
)

// pluginSettings are the http plugin's settings in every phase: the
// receiver is on loopback, which the SSRF guard refuses unless allowed.
func pluginSettings() map[string]string {
	return map[string]string{"allowed_networks": "127.0.0.0/8"}
}

// formData is the submission every phase sends: a small contact form.
var formData = json.RawMessage(`{"name":"Ada Lovelace","email":"ada@example.com","message":"Hello from hymical bench"}`)

// samplePayload is one real submission body, for the phases that send
// without a store.
func samplePayload() ([]byte, error) {
	ev, err := event.Submission("form_bench", formData, time.Now())
	if err != nil {
		return nil, err
	}
	return ev.Payload, nil
}

// loopID is the webhook-id of message i of a send-only phase, shaped like
// a delivery id.
func loopID(i int) string { return fmt.Sprintf("dlv_%032x", i) }

// sendLoop runs send for i in [0, n) on conc goroutines and times each.
// It stops at the first error: a phase whose sends fail measures nothing.
func sendLoop(ctx context.Context, n, conc int, send func(ctx context.Context, i int) error) (time.Duration, []time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	lat := make([]time.Duration, n)
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := send(ctx, i); err != nil {
					cancel(fmt.Errorf("message %d: %w", i, err))
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return wall, nil, err
	}
	return wall, lat, nil
}

// sendPhase runs one send-only phase and fills in what it measured.
func (r *runner) sendPhase(ctx context.Context, name string, send func(ctx context.Context, i int) error) (Phase, error) {
	n, conc := r.o.Deliveries(), r.o.Worker.Concurrency
	r.recv.reset()
	m := startMeter(r.dbPID)
	wall, lat, err := sendLoop(ctx, n, conc, send)
	u := m.stop()
	if err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	if got := r.recv.ok.Load(); got != int64(n) {
		return Phase{}, fmt.Errorf("%s: the receiver verified %d of %d messages (%d refused)", name, got, n, r.recv.bad.Load())
	}
	p := Phase{
		Name: name, Kind: KindSend, Messages: n, Wall: wall,
		Rate:    float64(n) / wall.Seconds(),
		Latency: "one send, start to answer", LatencySamples: n,
		P50: percentile(lat, 50), P99: percentile(lat, 99),
		Received: r.recv.ok.Load(),
	}
	p.setUsage(u, m.hwmReset)
	r.progress("%s: %d messages in %s, %.0f/s", name, n, wall.Round(time.Millisecond), p.Rate)
	return p, nil
}

// ceiling is a bare Go loop: sign, POST with a client tuned for this one
// receiver, discard the answer. Nothing else happens, so nothing built on
// the same steps can go faster on this machine.
func (r *runner) ceiling(ctx context.Context) (Phase, error) {
	body, err := samplePayload()
	if err != nil {
		return Phase{}, err
	}
	conc := r.o.Worker.Concurrency
	client := &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conc,
		MaxIdleConnsPerHost: conc,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
	defer client.CloseIdleConnections()
	endpoints := r.o.Endpoints
	return r.sendPhase(ctx, "ceiling: bare loop", func(ctx context.Context, i int) error {
		h, err := webhook.SignHeaders(loopID(i), time.Now(), body, r.secret)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.recv.url(i%endpoints), bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header = h
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("receiver answered %s", resp.Status)
		}
		return nil
	})
}

// message builds what the worker hands a transport for message i: the
// same three signed headers and body.
func (r *runner) message(i int, body []byte) (transport.Message, error) {
	return SignedMessage(loopID(i), 1, r.recv.url(i%r.o.Endpoints), r.secret, body, time.Now())
}

// SignedMessage is the message hymical's worker hands a transport for one
// attempt (server/worker builds it from a claim the same way): the
// delivery's id, the attempt's number counting from 1, the endpoint's URL,
// the three Standard Webhooks headers signed at now with secret, and the
// body. harness/riverbench sends it through the plugin so River's messages
// are byte for byte hymical's.
func SignedMessage(deliveryID string, attempt int, url, secret string, body []byte, now time.Time) (transport.Message, error) {
	h, err := webhook.SignHeaders(deliveryID, now, body, secret)
	if err != nil {
		return transport.Message{}, err
	}
	headers := make([]transport.Header, 0, 3)
	for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
		headers = append(headers, transport.Header{Name: name, Value: h.Get(name)})
	}
	return transport.Message{
		DeliveryID: deliveryID,
		Attempt:    attempt,
		Endpoint:   transport.Endpoint{URL: url},
		Headers:    headers,
		Body:       body,
	}, nil
}

// sendVia is a send-only phase through a worker.Sender: the transport
// without the store.
func (r *runner) sendVia(ctx context.Context, name string, send func(ctx context.Context, plugin string, msg transport.Message, deadline time.Time) transport.Outcome) (Phase, error) {
	body, err := samplePayload()
	if err != nil {
		return Phase{}, err
	}
	timeout := r.o.Worker.SendTimeout
	return r.sendPhase(ctx, name, func(ctx context.Context, i int) error {
		msg, err := r.message(i, body)
		if err != nil {
			return err
		}
		out := send(ctx, "http", msg, time.Now().Add(timeout))
		if out.Kind != transport.OutcomeDelivered {
			return fmt.Errorf("outcome %s: %s", out.Kind, out.Error)
		}
		return nil
	})
}

func (r *runner) sendInProcess(ctx context.Context) (Phase, error) {
	s, err := NewInProcess(ctx, pluginSettings())
	if err != nil {
		return Phase{}, err
	}
	return r.sendVia(ctx, "send only: in-process transport", s.Send)
}

func (r *runner) sendPlugin(ctx context.Context) (Phase, error) {
	host, err := r.startHost(ctx)
	if err != nil {
		return Phase{}, err
	}
	defer host.Close()
	return r.sendVia(ctx, "send only: plugin", host.Send)
}

// startHost launches the real hymical-plugin-http from the plugin
// directory, and only it: other plugins there are not this bench's.
func (r *runner) startHost(ctx context.Context) (*pluginhost.Host, error) {
	return StartPluginHost(ctx, r.o.PluginDir, r.o.Logger)
}

// StartPluginHost launches dir's hymical-plugin-http, and only it, through
// the server's plugin host (hashicorp/go-plugin over gRPC, as `hymical
// serve` runs it), configured as in every bench phase: the plugin's
// default settings with the loopback receiver allowed. The host's Send is
// the worker.Sender the server's worker calls (use the plugin name
// "http"); Close stops the plugin. The plugin process is a child of this
// one, so a Rival's readings count its CPU. logger may be nil
// (slog.Default). harness/riverbench uses it to send through the same hop
// as hymical.
func StartPluginHost(ctx context.Context, dir string, logger *slog.Logger) (*pluginhost.Host, error) {
	path := pluginPath(dir)
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	build := fmt.Sprintf("build it from the repository's root with: go build -o %s ./plugins/http", path)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no http plugin at %s (%s): %w", path, build, err)
	}
	host, err := pluginhost.New(ctx, pluginhost.Config{
		Plugins: []pluginhost.PluginConfig{{
			Name:     "http",
			Path:     path,
			Settings: pluginSettings(),
		}},
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("start the http plugin from %s (%s): %w", dir, build, err)
	}
	return host, nil
}

func pluginPath(dir string) string {
	return filepath.Join(dir, pluginhost.BinaryPrefix+"http")
}
