// Package pluginkit is the plumbing the transport plugins shipped with
// Hymical (amqp, http, kafka, mqtt, nats, redis) have in common: reading
// their settings with the same errors, bounding an attempt by its
// deadline, ending a publish span, asking the SSRF guard about a broker
// before connecting, and keeping one connection per broker.
//
// It is not SDK: its API follows what the shipped plugins need and changes
// with them, so it sits under plugins/internal, where Go keeps it to
// plugins/. A third-party plugin builds on the public SDK instead:
// sdk/transport (the contract, Serve, BoundError, ScrubError), sdk/netguard
// (the SSRF rule) and sdk/redact (hiding its own secrets by the server's
// rule).
//
// It knows no broker: it imports only the standard library, OpenTelemetry
// and the SDK, so using it adds no client library to a plugin.
package pluginkit
