package telemetry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Metrics are the instruments the worker pool records into. A nil *Metrics
// records nothing, so code that was given none needs no checks.
type Metrics struct {
	attempts     metric.Int64Counter
	late         metric.Int64Counter
	sendDuration metric.Float64Histogram
	claimToSend  metric.Float64Histogram
	disables     metric.Int64Counter
	unsent       metric.Int64Counter
}

// NewMetrics creates the worker's instruments on mp.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	m := mp.Meter(ScopeName)
	var (
		out Metrics
		err error
	)
	if out.attempts, err = m.Int64Counter(MetricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts recorded, late ones included, by outcome and transport.")); err != nil {
		return nil, instrumentError(MetricAttempts, err)
	}
	if out.late, err = m.Int64Counter(MetricAttemptsLate, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts recorded late, after their claim was superseded while the request was out, by transport.")); err != nil {
		return nil, instrumentError(MetricAttemptsLate, err)
	}
	if out.sendDuration, err = m.Float64Histogram(MetricSendDuration, metric.WithUnit("s"),
		metric.WithDescription("How long one send through a transport plugin took, by outcome and transport."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...)); err != nil {
		return nil, instrumentError(MetricSendDuration, err)
	}
	if out.claimToSend, err = m.Float64Histogram(MetricClaimToSend, metric.WithUnit("s"),
		metric.WithDescription("Time from a delivery's claim to the start of its send, by transport."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...)); err != nil {
		return nil, instrumentError(MetricClaimToSend, err)
	}
	if out.disables, err = m.Int64Counter(MetricEndpointDisables, metric.WithUnit("{endpoint}"),
		metric.WithDescription("Endpoints this process disabled on its own, by reason: gone (410) or failing.")); err != nil {
		return nil, instrumentError(MetricEndpointDisables, err)
	}
	if out.unsent, err = m.Int64Counter(MetricClaimsUnsent, metric.WithUnit("{claim}"),
		metric.WithDescription("Claims ended without a request, so with no attempt recorded, by transport and reason: unavailable (released), refused or unsignable (failed).")); err != nil {
		return nil, instrumentError(MetricClaimsUnsent, err)
	}
	return &out, nil
}

// SeedSeries adds zero to every series of the counters this process can
// know in advance: each outcome and late attempt per transport, each kind
// of unsent claim per transport, and each reason an endpoint is disabled.
// A counter otherwise appears only when first used, and an alert such as
// rate(hymical_attempts_late_total[5m]) > 0 would need absent() to tell
// "none yet" from "not scraped".
func (m *Metrics) SeedSeries(ctx context.Context, transports, outcomes, disableReasons []string) {
	if m == nil {
		return
	}
	for _, t := range transports {
		tr := MetricAttrTransport.String(t)
		for _, o := range outcomes {
			m.attempts.Add(ctx, 0, metric.WithAttributes(MetricAttrOutcome.String(o), tr))
		}
		m.late.Add(ctx, 0, metric.WithAttributes(tr))
		for _, r := range []string{UnsentUnavailable, UnsentRefused, UnsentUnsignable} {
			m.unsent.Add(ctx, 0, metric.WithAttributes(tr, MetricAttrReason.String(r)))
		}
	}
	for _, r := range disableReasons {
		m.disables.Add(ctx, 0, metric.WithAttributes(MetricAttrReason.String(r)))
	}
}

func instrumentError(name string, err error) error {
	return fmt.Errorf("telemetry: creating the instrument %s: %w", name, err)
}

// RecordAttempt counts one recorded attempt and how long its send took.
func (m *Metrics) RecordAttempt(ctx context.Context, transport, outcome string, late bool, took time.Duration) {
	if m == nil {
		return
	}
	attrs := metric.WithAttributes(MetricAttrOutcome.String(outcome), MetricAttrTransport.String(transport))
	m.attempts.Add(ctx, 1, attrs)
	m.sendDuration.Record(ctx, took.Seconds(), attrs)
	if late {
		m.late.Add(ctx, 1, metric.WithAttributes(MetricAttrTransport.String(transport)))
	}
}

// RecordClaimToSend records the time from a delivery's claim to its send.
func (m *Metrics) RecordClaimToSend(ctx context.Context, transport string, lag time.Duration) {
	if m == nil {
		return
	}
	m.claimToSend.Record(ctx, max(lag, 0).Seconds(), metric.WithAttributes(MetricAttrTransport.String(transport)))
}

// RecordUnsent counts a claim ended without a request; reason is one of
// the Unsent* kinds.
func (m *Metrics) RecordUnsent(ctx context.Context, transport, reason string) {
	if m == nil {
		return
	}
	m.unsent.Add(ctx, 1, metric.WithAttributes(MetricAttrTransport.String(transport), MetricAttrReason.String(reason)))
}

// RecordEndpointDisabled counts an endpoint this process disabled.
func (m *Metrics) RecordEndpointDisabled(ctx context.Context, reason string) {
	if m == nil {
		return
	}
	m.disables.Add(ctx, 1, metric.WithAttributes(MetricAttrReason.String(reason)))
}

// ConnectionCounters count what the API's connection limits did. A nil
// *ConnectionCounters counts nothing.
type ConnectionCounters struct {
	refused, evicted metric.Int64Counter
}

// NewConnectionCounters creates the connection counters on mp, with a
// series at zero for each of limits, so an alert on them needs no
// absent().
func NewConnectionCounters(mp metric.MeterProvider, limits []string) (*ConnectionCounters, error) {
	m := mp.Meter(ScopeName)
	var (
		out ConnectionCounters
		err error
	)
	if out.refused, err = m.Int64Counter(MetricConnectionsRefused, metric.WithUnit("{connection}"),
		metric.WithDescription("API connections closed as soon as they were accepted, because a connection limit was reached and every connection was busy, by limit: total or address.")); err != nil {
		return nil, instrumentError(MetricConnectionsRefused, err)
	}
	if out.evicted, err = m.Int64Counter(MetricConnectionsEvicted, metric.WithUnit("{connection}"),
		metric.WithDescription("Waiting API connections (no request sent yet, or idle) closed to make room for a new one at a connection limit, by limit: total or address.")); err != nil {
		return nil, instrumentError(MetricConnectionsEvicted, err)
	}
	for _, l := range limits {
		attrs := metric.WithAttributes(MetricAttrLimit.String(l))
		out.refused.Add(context.Background(), 0, attrs)
		out.evicted.Add(context.Background(), 0, attrs)
	}
	return &out, nil
}

// Refused counts a connection refused at limit.
func (c *ConnectionCounters) Refused(limit string) {
	if c != nil {
		c.refused.Add(context.Background(), 1, metric.WithAttributes(MetricAttrLimit.String(limit)))
	}
}

// Evicted counts a waiting connection closed to make room at limit.
func (c *ConnectionCounters) Evicted(limit string) {
	if c != nil {
		c.evicted.Add(context.Background(), 1, metric.WithAttributes(MetricAttrLimit.String(limit)))
	}
}

// DeliveryGauges are the delivery counts the gauges show.
type DeliveryGauges struct {
	ByState   map[string]int64
	Due, Held int64
	// OldestDue is since when the longest-waiting due delivery has been
	// due; zero when none is.
	OldestDue time.Time
}

// DeliveryCounts reads the deliveries in each state, how many are due now
// and how many are held, for the gauges. It runs on every collection (every
// scrape of /metrics), with a context that bounds it.
type DeliveryCounts func(ctx context.Context) (DeliveryGauges, error)

// statsTimeout bounds one read of the delivery counts, so a slow database
// makes a scrape miss the gauges rather than hang.
const statsTimeout = 5 * time.Second

// ObserveDeliveries registers the MetricDeliveries and MetricDeliveriesDue
// gauges on mp, read through counts. A failed read reports nothing for that
// collection.
func ObserveDeliveries(mp metric.MeterProvider, counts DeliveryCounts) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	byState, err := m.Int64ObservableGauge(MetricDeliveries, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries in the database in each state."))
	if err != nil {
		return nil, instrumentError(MetricDeliveries, err)
	}
	due, err := m.Int64ObservableGauge(MetricDeliveriesDue, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries claimable now: the depth of the queue."))
	if err != nil {
		return nil, instrumentError(MetricDeliveriesDue, err)
	}
	held, err := m.Int64ObservableGauge(MetricDeliveriesHeld, metric.WithUnit("{delivery}"),
		metric.WithDescription("Pending deliveries held back: their endpoint is disabled, or they wait their turn at an ordered endpoint."))
	if err != nil {
		return nil, instrumentError(MetricDeliveriesHeld, err)
	}
	oldest, err := m.Float64ObservableGauge(MetricDeliveriesOldestDue, metric.WithUnit("s"),
		metric.WithDescription("How long the longest-waiting claimable delivery has been due; 0 when none is."))
	if err != nil {
		return nil, instrumentError(MetricDeliveriesOldestDue, err)
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, statsTimeout)
		defer cancel()
		g, err := counts(ctx)
		if err != nil {
			return fmt.Errorf("telemetry: reading the delivery counts for %s: %w", MetricDeliveries, err)
		}
		for _, s := range slices.Sorted(maps.Keys(g.ByState)) {
			o.ObserveInt64(byState, g.ByState[s], metric.WithAttributes(MetricAttrState.String(s)))
		}
		o.ObserveInt64(due, g.Due)
		o.ObserveInt64(held, g.Held)
		var age float64
		if !g.OldestDue.IsZero() {
			// PostgreSQL's clock says when it became due, this process's
			// when it is now: a skew between them is clamped at zero
			// rather than shown as a negative wait.
			age = max(time.Since(g.OldestDue).Seconds(), 0)
		}
		o.ObserveFloat64(oldest, age)
		return nil
	}, byState, due, held, oldest)
}

// ObserveDisabledEndpoints registers the MetricEndpointsDisabled gauge on
// mp, read through count, which reports the disabled endpoints by reason.
// Every one of reasons is reported, at zero when count does not name it, so
// the series exist before the first endpoint is disabled.
func ObserveDisabledEndpoints(mp metric.MeterProvider, reasons []string, count func(ctx context.Context) (map[string]int64, error)) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	disabled, err := m.Int64ObservableGauge(MetricEndpointsDisabled, metric.WithUnit("{endpoint}"),
		metric.WithDescription("Disabled endpoints, by reason: operator, gone (410) or failing."))
	if err != nil {
		return nil, instrumentError(MetricEndpointsDisabled, err)
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, statsTimeout)
		defer cancel()
		byReason, err := count(ctx)
		if err != nil {
			return fmt.Errorf("telemetry: counting disabled endpoints for %s: %w", MetricEndpointsDisabled, err)
		}
		shown := make(map[string]int64, len(reasons)+len(byReason))
		for _, r := range reasons {
			shown[r] = 0
		}
		maps.Copy(shown, byReason)
		for _, r := range slices.Sorted(maps.Keys(shown)) {
			o.ObserveInt64(disabled, shown[r], metric.WithAttributes(MetricAttrReason.String(r)))
		}
		return nil
	}, disabled)
}

// ObservePluginRestarts registers the MetricPluginRestarts counter on mp,
// read through restarts, which reports each plugin's restarts so far.
func ObservePluginRestarts(mp metric.MeterProvider, restarts func() map[string]int) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	c, err := m.Int64ObservableCounter(MetricPluginRestarts, metric.WithUnit("{restart}"),
		metric.WithDescription("Restarts of each transport plugin after it crashed, hung or exited."))
	if err != nil {
		return nil, instrumentError(MetricPluginRestarts, err)
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		rs := restarts()
		for _, name := range slices.Sorted(maps.Keys(rs)) {
			o.ObserveInt64(c, int64(rs[name]), metric.WithAttributes(MetricAttrPlugin.String(name)))
		}
		return nil
	}, c)
}

// ObservePluginsUp registers the MetricPluginUp gauge on mp, read through
// up, which reports whether each plugin's process is running now.
func ObservePluginsUp(mp metric.MeterProvider, up func() map[string]bool) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	g, err := m.Int64ObservableGauge(MetricPluginUp,
		metric.WithDescription("1 while a transport plugin's process runs, 0 while it is down and its deliveries wait."))
	if err != nil {
		return nil, instrumentError(MetricPluginUp, err)
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		us := up()
		for _, name := range slices.Sorted(maps.Keys(us)) {
			var v int64
			if us[name] {
				v = 1
			}
			o.ObserveInt64(g, v, metric.WithAttributes(MetricAttrPlugin.String(name)))
		}
		return nil
	}, g)
}
