// Command riverbench is the yardstick issue 21 measures hymical's drain
// against: a webhook sender a team could build on River instead, run on the
// same machine, database server, receiver and submission body as
// `hymical-bench --preload`, and measured the same way.
//
// It is its own Go module, outside the repository's go.work (hence
// GOWORK=off), so River never enters hymical's dependencies:
//
//	cd harness/riverbench && GOWORK=off go run . --database "$DSN" --submissions 50000 --endpoints 2
//
// One River job per delivery, signed with the endpoint's secret when it is
// worked and sent to the bench's loopback receiver, which verifies every
// signature. Like the River sender the issue describes, it keeps no
// attempt rows and no claim token fence; River's own fetch settings from
// its benchmark (2 ms cooldown, 20 ms poll).
//
// How it sends is --transport. inprocess (the default) POSTs from River's
// worker with net/http: no plugin hop. plugin sends the message hymical's
// worker would (bench.SignedMessage) through the real hymical-plugin-http,
// launched from --plugins through hymical's plugin host (hashicorp/go-plugin
// over gRPC) exactly as `hymical-bench --transport plugin` launches it, so
// the hop is on both sides of the comparison; build the plugin first:
//
//	go build -o bin/hymical-plugin-http ./plugins/http
//	cd harness/riverbench && GOWORK=off go run . --database "$DSN" --submissions 50000 --endpoints 2 --transport plugin --plugins ../../bin
//
// Either way a job whose message is not delivered returns an error, so
// River retries it. The CPU figures are this process's (River, the sender
// and the receiver), the plugin process's when there is one, and the
// database server's, over the drain.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/hymical/hymical/harness/bench"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

// The values of --transport.
const (
	transportInProcess = "inprocess"
	transportPlugin    = "plugin"
)

type options struct {
	database    string
	submissions int
	endpoints   int
	concurrency int
	timeout     time.Duration
	transport   string
	plugins     string
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("riverbench", flag.ContinueOnError)
	fs.StringVar(&o.database, "database", os.Getenv("HYMICAL_TEST_POSTGRES_DSN"), "postgres:// URL of a server where the user may CREATE DATABASE (env HYMICAL_TEST_POSTGRES_DSN)")
	fs.IntVar(&o.submissions, "submissions", 50000, "submissions; each is one job per endpoint")
	fs.IntVar(&o.endpoints, "endpoints", 2, "endpoints every submission goes to")
	fs.IntVar(&o.concurrency, "concurrency", 16, "River workers (MaxWorkers of the queue)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.StringVar(&o.transport, "transport", transportInProcess, "how River's worker sends: inprocess (net/http in this process) or plugin (hymical-plugin-http over go-plugin, as hymical sends)")
	fs.StringVar(&o.plugins, "plugins", "", "directory holding hymical-plugin-http (with --transport plugin)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case o.transport != transportInProcess && o.transport != transportPlugin:
		return fmt.Errorf("--transport is %s or %s, not %q", transportInProcess, transportPlugin, o.transport)
	case o.transport == transportPlugin && o.plugins == "":
		return errors.New("--transport plugin needs --plugins DIR, the directory holding hymical-plugin-http; build it from the repository's root with: go build -o DIR/hymical-plugin-http ./plugins/http")
	case o.transport == transportInProcess && o.plugins != "":
		return errors.New("--plugins is only used with --transport plugin")
	}
	if o.database == "" {
		return errors.New("--database is required: a postgres:// URL (or set HYMICAL_TEST_POSTGRES_DSN)")
	}
	if o.submissions < 1 || o.endpoints < 1 || o.concurrency < 1 {
		return fmt.Errorf("--submissions, --endpoints and --concurrency must be at least 1, got %d, %d, %d", o.submissions, o.endpoints, o.concurrency)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	// The plugin first: a missing one fails before a database is made.
	var host worker.Sender
	if o.transport == transportPlugin {
		h, err := bench.StartPluginHost(ctx, o.plugins, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			return err
		}
		defer h.Close()
		host = h
	}

	rival, err := bench.NewRival(ctx, o.database, o.endpoints)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := rival.Close(ctx); cerr != nil {
			fmt.Fprintln(os.Stderr, "riverbench:", cerr)
		}
	}()
	pool, err := pgxpool.New(ctx, rival.DatabaseURL())
	if err != nil {
		return fmt.Errorf("connect to the bench database: %w", err)
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River's tables: %w", err)
	}

	var endpoints []endpoint
	for i := range o.endpoints {
		url, secret := rival.Endpoint(i)
		endpoints = append(endpoints, endpoint{url: url, secret: secret})
	}
	workers := river.NewWorkers()
	if host != nil {
		river.AddWorker(workers, &pluginWorker{host: host, endpoints: endpoints, timeout: worker.DefaultConfig().SendTimeout})
	} else {
		river.AddWorker(workers, &inProcessWorker{endpoints: endpoints, client: &http.Client{Transport: &http.Transport{
			MaxIdleConns: 0, MaxIdleConnsPerHost: o.concurrency + 4, IdleConnTimeout: 90 * time.Second,
			DisableCompression: true,
		}}})
	}
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.concurrency}},
		Workers:           workers,
	})
	if err != nil {
		return err
	}

	total := o.submissions * o.endpoints
	createStart := time.Now()
	if err := create(ctx, client, rival, o); err != nil {
		return err
	}
	created := time.Since(createStart)

	// River drops events a full channel cannot take, so it has room for
	// every job's.
	completed, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: total,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed},
	})
	defer cancelSub()
	rival.Start(total)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	done, failed := 0, 0
	var last time.Time
	for done+failed < total {
		select {
		case ev, ok := <-completed:
			if !ok {
				return errors.New("the subscription to River's job events closed before every job ended")
			}
			if ev.Kind == river.EventKindJobCompleted {
				done++
			} else {
				failed++
			}
			last = time.Now()
		case <-ctx.Done():
			return fmt.Errorf("%d of %d jobs ended before %w", done+failed, total, ctx.Err())
		}
	}
	u := rival.Stop()
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancelStop()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop River: %w", err)
	}
	if failed != 0 || u.Arrived != int64(total) || u.Again != 0 || u.Bad != 0 {
		return fmt.Errorf("%d jobs failed; the receiver verified %d of %d messages, %d more than once, refused %d", failed, u.Arrived, total, u.Again, u.Bad)
	}

	wall := last.Sub(start)
	per := func(d time.Duration) time.Duration { return (d / time.Duration(total)).Round(time.Microsecond) }
	how := "in-process transport (net/http in River's worker, no plugin hop)"
	if host != nil {
		how = "plugin transport (hymical-plugin-http over go-plugin gRPC, as hymical sends)"
	}
	fmt.Fprintf(out, "riverbench  River sender, %s\n", how)
	fmt.Fprintf(out, "jobs        %d submissions x %d endpoints = %d jobs created in %s, then drained by %d workers\n",
		o.submissions, o.endpoints, total, created.Round(time.Millisecond), o.concurrency)
	fmt.Fprintf(out, "drain       %d in %s, %.0f/s\n", total, wall.Round(time.Millisecond), float64(total)/wall.Seconds())
	other := max(0, u.Machine-u.Self-u.Plugin-u.DB)
	if host != nil {
		fmt.Fprintf(out, "cpu         self %.2fs  plugin %.2fs  db %.2fs  other %.2fs\n", u.Self.Seconds(), u.Plugin.Seconds(), u.DB.Seconds(), other.Seconds())
		fmt.Fprintf(out, "  cpu/msg %s draining: this process (River, sender, receiver) + the plugin process + database (plugin %s, database %s of that)\n",
			per(u.Self+u.Plugin+u.DB), per(u.Plugin), per(u.DB))
		if u.Plugin == 0 {
			fmt.Fprintln(out, "  the plugin process's CPU read as 0: it is read from /proc/<pid>/stat (Linux) of this process's hymical-plugin-* children")
		}
	} else {
		fmt.Fprintf(out, "cpu         self %.2fs  db %.2fs  other %.2fs\n", u.Self.Seconds(), u.DB.Seconds(), other.Seconds())
		fmt.Fprintf(out, "  cpu/msg %s draining: this process (River, sender, receiver) + database (database %s of that)\n", per(u.Self+u.DB), per(u.DB))
	}
	return nil
}

// create inserts one job per delivery before the workers start, a
// thousand to a statement.
func create(ctx context.Context, client *river.Client[pgx.Tx], rival *bench.Rival, o options) error {
	const batch = 1000
	params := make([]river.InsertManyParams, 0, batch)
	flush := func() error {
		if len(params) == 0 {
			return nil
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		params = params[:0]
		return nil
	}
	for s := range o.submissions {
		body, err := rival.Body()
		if err != nil {
			return err
		}
		for e := range o.endpoints {
			params = append(params, river.InsertManyParams{Args: deliveryArgs{
				Delivery: fmt.Sprintf("dlv_%d_%d", s, e), Endpoint: e, Body: body,
			}})
			if len(params) == batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// deliveryArgs is one delivery: which endpoint, and the event's body.
type deliveryArgs struct {
	Delivery string          `json:"delivery"`
	Endpoint int             `json:"endpoint"`
	Body     json.RawMessage `json:"body"`
}

func (deliveryArgs) Kind() string { return "webhook_delivery" }

type endpoint struct{ url, secret string }

// inProcessWorker signs each delivery when it is worked and POSTs it.
type inProcessWorker struct {
	river.WorkerDefaults[deliveryArgs]
	client    *http.Client
	endpoints []endpoint
}

func (s *inProcessWorker) Work(ctx context.Context, job *river.Job[deliveryArgs]) error {
	ep := s.endpoints[job.Args.Endpoint]
	headers, err := webhook.SignHeaders(job.Args.Delivery, time.Now(), job.Args.Body, ep.secret)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(job.Args.Body))
	if err != nil {
		return err
	}
	req.Header = headers
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}

// pluginWorker builds, when a delivery is worked, the signed message
// hymical's worker builds for an attempt, and hands it to the http plugin
// with the worker's default send deadline, as hymical's worker does.
type pluginWorker struct {
	river.WorkerDefaults[deliveryArgs]
	host      worker.Sender
	endpoints []endpoint
	timeout   time.Duration
}

func (s *pluginWorker) Work(ctx context.Context, job *river.Job[deliveryArgs]) error {
	ep := s.endpoints[job.Args.Endpoint]
	now := time.Now()
	msg, err := bench.SignedMessage(job.Args.Delivery, job.Attempt, ep.url, ep.secret, job.Args.Body, now)
	if err != nil {
		return fmt.Errorf("sign %s: %w", job.Args.Delivery, err)
	}
	out := s.host.Send(ctx, "http", msg, now.Add(s.timeout))
	if out.Kind != transport.OutcomeDelivered {
		return fmt.Errorf("the http plugin's outcome is %s (status %d): %s", out.Kind, out.StatusCode, out.Error)
	}
	return nil
}
