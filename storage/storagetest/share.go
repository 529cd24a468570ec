package storagetest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
)

// testShare holds the claim's fair share between endpoints: a claim with a
// share takes no endpoint past its room, still oldest due first, and finds
// the other endpoints' deliveries however many of a full one's are due
// ahead of them. Every rule holds with few endpoints and with many idle
// ones beside them (an earlier claim looked at endpoints one by one when
// there were few, and at the oldest due first when there were more).
// manyIdle, backlogWindow and backlogScan size the layouts after the
// bounds of an earlier claim: past them it changed how it looked (more
// enabled endpoints than manyIdle; backlogs longer than the window of
// the oldest due rows it read, or than the scan that stepped over full
// endpoints). The claim through queue heads has no such bounds; the
// layouts keep testing the rule where the old one changed course.
const manyIdle = 32

func backlogWindow(limit int) int { return 8 * limit }
func backlogScan(limit int) int   { return 4 * backlogWindow(limit) }

func testShare(t *testing.T, b Backend) {
	for _, idle := range []int{0, manyIdle} {
		t.Run(fmt.Sprintf("with %d more endpoints that have nothing due", idle), func(t *testing.T) {
			t.Parallel()
			testShareAmong(t, b, idle)
		})
	}
}

func testShareAmong(t *testing.T, b Backend, idle int) {
	// forms creates idle endpoints for a form nothing is submitted to,
	// then an endpoint per form and n[i] deliveries to the i-th, one
	// endpoint's after another, so the first endpoint's are due first.
	forms := func(f *fixture, n ...int) (eps []storage.Endpoint, byEndpoint map[string][]string) {
		f.t.Helper()
		for range idle {
			f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{"form_idle"} })
		}
		byEndpoint = map[string][]string{}
		for i := range n {
			form := "form_" + string(rune('a'+i))
			eps = append(eps, f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{form} }))
		}
		for i, k := range n {
			for range k {
				res := f.event("form_" + string(rune('a'+i)))
				byEndpoint[eps[i].ID] = append(byEndpoint[eps[i].ID], res.Deliveries[0].ID)
			}
		}
		return eps, byEndpoint
	}
	claimShare := func(f *fixture, s storage.Store, limit int, share storage.ClaimShare) []storage.Claim {
		f.t.Helper()
		claims, err := s.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: limit, Lease: lease, Now: f.now, Share: &share})
		if err != nil {
			f.t.Fatalf("DeliveryClaim with share %+v: %v", share, err)
		}
		return claims
	}
	perEndpoint := func(claims []storage.Claim) map[string][]string {
		out := map[string][]string{}
		for _, c := range claims {
			out[c.Delivery.EndpointID] = append(out[c.Delivery.EndpointID], c.Delivery.ID)
		}
		return out
	}

	t.Run("a share takes each endpoint's oldest due up to its room, and the rest of the claim from the others", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		eps, want := forms(f, 6, 3, 1)
		got := perEndpoint(claimShare(f, f.store, 10, storage.ClaimShare{Default: 2}))
		for i, room := range []int{2, 2, 1} {
			if e := eps[i].ID; !slices.Equal(got[e], want[e][:room]) {
				t.Errorf("endpoint %d: claimed %v, want its oldest %d: %v", i, got[e], room, want[e][:room])
			}
		}
	})

	t.Run("a room of its own overrides the default, and a room of 0 takes none", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		eps, want := forms(f, 4, 4, 4)
		got := perEndpoint(claimShare(f, f.store, 10, storage.ClaimShare{Default: 3, Room: map[string]int{eps[0].ID: 1, eps[1].ID: 0}}))
		for i, room := range []int{1, 0, 3} {
			if e := eps[i].ID; !slices.Equal(got[e], want[e][:room]) {
				t.Errorf("endpoint %d: claimed %v, want its oldest %d", i, got[e], room)
			}
		}
		if n := len(claimShare(f, f.store, 10, storage.ClaimShare{})); n != 0 {
			t.Errorf("a share whose every room is 0 claimed %d", n)
		}
	})

	// A backlog of an endpoint without room is stepped over, and one of an
	// endpoint with a little room, which fills any window, is looked past
	// endpoint by endpoint.
	for _, c := range []struct{ backlog, room int }{
		{backlogWindow(2) + 20, 0},
		{16*backlogWindow(2) + 20, 0},
		// Exactly as many as the second look scans (limit 3, below): the
		// rest is behind the bound.
		{backlogScan(3), 0},
		{backlogWindow(2) + 20, 1},
	} {
		t.Run(fmt.Sprintf("behind a backlog of %d of an endpoint with room %d, the other endpoints are still found", c.backlog, c.room), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			const limit = 3
			eps, want := forms(f, c.backlog, 1, 3)
			got := perEndpoint(claimShare(f, f.store, limit, storage.ClaimShare{Default: 1, Room: map[string]int{eps[0].ID: c.room}}))
			if !slices.Equal(got[eps[0].ID], want[eps[0].ID][:c.room]) {
				t.Errorf("the endpoint with room %d got %v, want its oldest %d", c.room, got[eps[0].ID], c.room)
			}
			if !slices.Equal(got[eps[1].ID], want[eps[1].ID]) || !slices.Equal(got[eps[2].ID], want[eps[2].ID][:1]) {
				t.Errorf("claimed %v and %v, want %v and the oldest of %v", got[eps[1].ID], got[eps[2].ID], want[eps[1].ID], want[eps[2].ID])
			}
			// With room, the backlog ahead is claimed first, as without a share.
			got = perEndpoint(claimShare(f, f.store, limit, storage.ClaimShare{Default: limit}))
			if !slices.Equal(got[eps[0].ID], want[eps[0].ID][c.room:c.room+limit]) {
				t.Errorf("with room, claimed %v of the backlog, want its oldest %d left", got[eps[0].ID], limit)
			}
		})
	}

	// A top-up takes only what the rooms leave of the claim, its
	// endpoint's next oldest due, up to the top-up; whether the rooms were
	// found in the window or, behind a backlog, endpoint by endpoint.
	for _, c := range []struct {
		name                   string
		backlog, room, top     int
		limit                  int
		wantBacklog, wantOther int
	}{
		{"the top-up fills what the rooms leave", 10, 0, 5, 6, 3, 3},
		{"the top-up is bounded", 10, 0, 5, 10, 5, 3},
		{"a top-up adds to a room", 10, 1, 2, 5, 2, 3},
		{"no top-up is taken while the rooms fill the claim", 10, 1, 5, 4, 1, 3},
		{"behind a backlog the scan does not reach, the top-up fills what the rooms leave", backlogScan(6) + 20, 0, 5, 6, 3, 3},
		{"behind a backlog the scan does not reach, a top-up adds to a room", backlogScan(5) + 20, 1, 2, 5, 2, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			eps, want := forms(f, c.backlog, 3)
			backlog, other := eps[0].ID, eps[1].ID
			got := perEndpoint(claimShare(f, f.store, c.limit, storage.ClaimShare{
				Default: 3, Room: map[string]int{backlog: c.room}, TopUp: map[string]int{backlog: c.top}}))
			if !slices.Equal(got[other], want[other][:c.wantOther]) {
				t.Errorf("the other endpoint got %v, want its oldest %d first: %v", got[other], c.wantOther, want[other][:c.wantOther])
			}
			if !slices.Equal(got[backlog], want[backlog][:c.wantBacklog]) {
				t.Errorf("the endpoint with room %d and top-up %d got %v, want its oldest %d", c.room, c.top, got[backlog], c.wantBacklog)
			}
		})
	}

	t.Run("a disabled endpoint's deliveries are not claimed through a share", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		const limit = 2
		eps, want := forms(f, 16*backlogWindow(limit)+5, 1)
		f.setDisabled(eps[1], true)
		got := claimShare(f, f.store, limit, storage.ClaimShare{Default: 1, Room: map[string]int{eps[0].ID: 0}})
		if len(got) != 0 {
			t.Errorf("claimed %v, want none: one endpoint has no room, the other is disabled (%v)", claimIDs(got), want[eps[1].ID])
		}
		got = claimShare(f, f.store, limit, storage.ClaimShare{Room: map[string]int{eps[0].ID: 0}, TopUp: map[string]int{eps[1].ID: limit}})
		if len(got) != 0 {
			t.Errorf("claimed %v, want none: one endpoint has no room, the other is disabled and topped up (%v)", claimIDs(got), want[eps[1].ID])
		}
	})

	t.Run("a negative room is refused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		for _, share := range []storage.ClaimShare{{Default: -1}, {Room: map[string]int{"ep_x": -2}}, {TopUp: map[string]int{"ep_x": -1}}} {
			_, err := f.store.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: 1, Lease: lease, Now: f.now, Share: &share})
			if !errors.Is(err, storage.ErrInvalid) {
				t.Errorf("share %+v: %v, want ErrInvalid", share, err)
			}
		}
	})

	t.Run("stores claiming with shares at once never claim a delivery twice, and each keeps every room", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, b)
		_, want := forms(f, 30, 30, 30)
		total := 0
		for _, ids := range want {
			total += len(ids)
		}
		stores := []storage.Store{f.store, f.db.Open(t), f.db.Open(t)}
		var (
			mu      sync.Mutex
			claimed = map[string]int{}
			wg      sync.WaitGroup
		)
		for _, s := range stores {
			wg.Go(func() {
				for {
					claims, err := s.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: 5, Lease: lease, Now: f.now, Share: &storage.ClaimShare{Default: 2}})
					if err != nil {
						t.Errorf("DeliveryClaim: %v", err)
						return
					}
					if len(claims) == 0 {
						return
					}
					for e, ids := range perEndpoint(claims) {
						if len(ids) > 2 {
							t.Errorf("one claim took %d of endpoint %s, room 2", len(ids), e)
						}
					}
					mu.Lock()
					for _, c := range claims {
						claimed[c.Delivery.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(claimed) != total {
			t.Errorf("claimed %d distinct deliveries, want all %d", len(claimed), total)
		}
		for id, n := range claimed {
			if n != 1 {
				t.Errorf("delivery %s was claimed %d times", id, n)
			}
		}
	})
}

// testShareRule checks claims with a share against the rule they are
// documented to follow, written out here a second time as plain Go
// (shareRule), over random schedules: pending and processing rows of
// several endpoints with due times past and future, leases expired and
// live, rows held, and random rooms, top-ups and limits. Each round lays
// out the rows afresh with raw SQL, then makes a few claims in a row,
// each compared with what the rule takes of the rows as DeliveryList reads
// them just before it. Both ways a store may look are covered: with few
// enabled endpoints and with more than manyIdle.
func testShareRule(t *testing.T, b Backend) {
	for _, idle := range []int{0, manyIdle + 1} {
		t.Run(fmt.Sprintf("with %d more endpoints that have nothing due", idle), func(t *testing.T) {
			t.Parallel()
			const rounds, claimsPerRound = 25, 4
			f := newFixture(t, b)
			rng := rand.New(rand.NewPCG(uint64(idle), 38))
			for range idle {
				f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{"form_idle"} })
			}
			var eps []string
			for i := range 4 {
				form := fmt.Sprintf("form_rule_%d", i)
				eps = append(eps, f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{form} }).ID)
			}
			var ids []string
			for range 40 {
				ids = append(ids, f.event(fmt.Sprintf("form_rule_%d", rng.IntN(len(eps)))).Deliveries[0].ID)
			}
			checked := 0
			for round := range rounds {
				now := f.at(time.Duration(round) * time.Hour)
				layOut(t, f, rng, ids, now)
				for range claimsPerRound {
					share := randomShare(rng, eps)
					limit := 1 + rng.IntN(12)
					rows, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Limit: 1000})
					if err != nil {
						t.Fatal(err)
					}
					want := shareRule(rows, share, limit, now)
					claims, err := f.store.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: limit, Lease: lease, Now: now, Share: &share})
					if err != nil {
						t.Fatal(err)
					}
					if got := claimIDs(claims); !slices.Equal(got, want) {
						t.Fatalf("round %d: a claim of %d with share %+v took\n%v\nwant\n%v\nof the rows\n%s", round, limit, share, got, want, describeRows(rows, now))
					}
					checked++
					// Move on a little, so later claims see leases expire
					// and rows come due.
					now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
				}
			}
			t.Logf("%s: %d random claims with a share checked against the rule", b.Name, checked)
		})
	}
	t.Run("stores racing", func(t *testing.T) {
		t.Parallel()
		testShareRace(t, b)
	})
}

// testShareRace lays out rows at random, as testShareRule does, and has
// three stores claim with shares at once until each comes back empty. No
// row may be claimed twice or claimed while it was not claimable, no claim
// may take an endpoint's pending rows past its room, and every claimable
// row must be claimed in the end. It counts the claims that came back
// empty although a claim that began after they ended still found rows:
// rows nobody held, left behind.
func testShareRace(t *testing.T, b Backend) {
	const rounds, room = 6, 2
	f := newFixture(t, b)
	rng := rand.New(rand.NewPCG(3, 38))
	var ids []string
	for i := range 3 {
		form := fmt.Sprintf("form_race_%d", i)
		f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{form} })
	}
	for range 60 {
		ids = append(ids, f.event(fmt.Sprintf("form_race_%d", rng.IntN(3))).Deliveries[0].ID)
	}
	stores := []storage.Store{f.store, f.db.Open(t), f.db.Open(t)}
	type claimRun struct{ began, ended, took int }
	var runs []claimRun
	for round := range rounds {
		now := f.at(time.Duration(round) * time.Hour)
		layOut(t, f, rng, ids, now)
		rows, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		claimable, pending := map[string]bool{}, map[string]bool{}
		for _, d := range shareRule(rows, storage.ClaimShare{Default: len(rows)}, len(rows), now) {
			claimable[d] = true
		}
		for _, d := range rows {
			pending[d.ID] = d.State == storage.StatePending
		}
		var (
			mu      sync.Mutex
			seq     int
			roundOf []claimRun
			claimed = map[string]int{}
			wg      sync.WaitGroup
		)
		tick := func() int { mu.Lock(); defer mu.Unlock(); seq++; return seq }
		for i, s := range stores {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(i)))
				for {
					began := tick()
					got, err := s.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: 1 + rng.IntN(6), Lease: lease, Now: now,
						Share: &storage.ClaimShare{Default: room}})
					ended := tick()
					if err != nil {
						t.Errorf("DeliveryClaim: %v", err)
						return
					}
					taken := map[string]int{}
					mu.Lock()
					roundOf = append(roundOf, claimRun{began, ended, len(got)})
					for _, c := range got {
						claimed[c.Delivery.ID]++
						if !claimable[c.Delivery.ID] {
							t.Errorf("round %d: claimed %s, which was not claimable", round, c.Delivery.ID)
						}
						if pending[c.Delivery.ID] {
							taken[c.Delivery.EndpointID]++
						}
					}
					mu.Unlock()
					for e, n := range taken {
						if n > room {
							t.Errorf("round %d: one claim took %d pending rows of endpoint %s, room %d", round, n, e, room)
						}
					}
					if len(got) == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		for id := range claimable {
			if claimed[id] != 1 {
				t.Errorf("round %d: claimable delivery %s was claimed %d times, want once", round, id, claimed[id])
			}
		}
		runs = append(runs, roundOf...)
		// Sequence numbers restart each round; mark the round's end.
		runs = append(runs, claimRun{began: -1})
	}
	claims, empty, behind := 0, 0, 0
	for i, e := range runs {
		if e.began < 0 {
			continue
		}
		claims++
		if e.took > 0 {
			continue
		}
		empty++
		for _, later := range runs[i+1:] {
			if later.began < 0 {
				break
			}
			if later.began > e.ended && later.took > 0 {
				behind++
				break
			}
		}
		// Earlier runs of the round may have begun after e ended too.
		for j := i - 1; j >= 0 && runs[j].began >= 0; j-- {
			if runs[j].began > e.ended && runs[j].took > 0 {
				behind++
				break
			}
		}
	}
	t.Logf("%s: %d claims by 3 stores racing, %d came back empty, %d of them while rows nobody held were left (a later claim took them)", b.Name, claims, empty, behind)
}

// testQueueHeads checks what the claim with a share rests on: every write
// that makes a delivery claimable lowers its endpoint's queue head, so no
// claimable delivery is left behind by the heads, whichever store and
// statement wrote it and however the writes and claims interleave.
func testQueueHeads(t *testing.T, b Backend) {
	t.Run("creates and retries racing claims on three stores strand nothing", func(t *testing.T) {
		t.Parallel()
		testHeadsRace(t, b)
	})
	t.Run("rows claimable before the upgrade are found by the heads", func(t *testing.T) {
		t.Parallel()
		const queues = 14 // 0014_endpoint_queues
		ctx := t.Context()
		db := b.NewDatabase(t)
		s := db.Open(t)
		if _, err := s.Migrate(ctx, storage.MigrateParams{To: queues - 1}); err != nil {
			t.Fatal(err)
		}
		// The endpoints are written as that schema's rows, not through
		// this build's store, whose rows have columns added since.
		var eps []storage.Endpoint
		var seed strings.Builder
		now := db.TimeLiteral(time.Now())
		for i := range 3 {
			e := storage.Endpoint{ID: storage.NewID("ep")}
			fmt.Fprintf(&seed, `INSERT INTO webhook_endpoints (id, transport, url, form_ids, secrets, created_at, updated_at) VALUES ('%s', 'http', 'https://receiver.example/hook', '["form_%d"]', '[{"value":"whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="}]', %s, %s);`+"\n", e.ID, i, now, now)
			eps = append(eps, e)
		}
		if err := db.Exec(ctx, seed.String()); err != nil {
			t.Fatal(err)
		}
		// The events go to a form no endpoint takes, so this build writes
		// no head for them; their deliveries are written as an earlier
		// build wrote them, with nothing but the row.
		want := map[string]bool{}
		var rows strings.Builder
		at := db.TimeLiteral(time.Now().Add(-time.Minute).Truncate(time.Millisecond))
		for i := range 9 {
			sub := storage.NewID("sub")
			res, err := s.EventCreate(ctx, storage.Event{Type: "submission.received", FormID: "form_none", SubmissionID: sub, Payload: submissionPayload(sub, "form_none")})
			if err != nil {
				t.Fatal(err)
			}
			id := storage.NewID("dlv")
			fmt.Fprintf(&rows, "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, cycle_attempts, next_attempt_at, created_at, held) VALUES ('%s', '%s', '%s', 'pending', 0, 0, %s, %s, FALSE);\n",
				id, eps[i%len(eps)].ID, res.Event.ID, at, at)
			want[id] = true
		}
		if err := db.Exec(ctx, rows.String()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
			t.Fatal(err)
		}
		claims, err := s.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 20, Lease: lease,
			Now: time.Now().Add(time.Minute), Share: &storage.ClaimShare{Default: 5}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims {
			delete(want, c.Delivery.ID)
		}
		if len(want) > 0 || len(claims) != 9 {
			t.Fatalf("after the upgrade a claim with a share took %d of the 9 deliveries made before it; left %v", len(claims), want)
		}
	})
}

// testHeadsRace has creators on three stores add deliveries to a few
// endpoints while claimers on three other stores claim with a share and
// complete each claim as delivered or, one in three, as retryable and due
// again at once. Once the creators are done, the claimers go on until every
// delivery is delivered: a head left past a claimable row (a claim that
// moved it on while a create it could not see lowered it) would leave that
// row pending with every claim coming back empty.
func testHeadsRace(t *testing.T, b Backend) {
	f := newFixture(t, b)
	const endpoints, creators, perCreator = 4, 3, 60
	for i := range endpoints {
		form := fmt.Sprintf("form_race_%d", i)
		f.endpoint(func(e *storage.Endpoint) { e.FormIDs = []string{form} })
	}
	var (
		created, delivered atomic.Int64
		creating           sync.WaitGroup
		claiming           sync.WaitGroup
		errs               = make(chan error, 16)
		stopCreating       atomic.Bool
	)
	for c := range creators {
		s := f.db.Open(t)
		creating.Go(func() {
			for i := range perCreator {
				if stopCreating.Load() {
					return
				}
				sub := storage.NewID("sub")
				form := fmt.Sprintf("form_race_%d", (c+i)%endpoints)
				if _, err := s.EventCreate(f.ctx, storage.Event{Type: "submission.received", FormID: form, SubmissionID: sub, Payload: submissionPayload(sub, form)}); err != nil {
					errs <- fmt.Errorf("create: %w", err)
					stopCreating.Store(true)
					return
				}
				created.Add(1)
			}
		})
	}
	deadline := time.Now().Add(60 * time.Second)
	total := int64(creators * perCreator)
	var emptyAfterCreates atomic.Int64
	for range 3 {
		s := f.db.Open(t)
		claiming.Go(func() {
			n := 0
			for delivered.Load() < total && time.Now().Before(deadline) {
				doneCreating := created.Load() == total
				claims, err := s.DeliveryClaim(f.ctx, storage.DeliveryClaimParams{Limit: 3, Lease: lease, Share: &storage.ClaimShare{Default: 2}})
				if err != nil {
					errs <- fmt.Errorf("claim: %w", err)
					return
				}
				if len(claims) == 0 {
					if doneCreating {
						emptyAfterCreates.Add(1)
					}
					time.Sleep(time.Millisecond)
					continue
				}
				for _, c := range claims {
					n++
					outcome := storage.OutcomeDelivered
					if n%3 == 0 {
						outcome = storage.OutcomeRetryable
					}
					p := completeParams(c, outcome, time.Now().UTC(), 1000)
					p.Now, p.RetryDelay = time.Time{}, 0
					if _, _, err := s.DeliveryComplete(f.ctx, p); err != nil {
						errs <- fmt.Errorf("complete: %w", err)
						return
					}
					if outcome == storage.OutcomeDelivered {
						delivered.Add(1)
					}
				}
			}
		})
	}
	creating.Wait()
	claiming.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := delivered.Load(); got != total {
		left, err := f.store.DeliveryList(f.ctx, storage.DeliveryListParams{Limit: 1000, Filter: storage.DeliveryFilter{State: storage.StatePending}})
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("%d of %d delivered within a minute; %d claims came back empty after the creates were done; still pending:\n%s",
			got, total, emptyAfterCreates.Load(), describeRows(left, time.Now()))
	}
	t.Logf("%s: %d deliveries created and delivered on racing stores, %d empty claims after the creates were done", b.Name, total, emptyAfterCreates.Load())
}

// layOut gives each of the rows ids a random place in the schedule around
// now: pending or processing, due in the past or the future, a lease that
// expired or not, held or not.
func layOut(t *testing.T, f *fixture, rng *rand.Rand, ids []string, now time.Time) {
	t.Helper()
	var sql strings.Builder
	for _, id := range ids {
		next := f.db.TimeLiteral(now.Add(time.Duration(rng.IntN(120)-90) * time.Second).Truncate(time.Millisecond))
		switch rng.IntN(5) {
		case 0: // processing, its lease expired or not
			expires := f.db.TimeLiteral(now.Add(time.Duration(rng.IntN(60)-30) * time.Second).Truncate(time.Millisecond))
			fmt.Fprintf(&sql, "UPDATE webhook_deliveries SET state = 'processing', held = FALSE, next_attempt_at = %s, claim_expires_at = %s, claim_token = 'tok_%s' WHERE id = '%s';\n",
				next, expires, id, id)
		default:
			held := "FALSE"
			if rng.IntN(8) == 0 {
				held = "TRUE"
			}
			fmt.Fprintf(&sql, "UPDATE webhook_deliveries SET state = 'pending', held = %s, next_attempt_at = %s, claim_expires_at = NULL, claim_token = NULL WHERE id = '%s';\n",
				held, next, id)
		}
	}
	if err := f.db.Exec(f.ctx, sql.String()); err != nil {
		t.Fatalf("laying out the rows: %v", err)
	}
}

// randomShare is a share with a random default room, rooms of their own and
// top-ups for some of eps, and for some others a room and a top-up given
// by the Idle lookup.
func randomShare(rng *rand.Rand, eps []string) storage.ClaimShare {
	s := storage.ClaimShare{Default: rng.IntN(4)}
	idle := map[string][2]int{}
	// With a default of 0 a claim looks only at the endpoints the maps
	// name (see storage.ClaimShare.Idle).
	if s.Default > 0 && rng.IntN(2) == 0 {
		s.Idle = func(id string) (int, int, bool) {
			r, ok := idle[id]
			return r[0], r[1], ok
		}
	}
	for _, e := range eps {
		switch rng.IntN(5) {
		case 2:
			idle[e] = [2]int{rng.IntN(5), rng.IntN(6)}
		case 0:
			if s.Room == nil {
				s.Room = map[string]int{}
			}
			s.Room[e] = rng.IntN(5)
		case 1:
			if s.TopUp == nil {
				s.TopUp = map[string]int{}
			}
			s.TopUp[e] = rng.IntN(6)
		}
	}
	return s
}

// shareRule is what a claim of limit with share takes at now of rows, as
// storage.ClaimShare documents it: each endpoint's oldest due pending rows
// up to its room; of those the oldest due, up to the limit; then, for
// what the limit leaves, the oldest due of the endpoints' next rows past
// their room, each up to its top-up; and expired leases regardless. Of
// all these, the oldest due first, cut to the limit.
func shareRule(rows []storage.Delivery, share storage.ClaimShare, limit int, now time.Time) []string {
	byEndpoint := map[string][]storage.Delivery{}
	var expired []storage.Delivery
	for _, d := range rows {
		switch {
		case d.State == storage.StatePending && !d.Held && !d.NextAttemptAt.After(now):
			byEndpoint[d.EndpointID] = append(byEndpoint[d.EndpointID], d)
		case d.State == storage.StateProcessing && d.ClaimExpiresAt != nil && d.ClaimExpiresAt.Before(now):
			expired = append(expired, d)
		}
	}
	var within, past []storage.Delivery
	for e, due := range byEndpoint {
		sortByDue(due)
		room := min(share.RoomOf(e), len(due))
		within = append(within, due[:room]...)
		past = append(past, due[room:min(len(due), room+share.TopUpOf(e))]...)
	}
	sortByDue(within)
	sortByDue(past)
	sortByDue(expired)
	within = within[:min(len(within), limit)]
	take := append(within, past[:min(len(past), limit-len(within))]...)
	take = append(take, expired[:min(len(expired), limit)]...)
	sortByDue(take)
	var ids []string
	for _, d := range take[:min(len(take), limit)] {
		ids = append(ids, d.ID)
	}
	return ids
}

func sortByDue(ds []storage.Delivery) {
	slices.SortFunc(ds, func(a, b storage.Delivery) int {
		return cmp.Or(a.NextAttemptAt.Compare(b.NextAttemptAt), strings.Compare(a.ID, b.ID))
	})
}

// describeRows lists rows as a failure message shows them.
func describeRows(rows []storage.Delivery, now time.Time) string {
	rows = slices.Clone(rows)
	sortByDue(rows)
	var b strings.Builder
	for _, d := range rows {
		fmt.Fprintf(&b, "  %s %s %-10s held=%-5v due %+v", d.ID, d.EndpointID, d.State, d.Held, d.NextAttemptAt.Sub(now))
		if d.ClaimExpiresAt != nil {
			fmt.Fprintf(&b, " lease ends %+v", d.ClaimExpiresAt.Sub(now))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
