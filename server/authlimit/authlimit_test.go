package authlimit_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/server/authlimit"
)

// clock is a settable time for the Limiter.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newLimiter(t *testing.T, failures, clients int) (*authlimit.Limiter, *clock, *syncbuf.Buffer) {
	t.Helper()
	c := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	logs := &syncbuf.Buffer{}
	l, err := authlimit.New(authlimit.Config{
		Failures: failures, Window: time.Minute, Clients: clients, Now: c.Now,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, c, logs
}

// try presents a credential with the given outcome from addr and says
// whether it was judged, and how long to wait when it was not.
func try(l *authlimit.Limiter, addr string, out authlimit.Outcome) (judged bool, wait time.Duration) {
	wait = l.Check(addr, func() authlimit.Outcome {
		judged = true
		return out
	})
	return judged, wait
}

func TestAnAddressIsRefusedAfterItsFailures(t *testing.T) {
	t.Parallel()
	l, c, logs := newLimiter(t, 3, 100)
	const guesser = "192.0.2.7:40000"
	for i := range 3 {
		if judged, _ := try(l, guesser, authlimit.Failed); !judged {
			t.Fatalf("failure %d was refused before the limit", i+1)
		}
		c.advance(5 * time.Second)
	}
	steps := []struct {
		name     string
		addr     string
		out      authlimit.Outcome
		judged   bool
		wantWait time.Duration
	}{
		{"the guesser's next guess", guesser, authlimit.Failed, false, 45 * time.Second},
		{"the guesser from another port", "192.0.2.7:40001", authlimit.Failed, false, 45 * time.Second},
		// A right credential from a refused address is refused too: it
		// could be the guess that hit, and answering it would tell.
		{"the right credential from the guesser's address", guesser, authlimit.Passed, false, 45 * time.Second},
		{"the right credential from another address", "192.0.2.8:1", authlimit.Passed, true, 0},
		{"a wrong one from another address", "198.51.100.1:1", authlimit.Failed, true, 0},
	}
	for _, s := range steps {
		judged, wait := try(l, s.addr, s.out)
		if judged != s.judged || wait != s.wantWait {
			t.Errorf("%s: judged %v, wait %s; want judged %v, wait %s", s.name, judged, wait, s.judged, s.wantWait)
		}
	}
	c.advance(45 * time.Second)
	if judged, _ := try(l, guesser, authlimit.Passed); !judged {
		t.Error("still refused once the window has passed")
	}
	if n := strings.Count(logs.String(), "too many failed authentications"); n != 1 {
		t.Errorf("%d warnings for one burst, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "client=192.0.2.7") || !strings.Contains(logs.String(), "failures=3") {
		t.Errorf("the warning does not name the client and the count:\n%s", logs)
	}
}

func TestWhatCounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		outcome authlimit.Outcome
		refused bool
	}{
		{"wrong credentials count", authlimit.Failed, true},
		{"absent credentials do not", authlimit.Absent, false},
		// A success does not wipe the count either: a guesser sharing an
		// address with a real client would otherwise guess forever.
		{"right credentials do not", authlimit.Passed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, _, _ := newLimiter(t, 2, 10)
			try(l, "192.0.2.1:1", authlimit.Failed)
			for range 5 {
				try(l, "192.0.2.1:1", tt.outcome)
			}
			if judged, _ := try(l, "192.0.2.1:1", authlimit.Passed); judged == tt.refused {
				t.Errorf("judged %v after one failure and five %v, want refused %v", judged, tt.outcome, tt.refused)
			}
		})
	}
}

func TestIPv6CountsByItsSlash64(t *testing.T) {
	t.Parallel()
	l, _, logs := newLimiter(t, 3, 10)
	for i := range 3 {
		try(l, fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), authlimit.Failed)
	}
	for _, tt := range []struct {
		addr    string
		refused bool
	}{
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", true},
		{"[2001:db8:1:3::1]:1", false},
		{"[::ffff:192.0.2.1]:1", false},
	} {
		if judged, _ := try(l, tt.addr, authlimit.Passed); judged == tt.refused {
			t.Errorf("%s: judged %v, want refused %v", tt.addr, judged, tt.refused)
		}
	}
	if !strings.Contains(logs.String(), "client=2001:db8:1:2::/64") {
		t.Errorf("the warning does not name the /64:\n%s", logs)
	}
}

// TestManyAddressesFlushNothing is the attack on a table that forgets: a
// guesser rotating through far more addresses than the table holds. The
// refused address stays refused, memory stays within its bound, the
// overflow stops the rotation once its allowance is spent, and a client
// that authenticated before still gets in.
func TestManyAddressesFlushNothing(t *testing.T) {
	t.Parallel()
	const clients, failures = 50, 3
	l, _, logs := newLimiter(t, failures, clients)
	const blocked, regular = "203.0.113.9:1", "203.0.113.10:1"
	try(l, regular, authlimit.Passed)
	for range failures {
		try(l, blocked, authlimit.Failed)
	}
	judgedWrong := 0
	for i := range 20000 {
		addr := fmt.Sprintf("10.%d.%d.%d:9", i>>16, i>>8&0xff, i&0xff)
		if judged, _ := try(l, addr, authlimit.Failed); judged {
			judgedWrong++
		}
		if n := l.Remembered(); n > 2*clients {
			t.Fatalf("after %d addresses the limiter remembers %d, bound %d", i+1, n, 2*clients)
		}
	}
	// The table had room for clients-1 more records; then the overflow
	// took failures more.
	if want := clients - 1 + failures; judgedWrong != want {
		t.Errorf("%d guesses from rotating addresses were judged, want %d", judgedWrong, want)
	}
	if judged, wait := try(l, blocked, authlimit.Passed); judged || wait <= 0 {
		t.Error("the blocked address was let in after the rotation")
	}
	if judged, _ := try(l, "192.0.2.200:1", authlimit.Passed); judged {
		t.Error("a new address was judged while the table is full and the overflow spent")
	}
	if judged, _ := try(l, regular, authlimit.Passed); !judged {
		t.Error("a client that authenticated before was refused for others' guesses")
	}
	// One failure and the known client is judged like any other again.
	try(l, regular, authlimit.Failed)
	if judged, _ := try(l, regular, authlimit.Passed); judged {
		t.Error("a known client that failed still skips the spent overflow")
	}
	if !strings.Contains(logs.String(), "beyond the full table") {
		t.Errorf("the overflow's refusal was not logged:\n%s", logs)
	}
}

// TestANewClientIsNotRefusedForOthersFailures is the owner arriving from a
// new address after an attack from more addresses than the table holds:
// the table stays full for a window, but the overflow is a rate, so the
// owner is judged as soon as the guessing pauses, not a window later.
func TestANewClientIsNotRefusedForOthersFailures(t *testing.T) {
	t.Parallel()
	const clients, failures = 50, 3
	l, c, _ := newLimiter(t, failures, clients)
	for i := range clients + failures {
		if judged, _ := try(l, fmt.Sprintf("10.0.0.%d:1", i), authlimit.Failed); !judged {
			t.Fatalf("guess %d was refused before the table and the overflow were spent", i+1)
		}
	}
	steps := []struct {
		name    string
		advance time.Duration
		addr    string
		out     authlimit.Outcome
		judged  bool
	}{
		// The cost of a bounded guess rate: while addresses without a
		// record fail faster than the rate, a new one waits up to a second.
		{"a new address with the right credential, during the burst", 0, "192.0.2.1:1", authlimit.Passed, false},
		{"the same, a second later", time.Second, "192.0.2.1:1", authlimit.Passed, true},
		{"another new address with the right credential", 0, "192.0.2.2:1", authlimit.Passed, true},
		{"a new address with a wrong one", 0, "192.0.2.3:1", authlimit.Failed, true},
		{"a new address, half a minute on, the table still full", 30 * time.Second, "192.0.2.4:1", authlimit.Passed, true},
		{"an address of the table, still in its window", 0, "10.0.0.1:1", authlimit.Passed, true},
	}
	for _, s := range steps {
		c.advance(s.advance)
		judged, wait := try(l, s.addr, s.out)
		if judged != s.judged {
			t.Errorf("%s: judged %v, want %v", s.name, judged, s.judged)
		}
		if !judged && (wait <= 0 || wait > time.Second) {
			t.Errorf("%s: refused for %s, want at most a second", s.name, wait)
		}
	}
	if n := l.Remembered(); n > 2*clients {
		t.Errorf("the limiter remembers %d, bound %d", n, 2*clients)
	}
}

// TestTheOverflowBoundsGuessesPerSecond is a sustained attack from more
// addresses than the table holds, each guess from a new address: however
// many it sends, a short credential faces at most the table's allowance
// plus the overflow's rate.
func TestTheOverflowBoundsGuessesPerSecond(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		perSecond int
		seconds   int
	}{
		{"as fast as it can", 1000, 10},
		{"just above the rate", 4, 10},
		{"for longer than the window", 50, 150},
	}
	const clients, failures = 20, 3
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, c, logs := newLimiter(t, failures, clients)
			judged, n := 0, 0
			for range tt.seconds {
				for range tt.perSecond {
					n++
					if ok, _ := try(l, fmt.Sprintf("10.%d.%d.%d:1", n>>16, n>>8&0xff, n&0xff), authlimit.Failed); ok {
						judged++
					}
					c.advance(time.Second / time.Duration(tt.perSecond))
				}
			}
			// The window is a minute: each one the table takes clients
			// records anew.
			windows := (tt.seconds + 59) / 60
			if bound := windows*clients + failures*(tt.seconds+1); judged > bound {
				t.Errorf("%d guesses judged in %ds, bound %d", judged, tt.seconds, bound)
			}
			if tt.perSecond > failures && judged < failures*tt.seconds {
				t.Errorf("%d guesses judged in %ds: the overflow let fewer than its rate through", judged, tt.seconds)
			}
			if w := strings.Count(logs.String(), "beyond the full table"); w != windows {
				t.Errorf("%d overflow warnings in %ds, want one a window (%d)", w, tt.seconds, windows)
			}
		})
	}
}

func TestParallelGuessesGetExactlyTheLimit(t *testing.T) {
	t.Parallel()
	l, _, _ := newLimiter(t, 5, 10)
	var judged atomic.Int32
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			l.Check("192.0.2.1:1", func() authlimit.Outcome {
				judged.Add(1)
				return authlimit.Failed
			})
		})
	}
	wg.Wait()
	if n := judged.Load(); n != 5 {
		t.Fatalf("%d parallel guesses judged, want 5", n)
	}
}

func TestKnownClientsAreBounded(t *testing.T) {
	t.Parallel()
	l, _, _ := newLimiter(t, 3, 10)
	for i := range 1000 {
		try(l, fmt.Sprintf("10.0.%d.%d:1", i>>8, i&0xff), authlimit.Passed)
	}
	if n := l.Remembered(); n != 10 {
		t.Fatalf("%d clients remembered after 1000 successes, want the bound 10", n)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for wait, want := range map[time.Duration]string{
		time.Nanosecond:                "1",
		time.Second:                    "1",
		1500 * time.Millisecond:        "2",
		4*time.Minute + 59*time.Second: "299",
	} {
		if got := authlimit.RetryAfter(wait); got != want {
			t.Errorf("RetryAfter(%s) = %s, want %s", wait, got, want)
		}
	}
}

func TestNewRefusesNegativeSettings(t *testing.T) {
	t.Parallel()
	for _, cfg := range []authlimit.Config{{Failures: -1}, {Window: -time.Second}, {Clients: -1}} {
		if _, err := authlimit.New(cfg); err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("New(%+v) = %v", cfg, err)
		}
	}
}
