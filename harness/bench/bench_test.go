package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// pluginDir holds the real hymical-plugin-http and, for the HTTP mode, the
// real hymical executable, built once for the tests.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}, &pluginDir)
}

// hymicalBinary builds the hymical executable once, beside the plugin.
var hymicalBinary = sync.OnceValues(func() (string, error) {
	path := filepath.Join(pluginDir, "hymical")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/hymical/hymical").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build hymical: %v\n%s", err, out)
	}
	return path, nil
})

// small is a run that takes a second or two: every phase, a few messages.
func small(t *testing.T) Options {
	o := DefaultOptions()
	o.Submissions, o.Endpoints, o.Producers = 15, 3, 2
	o.Worker.Concurrency, o.Worker.BatchSize, o.Worker.PollInterval = 4, 4, 10*time.Millisecond
	o.PluginDir = pluginDir
	o.SQLiteDir = t.TempDir()
	o.Timeout = time.Minute
	return o
}

// Every phase delivers each message exactly once to a receiver that checks
// its signature, measures it, and leaves no database behind. Not parallel:
// a run counts every plugin process this test process started as its own,
// and TestRivalSendsThroughThePlugin, run beside it, starts one (its
// in-process phases then read a plugin's RSS); parallel tests wait until
// the sequential ones are done.
func TestRunMeasuresEveryPhaseAndCleansUp(t *testing.T) {
	backends := map[string]func(t *testing.T, o *Options) (left func() int){
		BackendSQLite: func(t *testing.T, o *Options) func() int {
			return func() int {
				entries, err := os.ReadDir(o.SQLiteDir)
				if err != nil {
					t.Fatal(err)
				}
				return len(entries)
			}
		},
		BackendPostgres: func(t *testing.T, o *Options) func() int {
			o.DatabaseURL = pgtest.BaseDSN(t)
			return func() int {
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, o.DatabaseURL)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				var n int
				if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE 'hymical_bench_%'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
		},
	}
	for backend, setup := range backends {
		// Not in parallel: a run counts every plugin process this process
		// started as its own.
		t.Run(backend, func(t *testing.T) {
			o := small(t)
			o.Backend = backend
			left := setup(t, &o)
			before := left()
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			want := []string{"ceiling: bare loop", "send only: in-process transport", "send only: plugin", "end to end: in-process", "end to end: plugin"}
			wantRatios := 5
			if backend == BackendPostgres {
				want = slices.Insert(want, 3, "database floor: the least SQL")
				wantRatios = 7
			}
			if len(rep.Phases) != len(want) {
				t.Fatalf("got %d phases, want %v", len(rep.Phases), want)
			}
			for i, p := range rep.Phases {
				if p.Name != want[i] {
					t.Errorf("phase %d is %q, want %q", i, p.Name, want[i])
				}
				if p.Kind == KindFloor {
					// Nothing is sent: the database's part alone.
					if p.Messages != 45 || p.Rate <= 0 || p.CPUSelf <= 0 || p.Received != 0 {
						t.Errorf("%s: %d messages at %.0f/s, cpu %s, %d received", p.Name, p.Messages, p.Rate, p.CPUSelf, p.Received)
					}
					continue
				}
				if p.Messages != 45 || p.Received != 45 {
					t.Errorf("%s: %d messages, %d received; want 45 of each", p.Name, p.Messages, p.Received)
				}
				if p.Rate <= 0 || p.P50 <= 0 || p.P99 < p.P50 || p.LatencySamples != 45 {
					t.Errorf("%s: rate %.0f, p50 %s, p99 %s from %d samples", p.Name, p.Rate, p.P50, p.P99, p.LatencySamples)
				}
				if p.CPUSelf <= 0 || p.PeakRSS <= 0 || p.AllocsPerMsg <= 0 {
					t.Errorf("%s: cpu %s, peak RSS %d, allocs/msg %.0f: not measured", p.Name, p.CPUSelf, p.PeakRSS, p.AllocsPerMsg)
				}
				// The plugin process was found and read.
				if strings.HasSuffix(p.Name, "plugin") != (p.PluginPeakRSS > 0) {
					t.Errorf("%s: plugin peak RSS %d", p.Name, p.PluginPeakRSS)
				}
				if p.Kind == KindDeliver && (p.RecordedP50 <= 0 || p.InsertWall <= 0) {
					t.Errorf("%s: recorded p50 %s, insert wall %s", p.Name, p.RecordedP50, p.InsertWall)
				}
			}
			if got := len(rep.Ratios()); got != wantRatios {
				t.Errorf("%d ratios, want %d: %+v", got, wantRatios, rep.Ratios())
			}
			var out strings.Builder
			if err := rep.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			for _, s := range append(want, "end to end, plugin / ceiling", "15 submissions x 3 endpoints = 45 deliveries") {
				if !strings.Contains(out.String(), s) {
					t.Errorf("report does not say %q:\n%s", s, out.String())
				}
			}
			if after := left(); after != before {
				t.Errorf("%d bench databases before the run and %d after: the run left some behind", before, after)
			}
		})
	}
}

// A preload phase's CPU is split into creating the backlog and draining
// it, and the two add up to the phase's. Not in parallel, for the reason
// TestRunMeasuresEveryPhaseAndCleansUp's backends are not.
func TestPreloadSplitsCreatingFromDraining(t *testing.T) {
	o := small(t)
	o.Preload, o.Ceiling, o.SendOnly = true, false, false
	o.Transports = []string{TransportPlugin}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Phases) != 1 {
		t.Fatalf("got %d phases, want the plugin's end to end alone", len(rep.Phases))
	}
	p := rep.Phases[0]
	if p.CreateCPUPerMsg <= 0 || p.DrainCPUPerMsg <= 0 || p.CreateCPUPerMsg+p.DrainCPUPerMsg != p.CPUPerMsg {
		t.Errorf("cpu/msg %s, creating %s, draining %s: want two positive parts that add up", p.CPUPerMsg, p.CreateCPUPerMsg, p.DrainCPUPerMsg)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if want := "= creating the backlog "; !strings.Contains(out.String(), want) {
		t.Errorf("report does not say %q:\n%s", want, out.String())
	}
}

func TestOptionsRefuseWhatCannotRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"unknown backend", func(o *Options) { o.Backend = "mysql" }, `backend "mysql"`},
		{"postgres without a URL", func(o *Options) { o.Backend = BackendPostgres }, "--database"},
		{"negative submissions", func(o *Options) { o.Submissions = -1 }, "at least 1"},
		{"unknown transport", func(o *Options) { o.Transports = []string{"carrier-pigeon"} }, `transport "carrier-pigeon"`},
		{"preload and a rate", func(o *Options) { o.Preload, o.Rate = true, 10 }, "one or the other"},
		{"nothing to run", func(o *Options) { o.Transports, o.Ceiling, o.SendOnly = nil, false, false }, "nothing to run"},
		{"lease inside the send", func(o *Options) { o.Worker.Lease = time.Second }, "must outlast"},
		{"idle without the http mode", func(o *Options) { o.Idle = time.Second }, "--http"},
		{"http mode without hymical", func(o *Options) { o.HTTP = true }, "hymical executable"},
		{"http mode and preload", func(o *Options) { o.HTTP, o.Hymical, o.Preload = true, "hymical", true }, "preload does not apply"},
		{"negative idle", func(o *Options) { o.HTTP, o.Hymical, o.Idle = true, "hymical", -time.Second }, "idle must not be negative"},
		{"serves without the http mode", func(o *Options) { o.Serves = 2 }, "add --http"},
		{"serves on sqlite", func(o *Options) { o.HTTP, o.Hymical, o.Serves = true, "hymical", 2 }, "needs PostgreSQL"},
		{"negative serves", func(o *Options) { o.HTTP, o.Hymical, o.Serves = true, "hymical", -1 }, "at least 1"},
		{"idle-warm without idle", func(o *Options) { o.HTTP, o.Hymical, o.IdleWarm = true, "hymical", true }, "use it with --idle"},
		{"fairness without the http mode", func(o *Options) { o.Fairness = DefaultFairRows() }, "--http"},
		{"fairness and idle", func(o *Options) {
			o.HTTP, o.Hymical, o.Idle, o.Fairness = true, "hymical", time.Second, DefaultFairRows()
		}, "give one of them"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := small(t)
			tt.change(&o)
			_, err := Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	t.Parallel()
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 99, 4 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.in, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %g) = %s, want %s", tt.in, tt.p, got, tt.want)
		}
	}
}

func TestProcessReadings(t *testing.T) {
	t.Parallel()
	comm, ppid, _, ok := procStat(os.Getpid())
	if !ok || ppid != os.Getppid() || !strings.HasPrefix(comm, "bench") {
		t.Errorf("procStat(self) = %q, ppid %d, %v; want this test binary, ppid %d", comm, ppid, ok, os.Getppid())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := listenerPID(ln.Addr().(*net.TCPAddr).Port); got != os.Getpid() {
		t.Errorf("listenerPID of a port this process listens on = %d, want %d", got, os.Getpid())
	}
	if machineBusy() <= 0 || statusBytes("/proc/self/status", "VmHWM:") <= 0 {
		t.Error("machine busy time or own peak RSS read as zero")
	}
}

// The receiver counts only what it could verify, so a bench that sent
// unsigned messages would fail instead of reporting a rate.
func TestReceiverRefusesUnsignedMessages(t *testing.T) {
	t.Parallel()
	r, err := startReceiver([]string{"whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	resp, err := http.Post(r.url(0), "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || r.ok.Load() != 0 || r.bad.Load() != 1 {
		t.Errorf("unsigned POST: status %d, ok %d, bad %d; want 401, 0, 1", resp.StatusCode, r.ok.Load(), r.bad.Load())
	}
}

func TestInProcessSendsOnlyHTTP(t *testing.T) {
	t.Parallel()
	s, err := NewInProcess(context.Background(), pluginSettings())
	if err != nil {
		t.Fatal(err)
	}
	out := s.Send(context.Background(), "nats", transport.Message{}, time.Now().Add(time.Second))
	if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "only the http transport") {
		t.Errorf("send to nats in-process = %+v, want a permanent outcome saying why", out)
	}
	if _, err := NewInProcess(context.Background(), map[string]string{"bogus": "1"}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("NewInProcess with an unknown setting = %v, want an error naming it", err)
	}
}

// benchDatabases counts what a run may leave behind: files in the SQLite
// directory, or bench databases on the PostgreSQL server.
func benchDatabases(t *testing.T, o Options) int {
	t.Helper()
	if o.Backend == BackendSQLite {
		entries, err := os.ReadDir(o.SQLiteDir)
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, o.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE 'hymical_bench_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// children lists the processes whose parent is this one, by comm.
func children(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, dir := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(dir))
		if comm, ppid, _, ok := procStat(pid); ok && ppid == os.Getpid() && comm != "go" {
			out = append(out, comm)
		}
	}
	return out
}

// The HTTP mode runs a real serve, drives it through its API flat out and
// paced, matches every delivery the server created with one verified
// arrival, fills the report, and leaves neither a server nor a database
// behind. The idle phase measures a serve that has nothing to do.
func TestHTTPModeDeliversEverySubmissionOnce(t *testing.T) {
	hymical, err := hymicalBinary()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		backend string
		rate    float64
		idle    time.Duration
		serves  int
	}{
		{"sqlite flat out", BackendSQLite, 0, 0, 1},
		{"sqlite paced", BackendSQLite, 200, 0, 1},
		{"postgres flat out", BackendPostgres, 0, 0, 1},
		{"postgres flat out, 2 serves", BackendPostgres, 0, 0, 2},
		{"sqlite idle", BackendSQLite, 0, time.Second, 1},
		{"postgres idle", BackendPostgres, 0, time.Second, 1},
		{"postgres idle, 3 serves", BackendPostgres, 0, time.Second, 3},
	}
	for _, tt := range tests {
		// Not in parallel: the CPU of a phase is read per process, and
		// the check for a server left behind looks at every child.
		t.Run(tt.name, func(t *testing.T) {
			o := small(t)
			o.HTTP, o.Hymical, o.Backend, o.Rate, o.Idle, o.Serves = true, hymical, tt.backend, tt.rate, tt.idle, tt.serves
			o.Submissions, o.Endpoints, o.Producers = 50, 2, 3
			if tt.backend == BackendPostgres {
				o.DatabaseURL = pgtest.BaseDSN(t)
			}
			before := benchDatabases(t, o)
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(rep.Phases) != 1 || rep.Mode != ModeHTTP || rep.Serves != tt.serves {
				t.Fatalf("mode %q with %d phases and %d serves, want one of the http mode with %d", rep.Mode, len(rep.Phases), rep.Serves, tt.serves)
			}
			p := rep.Phases[0]
			// The serve process and its plugin were found and read.
			if p.ServerPeakRSS <= 0 || p.PluginPeakRSS <= 0 {
				t.Errorf("%s: server peak RSS %d, plugin peak RSS %d: not measured", p.Name, p.ServerPeakRSS, p.PluginPeakRSS)
			}
			var out strings.Builder
			if err := rep.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			if tt.idle > 0 {
				if p.Name != PhaseIdle || p.Kind != KindIdle || p.Wall < tt.idle || p.Received != 0 || p.Messages != 0 {
					t.Errorf("idle phase %q (%s) over %s with %d received, %d messages", p.Name, p.Kind, p.Wall, p.Received, p.Messages)
				}
				if !strings.Contains(out.String(), "% of one core") {
					t.Errorf("the report does not give the idle CPU as a share of a core:\n%s", out.String())
				}
			} else {
				if p.Name != PhaseHTTP || p.Kind != KindHTTP || p.Messages != 100 || p.Received != 100 || p.LatencySamples != 100 {
					t.Errorf("%q (%s): %d messages, %d received, %d latency samples; want 100 of each", p.Name, p.Kind, p.Messages, p.Received, p.LatencySamples)
				}
				if p.Rate <= 0 || p.P50 <= 0 || p.P99 < p.P50 || p.Max < p.P99 || p.InsertWall <= 0 {
					t.Errorf("rate %.0f, p50 %s, p99 %s, max %s, posting %s", p.Rate, p.P50, p.P99, p.Max, p.InsertWall)
				}
				if p.IngestP50 <= 0 || p.IngestP99 < p.IngestP50 || p.IngestP99 > p.InsertWall {
					t.Errorf("ingest p50 %s, p99 %s, posting all %s", p.IngestP50, p.IngestP99, p.InsertWall)
				}
				if p.CPUServer <= 0 || p.CPUPerMsg != p.CPUServerPerMsg+p.CPUPluginPerMsg+p.CPUDBPerMsg || p.CPUServerPerMsg <= 0 {
					t.Errorf("cpu: server %s, per message %s = server %s + plugin %s + db %s", p.CPUServer, p.CPUPerMsg, p.CPUServerPerMsg, p.CPUPluginPerMsg, p.CPUDBPerMsg)
				}
				for _, want := range []string{PhaseHTTP, "50 submissions x 2 endpoints = 100 deliveries", "server/msg", "ingest p99", "--webhook.allowed_networks=127.0.0.0/8"} {
					if !strings.Contains(out.String(), want) {
						t.Errorf("report does not say %q:\n%s", want, out.String())
					}
				}
			}
			if tt.serves > 1 && !strings.Contains(out.String(), fmt.Sprintf("%d processes on the one database", tt.serves)) {
				t.Errorf("the report does not say %d serves ran:\n%s", tt.serves, out.String())
			}
			if left := children(t); len(left) > 0 {
				t.Errorf("processes left running after the run: %v", left)
			}
			if after := benchDatabases(t, o); after != before {
				t.Errorf("%d bench databases before the run and %d after", before, after)
			}
		})
	}
}

// Every delivery the server answered with must arrive exactly once, and
// nothing else may: otherwise the rate and the latency are of something
// other than what was asked.
func TestMatchArrivalsCountsEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	sent := []posted{{at: t0, deliveries: []string{"dlv_a", "dlv_b"}}, {at: t0.Add(time.Second), deliveries: []string{"dlv_c"}}}
	tests := []struct {
		name   string
		arrive []string
		again  int64
		want   string
	}{
		{"each once", []string{"dlv_a", "dlv_b", "dlv_c"}, 0, ""},
		{"one twice", []string{"dlv_a", "dlv_b", "dlv_c"}, 1, "more than once"},
		{"one missing", []string{"dlv_a", "dlv_c"}, 0, "dlv_b of submission 0 never reached"},
		{"one unknown", []string{"dlv_a", "dlv_b", "dlv_c", "dlv_x"}, 0, "4 distinct ones received"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			arr := &arrivals{at: map[string]time.Time{}, again: tt.again}
			for i, id := range tt.arrive {
				arr.at[id] = t0.Add(time.Duration(i+1) * 2 * time.Second)
			}
			lat, last, err := matchArrivals(sent, arr, 3)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("matchArrivals = %v, want an error saying %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second}
			if !slices.Equal(lat, want) || !last.Equal(t0.Add(6*time.Second)) {
				t.Errorf("latencies %v, last %s; want %v, last at +6s", lat, last.Sub(t0), want)
			}
		})
	}
}

// In the HTTP mode each endpoint has its own server-made secret; the
// receiver verifies each path with its own, so a message signed for one
// endpoint does not count at another.
func TestReceiverVerifiesEachPathWithItsSecret(t *testing.T) {
	t.Parallel()
	r, err := startReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	secrets := make([]string, 2)
	for i := range secrets {
		if secrets[i], err = webhook.NewSecret(); err != nil {
			t.Fatal(err)
		}
		if err := r.verifyPath(i, secrets[i]); err != nil {
			t.Fatal(err)
		}
	}
	arr := r.record(1)
	post := func(path string, secret string) int {
		return postSigned(t, "http://"+r.ln.Addr().String()+path, "dlv_1", secret, []byte(`{"type":"submission.received"}`))
	}
	if got := post(hookPath(1), secrets[0]); got != http.StatusUnauthorized {
		t.Errorf("endpoint 0's message at endpoint 1's path: %d, want 401", got)
	}
	if got := post(hookPath(2), secrets[0]); got != http.StatusNotFound {
		t.Errorf("a message at a path no endpoint has: %d, want 404", got)
	}
	if got := post(hookPath(0), secrets[0]); got != http.StatusNoContent {
		t.Errorf("endpoint 0's message at its own path: %d, want 204", got)
	}
	if r.ok.Load() != 1 || r.bad.Load() != 2 || len(arr.at) != 1 {
		t.Errorf("ok %d, bad %d, %d arrivals recorded; want 1, 2, 1", r.ok.Load(), r.bad.Load(), len(arr.at))
	}
}

// With several serves, the meter reads every one of them and the plugins
// of each, so the CPU per delivery is the whole deployment's.
func TestServesAreMeteredTogether(t *testing.T) {
	hymical, err := hymicalBinary()
	if err != nil {
		t.Fatal(err)
	}
	o := small(t)
	o.HTTP, o.Hymical, o.Backend, o.Serves, o.DatabaseURL = true, hymical, BackendPostgres, 2, pgtest.BaseDSN(t)
	o = o.withDefaults()
	recv, err := startReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.close()
	r := &runner{o: o, recv: recv}
	_, err = r.withServe(t.Context(), "metered", 1, nil, func(ctx context.Context, sv served) (Phase, error) {
		pids := sv.pids()
		if len(pids) != 2 || pids[0] == pids[1] {
			t.Errorf("serve pids %v, want 2 distinct", pids)
		}
		m := startServerMeter(pids, 0, nil)
		byParent := map[int]int{}
		for pid := range m.plugin {
			_, ppid, _, _ := procStat(pid)
			byParent[ppid]++
		}
		for _, pid := range pids {
			if byParent[pid] == 0 {
				t.Errorf("no plugin process of serve %d metered; plugins by parent: %v", pid, byParent)
			}
		}
		if u := m.stop(); u.ServerPeakRSS <= 0 {
			t.Errorf("server peak RSS %d: not read", u.ServerPeakRSS)
		}
		return Phase{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if left := children(t); len(left) > 0 {
		t.Errorf("processes left running after the phase: %v", left)
	}
}

// --idle-warm delivers once to every endpoint, the registered ones too,
// each verified with the secret the server made for it, before the idle
// phase measures; the idle phase itself then receives nothing.
func TestIdleWarmDeliversToEveryEndpointOnce(t *testing.T) {
	hymical, err := hymicalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		backend string
		serves  int
	}{
		{"sqlite", BackendSQLite, 1},
		{"postgres, 2 serves", BackendPostgres, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := small(t)
			o.HTTP, o.Hymical, o.Backend, o.Serves = true, hymical, tt.backend, tt.serves
			o.Idle, o.IdleWarm, o.Registered, o.Producers = time.Second, true, 40, 3
			if tt.backend == BackendPostgres {
				o.DatabaseURL = pgtest.BaseDSN(t)
			}
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			p := rep.Phases[0]
			if !rep.IdleWarm || p.Kind != KindIdle || p.WarmEndpoints != 41 || p.WarmWall <= 0 || p.Received != 0 || p.Wall < o.Idle {
				t.Errorf("idle warm %v, phase %s: warmed %d endpoints in %s, then %d received over %s; want 41 warmed, none received",
					rep.IdleWarm, p.Kind, p.WarmEndpoints, p.WarmWall, p.Received, p.Wall)
			}
			var out strings.Builder
			if err := rep.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"warm, having just delivered once to each of its 41 endpoints", "% of one core"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report does not say %q:\n%s", want, out.String())
				}
			}
			if left := children(t); len(left) > 0 {
				t.Errorf("processes left running after the run: %v", left)
			}
		})
	}
}

func TestParseFairRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []FairRow
		err  string
	}{
		{in: "4x950ms", want: []FairRow{{4, 950 * time.Millisecond}}},
		{in: " 4x100ms, 6xnever ,", want: []FairRow{{4, 100 * time.Millisecond}, {6, Never}}},
		{in: "default", want: DefaultFairRows()},
		{in: "4", err: "ENDPOINTSxDELAY"},
		{in: "0x1s", err: "at least 1"},
		{in: "fourx1s", err: "at least 1"},
		{in: "4xsoon", err: "neither a duration"},
		{in: "4x-1s", err: "neither a duration"},
		{in: ",", err: "no fairness rows"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFairRows(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseFairRows(%q) = %v, %v; want an error saying %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("ParseFairRows(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
	if n := len(DefaultFairRows()); n != 10 {
		t.Errorf("DefaultFairRows has %d rows, want the issue's 10", n)
	}
}

// A fairness row is within its bound only when its p99 is and no healthy
// delivery is missing.
func TestFairnessTableSaysWhichRowsAreWithinTheBound(t *testing.T) {
	t.Parallel()
	row := func(slow int, delay string, p99 time.Duration, missing int) Phase {
		return Phase{Kind: KindFairness, Round: 1, Slow: slow, SlowDelay: delay, P50: time.Millisecond,
			P99: p99, Max: p99, Missing: missing, Bound: 3 * time.Second}
	}
	rep := &Report{Mode: ModeHTTP, Fairness: []string{"4 x 950ms", "6 x never", "6 x 2s"}, Phases: []Phase{
		row(4, "950ms", 12*time.Millisecond, 0),
		row(6, "never", 4*time.Second, 0),
		row(6, "2s", 20*time.Millisecond, 1),
	}}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	var verdicts []string
	for line := range strings.Lines(out.String()) {
		f := strings.Fields(line)
		if len(f) != 9 {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err == nil {
			verdicts = append(verdicts, f[1]+" "+f[8])
		}
	}
	if want := []string{"950ms yes", "never NO", "2s NO"}; !slices.Equal(verdicts, want) {
		t.Errorf("verdicts %q, want %q; report:\n%s", verdicts, want, out.String())
	}
}
