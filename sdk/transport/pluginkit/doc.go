// Package pluginkit is the plumbing the broker transport plugins shipped
// with Hymical (amqp, kafka, mqtt, nats, redis) have in common: reading
// their settings, bounding an attempt by its deadline, asking the SSRF
// guard about a broker before connecting, and keeping one connection per
// broker. A custom transport may use it too.
//
// It knows no broker: it imports only the standard library and the rest of
// the SDK, so using it adds no client library to a plugin, and the SDK
// module stays free of them.
package pluginkit
