package worker

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hymical/hymical/server/retrypolicy"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
)

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
	// hear (see storage.Claiming.Wakeups).
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
