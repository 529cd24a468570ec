package bench

import (
	"context"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// pluginDir holds the real hymical-plugin-http, built once for the tests.
var pluginDir string

func TestMain(m *testing.M) {
	e2etest.PluginMain(m, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}, &pluginDir)
}

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
// its signature, measures it, and leaves no database behind.
func TestRunMeasuresEveryPhaseAndCleansUp(t *testing.T) {
	t.Parallel()
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
