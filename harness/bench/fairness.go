package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/worker"
)

// The fairness run (Options.Fairness) asks one question of a real serve:
// while some endpoints' receivers are slow, or never answer, and have a
// backlog, how long does a healthy endpoint's delivery wait? Each row is a
// fresh serve and store with Slow endpoints on a receiver that answers
// after Delay, fairBacklog submissions fanned out to them, then
// fairHealthy submissions at fairRate to one healthy endpoint on the
// verifying receiver. A row's latencies are the healthy deliveries', from
// just before each POST to the receiver holding the verified message.

// The fairness run's load, per row: the same for every row, so that rows
// differ only in their slow receivers.
const (
	fairBacklog = 150
	fairHealthy = 30
	fairRate    = 2.0
	// fairGrace is how long after the last healthy POST the row waits for
	// the healthy deliveries; those not there by then are missing.
	fairGrace = 15 * time.Second
	// fairTarget is the bound on the healthy p99, before one claim
	// interval is added: a delivery whose endpoint holds nothing should
	// not wait behind others' backlog.
	fairTarget = time.Second
)

// Forms of the fairness run: the slow endpoints take one, the healthy
// endpoint the other, so each submission reaches only its own kind.
const (
	fairSlowForm    = "bench_fair_slow"
	fairHealthyForm = "bench_fair_healthy"
)

// Never is FairRow.Delay for a receiver that reads the request and never
// answers it.
const Never time.Duration = -1

// FairRow is one row of the fairness run: Slow endpoints whose receiver
// answers after Delay, or never.
type FairRow struct {
	Slow  int
	Delay time.Duration
}

func (fr FairRow) String() string { return fmt.Sprintf("%d x %s", fr.Slow, delayText(fr.Delay)) }

func delayText(d time.Duration) string {
	if d == Never {
		return "never"
	}
	return d.String()
}

// DefaultFairRows are the rows issue 34 asks for: 4 and 6 slow endpoints
// at 100, 500, 950 and 2,000 ms and never answering.
func DefaultFairRows() []FairRow {
	var rows []FairRow
	for _, n := range []int{4, 6} {
		for _, d := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 950 * time.Millisecond, 2 * time.Second, Never} {
			rows = append(rows, FairRow{Slow: n, Delay: d})
		}
	}
	return rows
}

// ParseFairRows reads rows written as "4x950ms,6xnever": endpoints, an
// x, and a delay or "never". "default" is DefaultFairRows.
func ParseFairRows(s string) ([]FairRow, error) {
	if strings.TrimSpace(s) == "default" {
		return DefaultFairRows(), nil
	}
	var rows []FairRow
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n, d, ok := strings.Cut(item, "x")
		if !ok {
			return nil, fmt.Errorf("fairness row %q: write it as ENDPOINTSxDELAY, e.g. 4x950ms or 6xnever", item)
		}
		slow, err := strconv.Atoi(n)
		if err != nil || slow < 1 {
			return nil, fmt.Errorf("fairness row %q: %q is not a number of slow endpoints of at least 1", item, n)
		}
		row := FairRow{Slow: slow, Delay: Never}
		if d != "never" {
			if row.Delay, err = time.ParseDuration(d); err != nil || row.Delay < 0 {
				return nil, fmt.Errorf("fairness row %q: %q is neither a duration such as 950ms nor never", item, d)
			}
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, errors.New("no fairness rows: give e.g. 4x950ms,6xnever, or default")
	}
	return rows, nil
}

// fairBound is the bound on a row's healthy p99: fairTarget plus
// one claim interval of serve (worker.poll_interval).
func (r *runner) fairBound() time.Duration {
	poll := worker.DefaultPollInterval
	for _, a := range r.o.ServeArgs {
		if v, ok := strings.CutPrefix(a, "--worker.poll_interval="); ok {
			if d, err := time.ParseDuration(v); err == nil {
				poll = d
			}
		}
	}
	return fairTarget + poll
}

// fairRow runs one row of the fairness run on a serve of its own.
func (r *runner) fairRow(ctx context.Context, row FairRow) (Phase, error) {
	name := "fairness " + row.String()
	return r.withServe(ctx, name, 1, []string{fairHealthyForm}, func(ctx context.Context, sv served) (Phase, error) {
		slow, err := startSlowReceiver(row.Delay)
		if err != nil {
			return Phase{}, fmt.Errorf("%s: %w", name, err)
		}
		// Before serve stops: sends held by a receiver that never answers
		// end now, instead of keeping serve's shutdown waiting.
		defer slow.close()
		srv := sv.first()
		for i := range row.Slow {
			err := srv.call(ctx, http.MethodPost, "/v1/endpoints", http.StatusCreated, apiwire.EndpointCreate{
				URL: slow.url(i), FormIDs: []string{fairSlowForm}, Description: "hymical bench: slow receiver",
			}, nil)
			if err != nil {
				return Phase{}, fmt.Errorf("%s: %w", name, err)
			}
		}
		backlog := make([]posted, fairBacklog)
		if err := r.post(ctx, sv.srvs, time.Now(), backlog, postPlan{form: func(int) string { return fairSlowForm }, fanOut: row.Slow}); err != nil {
			return Phase{}, fmt.Errorf("%s: the slow endpoints' backlog: %w", name, err)
		}
		r.recv.reset()
		arr := r.recv.record(fairHealthy)
		sent := make([]posted, fairHealthy)
		start := time.Now()
		r.progress("%s: %d submissions to %d slow endpoints posted; now %d to the healthy one at %.0f/s", name, fairBacklog, row.Slow, fairHealthy, fairRate)
		if err := r.post(ctx, sv.srvs, start, sent, postPlan{form: func(int) string { return fairHealthyForm }, fanOut: 1, rate: fairRate}); err != nil {
			return Phase{}, fmt.Errorf("%s: the healthy endpoint's submissions: %w", name, err)
		}
		if err := waitArrivals(ctx, sv, arr, fairHealthy, time.Now().Add(fairGrace)); err != nil {
			return Phase{}, fmt.Errorf("%s: %w", name, err)
		}
		if bad := r.recv.bad.Load(); bad > 0 {
			return Phase{}, fmt.Errorf("%s: the receiver refused %d requests (bad signature or body)", name, bad)
		}
		lat, missing := healthyLatencies(sent, arr)
		p := Phase{
			Name: name, Kind: KindFairness, Messages: fairHealthy, Wall: time.Since(start),
			Latency:        "POST of a healthy endpoint's submission to the receiver holding the verified message",
			LatencySamples: len(lat), Received: r.recv.ok.Load(),
			P50: percentile(lat, 50), P99: percentile(lat, 99), Max: percentile(lat, 100),
			Slow: row.Slow, SlowDelay: delayText(row.Delay), Missing: missing, Bound: r.fairBound(),
			where: sv.where,
		}
		r.progress("%s: healthy p50 %s p99 %s max %s, %d missing", name, ms(p.P50), ms(p.P99), ms(p.Max), missing)
		return p, nil
	})
}

// waitArrivals returns once arr holds want arrivals or the deadline has
// passed; a serve that exits meanwhile is an error.
func waitArrivals(ctx context.Context, sv served, arr *arrivals, want int, deadline time.Time) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for arr.count() < want && time.Now().Before(deadline) {
		select {
		case s := <-sv.exited:
			return fmt.Errorf("%s exited during the run (%v):\n%s", s.name, s.err, s.out)
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
	return nil
}

// healthyLatencies pairs each submission's delivery with its arrival. A
// delivery not there is missing, and counted in no latency: a row with
// one missing has failed whatever its p99 says.
func healthyLatencies(sent []posted, arr *arrivals) (lat []time.Duration, missing int) {
	arr.mu.Lock()
	defer arr.mu.Unlock()
	for _, s := range sent {
		for _, id := range s.deliveries {
			if at, ok := arr.at[id]; ok {
				lat = append(lat, at.Sub(s.at))
			} else {
				missing++
			}
		}
	}
	return lat, missing
}

// slowReceiver answers every request 204 after its delay, or, with Never,
// holds it until the client gives up or the receiver closes. It does not
// verify: the fairness run times only the healthy endpoint.
type slowReceiver struct {
	srv   *http.Server
	ln    net.Listener
	delay time.Duration
	// done ends every held request at close, so that Close does not wait
	// on handlers.
	done     chan struct{}
	doneOnce sync.Once
}

func startSlowReceiver(delay time.Duration) (*slowReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("slow receiver: listen on loopback: %w", err)
	}
	s := &slowReceiver{ln: ln, delay: delay, done: make(chan struct{})}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *slowReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var wait <-chan time.Time
	if s.delay != Never {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-wait:
		w.WriteHeader(http.StatusNoContent)
	case <-req.Context().Done():
	case <-s.done:
	}
}

func (s *slowReceiver) url(i int) string {
	return fmt.Sprintf("http://%s/slow/%d", s.ln.Addr(), i)
}

func (s *slowReceiver) close() {
	s.doneOnce.Do(func() { close(s.done) })
	_ = s.srv.Close()
}
