//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	serverevent "github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// pluginDir holds the real HTTP plugin, built once.
var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hymical-receiver-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := e2etest.BuildPlugins(dir, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		fmt.Fprintf(os.Stderr, "building the http plugin: %v\n", err)
		return 1
	}
	pluginDir = dir
	return m.Run()
}

// The receiver behind the real sender: the server's worker delivers a
// submission through the shipped HTTP plugin, an operator replays the
// delivered delivery, and the receiver has stored the submission once.
func TestHymicalDeliveryAndReplayAreStoredOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbPath := filepath.Join(t.TempDir(), "receiver.db")
	secret := newSecret(t)
	r := start(t, dbPath, secret)

	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hymical.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.Migrate(ctx, storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	host, err := pluginhost.New(ctx, pluginhost.Config{
		Dir: pluginDir,
		// The receiver is on loopback, which the http plugin refuses by
		// default.
		Plugins: []pluginhost.PluginConfig{{Name: "http", Settings: map[string]string{"allowed_networks": "127.0.0.0/8"}}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	ep, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: "http",
		URL:       r.hookURL(),
		Secrets:   []storage.Secret{storage.NewSecret(secret, nil)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := serverevent.Submission("form_contact", json.RawMessage(`{"name":"Ada Lovelace"}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.EventCreate(ctx, ev)
	if err != nil || len(res.Deliveries) != 1 || res.Deliveries[0].EndpointID != ep.ID {
		t.Fatalf("EventCreate = %+v, %v", res, err)
	}
	dlv := res.Deliveries[0].ID

	pool, err := worker.New(store, host, worker.Config{PollInterval: 20 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	defer func() { stop(); <-done }()

	waitDelivered := func(attempts int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			d, err := store.DeliveryGet(ctx, dlv)
			if err != nil {
				t.Fatal(err)
			}
			if d.State == storage.StateDelivered && d.Attempts == attempts {
				return
			}
			if d.State == storage.StateFailed || time.Now().After(deadline) {
				list, _ := store.AttemptList(ctx, dlv)
				t.Fatalf("delivery %s after %d attempts, want delivered after %d: %+v", d.State, d.Attempts, attempts, list)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitDelivered(1)
	if _, err := store.DeliveryReplay(ctx, storage.DeliveryReplayParams{DeliveryID: dlv, Actor: "receiver example test"}); err != nil {
		t.Fatalf("DeliveryReplay: %v", err)
	}
	waitDelivered(2)

	if n := stored(t, dbPath, ev.SubmissionID); n != 1 {
		t.Fatalf("the receiver stored the submission %d times after a delivery and a replay, want 1", n)
	}
	attempts, err := store.AttemptList(ctx, dlv)
	if err != nil || len(attempts) != 2 || attempts[0].HTTPStatus != 204 || attempts[1].HTTPStatus != 200 {
		t.Fatalf("attempts %+v (%v): want 204 for the delivery, then 200 for the replay", attempts, err)
	}
}
