package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/server/api/apiwire"
)

// The HTTP mode drives what users drive: a real `hymical serve` process
// (the same executable, its own plugins, a fresh database), or Serves of
// them on one PostgreSQL database, that the bench reaches only through
// their HTTP API, as a form front end and an operator would. Endpoints are created with POST /v1/endpoints, so their secrets
// are the server's own; submissions go through the ingest route from
// Producers goroutines; the loopback receiver verifies each message with
// its endpoint's secret and notes when it arrived. The CPU of the serve
// processes, their plugin processes and the PostgreSQL server is read from
// /proc before and after the measured window; the bench's own is shown
// apart and counted in no per-delivery figure.

// ModeHTTP is Report.Mode for a run of the HTTP mode.
const ModeHTTP = "http"

// Phase names of the HTTP mode.
const (
	PhaseHTTP = "http: serve, ingest API"
	PhaseIdle = "idle: serve, no traffic"
)

// benchForm is the form every submission is for.
const benchForm = "form_bench"

// serveSettle is how long an idle serve is left alone before the idle
// phase measures it: starting the plugins, the first claims and the first
// heartbeat are start-up, not idling.
const serveSettle = 2 * time.Second

// warmSettle is serveSettle after a warm-up: the last completions of the
// burst, and serve giving its heap's spare memory back once it has been
// quiet for a moment (see gc.go), end a burst, not idling.
const warmSettle = 5 * time.Second

// settleOf is how long the idle phase waits before it measures.
func settleOf(warm bool) time.Duration {
	if warm {
		return warmSettle
	}
	return serveSettle
}

// runHTTP is Run for the HTTP mode.
func runHTTP(ctx context.Context, o Options) (*Report, error) {
	recv, err := startReceiver(nil)
	if err != nil {
		return nil, err
	}
	defer recv.close()
	r := &runner{o: o, recv: recv}
	if o.Backend == BackendPostgres {
		r.dbPID = listenerPID(postgresPort(o.DatabaseURL))
	}
	rep := &Report{
		Mode:        ModeHTTP,
		Machine:     describeMachine(),
		Backend:     o.Backend,
		Submissions: o.Submissions,
		Endpoints:   o.Endpoints,
		Registered:  o.Registered,
		Deliveries:  o.Deliveries(),
		Producers:   o.Producers,
		Rate:        o.Rate,
		Repeat:      o.Repeat,
		Serves:      o.Serves,
		Serve:       r.serveFlags(),
		Idle:        o.Idle,
		IdleWarm:    o.IdleWarm,
		Started:     time.Now().UTC(),
	}
	if o.Idle > 0 {
		rep.Submissions, rep.Endpoints, rep.Deliveries, rep.Producers, rep.Rate = 0, 1, 0, 0, 0
		if o.IdleWarm {
			// They post the warm-up.
			rep.Producers = o.Producers
		}
	}
	if len(o.Fairness) > 0 {
		rep.Submissions, rep.Endpoints, rep.Deliveries, rep.Rate = 0, 0, 0, 0
		for _, row := range o.Fairness {
			rep.Fairness = append(rep.Fairness, row.String())
		}
	}
	for round := 1; round <= o.Repeat; round++ {
		phases, err := r.round(ctx)
		for _, p := range phases {
			p.Round = round
			rep.Phases = append(rep.Phases, p)
			if rep.Where == "" {
				rep.Where = p.where
			}
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// round runs the HTTP mode's phases once: the idle phase, every fairness
// row, or the traffic phase. Each phase has o.Timeout.
func (r *runner) round(ctx context.Context) ([]Phase, error) {
	var phases []Phase
	timed := func(run func(context.Context) (Phase, error)) error {
		pctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
		defer cancel()
		p, err := run(pctx)
		if err == nil {
			phases = append(phases, p)
		}
		return err
	}
	switch {
	case r.o.Idle > 0:
		return phases, timed(r.idle)
	case len(r.o.Fairness) > 0:
		for _, row := range r.o.Fairness {
			if err := timed(func(ctx context.Context) (Phase, error) { return r.fairRow(ctx, row) }); err != nil {
				return phases, err
			}
		}
		return phases, nil
	default:
		return phases, timed(r.viaHTTP)
	}
}

// serveFlags are the flags serve runs with, besides the database URL and
// the admin token, which go in its environment: a URL may hold a password,
// and the command line of a process is visible to every user.
func (r *runner) serveFlags() []string {
	flags := []string{
		// A port of its own; the banner says which.
		"--server.listen=127.0.0.1:0",
		"--plugins.dir=" + r.o.PluginDir,
		// The receiver is on loopback, which the SSRF guard refuses
		// unless allowed.
		"--webhook.allowed_networks=127.0.0.0/8",
	}
	level := true
	for _, a := range r.o.ServeArgs {
		if strings.HasPrefix(a, "--log.level") || strings.HasPrefix(a, "-log.level") {
			level = false
		}
	}
	if level {
		// serve's default, info, writes a line per attempt; the bench
		// keeps only the last lines, for when serve fails.
		flags = append(flags, "--log.level=error")
	}
	return append(flags, r.o.ServeArgs...)
}

// serveProc is a running `hymical serve` child process.
type serveProc struct {
	// name says which serve it is in messages: "serve", or "serve 2 of
	// 3" when there are several.
	name   string
	cmd    *exec.Cmd
	base   string
	token  string
	client *http.Client
	out    *tail
	exited chan struct{}
	err    error // set before exited is closed
}

// startServe runs serve, named name, on the database fs and waits until
// its /readyz answers 200.
func (r *runner) startServe(ctx context.Context, fs *freshStore, name string) (*serveProc, error) {
	token, err := randomHex(24)
	if err != nil {
		return nil, err
	}
	if err := fs.handOver(); err != nil {
		return nil, fmt.Errorf("close the bench's handle on the database: %w", err)
	}
	cmd := exec.Command(r.o.Hymical, append([]string{"serve"}, r.serveFlags()...)...)
	// Only what the bench sets: a FORMS_* variable of the caller's would
	// change the settings the report says serve ran with.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FORMS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "FORMS_DATABASE_URL="+fs.url, "FORMS_SERVER_ADMIN_TOKEN="+token)
	cmd.SysProcAttr = serveSysProcAttr()
	out := &tail{max: 16 << 10}
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve (build it with: go build -o bin/ .): %w", r.o.Hymical, err)
	}
	s := &serveProc{name: name, cmd: cmd, token: token, out: out, exited: make(chan struct{})}
	addr := make(chan string, 1)
	var reading sync.WaitGroup
	reading.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			out.Write([]byte(line + "\n"))
			if _, a, ok := strings.Cut(line, " listening on http://"); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
		// Whatever is left unread must not block serve's writes.
		_, _ = io.Copy(out, stdout)
	})
	go func() {
		reading.Wait()
		s.err = cmd.Wait()
		close(s.exited)
	}()

	ready, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case a := <-addr:
		s.base = "http://" + a
	case <-s.exited:
		return nil, fmt.Errorf("%s exited before it listened (%v):\n%s", name, s.err, out)
	case <-ready.Done():
		return nil, errors.Join(fmt.Errorf("%s did not say where it listens within a minute:\n%s", name, out), s.stop())
	}
	s.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: r.o.Producers + 4, DisableCompression: true,
	}}
	for {
		status, body, err := s.do(ready, http.MethodGet, "/readyz", nil, nil)
		if err == nil && status == http.StatusOK {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("%s exited before it was ready (%v):\n%s", name, s.err, out)
		case <-ready.Done():
			return nil, errors.Join(fmt.Errorf("%s was not ready within a minute: /readyz said %d %s (%v):\n%s", name, status, body, err, out), s.stop())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends serve as an operator does, with SIGTERM, and waits for it;
// after 30 s it is killed. An exit that was not clean is an error, since
// the run's numbers came from that process.
func (s *serveProc) stop() error {
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
	select {
	case <-s.exited:
		return s.exitErr()
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return s.exitErr()
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("%s did not stop within 30 s of SIGTERM and was killed:\n%s", s.name, s.out)
	}
}

func (s *serveProc) exitErr() error {
	if s.err != nil {
		return fmt.Errorf("%s exited with %v:\n%s", s.name, s.err, s.out)
	}
	return nil
}

// do makes one API call with the admin token and returns the status and
// the body; in is encoded as JSON unless it is raw bytes.
func (s *serveProc) do(ctx context.Context, method, path string, in any, out any) (int, []byte, error) {
	var body io.Reader
	switch v := in.(type) {
	case nil:
	case json.RawMessage:
		body = bytes.NewReader(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, b, fmt.Errorf("%s %s: answer is not the JSON expected: %w", method, path, err)
		}
	}
	return resp.StatusCode, b, nil
}

// call is do for a call that must answer want.
func (s *serveProc) call(ctx context.Context, method, path string, want int, in, out any) error {
	status, body, err := s.do(ctx, method, path, in, out)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status != want {
		return fmt.Errorf("%s %s answered %d, want %d: %s", method, path, status, want, bytes.TrimSpace(body))
	}
	return nil
}

// createEndpoints makes n endpoints through the API, each to its own path
// on the receiver, which then verifies that path with the secret the
// server made for it. They are for the forms named (none: every form).
func (s *serveProc) createEndpoints(ctx context.Context, recv *receiver, n int, forms []string) error {
	for i := range n {
		var ep apiwire.EndpointCreated
		err := s.call(ctx, http.MethodPost, "/v1/endpoints", http.StatusCreated, apiwire.EndpointCreate{
			URL: recv.url(i), FormIDs: forms, Description: "hymical bench receiver",
		}, &ep)
		if err != nil {
			return err
		}
		if err := recv.verifyPath(i, ep.Secret); err != nil {
			return err
		}
	}
	return nil
}

// registerOthers makes n endpoints through the API that no submission of
// the bench's traffic matches, each for a form of its own (otherForm(i))
// and sending to path otherEndpoint(i) of the receiver, from 8 callers at
// once. With verify, the receiver then verifies each of those paths with
// the secret the server made for it, so that the warm-up of --idle-warm
// can deliver to them; without, it refuses anything sent there.
func (s *serveProc) registerOthers(ctx context.Context, recv *receiver, n int, verify bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	// Each caller writes only the secrets of the endpoints it made.
	secrets := make([]string, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				var ep apiwire.EndpointCreated
				err := s.call(ctx, http.MethodPost, "/v1/endpoints", http.StatusCreated, apiwire.EndpointCreate{
					URL: recv.url(otherEndpoint(i)), FormIDs: []string{otherForm(i)},
					Description: "hymical bench: registered, matched by no submission",
				}, &ep)
				if err != nil {
					cancel(fmt.Errorf("registering endpoint %d of %d: %w", i+1, n, err))
					continue
				}
				secrets[i] = ep.Secret
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil || !verify {
		return err
	}
	byNumber := make(map[int]string, n)
	for i, secret := range secrets {
		byNumber[otherEndpoint(i)] = secret
	}
	return recv.verifyPaths(byNumber)
}

// otherForm is the form registered endpoint i is for, and otherEndpoint
// its number at the receiver: apart from the bench's own endpoints, which
// are numbered from 0.
func otherForm(i int) string  { return fmt.Sprintf("bench_other_%d", i) }
func otherEndpoint(i int) int { return 1_000_000 + i }

// settled reports whether every delivery is recorded delivered: none is
// pending or processing. A failed one is an error.
func (s *serveProc) settled(ctx context.Context, checkFailed bool) (bool, error) {
	states := []string{"pending", "processing"}
	if checkFailed {
		states = append(states, "failed")
	}
	for _, st := range states {
		var page apiwire.DeliveryPage
		if err := s.call(ctx, http.MethodGet, "/v1/deliveries?limit=1&state="+st, http.StatusOK, nil, &page); err != nil {
			return false, err
		}
		if len(page.Deliveries) > 0 {
			if st == "failed" {
				return false, fmt.Errorf("delivery %s failed; run with --log-level info to see why", page.Deliveries[0].ID)
			}
			return false, nil
		}
	}
	return true, nil
}

// viaHTTP is the HTTP mode's traffic phase.
func (r *runner) viaHTTP(ctx context.Context) (Phase, error) {
	return r.withServe(ctx, PhaseHTTP, r.o.Endpoints, nil, r.postAndMeasure)
}

// withServe runs phase against r.o.Serves serve processes on a fresh
// store, with endpoints endpoints for forms (none: every form) and the
// r.o.Registered others made through the first, and stops and removes
// them all after it.
func (r *runner) withServe(ctx context.Context, name string, endpoints int, forms []string, phase func(context.Context, served) (Phase, error)) (p Phase, err error) {
	fs, err := openFresh(ctx, r.o)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	defer fs.removeInto(ctx, name, &err)
	srvs, err := r.startServes(ctx, fs)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if serr := stopServes(srvs); serr != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", name, serr))
		}
	}()
	srv := srvs[0]
	if err := srv.createEndpoints(ctx, r.recv, endpoints, forms); err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	// Only the warm-up delivers to the registered endpoints.
	if err := srv.registerOthers(ctx, r.recv, r.o.Registered, r.o.IdleWarm); err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	others, closeOthers, err := otherBackends(ctx, fs)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	defer closeOthers()
	return phase(ctx, served{srvs: srvs, exited: anyExited(srvs), where: fs.where, others: others})
}

// startServes starts r.o.Serves serve processes on fs. The first starts
// alone and is ready before the others start: the database is migrated
// already (openFresh), so nothing at start-up needs one process alone,
// but a failure then shows in the first serve's output only, and the
// others start on a database a serve has already opened, as they would
// join a running deployment.
func (r *runner) startServes(ctx context.Context, fs *freshStore) ([]*serveProc, error) {
	n := r.o.Serves
	nameOf := func(i int) string {
		if n == 1 {
			return "serve"
		}
		return fmt.Sprintf("serve %d of %d", i+1, n)
	}
	first, err := r.startServe(ctx, fs, nameOf(0))
	if err != nil {
		return nil, err
	}
	srvs := make([]*serveProc, n)
	srvs[0] = first
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { srvs[i], errs[i] = r.startServe(ctx, fs, nameOf(i)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		var started []*serveProc
		for _, s := range srvs {
			if s != nil {
				started = append(started, s)
			}
		}
		return nil, errors.Join(err, stopServes(started))
	}
	return srvs, nil
}

// stopServes stops every serve at once, so that N of them take as long
// to stop as the slowest, not the sum.
func stopServes(srvs []*serveProc) error {
	errs := make([]error, len(srvs))
	var wg sync.WaitGroup
	for i, s := range srvs {
		wg.Go(func() { errs[i] = s.stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// anyExited returns a channel that gets each serve of srvs that exits, as
// it exits. It has room for all of them, so the goroutines waiting end
// when the serves are stopped, read or not.
func anyExited(srvs []*serveProc) <-chan *serveProc {
	ch := make(chan *serveProc, len(srvs))
	for _, s := range srvs {
		go func() {
			<-s.exited
			ch <- s
		}()
	}
	return ch
}

// served is what a phase of the HTTP mode runs against: the serve
// processes (the first made the endpoints and answers the settled
// checks), a channel that gets any of them that exits, where their store
// is, and the PostgreSQL backends not its own.
type served struct {
	srvs   []*serveProc
	exited <-chan *serveProc
	where  string
	others func() map[int]bool
}

// first is the serve that made the endpoints and answers the settled
// checks: any serve reads the same database.
func (sv served) first() *serveProc { return sv.srvs[0] }

// pids are the serve processes, for the meter.
func (sv served) pids() []int {
	out := make([]int, len(sv.srvs))
	for i, s := range sv.srvs {
		out[i] = s.cmd.Process.Pid
	}
	return out
}

// postAndMeasure is the traffic phase proper: it posts the submissions
// and waits for every delivery to arrive.
func (r *runner) postAndMeasure(ctx context.Context, sv served) (p Phase, err error) {
	name := PhaseHTTP
	total := r.o.Deliveries()
	r.recv.reset()
	arr := r.recv.record(total)
	sent := make([]posted, r.o.Submissions)
	m := startServerMeter(sv.pids(), r.dbPID, sv.others)
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	produced := make(chan error, 1)
	var insertWall time.Duration
	var bg sync.WaitGroup
	bg.Go(func() {
		err := r.post(runCtx, sv.srvs, start, sent, postPlan{form: func(int) string { return benchForm }, fanOut: r.o.Endpoints, rate: r.o.Rate})
		insertWall = time.Since(start)
		produced <- err
	})
	werr := r.waitSettled(runCtx, sv, name, total, produced)
	u := m.stop()
	stop()
	bg.Wait()
	if werr != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, werr)
	}

	lat, last, err := matchArrivals(sent, arr, total)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	ingest := ingestLatencies(sent)
	if ok := r.recv.ok.Load(); ok != int64(total) {
		return Phase{}, fmt.Errorf("%s: the receiver verified %d requests for %d deliveries", name, ok, total)
	}
	wall := last.Sub(start)
	p = Phase{
		Name: name, Kind: KindHTTP, Messages: total, Wall: wall,
		Rate:    float64(total) / wall.Seconds(),
		Latency: "POST of the submission to the receiver holding the verified message", LatencySamples: len(lat),
		P50: percentile(lat, 50), P99: percentile(lat, 99), Max: percentile(lat, 100),
		IngestP50: percentile(ingest, 50), IngestP99: percentile(ingest, 99),
		InsertWall: insertWall,
		Received:   r.recv.ok.Load(),
		where:      sv.where,
	}
	p.setServerUsage(u, m.hwmReset)
	r.progress("%s: %d deliveries in %s, %.0f/s", name, total, wall.Round(time.Millisecond), p.Rate)
	return p, nil
}

// posted is one submission: when its POST began, when its 202 answer had
// been read, and the deliveries the server answered with.
type posted struct {
	at         time.Time
	accepted   time.Time
	deliveries []string
}

// ingestLatencies is, for every submission, its POST to its 202: what a
// form front end waits for, apart from what the delivery takes after.
func ingestLatencies(sent []posted) []time.Duration {
	out := make([]time.Duration, 0, len(sent))
	for _, s := range sent {
		if !s.accepted.IsZero() {
			out = append(out, s.accepted.Sub(s.at))
		}
	}
	return out
}

// postPlan says what post sends: submission i is for form(i) and must
// fan out to fanOut endpoints; rate, when positive, paces them.
type postPlan struct {
	form   func(i int) string
	fanOut int
	rate   float64
}

// post creates the submissions through the ingest route on r.o.Producers
// goroutines, as plan says, and notes each in sent. Submission i goes to
// serve i%len(srvs), as a load balancer taking turns would send it.
func (r *runner) post(ctx context.Context, srvs []*serveProc, start time.Time, sent []posted, plan postPlan) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.o.Producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(sent) {
					return
				}
				if plan.rate > 0 {
					at := start.Add(time.Duration(float64(i) / plan.rate * float64(time.Second)))
					if d := time.Until(at); d > 0 && !sleep(ctx, d) {
						return
					}
				}
				var res apiwire.IngestResult
				srv := srvs[i%len(srvs)]
				sent[i].at = time.Now()
				path := "/v1/forms/" + plan.form(i) + "/submissions"
				if err := srv.call(ctx, http.MethodPost, path, http.StatusAccepted, formData, &res); err != nil {
					cancel(fmt.Errorf("submission %d, to %s: %w", i, srv.name, err))
					return
				}
				sent[i].accepted = time.Now()
				if len(res.Deliveries) != plan.fanOut {
					cancel(fmt.Errorf("submission %d (form %s) fanned out to %d endpoints, want %d", i, plan.form(i), len(res.Deliveries), plan.fanOut))
					return
				}
				sent[i].deliveries = res.Deliveries
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// waitSettled returns once the receiver has every delivery and the server
// has recorded them all delivered. Like waitDelivered, it asks the server
// only near the end and every storeCheckEvery, so that waiting costs the
// measured processes nothing to speak of.
func (r *runner) waitSettled(ctx context.Context, sv served, name string, total int, produced <-chan error) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	lastCheck, lastReport := time.Now(), time.Now()
	for {
		select {
		case err := <-produced:
			if err != nil {
				return err
			}
			produced = nil
		case s := <-sv.exited:
			return fmt.Errorf("%s exited during the run (%v):\n%s", s.name, s.err, s.out)
		case <-ctx.Done():
			return fmt.Errorf("gave up after %d of %d deliveries reached the receiver: %w", r.recv.ok.Load(), total, context.Cause(ctx))
		case <-tick.C:
		}
		got := r.recv.ok.Load()
		if bad := r.recv.bad.Load(); bad > 0 {
			return fmt.Errorf("the receiver refused %d requests (bad signature or body)", bad)
		}
		if time.Since(lastReport) > 5*time.Second {
			lastReport = time.Now()
			r.progress("%s: %d of %d at the receiver", name, got, total)
		}
		periodic := time.Since(lastCheck) >= storeCheckEvery
		if (got < int64(total) || produced != nil) && !periodic {
			continue
		}
		lastCheck = time.Now()
		done, err := sv.first().settled(ctx, periodic || got >= int64(total))
		if err != nil {
			return err
		}
		if done && got >= int64(total) && produced == nil {
			return nil
		}
	}
}

// matchArrivals pairs every delivery the server answered with its arrival
// at the receiver and returns the latencies and the last arrival. Any
// delivery that did not arrive, arrived twice, or arrived without being
// created here makes the run's numbers meaningless, and is an error.
func matchArrivals(sent []posted, arr *arrivals, total int) ([]time.Duration, time.Time, error) {
	arr.mu.Lock()
	defer arr.mu.Unlock()
	if arr.again > 0 {
		return nil, time.Time{}, fmt.Errorf("%d deliveries reached the receiver more than once; a lease shorter than a send (or a failing receiver) makes the numbers meaningless", arr.again)
	}
	lat := make([]time.Duration, 0, total)
	var last time.Time
	for i, s := range sent {
		for _, id := range s.deliveries {
			at, ok := arr.at[id]
			if !ok {
				return nil, time.Time{}, fmt.Errorf("delivery %s of submission %d never reached the receiver", id, i)
			}
			lat = append(lat, at.Sub(s.at))
			if at.After(last) {
				last = at
			}
		}
	}
	if len(lat) != total || len(arr.at) != total {
		return nil, time.Time{}, fmt.Errorf("%d deliveries created and %d distinct ones received, want %d of each", len(lat), len(arr.at), total)
	}
	return lat, last, nil
}

// idle is the HTTP mode's idle phase: serve (every one of r.o.Serves)
// with one endpoint and no traffic, measured for r.o.Idle after it
// settles. With r.o.IdleWarm the one endpoint is for benchForm only, so
// that the warm-up reaches each endpoint exactly once.
func (r *runner) idle(ctx context.Context) (Phase, error) {
	var forms []string
	if r.o.IdleWarm {
		forms = []string{benchForm}
	}
	return r.withServe(ctx, PhaseIdle, 1, forms, r.measureIdle)
}

// measureIdle measures the idle serves for r.o.Idle, after warming them
// when r.o.IdleWarm says so.
func (r *runner) measureIdle(ctx context.Context, sv served) (Phase, error) {
	name := PhaseIdle
	var w warmth
	if r.o.IdleWarm {
		var err error
		if w, err = r.warm(ctx, sv); err != nil {
			return Phase{}, fmt.Errorf("%s: warming up: %w", name, err)
		}
	}
	r.recv.reset()
	if !sleep(ctx, settleOf(r.o.IdleWarm)) {
		return Phase{}, fmt.Errorf("%s: %w", name, context.Cause(ctx))
	}
	r.progress("%s: measuring for %s", name, r.o.Idle)
	m := startServerMeter(sv.pids(), r.dbPID, sv.others)
	start := time.Now()
	select {
	case <-time.After(r.o.Idle):
	case s := <-sv.exited:
		return Phase{}, fmt.Errorf("%s: %s exited while idle (%v):\n%s", name, s.name, s.err, s.out)
	case <-ctx.Done():
		return Phase{}, fmt.Errorf("%s: %w", name, context.Cause(ctx))
	}
	u := m.stop()
	p := Phase{
		Name: name, Kind: KindIdle, Wall: time.Since(start), Received: r.recv.ok.Load(),
		WarmEndpoints: w.endpoints, WarmWall: w.wall, where: sv.where,
	}
	if p.Received != 0 {
		return Phase{}, fmt.Errorf("%s: the receiver got %d requests from a server with no submissions left to deliver", name, p.Received)
	}
	p.setServerUsage(u, m.hwmReset)
	return p, nil
}

// warmth is what the warm-up did.
type warmth struct {
	// endpoints is how many endpoints were delivered to, each once.
	endpoints int
	// wall is from the first POST to the last verified arrival.
	wall time.Duration
}

// warm posts one submission for each endpoint's form, benchForm for the
// idle phase's own and otherForm(i) for registered endpoint i, from
// r.o.Producers goroutines across every serve, and waits until the
// receiver has verified every delivery, once, and the first serve has
// recorded them all delivered. Then the idle phase measures a serve that
// has just delivered to every endpoint it has: whatever it keeps per
// endpoint it has made, rather than an empty serve.
func (r *runner) warm(ctx context.Context, sv served) (warmth, error) {
	const name = "idle: warming up"
	n := r.o.Registered + 1
	form := func(i int) string {
		if i == 0 {
			return benchForm
		}
		return otherForm(i - 1)
	}
	r.recv.reset()
	arr := r.recv.record(n)
	sent := make([]posted, n)
	r.progress("%s: one submission to each of %d endpoints' forms", name, n)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	produced := make(chan error, 1)
	start := time.Now()
	var bg sync.WaitGroup
	bg.Go(func() { produced <- r.post(runCtx, sv.srvs, start, sent, postPlan{form: form, fanOut: 1}) })
	err := r.waitSettled(runCtx, sv, name, n, produced)
	stop()
	bg.Wait()
	if err != nil {
		return warmth{}, err
	}
	_, last, err := matchArrivals(sent, arr, n)
	if err != nil {
		return warmth{}, err
	}
	if ok := r.recv.ok.Load(); ok != int64(n) {
		return warmth{}, fmt.Errorf("the receiver verified %d requests for %d deliveries", ok, n)
	}
	w := warmth{endpoints: n, wall: last.Sub(start)}
	r.progress("%s: delivered to %d endpoints in %s", name, n, w.wall.Round(time.Millisecond))
	return w, nil
}

// otherBackends returns a function listing the PostgreSQL backends that
// serve other databases than fs's (none for SQLite), so that on a shared
// server other people's queries are not counted as this phase's database
// CPU. The server's own background processes (WAL writer, checkpointer)
// have no database and stay counted.
func otherBackends(ctx context.Context, fs *freshStore) (func() map[int]bool, func(), error) {
	if fs.dsn == "" {
		return nil, func() {}, nil
	}
	conn, err := pgx.Connect(ctx, fs.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the bench database to tell its backends from others: %w", err)
	}
	var mu sync.Mutex
	list := func() map[int]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[int]bool{}
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname IS NOT NULL AND datname <> current_database()`)
		if err != nil {
			return out
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return out
		}
		for _, pid := range pids {
			out[int(pid)] = true
		}
		return out
	}
	return list, func() { _ = conn.Close(context.WithoutCancel(ctx)) }, nil
}

// tail keeps the last max bytes written to it: serve's output, shown when
// it fails.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// randomHex is n random bytes in hex: the serve process's admin token.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
