// Package e2etest is what the end-to-end tests share: building real plugin
// binaries, opening a fresh migrated store of each kind, running a real
// worker pool, submitting and waiting; and, one level further out, running
// the real `hymical serve` as a process and driving it over its HTTP API
// (Server), then checking what a plugin wrote as a receiver would
// (CheckSeqDelivered). It is imported only by tests; its stores are real
// databases (SQLite files, PostgreSQL through pgtest), never a mock.
package e2etest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/pluginbin"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/sqlite"
)

// BuildPlugins puts each plugin in dir as hymical-plugin-<name>, built
// from its package's import path (e.g. "github.com/hymical/hymical/plugins/http"),
// so it works from any package's test. Under the test command, which has
// built the shipped plugins once for the whole run (see pluginbin), it
// copies that binary instead of building it again; a copy, not a link, so
// a test may replace or damage its own.
func BuildPlugins(dir string, pkgs map[string]string) error {
	for name, pkg := range pkgs {
		dst := filepath.Join(dir, pluginhost.BinaryPrefix+name)
		built, ok, err := pluginbin.Lookup(os.Getenv, pkg)
		if err != nil {
			return fmt.Errorf("plugin %s: %w", name, err)
		}
		if ok {
			if err := copyExecutable(built, dst); err != nil {
				return fmt.Errorf("plugin %s from the run's build of %s: %w", name, pkg, err)
			}
			continue
		}
		out, err := exec.Command("go", "build", "-o", dst, pkg).CombinedOutput()
		if err != nil {
			return fmt.Errorf("build plugin %s from %s: %v\n%s", name, pkg, err, out)
		}
	}
	return nil
}

// copyExecutable copies the file at src to a new executable file at dst.
func copyExecutable(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	// A new file, as go build makes, even if an old one is still running.
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}

// PluginMain builds the plugins into a fresh temporary directory, runs the
// tests with it, and removes it: the body of a TestMain.
func PluginMain(m *testing.M, pkgs map[string]string, dir *string) {
	d, err := os.MkdirTemp("", "hymical-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := BuildPlugins(d, pkgs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(d)
		os.Exit(1)
	}
	*dir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// Backends opens a fresh, migrated store of each kind, closed when the test
// ends. The PostgreSQL one skips without HYMICAL_TEST_POSTGRES_DSN (and
// fails under CI=true).
func Backends() map[string]func(t *testing.T) storage.Store {
	return map[string]func(t *testing.T) storage.Store{
		"sqlite": func(t *testing.T) storage.Store {
			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hymical.db"))
			if err != nil {
				t.Fatal(err)
			}
			return migrated(t, s)
		},
		"postgres": func(t *testing.T) storage.Store {
			s, err := postgres.Open(t.Context(), pgtest.NewDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			return migrated(t, s)
		},
	}
}

func migrated(t *testing.T, s storage.Store) storage.Store {
	t.Helper()
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background(), storage.MigrateParams{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// Logger is silent unless the tests run with -v.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// FastConfig is a worker pool's config for the broker tests: it retries
// within half a second, and allows maxCycleAttempts attempts, enough to
// outlast the test's broker outage many times over (a broker that boots
// slowly wants more).
func FastConfig(maxCycleAttempts int) worker.Config {
	return worker.Config{
		Concurrency:      4,
		BatchSize:        4,
		Lease:            8 * time.Second,
		SendTimeout:      2 * time.Second,
		PollInterval:     20 * time.Millisecond,
		MaxCycleAttempts: maxCycleAttempts,
		Retry: worker.RetrySchedule{Delays: []time.Duration{
			50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		}},
	}
}

// StartHost starts the real plugin host with the one plugin name from
// dir, configured with settings, and closes it when the test ends.
func StartHost(t *testing.T, dir, name string, settings map[string]string) *pluginhost.Host {
	t.Helper()
	host, err := pluginhost.New(t.Context(), pluginhost.Config{
		Dir:     dir,
		Plugins: []pluginhost.PluginConfig{{Name: name, Settings: settings}},
	}, Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	return host
}

// CreateEndpoint stores an endpoint of transport with config and a fresh
// signing secret, which it returns so the test can verify what arrives.
func CreateEndpoint(t *testing.T, store storage.Store, transport string, config map[string]string) string {
	t.Helper()
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.EndpointCreate(t.Context(), storage.EndpointCreateParams{Endpoint: storage.Endpoint{
		Transport: transport, Config: config, Secrets: []storage.Secret{storage.NewSecret(secret, nil)},
	}}); err != nil {
		t.Fatal(err)
	}
	return secret
}

// RunPool runs a worker pool until the test ends.
func RunPool(t *testing.T, store worker.Store, sender worker.Sender, cfg worker.Config) {
	t.Helper()
	pool, err := worker.New(store, sender, cfg, Logger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pool.Run: %v", err)
		}
	})
}

// Submit creates n submissions of formID, each fanning out to exactly one
// endpoint, and returns their events by delivery id.
func Submit(t *testing.T, store storage.Store, formID string, n int) map[string]storage.Event {
	t.Helper()
	out := map[string]storage.Event{}
	for i := range n {
		ev, err := event.Submission(formID, []byte(fmt.Sprintf(`{"n":%d}`, i)), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.EventCreate(t.Context(), ev)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Deliveries) != 1 {
			t.Fatalf("fan-out made %d deliveries, want 1", len(res.Deliveries))
		}
		out[res.Deliveries[0].ID] = res.Event
	}
	return out
}

// WaitUntil is testwait.For for a cond that says whether it holds and
// what it saw. New tests call testwait.For.
func WaitUntil(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testwait.For(t, limit, func() error {
		if ok, state := cond(); !ok {
			return fmt.Errorf("still not %s: %s", what, state)
		}
		return nil
	})
}

// CountDelivered counts the deliveries among ids that are delivered.
func CountDelivered(t *testing.T, store storage.Store, ids map[string]storage.Event) int {
	t.Helper()
	n := 0
	for id := range ids {
		d, err := store.DeliveryGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if d.State == storage.StateDelivered {
			n++
		}
	}
	return n
}

// lastFailure says what the last attempt of one of ids that is not
// delivered yet recorded, for a test that gives up waiting.
func lastFailure(t *testing.T, store storage.Store, ids map[string]storage.Event) string {
	t.Helper()
	for id := range ids {
		d, err := store.DeliveryGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if d.State == storage.StateDelivered {
			continue
		}
		as, err := store.AttemptList(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) == 0 {
			return fmt.Sprintf("%s is %s with no attempt (unsent reason %q)", id, d.State, d.UnsentReason)
		}
		a := as[len(as)-1]
		return fmt.Sprintf("%s is %s, its attempt %d was %s: %s", id, d.State, a.Number, a.Outcome, a.Error)
	}
	return "none left"
}

// CountAttempts counts the attempts with outcome recorded for ids.
func CountAttempts(t *testing.T, store storage.Store, ids map[string]storage.Event, outcome storage.OutcomeKind) int {
	t.Helper()
	n := 0
	for id := range ids {
		as, err := store.AttemptList(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Outcome == outcome {
				n++
			}
		}
	}
	return n
}

// Broker is a server a transport sends to, which a test can kill and start
// again on the same address and data.
type Broker interface {
	Stop()
	Restart()
}

// DeliverAcrossOutage drives deliveries through a broker that goes away
// mid-run: it submits 30, kills the broker once some are delivered, submits
// 20 more while it is away and waits until they have failed as retryable,
// starts it again, and waits until every delivery is delivered. Each
// delivery made during the outage that took more than one attempt must
// have failed first as retryable with an error naming addr and not holding
// secret, and ended delivered; at least one must have. It returns every
// delivery's event by delivery id and how many were retried.
func DeliverAcrossOutage(t *testing.T, store storage.Store, broker Broker, addr, secret string) (map[string]storage.Event, int) {
	t.Helper()
	ctx := t.Context()
	// The broker dies with deliveries going out: some of them may be on
	// the wire when it does.
	before := Submit(t, store, "form_1", 30)
	testwait.For(t, 20*time.Second, func() error {
		if n := CountDelivered(t, store, before); n < 3 {
			return fmt.Errorf("%d delivered before the outage, want at least 3", n)
		}
		return nil
	})
	broker.Stop()
	// Deliveries made while it is away fail as retryable and wait in the
	// store.
	during := Submit(t, store, "form_1", 20)
	testwait.For(t, 20*time.Second, func() error {
		if n := CountAttempts(t, store, during, storage.OutcomeRetryable); n < 10 {
			return fmt.Errorf("%d retryable attempts while the broker is down, want at least 10", n)
		}
		return nil
	})
	// It comes back on the same address and data; the plugin connects
	// again and every waiting delivery goes out.
	broker.Restart()
	all := map[string]storage.Event{}
	for id, ev := range before {
		all[id] = ev
	}
	for id, ev := range during {
		all[id] = ev
	}
	// Three minutes: a broker killed and restarted may take long to take
	// messages again on a loaded machine, and how long is the broker's
	// recovery, not the plugin's. In CI runs RabbitMQ routed no delivery
	// in the 30 s, and once in the 60 s, after the plugin had reconnected
	// (while every package's tests ran at once on two cores); alone it
	// takes a few seconds. The message says why the rest still wait.
	testwait.For(t, 3*time.Minute, func() error {
		if n := CountDelivered(t, store, all); n != len(all) {
			return fmt.Errorf("after the outage, %d of %d delivered; %s", n, len(all), lastFailure(t, store, all))
		}
		return nil
	})

	retried := 0
	for id := range during {
		d, err := store.DeliveryGet(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Attempts <= 1 {
			continue
		}
		retried++
		as, err := store.AttemptList(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		first := as[0]
		if first.Outcome != storage.OutcomeRetryable || !strings.Contains(first.Error, addr) || strings.Contains(first.Error, secret) {
			t.Fatalf("first attempt of a retried delivery = %+v, want retryable naming the server %s and not the secret", first, addr)
		}
		if last := as[len(as)-1]; last.Outcome != storage.OutcomeDelivered {
			t.Fatalf("last attempt = %+v, want delivered", last)
		}
	}
	if retried == 0 {
		t.Fatal("no delivery made during the outage was retried")
	}
	return all, retried
}
