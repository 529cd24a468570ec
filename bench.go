package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hymical/hymical/harness/bench"
	"github.com/hymical/hymical/internal/redact"
)

const benchUsage = `usage: hymical bench [flags]

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

Examples:
  go build -o bin/ . && go build -o bin/hymical-plugin-http ./plugins/http
  bin/hymical bench --backend sqlite --submissions 5000 --endpoints 2
  bin/hymical bench --backend postgres --database postgres://me@127.0.0.1/postgres`

// runBench is `hymical bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := bench.DefaultOptions()
	fs := newFlagSet("bench", benchUsage)
	backend := fs.String("backend", d.Backend, "database: sqlite or postgres")
	dbURL := fs.String("database", os.Getenv("FORMS_DATABASE_URL"), "postgres only: a postgres:// URL of a server where the bench may create and drop databases (env FORMS_DATABASE_URL); add pool_max_conns=N to size the pool")
	sqliteDir := fs.String("sqlite-dir", "", "sqlite only: where each phase's new database file is made (default: the temporary directory)")
	keep := fs.Bool("keep", false, "keep each phase's database instead of removing it")
	subs := fs.Int("submissions", d.Submissions, "submissions to create per phase")
	endpoints := fs.Int("endpoints", d.Endpoints, "endpoints every submission fans out to; a phase delivers submissions x endpoints")
	producers := fs.Int("producers", d.Producers, "goroutines creating submissions at once")
	rate := fs.Float64("rate", 0, "pace submissions at this many per second (0: as fast as the producers go)")
	preload := fs.Bool("preload", false, "create every submission before the pool starts, and time the pool draining the backlog")
	conc := fs.Int("concurrency", d.Worker.Concurrency, "sends in flight at once, for the pool and the ceiling")
	batch := fs.Int("batch", d.Worker.BatchSize, "most deliveries claimed in one statement")
	poll := fs.Duration("poll-interval", d.Worker.PollInterval, "how long the pool waits when nothing was due")
	lease := fs.Duration("lease", d.Worker.Lease, "claim lease; must outlast --send-timeout")
	sendTimeout := fs.Duration("send-timeout", d.Worker.SendTimeout, "deadline of one send")
	transports := fs.String("transport", strings.Join(d.Transports, ","), "end-to-end phases to run, comma-separated: inprocess, plugin (empty: none)")
	ceiling := fs.Bool("ceiling", d.Ceiling, "run the bare-loop ceiling phase")
	sendOnly := fs.Bool("send-only", d.SendOnly, "run the transports without a store, to measure the plugin boundary alone")
	floor := fs.Bool("floor", d.Floor, "postgres only: run the database floor, the least SQL a delivery needs with nothing else, a bound for end to end")
	pluginDir := fs.String("plugins", defaultPluginDir(), "directory holding hymical-plugin-http")
	repeat := fs.Int("repeat", 1, "run the whole sequence of phases this many times; ratios use each phase's best round")
	sample := fs.Int("latency-sample", d.LatencySample, "deliveries whose attempts are read back for the latency")
	timeout := fs.Duration("timeout", d.Timeout, "give up on a phase after this long")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the phases to this file (this process only, not the plugin or the database)")
	memProfile := fs.String("memprofile", "", "write an allocation profile to this file at the end")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	logLevel := fs.String("log-level", "error", "level of the server parts' logs on stderr: debug, info, warn, error (info logs every attempt, as serve does)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("bench takes no arguments, got %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", *logLevel)
	}

	o := d
	o.Backend, o.DatabaseURL, o.SQLiteDir, o.Keep = *backend, *dbURL, *sqliteDir, *keep
	o.Submissions, o.Endpoints, o.Producers, o.Rate, o.Preload = *subs, *endpoints, *producers, *rate, *preload
	o.Worker.Concurrency, o.Worker.BatchSize, o.Worker.PollInterval = *conc, *batch, *poll
	o.Worker.Lease, o.Worker.SendTimeout = *lease, *sendTimeout
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

	start := time.Now()
	rep, err := bench.Run(ctx, o)
	if err != nil {
		// What finished before the failure is still worth seeing.
		if rep != nil && len(rep.Phases) > 0 && !*asJSON {
			_ = rep.WriteText(stdout)
		}
		return fmt.Errorf("bench: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*bench.Report
			Ratios  []bench.Ratio `json:"ratios"`
			Command string        `json:"command"`
		}{rep, rep.Ratios(), "hymical bench " + shownArgs(args)})
	}
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "command   hymical bench %s  (%s in all)\n", shownArgs(args), time.Since(start).Round(time.Second))
	return nil
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
