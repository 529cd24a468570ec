// Package bench measures the delivery server end to end: it fills a fresh
// store with submissions, runs the real worker pool against it with the
// real http plugin (or, for comparison only, the same transport code
// in-process), sends everything to a loopback receiver that verifies each
// signature, and reports the rate, the latency, and what it cost in CPU and
// memory. In the same run it measures the ceiling: a bare loop doing the
// same signed POSTs to the same receiver at the same concurrency. Its HTTP
// mode (http.go) measures what users run instead: a real `hymical serve`
// process driven only through its HTTP API.
//
// It owns nothing but the measurement. It drives the server's own parts
// (server.OpenStore, pluginhost, worker) through their public APIs and
// must not reach into them, change delivery state by SQL, or point
// anything but loopback. The one phase that writes SQL of its own, the
// database floor, does so on a database that no server part reads: it is a
// reference, as the ceiling is. Each phase gets a database of its own that
// it creates and removes, so it never touches data it did not make.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/worker"
)

// Backends the bench runs on.
const (
	BackendSQLite   = "sqlite"
	BackendPostgres = "postgres"
)

// Transports an end-to-end phase sends through.
const (
	// TransportPlugin is the real path: the hymical-plugin-http process
	// behind the plugin host, over gRPC.
	TransportPlugin = "plugin"
	// TransportInProcess calls the same transport code in this process,
	// for measuring the plugin boundary only.
	TransportInProcess = "inprocess"
)

// Options say what to run. Zero fields take the defaults of DefaultOptions.
type Options struct {
	// Backend is BackendSQLite or BackendPostgres.
	Backend string
	// DatabaseURL is a postgres:// URL of a server on which the bench may
	// create and drop databases; each phase uses a new one. Unused for
	// SQLite.
	DatabaseURL string
	// SQLiteDir is where each phase's new SQLite file is made; empty means
	// the system's temporary directory.
	SQLiteDir string
	// Keep leaves the phases' databases in place instead of removing them.
	Keep bool

	// Submissions is how many submissions are created; each fans out to
	// Endpoints endpoints, so a phase delivers Submissions × Endpoints.
	Submissions int
	Endpoints   int
	// Registered, in the HTTP mode, is how many endpoints more are
	// registered, each for a form of its own that no submission goes to:
	// what a delivery costs should not grow with them.
	Registered int
	// Producers is how many goroutines create submissions at once.
	Producers int
	// Rate, when positive, paces submissions at this many per second;
	// zero creates them as fast as the producers can.
	Rate float64
	// Preload creates every submission before the pool starts, so the
	// rate is the pool draining a backlog; otherwise submissions are
	// created while the pool runs, as ingest would.
	Preload bool

	// Worker configures the pool; its Concurrency is also the ceiling's.
	Worker worker.Config

	// Transports lists the end-to-end phases to run, in order, from
	// TransportInProcess and TransportPlugin.
	Transports []string
	// Ceiling runs the bare-loop ceiling; SendOnly runs the transports
	// without the store, to measure the plugin boundary on its own; Floor
	// (PostgreSQL only) runs the database floor (see floor.go).
	Ceiling  bool
	SendOnly bool
	Floor    bool
	// PluginDir holds the hymical-plugin-http executable.
	PluginDir string

	// Repeat runs the whole sequence of phases this many times; the
	// ratios use each phase's best round, the one least disturbed by
	// whatever else the machine was doing.
	Repeat int

	// LatencySample caps how many deliveries' attempts are read back for
	// the attempt latency; the rest of the readback reads every row.
	LatencySample int
	// Timeout bounds one phase.
	Timeout time.Duration
	// CPUProfile and MemProfile, when set, are files to write a CPU
	// profile of the measured phases and an allocation profile to.
	CPUProfile string
	MemProfile string

	// HTTP runs the HTTP mode instead of the phases above (http.go): a
	// real `hymical serve` process, driven only through its HTTP API, with
	// Submissions created through the ingest route by Producers (paced
	// at Rate when set) and fanned out to Endpoints endpoints. Worker,
	// Transports, Ceiling, SendOnly, Floor and Preload do not apply: serve
	// runs with its own defaults and ServeArgs.
	HTTP bool
	// Idle, in the HTTP mode, measures serve with one endpoint and no
	// traffic for this long instead.
	Idle time.Duration
	// IdleWarm, with Idle, first posts one submission for each endpoint's
	// form (the idle one, then for benchForm only, and the Registered
	// others) from Producers goroutines and waits until each endpoint has
	// had its delivery, verified, before the settle: the idle phase then
	// measures a serve that has just delivered to every endpoint.
	IdleWarm bool
	// Fairness, in the HTTP mode, runs the fairness rows instead of the
	// traffic phase (fairness.go): per row a fresh serve whose slow
	// endpoints have a backlog while a healthy endpoint's deliveries are
	// timed.
	Fairness []FairRow
	// Serves, in the HTTP mode, is how many serve processes run on the one
	// fresh database, each on its own port (PostgreSQL only: a SQLite file
	// belongs to one process). The first makes the endpoints; submission i
	// goes to serve i%Serves; the CPU per delivery sums them all and their
	// plugins. Zero means 1.
	Serves int
	// Hymical is the hymical executable whose serve the HTTP mode runs.
	Hymical string
	// ServeArgs are more flags for serve, such as
	// --worker.concurrency=32 or --log.level=info (the bench's default is
	// error, since serve's info writes a line per attempt).
	ServeArgs []string

	// Logger gets the server parts' logs; nil discards them.
	Logger *slog.Logger
	// Progress, when set, gets a line every few seconds of a long phase.
	Progress io.Writer
}

// DefaultOptions are the bench's defaults: 5000 submissions to 2 endpoints
// on SQLite, the pool's own defaults except a 50 ms poll interval (the
// default 500 ms would idle the pool at the start of a phase that is over
// in seconds), both transports, the ceiling and the send-only phases.
func DefaultOptions() Options {
	w := worker.DefaultConfig()
	w.PollInterval = 50 * time.Millisecond
	return Options{
		Backend:       BackendSQLite,
		Submissions:   5000,
		Endpoints:     2,
		Producers:     4,
		Worker:        w,
		Transports:    []string{TransportInProcess, TransportPlugin},
		Ceiling:       true,
		SendOnly:      true,
		Floor:         true,
		LatencySample: 20000,
		Timeout:       30 * time.Minute,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Backend == "" {
		o.Backend = d.Backend
	}
	if o.Submissions == 0 {
		o.Submissions = d.Submissions
	}
	if o.Endpoints == 0 {
		o.Endpoints = d.Endpoints
	}
	if o.Producers == 0 {
		o.Producers = d.Producers
	}
	if o.Worker.Concurrency == 0 {
		o.Worker.Concurrency = d.Worker.Concurrency
	}
	if o.Worker.BatchSize == 0 {
		o.Worker.BatchSize = d.Worker.BatchSize
	}
	if o.Worker.PollInterval == 0 {
		o.Worker.PollInterval = d.Worker.PollInterval
	}
	if o.Repeat == 0 {
		o.Repeat = 1
	}
	if o.Serves == 0 {
		o.Serves = 1
	}
	if o.LatencySample == 0 {
		o.LatencySample = d.LatencySample
	}
	if o.Timeout == 0 {
		o.Timeout = d.Timeout
	}
	if o.SQLiteDir == "" {
		o.SQLiteDir = os.TempDir()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Idle < 0:
		return fmt.Errorf("idle must not be negative, got %s", o.Idle)
	case o.Idle > 0 && !o.HTTP:
		return errors.New("idle measures a serve process: use it with the http mode (--http)")
	case len(o.Fairness) > 0 && !o.HTTP:
		return errors.New("the fairness run times a serve process: use it with the http mode (--http)")
	case len(o.Fairness) > 0 && o.Idle > 0:
		return errors.New("--fairness and --idle are two different runs of serve: give one of them")
	case o.IdleWarm && o.Idle <= 0:
		return errors.New("--idle-warm warms serve up before the idle phase: use it with --idle D")
	case o.HTTP && o.Hymical == "":
		return errors.New("the http mode runs `hymical serve`: give the hymical executable to run")
	case o.HTTP && o.Preload:
		return errors.New("the http mode creates submissions through the API while serve runs, so preload does not apply: use one or the other")
	case o.Serves < 1:
		return fmt.Errorf("serves must be at least 1, got %d", o.Serves)
	case o.Serves > 1 && !o.HTTP:
		return errors.New("--serves runs several serve processes, which only the http mode starts: add --http")
	case o.Serves > 1 && o.Backend != BackendPostgres:
		return fmt.Errorf("--serves %d runs %d serve processes on one database, which needs PostgreSQL (a SQLite file belongs to one process): add --backend postgres --database URL, or leave --serves out", o.Serves, o.Serves)
	}
	switch {
	case o.Backend != BackendSQLite && o.Backend != BackendPostgres:
		return fmt.Errorf("backend %q: use %s or %s", o.Backend, BackendSQLite, BackendPostgres)
	case o.Backend == BackendPostgres && o.DatabaseURL == "":
		return errors.New("the postgres backend needs a database URL of a server where the bench may create databases: --database postgres://USER@HOST/DB or FORMS_DATABASE_URL")
	case o.Submissions < 1 || o.Endpoints < 1:
		return fmt.Errorf("submissions (%d) and endpoints per submission (%d) must be at least 1", o.Submissions, o.Endpoints)
	case o.Producers < 1:
		return fmt.Errorf("producers must be at least 1, got %d", o.Producers)
	case o.Registered < 0:
		return fmt.Errorf("registered endpoints must not be negative, got %d", o.Registered)
	case o.Registered > 0 && !o.HTTP:
		return errors.New("--registered applies to the http mode, which registers endpoints through the API: add --http")
	case o.Rate < 0:
		return fmt.Errorf("rate must not be negative, got %g", o.Rate)
	case o.Preload && o.Rate > 0:
		return errors.New("preload creates every submission before the pool starts, so a rate does not apply: use one or the other")
	case o.Repeat < 1:
		return fmt.Errorf("repeat must be at least 1, got %d", o.Repeat)
	case o.LatencySample < 1:
		return fmt.Errorf("latency sample must be at least 1, got %d", o.LatencySample)
	}
	for _, t := range o.Transports {
		if t != TransportPlugin && t != TransportInProcess {
			return fmt.Errorf("transport %q: use %s or %s", t, TransportPlugin, TransportInProcess)
		}
	}
	if len(o.Transports) == 0 && !o.HTTP && !o.Ceiling && !o.SendOnly && !(o.Floor && o.Backend == BackendPostgres) {
		return errors.New("nothing to run: no transports, no ceiling, no send-only and no floor phases")
	}
	return nil
}

// Deliveries is how many messages one phase sends.
func (o Options) Deliveries() int { return o.Submissions * o.Endpoints }

// Run runs the phases o asks for, or the HTTP mode, and reports them. A
// phase that does not deliver everything it was given, or delivers
// something twice, fails the run: its numbers would not mean what they say. It counts every plugin
// process this process starts as its own, so one Run at a time per process.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.HTTP {
		return runHTTP(ctx, o)
	}
	wc := o.Worker
	if _, err := worker.New(nil, nil, wc, nil); err != nil {
		return nil, fmt.Errorf("worker configuration: %w", err)
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	recv, err := startReceiver([]string{secret})
	if err != nil {
		return nil, err
	}
	defer recv.close()

	r := &runner{o: o, recv: recv, secret: secret}
	if o.Backend == BackendPostgres {
		r.dbPID = listenerPID(postgresPort(o.DatabaseURL))
	}
	rep := &Report{
		Machine:     describeMachine(),
		Backend:     o.Backend,
		Submissions: o.Submissions,
		Endpoints:   o.Endpoints,
		Deliveries:  o.Deliveries(),
		Concurrency: wc.Concurrency,
		BatchSize:   wc.BatchSize,
		Poll:        wc.PollInterval,
		Producers:   o.Producers,
		Rate:        o.Rate,
		Preload:     o.Preload,
		Repeat:      o.Repeat,
		Started:     time.Now().UTC(),
	}

	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	type phase struct {
		run func(context.Context) (Phase, error)
	}
	var phases []phase
	if o.Ceiling {
		phases = append(phases, phase{r.ceiling})
	}
	if o.SendOnly {
		phases = append(phases, phase{r.sendInProcess}, phase{r.sendPlugin})
	}
	if o.Floor && o.Backend == BackendPostgres {
		phases = append(phases, phase{r.floor})
	}
	for _, t := range o.Transports {
		phases = append(phases, phase{func(ctx context.Context) (Phase, error) { return r.deliver(ctx, t) }})
	}
	for round := 1; round <= o.Repeat; round++ {
		for _, ph := range phases {
			// Garbage left by the phase before is not this phase's to collect.
			runtime.GC()
			pctx, cancel := context.WithTimeout(ctx, o.Timeout)
			p, err := ph.run(pctx)
			cancel()
			if err != nil {
				return rep, err
			}
			p.Round = round
			rep.Phases = append(rep.Phases, p)
			if rep.Where == "" {
				rep.Where = p.where
			}
		}
	}

	if o.MemProfile != "" {
		f, err := os.Create(o.MemProfile)
		if err != nil {
			return rep, fmt.Errorf("memory profile: %w", err)
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return rep, fmt.Errorf("memory profile: %w", err)
		}
	}
	return rep, nil
}

// runner holds what every phase shares.
type runner struct {
	o      Options
	recv   *receiver
	secret string
	// dbPID is the PostgreSQL server's postmaster, when it runs here.
	dbPID int
}

// postgresPort is the port a postgres:// URL names; 0 when it names
// none that parses.
func postgresPort(dsn string) int {
	u, err := url.Parse(dsn)
	if err != nil {
		return 0
	}
	if u.Port() == "" {
		return 5432
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

func (r *runner) progress(format string, args ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, format+"\n", args...)
	}
}
