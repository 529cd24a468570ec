// Package harness holds no code of its own: its subpackages are the test
// and measurement harnesses that drive a whole server from outside, so they
// sit above package server and import it, while nothing in the product
// imports them. bench measures delivery (the `hymical bench` command),
// e2etest builds plugins and runs deliveries end to end for integration
// tests, faulttest is the fault harness that kills servers, plugins and
// PostgreSQL mid-delivery and balances the ledger, brokertest, natstest,
// redistest and rabbitmqtest start real message brokers on loopback for the
// transport tests,
// proctest kills processes tests started by hand, and sdkdrivers tests the
// SDK's SQL deduper against real database drivers.
package harness
