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
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

// Store is what the worker needs of the store: the Claiming role less
// the one-at-a-time DeliveryComplete, since it completes in batches.
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

	d := newDispatch(p.cfg.Concurrency, p.share.lastTook)
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

	p.claimLoop(ctx, record, d, taken)
	return nil
}

// reserveOf is how many senders a pool of concurrency has on top of it,
// for endpoints holding nothing else, none in flight and no other claim
// waiting (see dispatch): a quarter, at least one.
func reserveOf(concurrency int) int { return max(1, concurrency/4) }

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
