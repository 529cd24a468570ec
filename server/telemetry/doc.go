// Package telemetry sets up OpenTelemetry for the Hymical delivery server:
// the TracerProvider and its exporter (OTLP over gRPC or HTTP, or JSON lines
// on stdout for debugging), the MeterProvider behind the Prometheus
// exposition on /metrics, the resource that names the service, their
// shutdown, and the environment that gives each transport plugin the same
// tracing set-up. It is also the one place that names every span, span
// attribute, span event, metric and metric attribute the server makes, so a
// dashboard or a query can be written against this file.
//
// Nothing here is global: New returns providers that the caller hands to the
// API, the worker pool and the plugin host explicitly. With tracing and
// metrics both off (the default) New returns the no-op providers of the
// OpenTelemetry API, which allocate nothing and export nothing, so
// instrumented code costs next to nothing.
//
// It must not import storage, the worker, the API or the plugin host: they
// import it. It must never put a secret, a signing header or a message body
// into a span, a metric or a log line; the attribute keys below are the only
// ones the server sets, and none of them can carry one.
package telemetry
