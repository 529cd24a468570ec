package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/config"
)

const demoUsage = `usage: hymical demo [flags]

Runs the server that 'hymical serve' runs, on a SQLite file in a temporary
directory of its own (removed when the demo ends), creates an endpoint for a
receiver on loopback that verifies the signature and dedupes on the
submission id, submits a sample form submission through the HTTP API, and
shows its delivery with its attempt history.`

// runDemo is the whole path in one process, through the same server.New
// and Run as serve: the store (a fresh SQLite file), the http plugin as a
// real child process, the API, the worker pool and the fleet jobs, and a
// receiver on loopback. The endpoint and the submission go in through the
// HTTP API, as a user's would. Nothing is left in the working directory.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoUsage)
	pluginDir := fs.String("plugins", defaultPluginDir(), "directory holding hymical-plugin-<name> executables")
	timeout := fs.Duration("timeout", 30*time.Second, "give up if the submission is not delivered by then")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("demo takes no arguments, got %q", fs.Args())
	}

	dir, err := os.MkdirTemp("", "hymical-demo-")
	if err != nil {
		return fmt.Errorf("demo: make its temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	token, err := randomToken()
	if err != nil {
		return err
	}
	cfg := demoConfig(dir, *pluginDir, token)
	if _, err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}
	builtIn, err := builtInTransports()
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), server.WithBuiltInTransports(builtIn))
	if err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	srv.Describe(stdout)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			fmt.Fprintln(stderr, "demo server:", err)
		}
	}()

	deliverCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	return deliverSample(deliverCtx, &apiClient{
		base: "http://" + srv.Addr().String(), token: token, operator: "demo",
		http: &http.Client{Timeout: 10 * time.Second},
	}, stdout)
}

// demoConfig is serve's default configuration, changed only where the demo
// must: its own database file, a free loopback port, a token of its own,
// loopback receivers allowed, and a short poll so it is over quickly.
func demoConfig(dir, pluginDir, token string) config.Config {
	cfg := config.Default()
	cfg.Database.URL = config.DatabaseURL("sqlite:" + filepath.Join(dir, "hymical.db"))
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.AdminToken = config.Secret(token)
	// The demo receiver is on loopback, which the http transport refuses
	// by default as an SSRF guard; allow it for this run only.
	cfg.Webhook.AllowedNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	cfg.Workers.PollInterval = 50 * time.Millisecond
	cfg.Plugins.Dir = pluginDir
	cfg.Console.Enabled = false
	return cfg
}

// deliverSample creates an endpoint for a verifying receiver, submits a
// sample form submission through the API and waits for its delivery to
// end, then shows it with its attempt history.
func deliverSample(ctx context.Context, c *apiClient, stdout io.Writer) error {
	recv, err := startDemoReceiver()
	if err != nil {
		return err
	}
	defer recv.close()
	const formID = "form_demo"
	var ep apiwire.EndpointCreated
	if err := c.do(ctx, http.MethodPost, "/v1/endpoints", apiwire.EndpointCreate{
		URL: recv.url, FormIDs: []string{formID}, Description: "hymical demo receiver",
	}, &ep); err != nil {
		return fmt.Errorf("create the demo endpoint: %w", err)
	}
	// The secret exists once the endpoint does: only now can the receiver
	// verify.
	if err := recv.verifyWith(ep.Secret); err != nil {
		return err
	}

	var sub apiwire.IngestResult
	if err := c.do(ctx, http.MethodPost, "/v1/forms/"+formID+"/submissions",
		map[string]any{"name": "Ada Lovelace", "email": "ada@example.com", "message": "Hello <b>from</b> the demo & co"}, &sub); err != nil {
		return fmt.Errorf("submit the sample: %w", err)
	}
	if len(sub.Deliveries) != 1 {
		return fmt.Errorf("the submission made %d deliveries, want 1 (to the demo endpoint)", len(sub.Deliveries))
	}
	id := sub.Deliveries[0]
	fmt.Fprintf(stdout, "submission %s on %s: delivery %s to %s\n", sub.SubmissionID, formID, id, ep.URL)

	var d apiwire.DeliveryDetail
	for {
		if err := c.do(ctx, http.MethodGet, "/v1/deliveries/"+id, nil, &d); err != nil {
			return fmt.Errorf("read delivery %s: %w", id, err)
		}
		if d.State == apiwire.StateDelivered || d.State == apiwire.StateFailed {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("delivery %s still %s when the demo gave up (attempts %d): %w", id, d.State, d.Attempts, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, a := range d.AttemptHistory {
		status := "no HTTP status"
		if a.HTTPStatus != nil {
			status = fmt.Sprintf("HTTP %d", *a.HTTPStatus)
		}
		if a.Error != "" {
			status += ": " + a.Error
		}
		fmt.Fprintf(stdout, "  attempt %d: %s, %s\n", a.Number, a.Outcome, status)
	}
	if d.State != apiwire.StateDelivered {
		return fmt.Errorf("delivery %s ended %s", id, d.State)
	}
	select {
	case sub := <-recv.received:
		fmt.Fprintf(stdout, "receiver verified the signature and processed submission %s\n", sub)
	default:
		return errors.New("the delivery is marked delivered but the receiver saw nothing")
	}
	fmt.Fprintf(stdout, "delivered: attempts=%d cycle_attempts=%d\n", d.Attempts, d.CycleAttempts)
	return nil
}

// demoReceiver is a webhook receiver on a loopback port, built the way the
// docs tell receivers to: the SDK's handler verifies the signature and
// dedupes on the submission id before the demo sees the event. Until it
// has the endpoint's secret it answers 503, which the server retries.
type demoReceiver struct {
	url      string
	received chan string
	hook     atomic.Pointer[http.Handler]
	srv      *http.Server
}

func startDemoReceiver() (*demoReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo receiver: %w", err)
	}
	r := &demoReceiver{url: "http://" + ln.Addr().String() + "/hook", received: make(chan string, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook", func(w http.ResponseWriter, req *http.Request) {
		h := r.hook.Load()
		if h == nil {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, req)
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// verifyWith makes the receiver verify with secret from now on.
func (r *demoReceiver) verifyWith(secret string) error {
	verifier, err := webhook.NewVerifier([]string{secret})
	if err != nil {
		return err
	}
	dedupe, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{})
	if err != nil {
		return err
	}
	h, err := webhook.NewHandler(verifier, dedupe, func(_ context.Context, ev webhook.Event) error {
		select {
		case r.received <- ev.Submission.ID:
		default:
		}
		return nil
	})
	if err != nil {
		return err
	}
	var hh http.Handler = h
	r.hook.Store(&hh)
	return nil
}

func (r *demoReceiver) close() { r.srv.Close() }

// defaultPluginDir is the directory of the running executable, where the
// README's build puts the plugins.
func defaultPluginDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}
