// Command riverbench is the yardstick issue 21 measures hymical's drain
// against: a webhook sender a team could build on River instead, run on the
// same machine, database server, receiver and submission body as
// `hymical bench --preload`, and measured the same way.
//
// It is its own Go module so River never enters hymical's dependencies:
//
//	cd harness/riverbench && GOWORK=off go run . --database "$DSN" --submissions 50000 --endpoints 2
//
// One River job per delivery, signed with the endpoint's secret when it is
// worked and POSTed to the bench's loopback receiver, which verifies every
// signature. Like the River sender the issue describes, it keeps no
// attempt rows, no claim token fence, and sends in-process (no plugin hop);
// River's own fetch settings from its benchmark (2 ms cooldown, 20 ms poll).
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
	"github.com/hymical/hymical/sdk/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

type options struct {
	database    string
	submissions int
	endpoints   int
	concurrency int
	timeout     time.Duration
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("riverbench", flag.ContinueOnError)
	fs.StringVar(&o.database, "database", os.Getenv("HYMICAL_TEST_POSTGRES_DSN"), "postgres:// URL of a server where the user may CREATE DATABASE (env HYMICAL_TEST_POSTGRES_DSN)")
	fs.IntVar(&o.submissions, "submissions", 50000, "submissions; each is one job per endpoint")
	fs.IntVar(&o.endpoints, "endpoints", 2, "endpoints every submission goes to")
	fs.IntVar(&o.concurrency, "concurrency", 16, "River workers (MaxWorkers of the queue)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.database == "" {
		return errors.New("--database is required: a postgres:// URL (or set HYMICAL_TEST_POSTGRES_DSN)")
	}
	if o.submissions < 1 || o.endpoints < 1 || o.concurrency < 1 {
		return fmt.Errorf("--submissions, --endpoints and --concurrency must be at least 1, got %d, %d, %d", o.submissions, o.endpoints, o.concurrency)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

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

	w := &sender{client: &http.Client{Transport: &http.Transport{
		MaxIdleConns: 0, MaxIdleConnsPerHost: o.concurrency + 4, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true,
	}}}
	for i := range o.endpoints {
		url, secret := rival.Endpoint(i)
		w.endpoints = append(w.endpoints, endpoint{url: url, secret: secret})
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
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
	fmt.Fprintf(out, "riverbench  River sender, %d submissions x %d endpoints = %d jobs created in %s, then drained by %d workers\n",
		o.submissions, o.endpoints, total, created.Round(time.Millisecond), o.concurrency)
	fmt.Fprintf(out, "drain       %d in %s, %.0f/s\n", total, wall.Round(time.Millisecond), float64(total)/wall.Seconds())
	fmt.Fprintf(out, "cpu         self %.2fs  db %.2fs  other %.2fs\n", u.Self.Seconds(), u.DB.Seconds(), max(0, u.Machine-u.Self-u.DB).Seconds())
	fmt.Fprintf(out, "  cpu/msg %s draining (database %s of that)\n", per(u.Self+u.DB), per(u.DB))
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

// sender signs each delivery when it is worked and POSTs it.
type sender struct {
	river.WorkerDefaults[deliveryArgs]
	client    *http.Client
	endpoints []endpoint
}

func (s *sender) Work(ctx context.Context, job *river.Job[deliveryArgs]) error {
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
