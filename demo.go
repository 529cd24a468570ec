package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hymical/hymical/internal/redact"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// runDemo is the whole path in one process: the store (migrated if it is the
// embedded SQLite default), the http plugin as a real child process, the
// worker pool, and a receiver on loopback that verifies the signature and
// dedupes on the submission id the way the docs tell receivers to.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database", databaseURLDefault(), "database URL: sqlite:PATH or postgres://USER@HOST/DB (env FORMS_DATABASE_URL)")
	pluginDir := fs.String("plugins", defaultPluginDir(), "directory holding hymical-plugin-<name> executables")
	timeout := fs.Duration("timeout", 30*time.Second, "give up if the submission is not delivered by then")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := newLogger(stderr)

	store, err := server.OpenStore(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer store.Close()
	if res, err := store.Migrate(ctx, storage.MigrateParams{}); err != nil {
		return fmt.Errorf("migrate %s: %w", redact.URL(*dbURL), err)
	} else if len(res.Applied) > 0 {
		fmt.Fprintf(stdout, "migrated %s to schema version %d\n", redact.URL(*dbURL), res.To)
	}
	if _, err := server.CheckSchema(ctx, store); err != nil {
		return err
	}

	secret, err := webhook.NewSecret()
	if err != nil {
		return err
	}
	received := make(chan string, 4)
	recv, err := startDemoReceiver(secret, received)
	if err != nil {
		return err
	}
	defer recv.Close()

	host, err := pluginhost.New(ctx, pluginhost.Config{
		Dir: *pluginDir,
		// The demo receiver is on loopback, which the http transport
		// refuses by default as an SSRF guard; allow it for this run only.
		Plugins: []pluginhost.PluginConfig{{Name: "http", Settings: map[string]string{"allowed_networks": "127.0.0.0/8"}}},
	}, log)
	if err != nil {
		return fmt.Errorf("start plugins from %s (build them with: go build -o bin/hymical-plugin-http ./plugins/http): %w", *pluginDir, err)
	}
	defer host.Close()

	formID := "form_demo"
	ep, err := store.EndpointCreate(ctx, storage.Endpoint{
		Transport:   "http",
		URL:         "http://" + recv.Addr().String() + "/hook",
		FormIDs:     []string{formID},
		Secrets:     []storage.Secret{storage.NewSecret(secret, nil)},
		Description: "hymical demo receiver",
	})
	if err != nil {
		return err
	}
	ev, err := server.SubmissionEvent(formID, json.RawMessage(`{"name":"Ada Lovelace","email":"ada@example.com","message":"Hello from the demo"}`), time.Now())
	if err != nil {
		return err
	}
	res, err := store.EventCreate(ctx, ev)
	if err != nil {
		return err
	}
	var dlv storage.Delivery
	for _, d := range res.Deliveries {
		if d.EndpointID == ep.ID {
			dlv = d
		}
	}
	fmt.Fprintf(stdout, "submission %s on %s: delivery %s to %s\n", ev.SubmissionID, formID, dlv.ID, ep.URL)

	pool, err := worker.New(store, host, worker.Config{PollInterval: 100 * time.Millisecond}, log)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	defer func() { stop(); <-done }()

	deadline := time.After(*timeout)
	for {
		d, err := store.DeliveryGet(ctx, dlv.ID)
		if err != nil {
			return err
		}
		if d.State.Terminal() {
			attempts, err := store.AttemptList(ctx, d.ID)
			if err != nil {
				return err
			}
			for _, a := range attempts {
				fmt.Fprintf(stdout, "  attempt %d: %s, HTTP %d %s\n", a.Number, a.Outcome, a.HTTPStatus, a.Error)
			}
			if d.State != storage.StateDelivered {
				return fmt.Errorf("delivery %s ended %s", d.ID, d.State)
			}
			select {
			case sub := <-received:
				fmt.Fprintf(stdout, "receiver verified the signature and processed submission %s\n", sub)
			default:
				return errors.New("the delivery is marked delivered but the receiver saw nothing")
			}
			fmt.Fprintf(stdout, "delivered: attempts=%d cycle_attempts=%d\n", d.Attempts, d.CycleAttempts)
			return nil
		}
		select {
		case <-deadline:
			return fmt.Errorf("delivery %s still %s after %s (attempts %d)", d.ID, d.State, *timeout, d.Attempts)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startDemoReceiver serves a webhook receiver on a loopback port, built the
// way the docs tell receivers to: the SDK's handler verifies the signature
// and dedupes on the submission id before the demo sees the event.
func startDemoReceiver(secret string, received chan<- string) (net.Listener, error) {
	verifier, err := webhook.NewVerifier([]string{secret})
	if err != nil {
		return nil, err
	}
	dedupe, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{})
	if err != nil {
		return nil, err
	}
	handler, err := webhook.NewHandler(verifier, dedupe, func(_ context.Context, ev webhook.Event) error {
		received <- ev.Submission.ID
		return nil
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo receiver: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /hook", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln, nil
}

// defaultPluginDir is the directory of the running executable, where the
// README's build puts the plugins.
func defaultPluginDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}
