package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/internal/wakeup"
)

// Wake-ups across processes: a write that makes a delivery due now runs
// pg_notify on wakeChannel inside its own transaction, so the notification
// goes out when, and only if, the transaction commits; once per
// transaction, whatever it wrote. Every Store that was asked for wake-ups
// keeps one connection of its own LISTENing on the channel and wakes its
// claimers for each notification, coalesced by the hub. The payload is the
// id of the Store that wrote: that Store has woken its own claimers
// already, without the round trip, and skips its own notifications.
//
// Writes that make a delivery due later (a retry's backoff, a release with
// a delay, a rate limit's deferral) send no notification: the Store that
// wrote keeps a timed wake-up for them, and the others' poll finds them
// should that process be gone.

// wakeChannel is the channel the notifications go on. PostgreSQL scopes
// channels to the database, so deployments on separate databases of one
// server do not hear each other.
const wakeChannel = "hymical_wakeup"

// notifySQL sends the wake-up; $1 is the writing Store's id.
const notifySQL = `SELECT pg_notify('` + wakeChannel + `', $1)`

// notifyTurnSQL sends the wake-up when, among the endpoints of the
// deliveries $1, an ordered endpoint's turn has passed to a delivery that
// is due now, and returns a row when it did; $2 is the writing Store's id.
// It runs after hymical_promote, which returns nothing to say whether it
// let a delivery go.
const notifyTurnSQL = `
SELECT pg_notify('` + wakeChannel + `', $2) FROM (
	SELECT 1 FROM webhook_endpoints AS e
	JOIN webhook_deliveries AS d ON d.id = e.turn_delivery_id
	WHERE e.id IN (SELECT endpoint_id FROM webhook_deliveries WHERE id = ANY($1::text[]))
		AND e.ordered AND e.disabled_at IS NULL
		AND d.state = 'pending' AND NOT d.held AND d.next_attempt_at <= now()
	LIMIT 1) AS turn`

// notifyTurnOfEndpointsSQL is notifyTurnSQL for the endpoints $1.
const notifyTurnOfEndpointsSQL = `
SELECT pg_notify('` + wakeChannel + `', $2) FROM (
	SELECT 1 FROM webhook_endpoints AS e
	JOIN webhook_deliveries AS d ON d.id = e.turn_delivery_id
	WHERE e.id = ANY($1::text[])
		AND e.ordered AND e.disabled_at IS NULL
		AND d.state = 'pending' AND NOT d.held AND d.next_attempt_at <= now()
	LIMIT 1) AS turn`

// The listener's reconnect backoff: it doubles from the first to the cap.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 10 * time.Second
)

// listenReadyTimeout bounds how long the first Wakeups waits for the
// listener to be listening: past it, wake-ups from other processes are
// heard once it is, and the poll covers the time between.
const listenReadyTimeout = 5 * time.Second

// listenerName is the application_name of the LISTEN connection, so an
// operator can tell it in pg_stat_activity.
const listenerName = "hymical wakeups"

// wakeups is a Store's side of the wake-ups.
type wakeups struct {
	// id tells this Store's notifications from the others'.
	id  string
	hub wakeup.Hub

	start sync.Once
	// ready is closed once the listener first listens, or gave up trying
	// for the first time.
	ready chan struct{}
	stop  context.CancelFunc
	done  chan struct{}
	// listening is whether the listener's connection is LISTENing now.
	listening atomic.Bool
}

func newWakeups() *wakeups {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &wakeups{id: hex.EncodeToString(b[:]), ready: make(chan struct{})}
}

// Wakeups subscribes to wake-ups until ctx ends. The first call starts the
// listener, a connection of its own outside the pool, and returns once it
// listens, or after listenReadyTimeout if the database does not let it.
func (s *Store) Wakeups(ctx context.Context) <-chan struct{} {
	ch := s.wake.hub.Subscribe(ctx)
	s.wake.start.Do(func() {
		lctx, stop := context.WithCancel(context.Background())
		s.wake.stop, s.wake.done = stop, make(chan struct{})
		go func() {
			defer close(s.wake.done)
			s.listen(lctx)
		}()
	})
	t := time.NewTimer(listenReadyTimeout)
	defer t.Stop()
	select {
	case <-s.wake.ready:
	case <-t.C:
	case <-ctx.Done():
	}
	return ch
}

// Listening reports whether the listener is LISTENing now; for tests and
// health checks.
func (s *Store) Listening() bool { return s.wake.listening.Load() }

// closeWakeups stops the listener and the timed wake-ups.
func (s *Store) closeWakeups() {
	s.wake.hub.Close()
	// Taking the Once makes a Wakeups racing Close start nothing after.
	s.wake.start.Do(func() {})
	if s.wake.stop != nil {
		s.wake.stop()
		<-s.wake.done
	}
}

// notified wakes this process's claimers after a write whose transaction
// sent the wake-up committed.
func (s *Store) notified() { s.wake.hub.Signal() }

// listen keeps a connection LISTENing until ctx ends, reconnecting with a
// backoff when it is lost. After a reconnect it wakes the claimers once:
// notifications sent while it was away are lost, and the claimers should
// look now rather than at their next poll.
func (s *Store) listen(ctx context.Context) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = listenerName
	wait := listenBackoffMin
	first := true
	var once sync.Once
	ready := func() { once.Do(func() { close(s.wake.ready) }) }
	defer ready()
	for ctx.Err() == nil {
		// Why it failed does not matter here: the poll covers while the
		// listener is away, and the next try says whether it is back.
		_ = s.listenOn(ctx, cfg, func() {
			s.wake.listening.Store(true)
			if !first {
				s.wake.hub.Signal()
			}
			first = false
			wait = listenBackoffMin
			ready()
		})
		s.wake.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		if first {
			// The first try failed: Wakeups need not wait for the next.
			ready()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		wait = min(2*wait, listenBackoffMax)
	}
}

// listenOn connects, listens, calls up, and wakes the hub for every
// notification another Store sent, until the connection fails or ctx ends.
func (s *Store) listenOn(ctx context.Context, cfg *pgx.ConnConfig, up func()) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		// A dead connection must not hold Close up for long.
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+wakeChannel); err != nil {
		return err
	}
	up()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload != s.wake.id {
			s.wake.hub.Signal()
		}
	}
}
