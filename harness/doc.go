// Package harness holds no code of its own: its subpackages are the test
// and measurement harnesses that drive a whole server from outside, so they
// sit above package server and import it, while nothing in the product
// imports them (layout_test.go holds the hymical command to that). bench
// measures delivery and cmd/hymical-bench is its command; e2etest builds
// plugins and runs deliveries end to end for integration tests, up to a
// real `hymical serve` process driven over its API; faulttest
// is the fault harness that kills servers, plugins and PostgreSQL
// mid-delivery and balances the ledger; brokertest, natstest, redistest and
// rabbitmqtest start real message brokers on loopback for the transport
// tests; transporttest holds what those tests share (sending as the host
// does, checking error text gives nothing away, a hung server); proctest
// kills processes tests started by hand; sdkdrivers tests the SDK's SQL
// deduper against real database drivers; testrun is the README's test
// command.
package harness
