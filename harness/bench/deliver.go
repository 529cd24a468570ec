package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hymical/hymical/server/event"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/server/worker"
	"github.com/hymical/hymical/storage"
)

// deliver is one end-to-end phase: a fresh store, the endpoints, the real
// worker pool sending through via, and the submissions, created while the
// pool runs (or before it starts, with Preload), until every delivery is
// recorded delivered.
func (r *runner) deliver(ctx context.Context, via string) (p Phase, err error) {
	name := "end to end: plugin"
	if via == TransportInProcess {
		name = "end to end: in-process"
	}
	fs, err := openFresh(ctx, r.o)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	defer fs.removeInto(ctx, name, &err)

	var sender worker.Sender
	switch via {
	case TransportPlugin:
		host, err := r.startHost(ctx)
		if err != nil {
			return Phase{}, err
		}
		defer host.Close()
		sender = host
	default:
		s, err := NewInProcess(ctx, pluginSettings())
		if err != nil {
			return Phase{}, err
		}
		sender = s
	}

	if _, err := r.createEndpoints(ctx, fs); err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}
	schema, err := fs.SchemaVersion(ctx)
	if err != nil {
		return Phase{}, err
	}
	pool, err := worker.New(fs, sender, r.o.Worker, r.o.Logger.With("component", "worker"))
	if err != nil {
		return Phase{}, err
	}

	var stats *pgStats
	if fs.dsn != "" {
		if stats = openPGStats(ctx, fs.dsn); stats != nil {
			defer stats.close(context.WithoutCancel(ctx))
		}
	}

	total := r.o.Deliveries()
	r.recv.reset()
	if stats != nil {
		if err := stats.reset(ctx); err != nil {
			return Phase{}, fmt.Errorf("%s: reset pg_stat_statements: %w", name, err)
		}
	}
	m := startMeter(r.dbPID)
	start := time.Now()
	var insertWall time.Duration
	var created usage
	if r.o.Preload {
		if err := r.produce(ctx, fs, start); err != nil {
			return Phase{}, fmt.Errorf("%s: %w", name, err)
		}
		insertWall = time.Since(start)
		created = m.stop()
		r.progress("%s: %d submissions created in %s; starting the pool", name, r.o.Submissions, insertWall.Round(time.Millisecond))
		start = time.Now()
	}

	runCtx, stop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	poolErr := make(chan error, 1)
	bg.Go(func() { poolErr <- pool.Run(runCtx) })
	bg.Go(func() {
		fleet.RunHeartbeat(runCtx, fs, fleet.NewWorker(schema, time.Now()), fleet.HeartbeatInterval, r.o.Logger)
	})
	stopPool := func() error {
		stop()
		bg.Wait()
		return <-poolErr
	}

	produced := make(chan error, 1)
	if r.o.Preload {
		produced <- nil
	} else {
		// In bg, so stopPool also waits for it and insertWall is written
		// before it is read.
		bg.Go(func() {
			err := r.produce(runCtx, fs, start)
			insertWall = time.Since(start)
			produced <- err
		})
	}
	werr := r.waitDelivered(runCtx, fs, name, total, produced)
	u := m.stop()
	if err := errors.Join(werr, stopPool()); err != nil {
		return Phase{}, fmt.Errorf("%s: %w", name, err)
	}

	var statements []Statement
	if stats != nil {
		if statements, err = stats.top(ctx, 12, total); err != nil {
			return Phase{}, fmt.Errorf("%s: read pg_stat_statements: %w", name, err)
		}
	}
	rb, err := r.readBack(ctx, fs, total)
	if err != nil {
		return Phase{}, fmt.Errorf("%s: read back: %w", name, err)
	}
	if dup := r.recv.ok.Load() - int64(total); dup != 0 || rb.retried != 0 {
		return Phase{}, fmt.Errorf("%s: the receiver got %d requests for %d deliveries and %d deliveries took more than one attempt; a lease shorter than a send (or a failing receiver) makes the numbers meaningless",
			name, r.recv.ok.Load(), total, rb.retried)
	}
	wall := rb.lastCompleted.Sub(start)
	p = Phase{
		Name: name, Kind: KindDeliver, Messages: total, Wall: wall,
		Rate:    float64(total) / wall.Seconds(),
		Latency: "submission created to attempt finished", LatencySamples: len(rb.sent),
		P50: percentile(rb.sent, 50), P99: percentile(rb.sent, 99),
		RecordedP50: percentile(rb.recorded, 50), RecordedP99: percentile(rb.recorded, 99),
		InsertWall: insertWall,
		Received:   r.recv.ok.Load(),
		Statements: statements,
		where:      fs.where,
	}
	if r.o.Preload {
		p.Latency = "submission created (all before the pool started) to attempt finished"
	}
	p.setUsage(u, m.hwmReset)
	if r.o.Preload {
		p.setDrainUsage(created, u)
	}
	r.progress("%s: %d deliveries in %s, %.0f/s", name, total, wall.Round(time.Millisecond), p.Rate)
	return p, nil
}

// produce creates the submissions on r.o.Producers goroutines, paced at
// r.o.Rate when it is set. Each goes through EventCreate, the call the
// ingest API makes, with the payload the API would build.
func (r *runner) produce(ctx context.Context, s storage.Store, start time.Time) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.o.Producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= r.o.Submissions {
					return
				}
				if r.o.Rate > 0 {
					at := start.Add(time.Duration(float64(i) / r.o.Rate * float64(time.Second)))
					if d := time.Until(at); d > 0 && !sleep(ctx, d) {
						return
					}
				}
				ev, err := event.Submission("form_bench", formData, time.Now())
				if err != nil {
					cancel(err)
					return
				}
				res, err := s.EventCreate(ctx, ev)
				if err != nil {
					cancel(fmt.Errorf("create submission %d: %w", i, err))
					return
				}
				if len(res.Deliveries) != r.o.Endpoints {
					cancel(fmt.Errorf("submission %d fanned out to %d endpoints, want %d", i, len(res.Deliveries), r.o.Endpoints))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitDelivered returns once every delivery is recorded delivered. It
// watches the receiver's count, which costs nothing, and asks the store
// only near the end and every storeCheckEvery, so the waiting does not load
// the database it measures: counting by state reads the whole index, which
// on a table of a million rows costs a good part of a second.
// storeCheckEvery is how often waitDelivered asks the store, for failed
// deliveries, before the receiver has seen every delivery.
const storeCheckEvery = 20 * time.Second

func (r *runner) waitDelivered(ctx context.Context, s storage.Store, name string, total int, produced <-chan error) error {
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
		if got < int64(total) && time.Since(lastCheck) < storeCheckEvery {
			continue
		}
		lastCheck = time.Now()
		st, err := s.DeliveryStats(ctx, time.Time{})
		if err != nil {
			return err
		}
		if n := st.ByState[storage.StateFailed]; n > 0 {
			return fmt.Errorf("%d deliveries failed; run with --log-level info to see why", n)
		}
		if st.ByState[storage.StateDelivered] == int64(total) {
			return nil
		}
		if got >= int64(total) {
			// The last outcomes are being recorded: look again soon.
			lastCheck = time.Time{}
		}
	}
}

// readBack is what the store says happened, read after the measured
// window so reading costs nothing measured.
type readBack struct {
	// sent is, for a sample of deliveries, submission created to the
	// delivered attempt's FinishedAt.
	sent []time.Duration
	// recorded is, for every delivery, created to completed_at.
	recorded      []time.Duration
	lastCompleted time.Time
	// retried counts deliveries with more than one attempt.
	retried int
}

func (r *runner) readBack(ctx context.Context, s storage.Store, total int) (readBack, error) {
	var rb readBack
	rb.recorded = make([]time.Duration, 0, total)
	stride := max(1, (total+r.o.LatencySample-1)/r.o.LatencySample)
	type sample struct {
		id      string
		created time.Time
	}
	var samples []sample
	cursor := ""
	for {
		page, err := s.DeliveryList(ctx, storage.DeliveryListParams{
			Filter: storage.DeliveryFilter{State: storage.StateDelivered}, Before: cursor, Limit: 1000,
		})
		if err != nil {
			return rb, err
		}
		for _, d := range page {
			if d.CompletedAt == nil {
				return rb, fmt.Errorf("delivery %s is delivered without a completed_at", d.ID)
			}
			rb.recorded = append(rb.recorded, d.CompletedAt.Sub(d.CreatedAt))
			if d.CompletedAt.After(rb.lastCompleted) {
				rb.lastCompleted = *d.CompletedAt
			}
			if d.Attempts != 1 {
				rb.retried++
			}
			if len(rb.recorded)%stride == 0 {
				samples = append(samples, sample{d.ID, d.CreatedAt})
			}
		}
		if len(page) < 1000 {
			break
		}
		cursor = page[len(page)-1].ID
	}
	if len(rb.recorded) != total {
		return rb, fmt.Errorf("%d deliveries are delivered, want %d", len(rb.recorded), total)
	}

	rb.sent = make([]time.Duration, len(samples))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(samples) {
					return
				}
				as, err := s.AttemptList(ctx, samples[i].id)
				if err == nil && (len(as) == 0 || as[len(as)-1].Outcome != storage.OutcomeDelivered) {
					err = fmt.Errorf("delivery %s has no delivered attempt", samples[i].id)
				}
				if err != nil {
					errs <- err
					return
				}
				rb.sent[i] = as[len(as)-1].FinishedAt.Sub(samples[i].created)
			}
		})
	}
	wg.Wait()
	close(errs)
	return rb, <-errs
}

// createEndpoints makes the phase's r.o.Endpoints endpoints, each to its
// own path on the receiver, signing with r.secret, and returns their ids.
func (r *runner) createEndpoints(ctx context.Context, s storage.Store) ([]string, error) {
	ids := make([]string, 0, r.o.Endpoints)
	for i := range r.o.Endpoints {
		ep, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
			Transport:   "http",
			URL:         r.recv.url(i),
			Secrets:     []storage.Secret{storage.NewSecret(r.secret, nil)},
			Description: "hymical bench receiver",
		}})
		if err != nil {
			return nil, fmt.Errorf("create endpoint: %w", err)
		}
		ids = append(ids, ep.ID)
	}
	return ids, nil
}
