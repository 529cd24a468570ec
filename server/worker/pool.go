// Package worker is the delivery loop of the core: it claims due deliveries
// in batches, signs each message, hands it to the endpoint's transport plugin,
// and records the outcome under the claim token. It owns the retry schedule
// and the shutdown rules. It never decides a state transition itself: the
// store enforces those in SQL, and this package only reports what happened.
//
// A send never outlives its claim: before a message goes out the worker
// checks that the lease covers the whole send deadline, and otherwise gives
// the claim back unspent. On shutdown it stops claiming, gives back claims it
// has not started, and lets in-flight sends finish by their deadline, which
// is inside the lease. Only a transport's delivered outcome marks a delivery
// delivered.
//
// An attempt is a request that went out, or may have: a plugin that crashed
// or hung mid-send is one. A claim that sends nothing (the message cannot be
// signed, the transport is unknown or its plugin is not running, the plugin
// refused before sending) records no attempt and spends no allowance; see
// unsent.
//
// Each claim that took deliveries is a span, the root of a trace of its
// own; each attempt is a span in the trace of the ingest request that made
// the event (a child of it, linked to its claim), and its trace id is stored
// with the attempt when it is sampled. The attempt's context goes to the
// plugin, so the plugin's spans and the receiver's traceparent join the
// submitter's trace.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hymical/hymical/internal/redact"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/retrypolicy"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// Store is what the worker needs of storage.Store.
type Store interface {
	DeliveryClaim(ctx context.Context, p storage.DeliveryClaimParams) ([]storage.Claim, error)
	DeliveryCompleteBatch(ctx context.Context, ps []storage.DeliveryCompleteParams) ([]storage.DeliveryCompleteResult, error)
	DeliveryRelease(ctx context.Context, p storage.DeliveryReleaseParams) (storage.Delivery, error)
	DeliveryFail(ctx context.Context, p storage.DeliveryFailParams) (storage.Delivery, error)
	AttemptRecordLate(ctx context.Context, p storage.AttemptRecordLateParams) (storage.Attempt, error)
	// Wakeups tells the claimer that a delivery may have become due, so
	// it claims at once instead of at its next poll.
	Wakeups(ctx context.Context) <-chan struct{}
}

// StoreObserver hears how a write to the store ended; nil is success.
type StoreObserver interface {
	Observe(err error)
}

// Sender moves one signed message through the named transport plugin by
// deadline. It reports every failure, a crashed or hung plugin included, as
// an Outcome, with NoRequest set when the message never went out: it never
// reached a plugin (unknown transport, plugin not running), or the plugin
// refused before sending.
type Sender interface {
	Send(ctx context.Context, plugin string, msg transport.Message, deadline time.Time) transport.Outcome
}

// Config tunes the pool. Zero fields take the defaults in DefaultConfig.
type Config struct {
	// Concurrency is how many sends may be in flight at once, and a
	// quarter of it more (at least one) for endpoints holding nothing else
	// (see dispatch).
	Concurrency int
	// EndpointShare is the fraction of the Concurrency senders one endpoint
	// may hold while other endpoints have due work (at least one sender);
	// 1 lets one endpoint hold them all. See fairShare for the policy.
	EndpointShare float64
	// BatchSize is the most deliveries claimed in one statement, and the
	// most claims queued for the senders.
	BatchSize int
	// Lease is how long a claim holds. It must outlast SendTimeout.
	Lease time.Duration
	// SendTimeout is the deadline of one send through the plugin, from the
	// moment it starts: the transport's connect and read timeouts plus a
	// margin for the plugin hop.
	SendTimeout time.Duration
	// PollInterval is how long the claimer waits for a wake-up, when
	// nothing was due, before it looks again anyway: the fallback that
	// finds expired leases and the deliveries whose wake-up it could not
	// hear (see storage.Store.Wakeups).
	PollInterval time.Duration
	// MaxCycleAttempts is the retry allowance.
	MaxCycleAttempts int
	Retry            RetrySchedule
	// EndpointRetry bounds the retry schedule an endpoint sets for itself.
	EndpointRetry retrypolicy.EndpointBounds
	// Disabler disables an endpoint whose receiver answered 410 Gone to
	// the claim's owner (endpoints.disable_on_gone); nil, the default,
	// leaves such endpoints enabled and records the 410 as the transport
	// classified it (the http plugin: permanent, as any other 4xx).
	Disabler EndpointDisabler
	// StoreHealth hears how the pool's writes to the store ended, so the
	// server can report a store that has run out of space (api.StoreHealth
	// does, on /readyz): every completion batch, and the failures of
	// claims, which add no rows. nil tells nobody.
	StoreHealth StoreObserver

	// TracerProvider makes the claim and attempt spans; nil means none.
	TracerProvider trace.TracerProvider
	// Metrics records attempts, send durations and claim-to-send times;
	// nil records nothing.
	Metrics *telemetry.Metrics
}

// DefaultPollInterval is how long an idle claimer waits before it looks
// again without a wake-up. Wake-ups bring what becomes due at once, and
// timed ones what a retry or a deferral of this process makes due later,
// so the poll only finds expired leases (which take a lease to expire
// anyway), what another process scheduled for later and did not live to
// claim, and what a PostgreSQL listener missed while it reconnected. Two
// seconds keeps that bounded while idle processes ask the database little.
const DefaultPollInterval = 2 * time.Second

// DefaultConfig is the pool's configuration when nothing is set: a lease of
// 60 s against a send deadline of 17 s (5 s connect + 10 s read + 2 s for the
// plugin hop).
func DefaultConfig() Config {
	return Config{
		Concurrency:   16,
		EndpointShare: DefaultEndpointShare,
		// Four senders' worth: draining a backlog of 10,000 on PostgreSQL
		// with 16 senders, 64 took 10-22 % more deliveries a second than
		// 16, at 3-13 % less CPU a delivery (docs/performance.md).
		BatchSize:        64,
		Lease:            60 * time.Second,
		SendTimeout:      17 * time.Second,
		PollInterval:     DefaultPollInterval,
		MaxCycleAttempts: storage.DefaultMaxCycleAttempts,
		Retry:            DefaultRetrySchedule(),
		EndpointRetry:    retrypolicy.DefaultEndpointBounds(),
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Concurrency == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.EndpointShare == 0 {
		c.EndpointShare = d.EndpointShare
	}
	if c.BatchSize == 0 {
		c.BatchSize = d.BatchSize
	}
	if c.Lease == 0 {
		c.Lease = d.Lease
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = d.SendTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = d.PollInterval
	}
	if c.MaxCycleAttempts == 0 {
		c.MaxCycleAttempts = d.MaxCycleAttempts
	}
	if c.Retry.Delays == nil {
		c.Retry = d.Retry
	}
	if c.EndpointRetry == (retrypolicy.EndpointBounds{}) {
		c.EndpointRetry = d.EndpointRetry
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	return c
}

// Validate checks the configuration after defaults are applied.
func (c Config) Validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("worker concurrency must be at least 1, got %d", c.Concurrency)
	case c.BatchSize < 1:
		return fmt.Errorf("worker batch size must be at least 1, got %d", c.BatchSize)
	case !(c.EndpointShare > 0 && c.EndpointShare <= 1):
		return fmt.Errorf("worker endpoint share must be more than 0 and at most 1, got %g", c.EndpointShare)
	case c.SendTimeout <= 0:
		return fmt.Errorf("send timeout must be positive, got %s", c.SendTimeout)
	case c.Lease <= c.SendTimeout:
		return fmt.Errorf("worker lease %s must outlast the send deadline %s (connect + read timeout + plugin margin), or another worker will reclaim deliveries still in flight: raise the lease or lower the timeouts", c.Lease, c.SendTimeout)
	case c.PollInterval <= 0:
		return fmt.Errorf("poll interval must be positive, got %s", c.PollInterval)
	case c.MaxCycleAttempts < 1:
		return fmt.Errorf("retry allowance must be at least 1, got %d", c.MaxCycleAttempts)
	}
	if err := c.EndpointRetry.Validate(); err != nil {
		return err
	}
	return c.Retry.Validate()
}

// Pool claims and sends deliveries until its context ends.
type Pool struct {
	store  Store
	sender Sender
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer
	// traced is false with the no-op provider, so that tracing off costs
	// not even the attributes' allocations.
	traced  bool
	metrics *telemetry.Metrics
	now     func() time.Time
	share   *fairShare
	// freed wakes the claimer when a claim ends while it waits after a
	// claim the fair share may have left due deliveries behind in: now
	// there is room for one.
	freed chan struct{}
}

// New checks cfg and returns a pool; Run starts it.
func New(store Store, sender Sender, cfg Config, log *slog.Logger) (*Pool, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pool{
		store: store, sender: sender, cfg: cfg, log: log, now: time.Now,
		tracer: cfg.TracerProvider.Tracer(telemetry.ScopeName), traced: !isNoop(cfg.TracerProvider), metrics: cfg.Metrics,
		share: newFairShare(cfg.Concurrency, cfg.BatchSize, cfg.EndpointShare, time.Now),
		freed: make(chan struct{}, 1),
	}, nil
}

func isNoop(tp trace.TracerProvider) bool {
	_, noop := tp.(tracenoop.TracerProvider)
	return noop
}

// queued is one claim waiting for a sender, with the claim's span context
// and when it was claimed.
type queued struct {
	ctx   context.Context
	claim storage.Claim
	at    time.Time
}

// Run claims and sends until ctx ends, then gives back what it had not
// started, waits for in-flight sends to finish and be recorded, and returns.
//
// Concurrency senders take claims from a queue that holds at most one
// batch; the claimer tops the queue up once it is half empty, so claims
// are large (one statement for many rows) while no claim waits longer than
// it takes the senders to work through one batch. A claim that would wait
// so long that its lease could not cover the send is given back unspent
// (see process). A sender does not wait for its outcome to be written: it
// hands it over (see recorder) and takes its next claim, and one completer
// records whatever outcomes have arrived in one fenced batch, one
// transaction for many attempts.
func (p *Pool) Run(ctx context.Context) error {
	// Recording outlives ctx, so that a request already on the wire has its
	// answer written while the process stops, but by one lease at most: by
	// then its claim has expired and been taken over anyway, and a database
	// that stopped answering must not keep the process from exiting.
	record, stopRecording := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRecording()
	go func() {
		select {
		case <-ctx.Done():
		case <-record.Done():
			return
		}
		grace := time.NewTimer(p.cfg.Lease)
		defer grace.Stop()
		select {
		case <-grace.C:
			stopRecording()
		case <-record.Done():
		}
	}()

	d := newDispatch(p.cfg.Concurrency)
	// taken wakes the claimer when a sender takes a claim off the queue.
	taken := make(chan struct{}, 1)
	rec := &recorder{done: make(chan completion), slots: make(chan struct{}, 2*p.cfg.Concurrency)}

	var completer sync.WaitGroup
	completer.Go(func() { p.completeLoop(record, rec.done) })
	var senders sync.WaitGroup
	for range p.cfg.Concurrency + reserveOf(p.cfg.Concurrency) {
		senders.Go(func() {
			for {
				c, ok := d.take()
				if !ok {
					return
				}
				select {
				case taken <- struct{}{}:
				default:
				}
				p.process(ctx, c.ctx, c.claim, c.at, rec)
				d.done(c.claim.Delivery.EndpointID)
			}
		})
	}
	defer func() {
		d.close()
		senders.Wait()
		rec.wg.Wait()
		close(rec.done)
		completer.Wait()
	}()

	// Subscribed before the first claim, so nothing that becomes due
	// after it goes unheard.
	wake := p.store.Wakeups(ctx)
	backoff := p.cfg.PollInterval
	low := p.cfg.BatchSize / 2
	var lastClaim time.Time
	var lastTook time.Duration
	// With the share off, claims take the oldest due whoever they go to:
	// there are no newcomers to claim for apart.
	newcomers := wake
	if p.cfg.EndpointShare >= 1 {
		newcomers = nil
	}
	// newcomersDue fires when a claim for the endpoints holding nothing
	// here is to be made; nil while none is.
	var newcomersDue <-chan time.Time
	for {
		for d.waitingCount() > low {
			select {
			case <-taken:
			case <-newcomers:
				// Something became due while the senders have plenty to
				// do. If the queue does not drain soon (a claim of the
				// main loop would take it), claim what endpoints holding
				// nothing here have due, so that it waits for its turn at
				// a sender, not for the queue to drain.
				if newcomersDue == nil {
					newcomersDue = time.After(p.newcomerGap(lastClaim, lastTook))
				}
			case <-newcomersDue:
				newcomersDue = nil
				if gap := p.newcomerGap(lastClaim, lastTook); gap > 0 {
					// A claim was made meanwhile: wait from it.
					newcomersDue = time.After(gap)
					continue
				}
				lastClaim = p.now()
				lastTook = p.claimNewcomers(ctx, record, d)
			case <-ctx.Done():
				return nil
			}
		}
		// The claim below takes what the newcomers' would have.
		newcomersDue = nil
		if ctx.Err() != nil {
			return nil
		}
		n := p.cfg.BatchSize - d.waitingCount()
		claimStart := p.now()
		// The claim statement is not cut short by shutdown: cancelled
		// midway, it could commit claims this process never hears of, and
		// those would wait out their lease. Claims that arrive after
		// shutdown began are given back unspent by the senders.
		stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Lease)
		ended := p.share.endedCount()
		claims, capped, err := p.claim(stmtCtx, n)
		cancel()
		at := p.now()
		claimCtx := p.claimSpan(record, n, claims, err, claimStart, at)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The database is away, or full: nothing is lost (every
			// delivery is still in it), so wait and try again, backing off
			// to a cap.
			p.observe(err)
			p.log.Error("claiming deliveries failed; retrying", "error", err, "retry_in", backoff)
			backoff = min(backoff*2, 30*time.Second)
			if !sleep(ctx, backoff) {
				return nil
			}
			continue
		}
		backoff = p.cfg.PollInterval
		lastClaim, lastTook = claimStart, at.Sub(claimStart)
		d.add(queuedClaims(claimCtx, claims, at))
		// A full claim may have left more behind: claim again at once. A
		// short one drained what was due, but for what the fair share
		// kept back: wait for a wake-up, the end of a claim when the share
		// kept some back, or the poll. Each brings one claim, so however
		// many arrive the claimer never spins.
		if len(claims) >= n {
			continue
		}
		if p.share.waiting(capped, ended) {
			// A claim ended while this one read the rooms from before.
			continue
		}
		if !p.idle(ctx, wake, claimStart, at.Sub(claimStart)) {
			return nil
		}
	}
}

// reserveOf is how many senders a pool of concurrency has on top of it,
// for endpoints holding nothing else, none in flight and no other claim
// waiting (see dispatch): a quarter, at least one.
func reserveOf(concurrency int) int { return max(1, concurrency/4) }

// queuedClaims are claims as they wait for a sender: with the claim's span
// context and when they were claimed.
func queuedClaims(ctx context.Context, claims []storage.Claim, at time.Time) []queued {
	out := make([]queued, len(claims))
	for i, c := range claims {
		out[i] = queued{ctx: ctx, claim: c, at: at}
	}
	return out
}

// newcomerWait is how long after the last claim, while the senders' queue
// stays more than half full, a wake-up brings a claim for the endpoints
// holding nothing here. When the senders drain the queue quickly, the main
// loop's next claim comes first and takes their deliveries, so a stream of
// submissions costs no claims apart; when they do not (receivers that take
// their time), newcomers wait this long at most for a claim of their own.
const newcomerWait = 50 * time.Millisecond

// newcomerGap is how long from now a claim for the newcomers waits after a
// claim that started at last and took took: newcomerWait, and at least
// claimGapFactor times took, as idle spaces claims.
func (p *Pool) newcomerGap(last time.Time, took time.Duration) time.Duration {
	return max(newcomerWait, claimGapFactor*took) - p.now().Sub(last)
}

// claimNewcomers claims, while the senders' queue is more than half full,
// what the endpoints that hold no claims in this process have due (see
// fairShare.newcomerShare), up to half a batch and at most two batches
// queued in all, and queues it for the senders. It returns how long the
// claim took. A claim that fails is logged; the next claim of the main
// loop tries again.
func (p *Pool) claimNewcomers(ctx, record context.Context, d *dispatch) time.Duration {
	n := min(max(1, p.cfg.BatchSize/2), 2*p.cfg.BatchSize-d.waitingCount())
	if n <= 0 {
		return 0
	}
	start := p.now()
	stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Lease)
	claims, err := p.store.DeliveryClaim(stmtCtx, storage.DeliveryClaimParams{Limit: n, Lease: p.cfg.Lease, Share: p.share.newcomerShare()})
	cancel()
	at := p.now()
	claimCtx := p.claimSpan(record, n, claims, err, start, at)
	if err != nil {
		if ctx.Err() == nil {
			p.observe(err)
			p.log.Error("claiming deliveries of endpoints holding none failed; the next claim tries again", "error", err)
		}
		return at.Sub(start)
	}
	p.share.claimed(claims)
	d.add(queuedClaims(claimCtx, claims, at))
	return at.Sub(start)
}

// minClaimGap is the least time between the starts of two claims that a
// wake-up brings. Under a stream of submissions each would otherwise claim
// a delivery or two, every claim a write transaction that, on SQLite,
// takes the one writer from the creates and completions; waiting this
// long lets a few gather per claim, and adds at most this much latency.
const minClaimGap = 5 * time.Millisecond

// claimGapFactor keeps the claims a wake-up brings to at most about a
// third of the time: the gap after a claim is at least this many times
// as long as that claim took, so on SQLite, whose one writer also takes
// the creates and completions, a slow claim is followed by a longer wait.
const claimGapFactor = 3

// idle waits, after a claim that found less than it asked for and started
// at last, until something may be due: a wake-up from the store, the end of
// a claim when the fair share kept some back, or the poll interval
// passing; then at least until minClaimGap, or claimGapFactor times took
// (how long that claim took), after last. It returns false when ctx ends.
func (p *Pool) idle(ctx context.Context, wake <-chan struct{}, last time.Time, took time.Duration) bool {
	poll := time.NewTimer(p.cfg.PollInterval)
	defer poll.Stop()
	select {
	case <-wake:
	case <-p.freed:
	case <-poll.C:
	case <-ctx.Done():
		return false
	}
	if gap := max(minClaimGap, claimGapFactor*took) - p.now().Sub(last); gap > 0 {
		return sleep(ctx, gap)
	}
	return true
}

// claim claims up to n deliveries within the endpoints' fair share, in
// one claim that tops what the rooms leave of it up from the quick
// endpoints: with nothing else due, one endpoint may use every sender.
// The claims count as held from here until process is done with them.
// capped reports whether a short claim may have left due deliveries
// behind: an endpoint had no room, or filled what it was given.
func (p *Pool) claim(ctx context.Context, n int) (claims []storage.Claim, capped bool, err error) {
	if p.cfg.EndpointShare >= 1 {
		// The share is off: the oldest due, whoever they go to.
		claims, err = p.store.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: n, Lease: p.cfg.Lease})
		return claims, false, err
	}
	share := p.share.claimShare()
	claims, err = p.store.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: n, Lease: p.cfg.Lease, Share: share})
	if err != nil {
		return nil, false, err
	}
	// Before the claims count as held: share's Idle lookup answers for
	// endpoints as they were when it was made.
	capped = len(claims) < n && filled(share, claims)
	p.share.claimed(claims)
	return claims, capped, nil
}

// recorder records outcomes off the senders' path: a sender hands its
// outcome over and takes its next claim while the completer writes. slots
// bounds the outcomes waiting to be written, so a slow database slows the
// senders down instead of piling claims up in memory.
type recorder struct {
	done  chan completion
	slots chan struct{}
	wg    sync.WaitGroup
}

// record runs fn, which records one attempt, in its own goroutine once a
// slot is free.
func (r *recorder) record(fn func()) {
	r.slots <- struct{}{}
	r.wg.Go(func() {
		defer func() { <-r.slots }()
		fn()
	})
}

// completion is one owner's outcome on its way to the completer, with
// where to send the store's answer.
type completion struct {
	params storage.DeliveryCompleteParams
	reply  chan<- storage.DeliveryCompleteResult
}

// completeLoop records outcomes as they arrive: it gathers a batch (see
// gather) and writes it in one transaction. It returns when done is
// closed. ctx is Run's recording context, which outlives shutdown by a
// lease.
func (p *Pool) completeLoop(ctx context.Context, done <-chan completion) {
	limit := min(storage.MaxCompleteBatch, max(p.cfg.Concurrency, p.cfg.BatchSize))
	batch := make([]completion, 0, limit)
	params := make([]storage.DeliveryCompleteParams, 0, limit)
	for first := range done {
		batch = gather(append(batch[:0], first), done, limit, completeGatherGap, completeGatherMax)
		params = params[:0]
		for _, c := range batch {
			params = append(params, c.params)
		}
		res, err := p.store.DeliveryCompleteBatch(ctx, params)
		// A batch that failed for want of space is retried by each of its
		// senders (see finish), like any outage; one that wrote shows
		// there is room again.
		p.observe(err)
		for i, c := range batch {
			if err != nil {
				c.reply <- storage.DeliveryCompleteResult{Err: err}
				continue
			}
			c.reply <- res[i]
		}
	}
}

// completeGatherGap and completeGatherMax bound how long the completer
// waits for more outcomes before it writes. Part of what a completion
// costs the database is per statement (three a batch, and a transaction),
// so under load a batch written a moment later is cheaper by the outcomes
// that joined it: draining on PostgreSQL with 16 senders, batches went
// from 11 outcomes to 22 and the completion's statements from 88 to 64-73
// µs of database time a delivery. Nobody waits on the write to send: a
// sender hands its outcome over and goes on (see recorder), so the wait delays
// only when the attempt shows up in the history and when a retry or an
// ordered endpoint's next delivery is let go.
const (
	completeGatherGap = time.Millisecond
	completeGatherMax = 3 * time.Millisecond
)

// gather adds outcomes from done to batch while they arrive no more than
// gap apart, until batch holds limit, most has passed since the call, or
// done is closed. A lone outcome is written after one gap; a stream of
// them, after most.
func gather(batch []completion, done <-chan completion, limit int, gap, most time.Duration) []completion {
	if len(batch) >= limit {
		return batch
	}
	end := time.Now().Add(most)
	wait := time.NewTimer(min(gap, most))
	defer wait.Stop()
	for len(batch) < limit {
		select {
		case c, ok := <-done:
			if !ok {
				return batch
			}
			batch = append(batch, c)
			left := time.Until(end)
			if left <= 0 {
				return batch
			}
			wait.Reset(min(gap, left))
		case <-wait.C:
			return batch
		}
	}
	return batch
}

// complete hands one outcome to the completer and waits for the store's
// answer.
func complete(done chan<- completion, params storage.DeliveryCompleteParams) (storage.Delivery, storage.Attempt, error) {
	reply := make(chan storage.DeliveryCompleteResult, 1)
	done <- completion{params: params, reply: reply}
	r := <-reply
	return r.Delivery, r.Attempt, r.Err
}

// observe tells the configured StoreObserver how a write ended.
func (p *Pool) observe(err error) {
	if p.cfg.StoreHealth != nil {
		p.cfg.StoreHealth.Observe(err)
	}
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

// claimSpan records one claim statement as a span, the root of the trace
// its attempts join, and returns ctx carrying it. A poll that found nothing
// due makes no span: the claim loop polls all day, and an empty poll tells
// nobody anything. The span is written after the fact, with the claim's own
// start and end, because only then is it known whether it is worth having.
func (p *Pool) claimSpan(ctx context.Context, limit int, claims []storage.Claim, err error, start, end time.Time) context.Context {
	if !p.traced || err == nil && len(claims) == 0 {
		return ctx
	}
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.Delivery.ID
	}
	ctx, span := p.tracer.Start(ctx, telemetry.SpanClaim, trace.WithNewRoot(), trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			telemetry.AttrClaimLimit.Int(limit),
			telemetry.AttrClaimCount.Int(len(claims)),
			telemetry.AttrDeliveryIDs.StringSlice(ids),
		))
	if err != nil && ctx.Err() == nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "claiming deliveries failed")
	}
	span.End(trace.WithTimestamp(end))
	return ctx
}

// startAttempt starts the span of one attempt: a child of the ingest
// request that created the event, so an attempt made hours later is in the
// submission's trace, and linked to the claim in ctx. An event made with no
// trace context (the server's own, or ingest with tracing off) has its
// attempts under the claim instead.
func (p *Pool) startAttempt(ctx context.Context, c storage.Claim, ep storage.Endpoint, start time.Time) (context.Context, trace.Span) {
	if !p.traced {
		return p.tracer.Start(ctx, telemetry.SpanAttempt)
	}
	attrs := []attribute.KeyValue{
		telemetry.AttrDeliveryID.String(c.Delivery.ID),
		telemetry.AttrEndpointID.String(c.Delivery.EndpointID),
		telemetry.AttrEventID.String(c.Event.ID),
		telemetry.AttrEventType.String(c.Event.Type),
		// Tentative: a late attempt's number is only known once recorded.
		telemetry.AttrAttemptNumber.Int(c.Delivery.Attempts + 1),
		telemetry.AttrCycleAttempt.Int(c.Delivery.CycleAttempts + 1),
		telemetry.AttrTransport.String(ep.Transport),
	}
	if c.Event.SubmissionID != "" {
		attrs = append(attrs, telemetry.AttrSubmissionID.String(c.Event.SubmissionID))
	}
	if c.Event.FormID != "" {
		attrs = append(attrs, telemetry.AttrFormID.String(c.Event.FormID))
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if ingest := telemetry.SpanContextFromTraceParent(c.Event.TraceParent); ingest.IsValid() {
		// The submitter's trace: the attempt, the plugin's spans and the
		// receiver's all join the trace of the request that created the
		// event, so following one submission is following one trace. The
		// claim that took it, with the others of its batch, is a link.
		if claim := trace.SpanContextFromContext(ctx); claim.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{
				SpanContext: claim,
				Attributes:  []attribute.KeyValue{telemetry.AttrLinkKind.String(telemetry.LinkClaim)},
			}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, ingest)
	}
	return p.tracer.Start(ctx, telemetry.SpanAttempt, opts...)
}

// process sends one claimed delivery and records what happened. run is
// Run's context, which ends at shutdown; record carries the claim's span
// and outlives shutdown by a lease, so that a request that went out is
// recorded even while the process stops, or the history would under-count.
// claimed is when the claim was made.
func (p *Pool) process(run, record context.Context, c storage.Claim, claimed time.Time, rec *recorder) {
	log := deliveryLog{l: p.log, c: &c}
	ep := c.Endpoint
	defer func() {
		if p.share.done(c.Delivery.EndpointID) {
			select {
			case p.freed <- struct{}{}:
			default:
			}
		}
	}()
	if run.Err() != nil {
		p.release(record, log, c, 0)
		return
	}
	start := p.now()
	deadline := start.Add(p.cfg.SendTimeout)
	if c.Delivery.ClaimExpiresAt != nil && !deadline.Before(*c.Delivery.ClaimExpiresAt) {
		log.Warn("the lease would end before the send deadline; giving the claim back", "lease_ends", c.Delivery.ClaimExpiresAt, "deadline", deadline)
		p.release(record, log, c, 0)
		return
	}

	if !p.share.maySend(c.Delivery.EndpointID) {
		// Claimed while its endpoint was quick, which it no longer is, and
		// the slow endpoints have their share of the senders: back to the
		// queue unsent, for a sender within that share to take later.
		log.Info("its endpoint turned slow while the claim waited; giving it back unsent")
		p.release(record, log, c, 0)
		return
	}
	actx, span := p.startAttempt(record, c, ep, start)
	finish := func(o transport.Outcome) {
		end := p.now()
		rec.record(func() {
			defer span.End()
			p.finish(actx, log, c, ep.Transport, o, start, end, rec.done)
		})
	}
	msg, err := message(c, ep, start)
	msg.Deadline = deadline
	if err != nil {
		// Nothing can be sent until the endpoint is fixed: no request, so
		// no attempt; the delivery fails with why.
		rec.record(func() {
			defer span.End()
			p.unsent(actx, log, c, ep.Transport, telemetry.UnsentUnsignable, "signing failed: "+err.Error(), 0)
		})
		return
	}
	p.metrics.RecordClaimToSend(actx, ep.Transport, start.Sub(claimed))
	// The send runs to its deadline even during shutdown, so a request that
	// is already on the wire gets its answer recorded. The deadline goes to
	// the sender, not onto ctx: the sender enforces it and tells a plugin
	// that hung past it (and must be restarted) from a caller that gave up.
	// actx carries the attempt's span to the plugin and on to the receiver.
	p.share.sending(c.Delivery.EndpointID, start)
	out := p.sender.Send(actx, ep.Transport, msg, deadline)
	if out.Error != "" {
		// A plugin's words are recorded in the history, logged and traced,
		// and may quote the endpoint's URL (Go's *url.Error does) or one of
		// its secrets: whatever the plugin, they are masked first.
		out.Error = redact.TextFor(out.Error, redact.SecretsOf(ep.URL, ep.Config))
	}
	p.share.sent(c.Delivery.EndpointID, start, p.now().Sub(start), !out.NoRequest)
	if out.NoRequest && (out.Kind == transport.OutcomeRetryable || out.Kind == transport.OutcomePermanent) {
		kind := telemetry.UnsentRefused
		if out.Kind == transport.OutcomeRetryable {
			kind = telemetry.UnsentUnavailable
		}
		rec.record(func() {
			defer span.End()
			p.unsent(actx, log, c, ep.Transport, kind, out.Error, out.RetryAfter)
		})
		return
	}
	finish(out)
}

// maxUnsentDelay caps how long a delivery released without a request waits
// before it is due again, whatever its retry schedule says, so that it goes
// soon after its plugin is back.
const maxUnsentDelay = time.Minute

// unsent ends a claim that made no request: no attempt is recorded and no
// allowance spent, since an attempt is a request that went out. The reason
// is kept on the delivery. A passing cause (kind UnsentUnavailable: the
// plugin is not running, or said not now) gives the claim back, due again
// after the first step of the delivery's retry schedule (the plugin's
// retryAfter as a floor), at most maxUnsentDelay, however often it
// happens: the delivery did nothing wrong, so its schedule does not
// advance. A lasting one (the transport is unknown or refused the target,
// the message cannot be signed) fails the delivery, for an operator to fix
// and replay. A superseded worker's write changes nothing, and there is no
// request to record late.
func (p *Pool) unsent(ctx context.Context, log deliveryLog, c storage.Claim, transportName, kind, reason string, retryAfter time.Duration) {
	if strings.TrimSpace(reason) == "" {
		reason = fmt.Sprintf("transport %q made no request and gave no reason", transportName)
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrUnsent.String(kind))
		span.SetStatus(codes.Error, reason)
	}
	p.metrics.RecordUnsent(ctx, transportName, kind)
	if kind == telemetry.UnsentUnavailable {
		schedule, _ := p.retryFor(c.Endpoint)
		delay := min(schedule.Delay(1, retryAfter), maxUnsentDelay)
		err := p.retryStore(ctx, c, func() error {
			_, err := p.store.DeliveryRelease(ctx, storage.DeliveryReleaseParams{
				DeliveryID: c.Delivery.ID, Token: c.Token, Delay: delay, Reason: reason})
			return err
		})
		switch {
		case err == nil:
			log.Info("no request was made; the claim is given back unspent", "reason", reason, "retry_in", delay)
		case !errors.Is(err, storage.ErrClaimLost):
			log.Error("giving back a claim that made no request failed; it is retried when its lease expires", "reason", reason, "error", err)
			span.RecordError(err)
		}
		return
	}
	err := p.retryStore(ctx, c, func() error {
		_, err := p.store.DeliveryFail(ctx, storage.DeliveryFailParams{DeliveryID: c.Delivery.ID, Token: c.Token, Reason: reason})
		return err
	})
	switch {
	case err == nil:
		log.Warn("no request could be made; the delivery failed without an attempt: fix this and replay it", "reason", reason)
	case !errors.Is(err, storage.ErrClaimLost):
		log.Error("failing a delivery that could make no request failed; it is retried when its lease expires", "reason", reason, "error", err)
		span.RecordError(err)
	}
}

// message builds the signed message for one attempt. The secret is used
// here and goes no further: the plugin only gets the headers.
func message(c storage.Claim, ep storage.Endpoint, now time.Time) (transport.Message, error) {
	var secrets []string
	for _, s := range ep.Secrets {
		if s.ActiveAt(now) {
			secrets = append(secrets, s.Reveal())
		}
	}
	if len(secrets) == 0 {
		return transport.Message{}, errors.New("the endpoint has no active signing secret; rotate in a new one")
	}
	h, err := webhook.SignHeaders(c.Delivery.ID, now, c.Event.Payload, secrets...)
	if err != nil {
		return transport.Message{}, err
	}
	headers := make([]transport.Header, 0, len(h))
	for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
		headers = append(headers, transport.Header{Name: name, Value: h.Get(name)})
	}
	return transport.Message{
		DeliveryID: c.Delivery.ID,
		Attempt:    c.Delivery.Attempts + 1,
		Endpoint:   transport.Endpoint{URL: ep.URL, Config: ep.Config},
		Headers:    headers,
		Body:       c.Event.Payload,
	}, nil
}

// finish records the attempt under the claim token, or as a late attempt
// when the claim was superseded while the request was out. ctx carries the
// attempt's span, which finish completes from what was recorded.
func (p *Pool) finish(ctx context.Context, log deliveryLog, c storage.Claim, transportName string, o transport.Outcome, start, end time.Time, done chan<- completion) {
	span := trace.SpanFromContext(ctx)
	kind := storage.OutcomeKind(o.Kind)
	if !kind.Valid() {
		kind = storage.OutcomeRetryable
		o.Error = fmt.Sprintf("transport reported an unknown outcome %q", o.Kind)
	}
	status := o.StatusCode
	if status < 100 || status > 599 {
		status = 0
	}
	// With a Disabler (endpoints.disable_on_gone), 410 Gone says the
	// endpoint is gone, not that this message was wrong: the owner's
	// attempt is recorded retryable, then the endpoint is disabled and
	// the delivery kept, held, for when an operator enables it again.
	// Without one, a 410 is recorded as the transport classified it.
	reported, reportedError := kind, o.Error
	gone := status == http.StatusGone && kind != storage.OutcomeDelivered && p.cfg.Disabler != nil
	if gone {
		kind = storage.OutcomeRetryable
		o.Error = "the receiver answered 410 Gone: the endpoint is disabled and its deliveries kept until it is enabled again"
	}
	schedule, allowance := p.retryFor(c.Endpoint)
	traceID := telemetry.SampledTraceID(ctx)
	params := storage.DeliveryCompleteParams{
		DeliveryID:       c.Delivery.ID,
		Token:            c.Token,
		Outcome:          kind,
		HTTPStatus:       status,
		Error:            o.Error,
		StartedAt:        start,
		FinishedAt:       end,
		TraceID:          traceID,
		RetryDelay:       schedule.Delay(c.Delivery.CycleAttempts+1, o.RetryAfter),
		MaxCycleAttempts: allowance,
	}
	outcomeSpan(span, kind, status, o.Error)
	late := false
	defer func() { p.metrics.RecordAttempt(ctx, transportName, string(kind), late, end.Sub(start)) }()

	// One budget for recording this attempt, owner's write and late one
	// together, independent of the lease (see recordRetryFor).
	recordBy := p.now().Add(recordRetryFor)
	err := p.retryUntil(ctx, recordBy, func() error {
		d, a, err := complete(done, params)
		if err == nil {
			// A delivered attempt is the common case and the metrics and
			// the attempt history count it: at info it was one line per
			// delivery, most of the log. A failure, and the state it
			// leaves the delivery in, stays at info.
			level := slog.LevelInfo
			if a.Outcome == storage.OutcomeDelivered {
				level = slog.LevelDebug
			}
			log.log(level, "attempt recorded", []any{"attempt", a.Number, "outcome", a.Outcome, "http_status", a.HTTPStatus, "state", d.State})
		}
		if err == nil && span.IsRecording() {
			span.SetAttributes(telemetry.AttrAttemptNumber.Int(a.Number), telemetry.AttrLate.Bool(false),
				telemetry.AttrDeliveryState.String(string(d.State)))
		}
		return err
	})
	if !errors.Is(err, storage.ErrClaimLost) {
		if err != nil {
			log.Error("recording the attempt failed; the request it made is missing from the history, and once the lease expires the delivery is sent again", "error", err)
			span.RecordError(err)
			return
		}
		if gone {
			p.endpointGone(ctx, log, c.Endpoint.ID)
		}
		return
	}
	late = true
	// A late attempt changes nothing but the history: it is recorded as
	// the transport reported it, and its 410 disables nothing, since only
	// the current owner's outcome may act on the endpoint.
	kind, o.Error = reported, reportedError
	outcomeSpan(span, kind, status, o.Error)
	if span.IsRecording() {
		span.AddEvent(telemetry.EventClaimLost)
		span.SetAttributes(telemetry.AttrLate.Bool(true))
	}
	lateParams := storage.AttemptRecordLateParams{
		DeliveryID: c.Delivery.ID, Token: c.Token, Outcome: kind, HTTPStatus: status,
		Error: o.Error, StartedAt: start, FinishedAt: end, TraceID: traceID,
	}
	err = p.retryUntil(ctx, recordBy, func() error {
		a, err := p.store.AttemptRecordLate(ctx, lateParams)
		if err == nil {
			log.Warn("claim was superseded while the request was out; recorded as a late attempt", "attempt", a.Number, "outcome", a.Outcome)
		}
		if err == nil && span.IsRecording() {
			span.SetAttributes(telemetry.AttrAttemptNumber.Int(a.Number))
		}
		return err
	})
	if err != nil {
		log.Error("recording the late attempt failed; the request it made is missing from the history", "error", err)
		span.RecordError(err)
	}
}

// endpointGone disables the endpoint after its receiver answered 410 Gone
// to the claim's owner, once the owner's attempt is recorded: finish never
// calls it for a superseded worker. Several sends may see the 410; the
// disabler writes only once.
func (p *Pool) endpointGone(ctx context.Context, log deliveryLog, endpointID string) {
	if err := p.cfg.Disabler.DisableEndpoint(ctx, endpointID, storage.DisabledGone); err != nil {
		log.Error("the receiver answered 410 Gone but disabling the endpoint failed; the delivery will be retried", "error", err)
	}
}

// deliveryLog logs about one delivery. It adds the delivery's ids to each
// line it writes, where Logger.With would format them for every delivery,
// logged or not.
type deliveryLog struct {
	l *slog.Logger
	c *storage.Claim
}

func (d deliveryLog) Info(msg string, args ...any)  { d.log(slog.LevelInfo, msg, args) }
func (d deliveryLog) Warn(msg string, args ...any)  { d.log(slog.LevelWarn, msg, args) }
func (d deliveryLog) Error(msg string, args ...any) { d.log(slog.LevelError, msg, args) }

func (d deliveryLog) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if !d.l.Enabled(ctx, level) {
		return
	}
	d.l.Log(ctx, level, msg, append([]any{"delivery_id", d.c.Delivery.ID, "endpoint_id", d.c.Delivery.EndpointID}, args...)...)
}

// outcomeSpan sets the attempt span's outcome attributes and status: only
// a delivered outcome is Ok.
func outcomeSpan(span trace.Span, kind storage.OutcomeKind, status int, reason string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(telemetry.AttrOutcome.String(string(kind)))
	if status != 0 {
		span.SetAttributes(telemetry.AttrHTTPStatus.Int(status))
	}
	if kind == storage.OutcomeDelivered {
		span.SetStatus(codes.Ok, "")
		return
	}
	span.SetStatus(codes.Error, reason)
}

func (p *Pool) release(ctx context.Context, log deliveryLog, c storage.Claim, delay time.Duration) {
	err := p.retryStore(ctx, c, func() error {
		_, err := p.store.DeliveryRelease(ctx, storage.DeliveryReleaseParams{DeliveryID: c.Delivery.ID, Token: c.Token, Delay: delay})
		return err
	})
	if err != nil && !errors.Is(err, storage.ErrClaimLost) {
		log.Error("giving the claim back failed; it is retried when its lease expires", "error", err)
	}
}

// recordRetryFor bounds how long recording one attempt is retried after a
// write failed for a passing reason (a dropped connection, a database
// restarting or failing over). The request went out, so the history must
// have it, and the claim's lease is no bound here: a superseded worker's
// lease has usually run out already by the time it learns it is late, and
// an owner whose lease runs out while it retries still records, as owner
// if nobody took the delivery over meanwhile and as a late attempt if
// somebody did (the fence decides). Two minutes rides out a PostgreSQL
// restart or failover. On shutdown Run's recording context ends retrying
// sooner, one lease after the shutdown began, so a database that stopped
// answering does not keep the process from exiting.
const recordRetryFor = 2 * time.Minute

// retryStore retries a store write that failed for a reason other than the
// state machine's answer (a dropped connection, a restarting database) until
// the claim's lease would have expired anyway.
func (p *Pool) retryStore(ctx context.Context, c storage.Claim, write func() error) error {
	until := p.now().Add(p.cfg.Lease)
	if c.Delivery.ClaimExpiresAt != nil {
		until = *c.Delivery.ClaimExpiresAt
	}
	return p.retryUntil(ctx, until, write)
}

// retryUntil retries write, backing off from 100 ms to 2 s, until it
// succeeds, fails with the state machine's answer, would retry past until,
// or ctx ends.
func (p *Pool) retryUntil(ctx context.Context, until time.Time, write func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := write()
		if err == nil || errors.Is(err, storage.ErrClaimLost) || errors.Is(err, storage.ErrNotFound) ||
			errors.Is(err, storage.ErrInvalid) || errors.Is(err, storage.ErrClaimHeld) || !p.now().Add(wait).Before(until) {
			return err
		}
		if !sleep(ctx, wait) {
			return err
		}
		wait = min(wait*2, 2*time.Second)
	}
}
