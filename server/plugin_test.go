package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite"
)

// TestAPluginWhoseChildHoldsItsOutputCannotHoldUpTheServer runs a server
// with a transport plugin that starts a child holding the plugin's stdout
// and stderr open, then has the plugin hang on a send so the host kills
// and restarts it: the delivery is released with its attempt recorded and
// sent again, not left processing; and the shutdown that follows ends
// within its bound, the plugin and its child gone.
func TestAPluginWhoseChildHoldsItsOutputCannotHoldUpTheServer(t *testing.T) {
	t.Parallel()
	bin := buildMisbehave(t)

	dbPath := filepath.Join(t.TempDir(), "hymical.db")
	direct, err := sqlite.Open(t.Context(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	if _, err := direct.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	endpoint := func(form, mode string) string {
		secret, err := webhook.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		e, err := direct.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "misbehave", URL: "https://hooks.example.com/" + form,
			FormIDs: []string{form}, Secrets: []storage.Secret{storage.NewSecret(secret, nil)}, Config: map[string]string{"mode": mode}}})
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	spawner, hanger := endpoint("form_spawn", "spawn"), endpoint("form_hang", "hang")

	cfg := testConfig("sqlite:" + dbPath)
	cfg.Console.Enabled = false
	cfg.Plugins.List = append(cfg.Plugins.List, config.PluginConfig{Name: "misbehave", Path: bin})
	cfg.Plugins.SendGrace = 300 * time.Millisecond
	cfg.Webhook.ConnectTimeoutSeconds, cfg.Webhook.ReadTimeoutSeconds = 1, 1
	cfg.Workers.LeaseSeconds = 10
	lease := time.Duration(cfg.Workers.LeaseSeconds) * time.Second
	r := start(t, cfg)

	only := func(endpointID string) storage.Delivery {
		ds, err := direct.DeliveryList(t.Context(), storage.DeliveryListParams{Filter: storage.DeliveryFilter{EndpointID: endpointID}})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 {
			return storage.Delivery{}
		}
		return ds[0]
	}
	spawn := func(n int) {
		t.Helper()
		submitTo(t, direct, "form_spawn", 1)
		testwait.For(t, 20*time.Second, func() error {
			ds, err := direct.DeliveryList(t.Context(), storage.DeliveryListParams{Filter: storage.DeliveryFilter{EndpointID: spawner, State: storage.StateDelivered}})
			if err != nil || len(ds) != n {
				return fmt.Errorf("%d of the spawning endpoint's deliveries delivered, want %d (%v)", len(ds), n, err)
			}
			return nil
		})
		if procs, err := proctest.Alive(bin); err != nil || len(procs) != 2 {
			t.Fatalf("processes of %s: %v (%v), want the plugin and its child", bin, procs, err)
		}
	}
	spawn(1)

	// The send hangs; past its deadline and the grace the host kills the
	// plugin, and the attempt is recorded and the delivery released well
	// before its lease would have run out.
	hungAt := time.Now()
	submitTo(t, direct, "form_hang", 1)
	testwait.For(t, lease, func() error {
		if d := only(hanger); d.Attempts < 1 || d.State != storage.StatePending {
			return fmt.Errorf("the hung delivery is not released with its attempt: %+v", d)
		}
		return nil
	})
	t.Logf("the hung delivery was released %s after it was submitted", time.Since(hungAt).Round(time.Millisecond))
	// The restart took the child with the plugin; the new plugin starts
	// one of its own, to hold its pipes through the shutdown.
	spawn(2)

	began := time.Now()
	r.stop()
	bound := pluginhost.KillBound + 3*time.Second
	select {
	case <-r.done:
	case <-time.After(2 * bound):
		t.Fatalf("Run had not returned %s after the shutdown began", 2*bound)
	}
	took := time.Since(began)
	t.Logf("Run returned %s after the shutdown began: %v", took.Round(time.Millisecond), r.err)
	if took > bound {
		t.Errorf("the shutdown took %s, more than pluginhost.KillBound plus 3s (%s)", took, bound)
	}
	if left, err := proctest.Alive(bin); err != nil || len(left) != 0 {
		t.Errorf("processes of %s left after Run returned: %v (%v)", bin, left, err)
	}
}

// TestAPluginThatHangsInConfigureAtStartUpLeavesTheServerServing starts a
// server whose second transport plugin's Configure never answers: the
// server starts all the same, /readyz answers 503 naming that transport
// and nothing of the host, its delivery waits unsent with the reason on
// it, the http transport delivers to a real receiver meanwhile, and once
// Configure answers the host's background start brings the transport back
// and its delivery goes out.
func TestAPluginThatHangsInConfigureAtStartUpLeavesTheServerServing(t *testing.T) {
	t.Parallel()
	bin := buildMisbehave(t)
	// While this file exists the plugin's Configure never answers.
	flag := filepath.Join(t.TempDir(), "hang-now")
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	dbPath := filepath.Join(t.TempDir(), "hymical.db")
	direct, err := sqlite.Open(t.Context(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	if _, err := direct.Migrate(t.Context(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	received := make(chan struct{}, 10)
	loopbackEndpoint(t, direct, "form_http", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		received <- struct{}{}
		w.WriteHeader(http.StatusNoContent)
	}))
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	stuck, err := direct.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "stuck", URL: "https://hooks.example.com/stuck",
		FormIDs: []string{"form_stuck"}, Secrets: []storage.Secret{storage.NewSecret(secret, nil)}, Config: map[string]string{"mode": "ok"}}})
	if err != nil {
		t.Fatal(err)
	}

	cfg := testConfig("sqlite:" + dbPath)
	cfg.Console.Enabled = false
	cfg.Plugins.List = append(cfg.Plugins.List, config.PluginConfig{Name: "stuck", Path: bin, Settings: config.Settings{"configure_hang_while": flag}})
	cfg.Plugins.StartTimeout = time.Second
	r := start(t, cfg)

	status, body := r.get(t, "/readyz")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `transport plugin \"stuck\" is not running (configure timed out)`) || strings.Contains(body, bin) {
		t.Fatalf("/readyz = %d %s, want 503 naming the stuck transport and why in a few words, without its path", status, body)
	}

	submitTo(t, direct, "form_http", 1)
	select {
	case <-received:
	case <-time.After(20 * time.Second):
		t.Fatal("the http transport delivered nothing while the stuck one was down")
	}

	submitTo(t, direct, "form_stuck", 1)
	stuckDelivery := func() (storage.Delivery, error) {
		ds, err := direct.DeliveryList(t.Context(), storage.DeliveryListParams{Filter: storage.DeliveryFilter{EndpointID: stuck.ID}})
		if err != nil || len(ds) != 1 {
			return storage.Delivery{}, fmt.Errorf("%d deliveries to the stuck transport (%v), want 1", len(ds), err)
		}
		return ds[0], nil
	}
	testwait.For(t, 20*time.Second, func() error {
		d, err := stuckDelivery()
		if err != nil {
			return err
		}
		if d.State != storage.StatePending || d.Attempts != 0 || !strings.Contains(d.UnsentReason, `transport plugin "stuck" is not running`) {
			return fmt.Errorf("the stuck transport's delivery is not given back unsent with the reason: %+v", d)
		}
		return nil
	})

	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, func() error {
		if status, body := r.get(t, "/readyz"); status != http.StatusOK {
			return fmt.Errorf("/readyz = %d %s once Configure answers", status, body)
		}
		return nil
	})
	// Given back with a delay of the first retry step, at most a minute.
	testwait.For(t, 90*time.Second, func() error {
		d, err := stuckDelivery()
		if err != nil {
			return err
		}
		if d.State != storage.StateDelivered {
			return fmt.Errorf("the stuck transport's delivery is %s once it runs again: %+v", d.State, d)
		}
		return nil
	})
}

// buildMisbehave builds the misbehaving test plugin into a directory of the
// test's own and returns its path; its processes are killed when the test
// ends.
func buildMisbehave(t *testing.T) string {
	t.Helper()
	binDir := t.TempDir()
	if err := e2etest.BuildPlugins(binDir, map[string]string{"misbehave": "github.com/hymical/hymical/server/pluginhost/testdata/misbehave"}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, pluginhost.BinaryPrefix+"misbehave")
	t.Cleanup(func() { _, _ = proctest.KillExecutable(bin) })
	return bin
}
