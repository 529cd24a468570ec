package storagetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// Bench runs the store benchmarks against b: the operations on the
// delivery hot path, each on a fresh, migrated database. It only measures;
// a benchmark fails only when an operation errs or returns the wrong
// number of rows, never on time.
//
//	func BenchmarkStore(b *testing.B) { storagetest.Bench(b, backend) }
//
// It needs backend.NewBenchStore; without it every benchmark is skipped
// and says why.
func Bench(b *testing.B, backend Backend) {
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("EventCreate/endpoints=%d", n), func(b *testing.B) { benchEventCreate(b, backend, n) })
	}
	for _, n := range registeredSizes(b) {
		b.Run(fmt.Sprintf("EventCreateRegistered/endpoints=%d", n), func(b *testing.B) { benchEventCreateRegistered(b, backend, n) })
	}
	// Claims run against a queue kept at about the same number of due
	// deliveries throughout, so the cost per claim does not drift with b.N;
	// the due=20000 cases show what a longer queue costs each claim.
	for _, c := range []struct{ batch, due int }{{16, 1000}, {64, 1000}, {16, 20000}} {
		b.Run(fmt.Sprintf("DeliveryClaim/batch=%d/due=%d", c.batch, c.due), func(b *testing.B) { benchClaim(b, backend, c.batch, c.due) })
	}
	b.Run("DeliveryComplete", func(b *testing.B) { benchComplete(b, backend) })
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprintf("DeliveryCompleteBatch/batch=%d", n), func(b *testing.B) { benchCompleteBatch(b, backend, n) })
	}
	for _, c := range []struct{ batch, due int }{{16, 1000}, {64, 1000}, {16, 20000}} {
		b.Run(fmt.Sprintf("ClaimComplete/batch=%d/due=%d", c.batch, c.due), func(b *testing.B) { benchCycle(b, backend, c.batch, c.due) })
	}
	// What the endpoint controls cost the same loop. limited: every
	// endpoint has an in-flight cap too high to bite, so each claim pays
	// for admission (the limiter row of each endpoint, the count of its
	// sends) and admits everything. ordered: one endpoint, one delivery at a
	// time, as ordering allows, against the same loop unordered.
	b.Run("ClaimComplete/batch=16/due=1000/limited", func(b *testing.B) {
		benchCycle(b, backend, 16, 1000, func(e *storage.Endpoint) { e.MaxInFlight = storage.MaxInFlightCap })
	})
	b.Run("ClaimComplete/batch=1/due=1000", func(b *testing.B) { benchCycle(b, backend, 1, 1000) })
	b.Run("ClaimComplete/batch=1/due=1000/ordered", func(b *testing.B) {
		benchCycle(b, backend, 1, 1000, func(e *storage.Endpoint) { e.Ordered = true })
	})
}

// benchLease is long enough that nothing claimed in a benchmark expires.
const benchLease = time.Hour

// benchStore opens a fresh store and endpoints of it: every event fans
// out to all of them.
func benchStore(b *testing.B, backend Backend, endpoints int, mutate ...func(*storage.Endpoint)) storage.Store {
	b.Helper()
	if backend.NewBenchStore == nil {
		b.Skipf("%s: Backend.NewBenchStore is not set, so there is no database to benchmark on", backend.Name)
	}
	s := backend.NewBenchStore(b)
	ctx := context.Background()
	if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
		b.Fatalf("%s: migrate: %v", backend.Name, err)
	}
	for i := range endpoints {
		e := storage.Endpoint{
			Transport: "http",
			URL:       fmt.Sprintf("https://receiver.example/hook/%d", i),
			Secrets:   []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)},
		}
		for _, m := range mutate {
			m(&e)
		}
		if _, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: e}); err != nil {
			b.Fatalf("EndpointCreate: %v", err)
		}
	}
	return s
}

func benchEvent() storage.Event {
	sub := storage.NewID("sub")
	return storage.Event{
		Type:         "submission.received",
		FormID:       "form_bench",
		SubmissionID: sub,
		Payload:      submissionPayload(sub, "form_bench"),
	}
}

// seedDeliveries creates events until at least n pending deliveries are
// due, fanning out to however many endpoints s has (fanout).
func seedDeliveries(b *testing.B, s storage.Store, n, fanout int) {
	b.Helper()
	ctx := context.Background()
	for made := 0; made < n; made += fanout {
		res, err := s.EventCreate(ctx, benchEvent())
		if err != nil {
			b.Fatalf("seed EventCreate: %v", err)
		}
		if len(res.Deliveries) != fanout {
			b.Fatalf("seed EventCreate fanned out to %d, want %d", len(res.Deliveries), fanout)
		}
	}
}

// claimAll claims n deliveries in batches of 64.
func claimAll(b *testing.B, s storage.Store, n int) []storage.Claim {
	b.Helper()
	var out []storage.Claim
	for len(out) < n {
		cs, err := s.DeliveryClaim(context.Background(), storage.DeliveryClaimParams{Limit: min(64, n-len(out)), Lease: benchLease})
		if err != nil {
			b.Fatalf("DeliveryClaim: %v", err)
		}
		if len(cs) == 0 {
			b.Fatalf("DeliveryClaim found nothing due after %d of %d", len(out), n)
		}
		out = append(out, cs...)
	}
	return out
}

func delivered(c storage.Claim) storage.DeliveryCompleteParams {
	now := time.Now()
	return storage.DeliveryCompleteParams{
		DeliveryID: c.Delivery.ID,
		Token:      c.Token,
		Outcome:    storage.OutcomeDelivered,
		HTTPStatus: 204,
		StartedAt:  now.Add(-time.Millisecond),
		FinishedAt: now,
		TraceID:    "4bf92f3577b34da6a3ce929d0e0e4736",
	}
}

// perSecond reports n things done in the timed part of the benchmark.
func perSecond(b *testing.B, n int64, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(n)/s, unit+"/s")
	}
}

// EventCreate with fan-out: one transaction writing the event and one
// delivery per endpoint.
func benchEventCreate(b *testing.B, backend Backend, endpoints int) {
	s := benchStore(b, backend, endpoints)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := s.EventCreate(ctx, benchEvent())
		if err != nil {
			b.Fatalf("EventCreate: %v", err)
		}
		if len(res.Deliveries) != endpoints {
			b.Fatalf("EventCreate fanned out to %d, want %d", len(res.Deliveries), endpoints)
		}
	}
	b.StopTimer()
	perSecond(b, int64(b.N*endpoints), "deliveries")
}

// registeredSizes are the numbers of registered endpoints
// EventCreateRegistered runs at: HYMICAL_BENCH_REGISTERED, a comma-separated
// list (e.g. 10,1000,10000,100000), or 10, 1,000 and 10,000, since
// registering 100,000 endpoints takes minutes.
func registeredSizes(b *testing.B) []int {
	env := os.Getenv("HYMICAL_BENCH_REGISTERED")
	if env == "" {
		return []int{10, 1000, 10000}
	}
	var out []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			b.Fatalf("HYMICAL_BENCH_REGISTERED=%q: want a comma-separated list of numbers of at least 2", env)
		}
		out = append(out, n)
	}
	return out
}

// registeredFanOut is how many of the registered endpoints an event of
// EventCreateRegistered goes to.
const registeredFanOut = 2

// EventCreate when many endpoints are registered but the event's form has
// only two of them: the others are one per form of their own, as when every
// customer of a forms service registers an endpoint for their form. What
// the create costs should follow the two, not the registered.
func benchEventCreateRegistered(b *testing.B, backend Backend, registered int) {
	s := benchStore(b, backend, 0)
	ctx := context.Background()
	// Created by a few goroutines at once: 100,000 one after another take
	// a long time on a server that batches nothing.
	const creators = 4
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < registered; i += creators {
				form := fmt.Sprintf("form_other_%d", i)
				if i < registeredFanOut {
					form = "form_bench"
				}
				_, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{
					Transport:  "http",
					URL:        fmt.Sprintf("https://receiver.example/hook/%d", i),
					Secrets:    []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)},
					EventTypes: []string{"submission.received"},
					FormIDs:    []string{form},
				}})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatalf("EndpointCreate: %v", firstErr)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := s.EventCreate(ctx, benchEvent())
		if err != nil {
			b.Fatalf("EventCreate: %v", err)
		}
		if len(res.Deliveries) != registeredFanOut {
			b.Fatalf("EventCreate fanned out to %d of %d registered, want %d", len(res.Deliveries), registered, registeredFanOut)
		}
	}
	b.StopTimer()
	perSecond(b, int64(b.N*registeredFanOut), "deliveries")
}

// queue keeps a store's due deliveries between due and due+refill
// before each claim, topping it up with the timer stopped.
type queue struct {
	b      *testing.B
	s      storage.Store
	fanout int
	due    int
	refill int
	have   int
}

func newQueue(b *testing.B, s storage.Store, fanout, due, batch int) *queue {
	q := &queue{b: b, s: s, fanout: fanout, due: due, refill: 16 * batch}
	seedDeliveries(b, s, due+q.refill, fanout)
	q.have = due + q.refill
	return q
}

// take is called before each claim of n: it makes sure more than due
// deliveries are due once the claim has taken its n.
func (q *queue) take(n int) {
	if q.have-n < q.due {
		q.b.StopTimer()
		seedDeliveries(q.b, q.s, q.refill, q.fanout)
		q.have += q.refill
		q.b.StartTimer()
	}
	q.have -= n
}

// DeliveryClaim of a full batch from a queue of about due deliveries; the
// benchmark's own completions are not timed.
func benchClaim(b *testing.B, backend Backend, batch, due int) {
	s := benchStore(b, backend, batch)
	q := newQueue(b, s, batch, due, batch)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		q.take(batch)
		cs, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: batch, Lease: benchLease})
		if err != nil {
			b.Fatalf("DeliveryClaim: %v", err)
		}
		if len(cs) != batch {
			b.Fatalf("DeliveryClaim claimed %d, want %d", len(cs), batch)
		}
		// Completed untimed, so claimed rows do not pile up as processing,
		// which a worker's never do beyond its concurrency.
		b.StopTimer()
		for _, c := range cs {
			if _, _, err := s.DeliveryComplete(ctx, delivered(c)); err != nil {
				b.Fatalf("DeliveryComplete: %v", err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	perSecond(b, int64(b.N*batch), "deliveries")
}

// DeliveryComplete of one claimed delivery as delivered: the fenced
// transition and the attempt row, in one transaction.
func benchComplete(b *testing.B, backend Backend) {
	s := benchStore(b, backend, 16)
	seedDeliveries(b, s, b.N, 16)
	claims := claimAll(b, s, b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, _, err := s.DeliveryComplete(ctx, delivered(claims[i])); err != nil {
			b.Fatalf("DeliveryComplete: %v", err)
		}
	}
}

// DeliveryCompleteBatch of n claimed deliveries as delivered, as the
// worker's completer writes them; reported per delivery.
func benchCompleteBatch(b *testing.B, backend Backend, n int) {
	s := benchStore(b, backend, 16)
	seedDeliveries(b, s, b.N*n, 16)
	claims := claimAll(b, s, b.N*n)
	ps := make([]storage.DeliveryCompleteParams, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := range n {
			ps[j] = delivered(claims[i*n+j])
		}
		completeBatch(b, s, ps)
	}
	b.StopTimer()
	perSecond(b, int64(b.N*n), "deliveries")
}

// completeBatch completes ps in one batch and requires every entry to
// succeed.
func completeBatch(b *testing.B, s storage.Store, ps []storage.DeliveryCompleteParams) {
	res, err := s.DeliveryCompleteBatch(context.Background(), ps)
	if err != nil {
		b.Fatalf("DeliveryCompleteBatch: %v", err)
	}
	for _, r := range res {
		if r.Err != nil {
			b.Fatalf("DeliveryCompleteBatch entry: %v", r.Err)
		}
	}
}

// One claim of a batch and its completions in one batch: the store's share
// of the worker's loop for one batch.
func benchCycle(b *testing.B, backend Backend, batch, due int, mutate ...func(*storage.Endpoint)) {
	s := benchStore(b, backend, batch, mutate...)
	q := newQueue(b, s, batch, due, batch)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		q.take(batch)
		cs, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: batch, Lease: benchLease})
		if err != nil {
			b.Fatalf("DeliveryClaim: %v", err)
		}
		if len(cs) != batch {
			b.Fatalf("DeliveryClaim claimed %d, want %d", len(cs), batch)
		}
		ps := make([]storage.DeliveryCompleteParams, len(cs))
		for i, c := range cs {
			ps[i] = delivered(c)
		}
		completeBatch(b, s, ps)
	}
	b.StopTimer()
	perSecond(b, int64(b.N*batch), "deliveries")
}
