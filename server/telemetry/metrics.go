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
	return &out, nil
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

// DeliveryCounts reads the deliveries in each state, and how many are due
// now, for the gauges. It runs on every collection (every scrape of
// /metrics), with a context that bounds it.
type DeliveryCounts func(ctx context.Context) (byState map[string]int64, due int64, err error)

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
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, statsTimeout)
		defer cancel()
		states, n, err := counts(ctx)
		if err != nil {
			return fmt.Errorf("telemetry: reading the delivery counts for %s: %w", MetricDeliveries, err)
		}
		for _, s := range slices.Sorted(maps.Keys(states)) {
			o.ObserveInt64(byState, states[s], metric.WithAttributes(MetricAttrState.String(s)))
		}
		o.ObserveInt64(due, n)
		return nil
	}, byState, due)
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
