//go:build unix

package pluginhost

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/hymical/hymical/sdk/transport"
)

// protocol is the protocol version the host speaks with the named plugin's
// current process.
func protocol(t *testing.T, h *Host, name string) int {
	t.Helper()
	s := h.slots[name]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		t.Fatalf("plugin %q has no running process", name)
	}
	return s.cur.protocol
}

// v1Config is misbehaveConfig for the misbehave plugin serving protocol 1
// only, as one built against an SDK from before protocol 2.
func v1Config(settings map[string]string) Config {
	cfg := misbehaveConfig(settings)
	cfg.PluginEnv = func(string) []string { return []string{"MISBEHAVE_PROTOCOL=1"} }
	return cfg
}

// A plugin built against an older SDK gets protocol 1, every send its own
// call, with the same guarantees; a current one gets protocol 2.
func TestProtocolNegotiation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  func(map[string]string) Config
		want int
	}{
		{"current plugin", misbehaveConfig, transport.ProtocolVersion},
		{"protocol 1 plugin", v1Config, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newHost(t, tt.cfg(map[string]string{"marker": "m"}))
			if got := protocol(t, h, "misbehave"); got != tt.want {
				t.Fatalf("negotiated protocol %d, want %d", got, tt.want)
			}
			deadline := time.Now().Add(3 * time.Second).UTC()
			if out := h.Send(context.Background(), "misbehave", mode("deadline"), deadline); !strings.HasPrefix(out.Error, deadline.Format(time.RFC3339Nano)) {
				t.Errorf("deadline outcome = %+v, want the attempt's deadline", out)
			}
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Kind != transport.OutcomeDelivered || out.Error != "marker=m" {
						t.Errorf("outcome = %+v, want delivered by the configured plugin", out)
					}
				})
			}
			wg.Wait()

			out := h.Send(context.Background(), "misbehave", mode("exit"), soon())
			if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "crashed") {
				t.Errorf("crash outcome = %+v, want retryable saying the plugin crashed", out)
			}
			out = h.Send(context.Background(), "misbehave", mode("hang"), time.Now().Add(100*time.Millisecond))
			if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "did not answer") {
				t.Errorf("hang outcome = %+v, want retryable saying the plugin did not answer", out)
			}
			if n := h.Restarts("misbehave"); n != 2 {
				t.Errorf("Restarts = %d, want 2", n)
			}
			if got := protocol(t, h, "misbehave"); got != tt.want {
				t.Errorf("the restarted plugin speaks protocol %d, want %d", got, tt.want)
			}
			if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Kind != transport.OutcomeDelivered || out.Error != "marker=m" {
				t.Errorf("outcome after the restarts = %+v, want delivered by a configured plugin", out)
			}
		})
	}
}

// Many sends in flight on one plugin's stream, finishing in another order
// than they were sent, each get their own answer.
func TestManySendsMultiplexedOnTheStream(t *testing.T) {
	t.Parallel()
	h, _ := newHost(t, misbehaveConfig(nil))
	before := pid(t, h, "misbehave")
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			msg := mode("slow_ok")
			msg.DeliveryID = fmt.Sprintf("dlv_%02d", i)
			// Later sends finish sooner, so answers come back out of order.
			msg.Endpoint.Config["delay"] = fmt.Sprintf("%dms", (n-i)*2)
			if out := h.Send(context.Background(), "misbehave", msg, soon()); out.Kind != transport.OutcomeDelivered || out.Error != msg.DeliveryID {
				t.Errorf("send %s got %+v, want its own delivered answer", msg.DeliveryID, out)
			}
		})
	}
	wg.Wait()
	if after := pid(t, h, "misbehave"); after != before || h.Restarts("misbehave") != 0 {
		t.Errorf("process %d → %d with %d restarts, want one process throughout", before, after, h.Restarts("misbehave"))
	}
}

// A plugin killed from outside with sends in flight on its stream: every
// one of them is retryable at once (not at its deadline, an hour away), the
// plugin is restarted once, and later sends work.
func TestKilledWithSendsInFlightOnTheStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  func(map[string]string) Config
	}{
		{"protocol 2", misbehaveConfig},
		{"protocol 1", v1Config},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, logs := newHost(t, tt.cfg(map[string]string{"marker": "relaunched"}))
			victim := pid(t, h, "misbehave")
			const n = 8
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					msg := mode("log_hang")
					msg.DeliveryID = fmt.Sprintf("dlv_inflight_%d", i)
					out := h.Send(context.Background(), "misbehave", msg, time.Now().Add(time.Hour))
					if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "crashed") {
						t.Errorf("in-flight send %s got %+v, want retryable saying the plugin crashed", msg.DeliveryID, out)
					}
				})
			}
			waitInFlight(t, n, logs)
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if n := h.Restarts("misbehave"); n != 1 {
				t.Errorf("Restarts = %d, want 1", n)
			}
			if out := h.Send(context.Background(), "misbehave", mode("configured"), soon()); out.Kind != transport.OutcomeDelivered || out.Error != "marker=relaunched" {
				t.Errorf("outcome after the kill = %+v, want delivered by a relaunched, configured plugin", out)
			}
		})
	}
}

// waitInFlight waits until n sends in log_hang mode have reached the
// plugin, as its log lines in the host's log say.
func waitInFlight(t *testing.T, n int, logs fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(logs.String(), "misbehave hangs on") < n; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d sends reached the plugin\n%s", strings.Count(logs.String(), "misbehave hangs on"), n, logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One send answered after its deadline but within the grace, among others
// answered on time: every one gets its plugin's answer and nothing is
// restarted. One that never answers, among others, costs only itself and a
// restart.
func TestOneLateAnswerAmongOthersOnTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		odd          string
		wantOdd      transport.OutcomeKind
		wantRestarts int
	}{
		{"late within the grace", "late", transport.OutcomeDelivered, 0},
		{"never", "hang", transport.OutcomeRetryable, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := misbehaveConfig(map[string]string{"late_by": "300ms"})
			cfg.SendGrace = 2 * time.Second // the late answer comes 150ms after its deadline
			h, _ := newHost(t, cfg)
			var wg sync.WaitGroup
			wg.Go(func() {
				out := h.Send(context.Background(), "misbehave", mode(tt.odd), time.Now().Add(200*time.Millisecond))
				if out.Kind != tt.wantOdd {
					t.Errorf("%s send got %+v, want %s", tt.odd, out, tt.wantOdd)
				}
			})
			for i := range 16 {
				wg.Go(func() {
					msg := mode("slow_ok")
					msg.DeliveryID = fmt.Sprintf("dlv_%d", i)
					msg.Endpoint.Config["delay"] = fmt.Sprintf("%dms", i*10)
					if out := h.Send(context.Background(), "misbehave", msg, soon()); out.Kind != transport.OutcomeDelivered || out.Error != msg.DeliveryID {
						t.Errorf("send %s got %+v, want its own delivered answer", msg.DeliveryID, out)
					}
				})
			}
			wg.Wait()
			if n := h.Restarts("misbehave"); n != tt.wantRestarts {
				t.Errorf("Restarts = %d, want %d", n, tt.wantRestarts)
			}
		})
	}
}

// A host built against an SDK from before protocol 2 offers only protocol
// 1; a current plugin serves it that, every send its own call.
func TestProtocol1HostWithACurrentPlugin(t *testing.T) {
	t.Parallel()
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  transport.Handshake(),
		VersionedPlugins: map[int]plugin.PluginSet{1: transport.HostPlugins(nil)[1]},
		Cmd:              exec.Command(misbehaveBin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		Logger:           hclog.NewNullLogger(),
	})
	t.Cleanup(client.Kill)
	rpcClient, err := client.Client()
	if err != nil {
		t.Fatal(err)
	}
	if v := client.NegotiatedVersion(); v != 1 {
		t.Fatalf("negotiated protocol %d, want 1", v)
	}
	raw, err := rpcClient.Dispense(transport.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := raw.(*transport.GRPCClient)
	if !ok {
		t.Fatalf("dispensed %T, want *transport.GRPCClient", raw)
	}
	if c.Protocol() != 1 {
		t.Fatalf("the client speaks protocol %d, want 1", c.Protocol())
	}
	if err := c.Configure(context.Background(), transport.Settings{"marker": "old-host"}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.SendRPC(context.Background(), mode("configured")); err != nil || out.Error != "marker=old-host" {
		t.Errorf("SendRPC = %+v, %v; want delivered by the configured plugin", out, err)
	}
}
