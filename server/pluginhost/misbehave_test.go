//go:build unix

package pluginhost

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/sdk/transport"
)

// spawnChild has the plugin start a child holding its stdout and stderr
// and returns the child's pid; the child is killed when the test ends,
// before the host is closed.
func spawnChild(t *testing.T, h *Host, setsid, quiet bool) int {
	t.Helper()
	msg := mode("spawn")
	msg.Endpoint.Config["setsid"] = strconv.FormatBool(setsid)
	msg.Endpoint.Config["quiet"] = strconv.FormatBool(quiet)
	out := h.Send(context.Background(), "misbehave", msg, soon())
	child, err := strconv.Atoi(out.Error)
	if out.Kind != transport.OutcomeDelivered || err != nil {
		t.Fatalf("spawn outcome = %+v, want delivered with the child's pid", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	return child
}

// within runs f and fails the test if it has not returned by limit. A
// call that never returns is left running; the test's cleanup, which
// kills the child holding the pipes, releases it.
func within(t *testing.T, limit time.Duration, what string, f func()) time.Duration {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("%s had not returned after %s", what, limit)
		return 0
	}
}

// A plugin's child that keeps the plugin's stdout and stderr open cannot
// hold up a restart, the sends in flight on the process being replaced,
// or Close. A child in the plugin's process group dies with it; one that
// left the group (a session of its own) is out of the host's reach, but
// its pipes are no longer waited on.
func TestAChildHoldingThePluginsOutputDoesNotHoldUpItsKill(t *testing.T) {
	t.Parallel()
	const (
		deadline = 200 * time.Millisecond
		grace    = 300 * time.Millisecond // misbehaveConfig's
	)
	// The kill, then the start of a new process, which the host bounds
	// by its start timeout. Without the fix the kill never returns.
	restart := deadline + grace + KillBound + DefaultStartTimeout
	for _, setsid := range []bool{false, true} {
		for _, how := range []string{"hang", "exit", "close"} {
			t.Run(fmt.Sprintf("setsid=%v/%s", setsid, how), func(t *testing.T) {
				t.Parallel()
				h, _ := newHost(t, misbehaveConfig(map[string]string{"marker": "fresh"}))
				before := pid(t, h, "misbehave")
				child := spawnChild(t, h, setsid, false)

				if how == "close" {
					took := within(t, KillBound+2*time.Second, "Close", h.Close)
					t.Logf("Close took %s", took.Round(time.Millisecond))
					if took < gracefulExit {
						t.Errorf("Close took %s: the plugin's group was killed before its %s grace", took, gracefulExit)
					}
				} else {
					// Sends in flight on the process being replaced are
					// answered, not left waiting on the kill.
					var wg sync.WaitGroup
					for range 4 {
						wg.Go(func() {
							out := h.Send(context.Background(), "misbehave", mode("slow"), time.Now().Add(time.Minute))
							if out.Kind != transport.OutcomeRetryable {
								t.Errorf("in-flight outcome = %+v, want retryable", out)
							}
						})
					}
					time.Sleep(100 * time.Millisecond) // let them reach the plugin
					var out transport.Outcome
					took := within(t, restart, "the send that restarts the plugin", func() {
						out = h.Send(context.Background(), "misbehave", mode(how), time.Now().Add(deadline))
					})
					t.Logf("the send that restarted the plugin took %s", took.Round(time.Millisecond))
					if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "restarted") {
						t.Errorf("outcome = %+v, want retryable, the plugin restarted", out)
					}
					within(t, restart, "the sends in flight", wg.Wait)
					if n := h.Restarts("misbehave"); n != 1 {
						t.Errorf("Restarts = %d, want 1", n)
					}
					if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Error != "marker=fresh" {
						t.Errorf("outcome after the restart = %+v, want delivered by a configured plugin", out)
					}
				}
				if !proctest.Ended(before) {
					t.Errorf("the plugin process %d is still alive", before)
				}
				if got := proctest.Ended(child); got != !setsid {
					t.Errorf("child %d (setsid %v) dead = %v, want %v: the host kills the plugin's process group, no more", child, setsid, got, !setsid)
				}
			})
		}
	}
}

// A plugin that exits within its grace on Close, leaving a child that
// holds none of its pipes, does not leave the child running: the group is
// killed once the plugin has gone.
func TestCloseKillsAChildLeftBehindByAPluginThatExited(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))
	child := spawnChild(t, h, false, true)
	took := within(t, KillBound+2*time.Second, "Close", h.Close)
	if took >= gracefulExit {
		t.Errorf("Close took %s: the plugin, holding no pipes of its own, should have exited within its grace", took)
	}
	for deadline := time.Now().Add(2 * time.Second); !proctest.Ended(child); {
		if time.Now().After(deadline) {
			t.Fatalf("child %d still running after Close", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A plugin process that exits while its child holds its pipes counts as
// exited: the next send starts a new one rather than using the dead one.
func TestAPluginThatExitedIsSeenGoneWhileAChildHoldsItsPipes(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(map[string]string{"marker": "relaunched"}))
	before := pid(t, h, "misbehave")
	spawnChild(t, h, false, false)
	if err := syscall.Kill(before, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, h, "misbehave")
	if err := h.Up(context.Background()); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Error != "marker=relaunched" || h.Restarts("misbehave") != 1 {
		t.Errorf("outcome = %+v after %d restarts, want delivered by one relaunched plugin", out, h.Restarts("misbehave"))
	}
}

// A line of plugin output over go-plugin's 64 KiB read buffer, or of
// megabytes with no newline, on any of the three ways out of a plugin,
// neither blocks the plugin nor reaches the log longer than
// MaxOutputLine; the log says how much was dropped and goes on.
func TestLongPluginOutputLinesAreBounded(t *testing.T) {
	t.Parallel()
	for _, to := range []string{"sync", "raw", "stdout"} {
		for _, size := range []struct {
			bytes   int
			newline bool
		}{{100 << 10, true}, {3 << 20, false}} {
			t.Run(fmt.Sprintf("%s/%d bytes newline=%v", to, size.bytes, size.newline), func(t *testing.T) {
				t.Parallel()
				h, logs := newHost(t, misbehaveConfig(nil))
				spew := func(id string, n int, newline bool) transport.Outcome {
					msg := mode("spew")
					msg.DeliveryID = id
					msg.Endpoint.Config["bytes"] = strconv.Itoa(n)
					msg.Endpoint.Config["to"] = to
					msg.Endpoint.Config["newline"] = map[bool]string{true: "yes", false: "no"}[newline]
					return h.Send(context.Background(), "misbehave", msg, time.Now().Add(5*time.Second))
				}
				// Three times over: a pipe holds 64 KiB, so a host that
				// stopped reading one blocks the plugin by the second.
				for i := range 3 {
					if out := spew(fmt.Sprintf("dlv_long%d", i), size.bytes, size.newline); out.Kind != transport.OutcomeDelivered {
						t.Fatalf("long line %d: outcome = %+v, want delivered", i, out)
					}
				}
				if out := spew("dlv_after", 10, true); out.Kind != transport.OutcomeDelivered {
					t.Fatalf("short line after: outcome = %+v, want delivered", out)
				}
				if out := h.Send(context.Background(), "misbehave", mode("log"), soon()); out.Kind != transport.OutcomeDelivered {
					t.Fatalf("log: outcome = %+v, want delivered", out)
				}
				want := []string{"misbehave says hello for dlv_test"}
				if to != "stdout" { // go-plugin discards stdout once started
					want = append(want, "spew done for dlv_after")
					// The long line, cut, with what it lost: after a line
					// without its newline, the line that says spew is
					// done is the rest of it.
					dropped := size.bytes - MaxOutputLine
					if !size.newline {
						dropped += len("spew done for dlv_long0")
					}
					want = append(want, strings.Repeat("y", 64)+droppedMarker(int64(dropped)))
				}
				for deadline := time.Now().Add(5 * time.Second); ; {
					missing := ""
					for _, w := range want {
						if !strings.Contains(logs.String(), w) {
							missing = w
						}
					}
					if missing == "" {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the host log never showed %.100q", missing)
					}
					time.Sleep(10 * time.Millisecond)
				}
				for line := range strings.Lines(logs.String()) {
					if len(line) > MaxOutputLine+1024 {
						t.Errorf("a log record of %d bytes: %.200s…", len(line), line)
					}
				}
			})
		}
	}
}

// hostProcessEnv, set to the misbehave plugin's path, makes the test
// binary a host process of its own (hostProcess), for a test to kill.
const hostProcessEnv = "PLUGINHOST_TEST_HOST_OF"

// hostProcess runs a host of the misbehave plugin serving protocol 1, a
// plugin built on go-plugin's Serve rather than the SDK's (which watches
// for its host's death itself), prints the plugin's pid and waits to be
// killed.
func hostProcess(bin string) int {
	cfg := Config{
		Plugins:   []PluginConfig{{Name: "misbehave", Path: bin}},
		PluginEnv: func(string) []string { return []string{"MISBEHAVE_PROTOCOL=1"} },
	}
	h, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(h.slots["misbehave"].cur.proc.Pid)
	select {}
}
