// Package faulttest is the fault harness: it proves "at least once, nothing
// lost" against real `hymical serve` processes, a real PostgreSQL cluster it
// starts for itself, a SQLite file and a signature-verifying receiver, all on
// loopback. In the middle of a run it SIGKILLs a server while its plugin has
// a request on the wire, SIGKILLs a plugin process mid-send, crashes and
// restarts PostgreSQL, and freezes a server (SIGSTOP) past its lease so the
// other server steals its claims, then thaws it; on SQLite it kills the one
// server mid-send and restarts it. On both it then takes the http plugin
// binary away from every server (and kills its processes) for twice the
// whole retry schedule while submissions go on, polling /readyz, and puts
// it back; and it adds an endpoint whose receiver accepts and never
// answers, with a burst of deliveries to it, and four endpoints whose
// receiver answers after 600 ms, with a backlog of 30 deliveries each,
// while the healthy endpoint's deliveries are timed. At the end a ledger built from the receivers' logs
// and the database must balance: every submission to the healthy endpoint
// reached the receiver at least once and is delivered (none failed, none
// stuck, including every one made while the plugin was away, and none
// reached the receiver before it was back), attempt numbers are 1..n on
// every delivery, every recorded answer is one the receiver really gave,
// every attempt without an answer had a request that reached a receiver
// unless a kill of the process it was handed to explains it, the frozen
// server's requests are recorded as late, /readyz answered 503 naming
// "http" while the plugin was away and 200 after, no delivery to the hung
// receiver is delivered, every delivery to the slow endpoints is, the
// healthy deliveries' create→received p99 during the hang is within 1.1 s,
// and duplicates are counted and reported.
//
// The harness is behind the build tag "fault", so the ordinary go test never
// runs it. Run it with
//
//	go test -tags fault -v -run TestFault -timeout 15m ./harness/faulttest/
//
// It needs PostgreSQL's binaries (PG_BINDIR, or /usr/lib/postgresql/*/bin;
// .ci/postgres.sh installs them), takes about 75 s after building the
// binaries, stops by itself (each backend's run is capped at five minutes)
// and prints one "FAULT LEDGER" line per backend and one for the total. It
// starts its own cluster, because it restarts it, and never touches one it
// did not start. Unlike the CI test cluster, that one runs as production
// must (fsync, synchronous_commit and full_page_writes on), so the crash
// counts what a real deployment would lose; a server that warns at start-up
// that its database is NOT DURABLE fails the run. It owns no product code
// and nothing may import it.
package faulttest
