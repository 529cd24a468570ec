// Command hymical-bench measures the delivery server on this machine: the
// server's parts in this process against a loopback receiver, or, with
// --http, a real `hymical serve` driven through its HTTP API. It lives
// under harness/, outside the product, so that the hymical binary links no
// measuring code, no in-process copy of a transport and no raw SQL of its
// own; what it measures is in harness/bench. Run it with --help.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hymical/hymical/harness/bench"
	"github.com/hymical/hymical/internal/gctarget"
	"github.com/hymical/hymical/sdk/redact"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hymical-bench:", err)
		os.Exit(1)
	}
}

const benchUsage = `usage: hymical-bench [flags]

Measures the delivery server on this machine. Each end-to-end phase makes a
fresh database (a new SQLite file, or a new PostgreSQL database that it drops
afterwards), creates the submissions with the store's EventCreate, runs the
real worker pool with the real hymical-plugin-http (or, for comparison, the
same transport code in-process) against a loopback receiver that verifies
every signature, and waits until every delivery is recorded delivered. The
ceiling phase is a bare loop doing the same signed POSTs to the same receiver
at the same concurrency; the send-only phases run the transports without a
store; on PostgreSQL, the database floor runs the least SQL a delivery needs,
in batches, and nothing else, on a database of its own: a bound for the
end-to-end phases, which do all of that and send too. It prints deliveries
per second, p50/p99 latency, CPU time, peak RSS, and the ratios between
phases.

With --http it measures what users run instead: it starts a real
` + "`hymical serve`" + ` (the hymical executable beside this one, or --hymical, with
the plugins of --plugins and serve's default settings) on a fresh database, creates --endpoints endpoints through
POST /v1/endpoints, and posts --submissions submissions to the ingest route
from --producers goroutines, as fast as they go or paced by --rate. It
prints deliveries per second, the latency from each POST to the receiver
holding the verified message (p50, p99, max), the ingest latency from each
POST to its 202 answer (p50, p99), and the CPU per delivery of the serve
process, its plugins and the PostgreSQL server, sampled from /proc before
and after. --concurrency, --batch, --poll-interval,
--endpoint-share, --lease and --log-level, when given, are passed to serve
as its worker and log settings; --idle D measures serve with one endpoint and no traffic for D.
--idle-warm first delivers once to every endpoint, the registered ones
too, so the idle phase measures a serve that has just delivered to all of
them. --serves N (PostgreSQL only) starts N serve processes on the one database
instead, each on its own port, and posts submission i to serve i%N; the CPU
per delivery is then that of all N and their plugins, summed, and with
--idle all N idle.

--fairness ROWS asks how long a healthy endpoint's deliveries wait while
other endpoints' receivers are slow: per row (N endpoints whose receiver
answers after D, or never) a fresh serve, 150 submissions fanned out to the
slow endpoints, then 30 submissions at 2/s to one healthy endpoint, whose
POST-to-receiver latency is reported against the bound of 1 s plus one
claim interval.

Examples:
  go build -o bin/ . ./harness/cmd/hymical-bench && go build -o bin/hymical-plugin-http ./plugins/http
  bin/hymical-bench --backend sqlite --submissions 5000 --endpoints 2
  bin/hymical-bench --backend postgres --database postgres://me@127.0.0.1/postgres
  bin/hymical-bench --http --submissions 20000 --endpoints 2 --producers 4
  bin/hymical-bench --http --submissions 1500 --endpoints 1 --rate 50
  bin/hymical-bench --http --idle 30s
  bin/hymical-bench --http --idle 30s --registered 100000 --idle-warm
  bin/hymical-bench --http --backend postgres --database postgres://me@127.0.0.1/postgres --serves 3
  bin/hymical-bench --fairness default --backend sqlite`

// run is the whole command line. Asked for help, it prints the usage on
// stdout and returns flag.ErrHelp, which main turns into exit status 0.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := bench.DefaultOptions()
	fs := newFlagSet(benchUsage)
	// The README's build puts hymical, its plugins and this command in one
	// directory, so that is where both are looked for by default.
	here := executableDir()
	backend := fs.String("backend", d.Backend, "database: sqlite or postgres")
	dbURL := fs.String("database", os.Getenv("FORMS_DATABASE_URL"), "postgres only: a postgres:// URL of a server where the bench may create and drop databases (env FORMS_DATABASE_URL); add pool_max_conns=N to size the pool")
	sqliteDir := fs.String("sqlite-dir", "", "sqlite only: where each phase's new database file is made (default: the temporary directory)")
	keep := fs.Bool("keep", false, "keep each phase's database instead of removing it")
	subs := fs.Int("submissions", d.Submissions, "submissions to create per phase")
	endpoints := fs.Int("endpoints", d.Endpoints, "endpoints every submission fans out to; a phase delivers submissions x endpoints")
	producers := fs.Int("producers", d.Producers, "goroutines creating submissions at once")
	registered := fs.Int("registered", 0, "with --http: endpoints more to register, each for a form no submission goes to (what a delivery costs must not grow with them)")
	rate := fs.Float64("rate", 0, "pace submissions at this many per second (0: as fast as the producers go)")
	preload := fs.Bool("preload", false, "create every submission before the pool starts, and time the pool draining the backlog")
	conc := fs.Int("concurrency", d.Worker.Concurrency, "sends in flight at once, for the pool and the ceiling")
	batch := fs.Int("batch", d.Worker.BatchSize, "most deliveries claimed in one statement")
	poll := fs.Duration("poll-interval", d.Worker.PollInterval, "how long the pool waits when nothing was due")
	lease := fs.Duration("lease", d.Worker.Lease, "claim lease; must outlast --send-timeout")
	share := fs.Float64("endpoint-share", d.Worker.EndpointShare, "fraction of the senders one endpoint may hold while others have due work (worker.endpoint_share; 1 turns the fair share off)")
	sendTimeout := fs.Duration("send-timeout", d.Worker.SendTimeout, "deadline of one send")
	transports := fs.String("transport", strings.Join(d.Transports, ","), "end-to-end phases to run, comma-separated: inprocess, plugin (empty: none)")
	ceiling := fs.Bool("ceiling", d.Ceiling, "run the bare-loop ceiling phase")
	sendOnly := fs.Bool("send-only", d.SendOnly, "run the transports without a store, to measure the plugin boundary alone")
	floor := fs.Bool("floor", d.Floor, "postgres only: run the database floor, the least SQL a delivery needs with nothing else, a bound for end to end")
	pluginDir := fs.String("plugins", here, "directory holding hymical-plugin-http")
	repeat := fs.Int("repeat", 1, "run the whole sequence of phases this many times; ratios use each phase's best round")
	sample := fs.Int("latency-sample", d.LatencySample, "deliveries whose attempts are read back for the latency")
	timeout := fs.Duration("timeout", d.Timeout, "give up on a phase after this long")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the phases to this file (this process only, not the plugin or the database)")
	memProfile := fs.String("memprofile", "", "write an allocation profile to this file at the end")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	logLevel := fs.String("log-level", "error", "level of the server parts' logs on stderr: debug, info, warn, error (info logs every attempt, as serve does)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	viaHTTP := fs.Bool("http", false, "run a real `hymical serve` and drive it through its HTTP API instead of the phases above (see above)")
	fairness := fs.String("fairness", "", "with --http: run the fairness rows instead of the traffic phase (implies --http): per row, N endpoints whose receiver answers after D have a backlog of 150 submissions while 30 submissions at 2/s to a healthy endpoint are timed; rows as NxD,… e.g. 4x950ms,6xnever, or default (4 and 6 at 100ms, 500ms, 950ms, 2s, never)")
	idle := fs.Duration("idle", 0, "with --http: measure serve with one endpoint and no traffic for this long instead, e.g. 30s (implies --http)")
	hymical := fs.String("hymical", filepath.Join(here, "hymical"), "with --http: the hymical executable whose serve is run")
	idleWarm := fs.Bool("idle-warm", false, "with --idle: first post one submission to the form of each endpoint (the idle one and every --registered one) from --producers goroutines and wait until every endpoint has had its delivery, verified; then settle and measure a serve that has just delivered to all of them")
	serves := fs.Int("serves", 1, "with --http and --backend postgres: run this many serve processes on the one database, each on its own port; the first makes the endpoints, submission i goes to serve i%N, and the CPU per delivery sums them all")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("no arguments are taken, only flags; got %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", *logLevel)
	}

	if *serves < 1 {
		// Options takes 0 for the default, 1; said outright, it is a mistake.
		return fmt.Errorf("--serves %d: give at least 1 serve process", *serves)
	}
	if *idle != 0 || *fairness != "" {
		*viaHTTP = true
	}
	var fairRows []bench.FairRow
	if *fairness != "" {
		var err error
		if fairRows, err = bench.ParseFairRows(*fairness); err != nil {
			return fmt.Errorf("--fairness: %w", err)
		}
	}
	o := d
	if *viaHTTP {
		serveArgs, err := httpModeFlags(fs)
		if err != nil {
			return err
		}
		o.HTTP, o.Idle, o.Hymical, o.ServeArgs = true, *idle, *hymical, serveArgs
	}
	o.Backend, o.DatabaseURL, o.SQLiteDir, o.Keep = *backend, *dbURL, *sqliteDir, *keep
	o.Submissions, o.Endpoints, o.Producers, o.Rate, o.Preload = *subs, *endpoints, *producers, *rate, *preload
	o.Registered, o.Serves, o.IdleWarm, o.Fairness = *registered, *serves, *idleWarm, fairRows
	o.Worker.Concurrency, o.Worker.BatchSize, o.Worker.PollInterval = *conc, *batch, *poll
	o.Worker.Lease, o.Worker.SendTimeout, o.Worker.EndpointShare = *lease, *sendTimeout, *share
	o.Transports = nil
	for _, t := range strings.Split(*transports, ",") {
		if t = strings.TrimSpace(t); t != "" {
			o.Transports = append(o.Transports, t)
		}
	}
	o.Ceiling, o.SendOnly, o.Floor, o.PluginDir = *ceiling, *sendOnly, *floor, *pluginDir
	o.LatencySample, o.Timeout, o.Repeat = *sample, *timeout, *repeat
	o.CPUProfile, o.MemProfile = *cpuProfile, *memProfile
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if !*quiet {
		o.Progress = stderr
	}

	// The phases that run the server's parts in this process run them with
	// serve's collector setting; in the HTTP mode serve sets its own.
	gc := gctarget.Apply(os.Getenv)

	start := time.Now()
	rep, err := bench.Run(ctx, o)
	if err != nil {
		// What finished before the failure is still worth seeing.
		if rep != nil && len(rep.Phases) > 0 && !*asJSON {
			_ = rep.WriteText(stdout)
		}
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*bench.Report
			Ratios  []bench.Ratio `json:"ratios"`
			Command string        `json:"command"`
		}{rep, rep.Ratios(), "hymical-bench " + shownArgs(args)})
	}
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "go        collector %s\n", gc)
	fmt.Fprintf(stdout, "command   hymical-bench %s  (%s in all)\n", shownArgs(args), time.Since(start).Round(time.Second))
	return nil
}

// httpModeFlags turns the bench's pool flags the caller gave into serve's
// flags for the HTTP mode, and refuses those that have no meaning there.
func httpModeFlags(fs *flagSet) ([]string, error) {
	var args []string
	var err error
	fs.Visit(func(f *flag.Flag) {
		v := f.Value.String()
		switch f.Name {
		case "concurrency":
			args = append(args, "--worker.concurrency="+v)
		case "batch":
			args = append(args, "--worker.batch_size="+v)
		case "poll-interval":
			args = append(args, "--worker.poll_interval="+v)
		case "endpoint-share":
			args = append(args, "--worker.endpoint_share="+v)
		case "lease":
			d, _ := time.ParseDuration(v)
			if d%time.Second != 0 {
				err = errors.Join(err, fmt.Errorf("--lease %s: serve takes whole seconds (worker.lease_seconds)", v))
			}
			args = append(args, fmt.Sprintf("--worker.lease_seconds=%d", int(d/time.Second)))
		case "log-level":
			args = append(args, "--log.level="+v)
		case "send-timeout", "transport", "ceiling", "send-only", "floor", "preload", "latency-sample", "cpuprofile", "memprofile":
			err = errors.Join(err, fmt.Errorf("--%s does not apply to --http, which runs serve with its own settings: leave it out", f.Name))
		}
	})
	return args, err
}

// shownArgs is the command line to print, with any password in a URL
// hidden: the report is meant to be pasted into a README.
func shownArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if name, v, ok := strings.Cut(a, "="); ok {
			out[i] = name + "=" + redact.URL(v)
		} else {
			out[i] = redact.URL(a)
		}
	}
	return strings.Join(out, " ")
}

// executableDir is the directory of the running executable, or "bin" (the
// README's) when the system cannot say.
func executableDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}

// flagSet is the command's flags and its usage text, printed above them.
type flagSet struct {
	*flag.FlagSet
	usage string
}

// newFlagSet makes the flags. The flag package prints nothing itself:
// parse says where the usage goes.
func newFlagSet(usage string) *flagSet {
	fs := flag.NewFlagSet("hymical-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, usage: usage}
}

// parse reads args. Asked for help (-h, --help), it prints the usage on
// stdout and returns flag.ErrHelp; after a mistake it prints the usage on
// stderr and returns the mistake, which main prints last.
func (fs *flagSet) parse(args []string, stdout, stderr io.Writer) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.printUsage(stdout)
	case err != nil:
		fs.printUsage(stderr)
	}
	return err
}

func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprint(w, strings.TrimRight(fs.usage, "\n")+"\n\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
