//go:build linux

package pluginhost

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
)

// BenchmarkSend measures the plugin boundary alone: sends that the
// misbehave plugin answers at once, from 16 goroutines as the worker pool's
// default concurrency would, reporting the CPU both processes spend per
// send, for each protocol version. With HYMICAL_BENCH_PLUGIN_CPUPROFILE=path
// set, the plugin process writes its CPU profile to path-protocol=N (and
// -cpuprofile gives the host's).
func BenchmarkSend(b *testing.B) {
	for _, v := range []int{1, 2} {
		b.Run(fmt.Sprintf("protocol=%d", v), func(b *testing.B) {
			h := newHostB(b, misbehaveConfig(nil), v)
			msg := mode("ok")
			msg.Headers = []transport.Header{
				{Name: "webhook-id", Value: "dlv_0123456789abcdef0123456789abcdef"},
				{Name: "webhook-timestamp", Value: "1700000000"},
				{Name: "webhook-signature", Value: "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
			}
			msg.Body = []byte(`{"type":"submission.received","submission":{"id":"sub_48984534f33749c49a88de2d59400dce","form_id":"form_bench","data":{"name":"Ada Lovelace","email":"ada@example.com","message":"Hello from hymical bench"}}}`)
			pluginPID := h.slots["misbehave"].cur.proc.Pid
			b.SetParallelism(16)
			selfBefore, pluginBefore := selfCPU(b), procCPU(b, pluginPID)
			selfIO, pluginIO := procSyscalls(b, os.Getpid()), procSyscalls(b, pluginPID)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if out := h.Send(context.Background(), "misbehave", msg, time.Now().Add(10*time.Second)); out.Kind != transport.OutcomeDelivered {
						b.Errorf("outcome = %+v", out)
						return
					}
				}
			})
			b.StopTimer()
			self, plugin := selfCPU(b)-selfBefore, procCPU(b, pluginPID)-pluginBefore
			b.ReportMetric(float64(procSyscalls(b, os.Getpid())-selfIO)/float64(b.N), "host-rw-syscalls/op")
			b.ReportMetric(float64(procSyscalls(b, pluginPID)-pluginIO)/float64(b.N), "plugin-rw-syscalls/op")
			b.ReportMetric(float64(self.Nanoseconds())/float64(b.N)/1e3, "host-cpu-µs/op")
			b.ReportMetric(float64(plugin.Nanoseconds())/float64(b.N)/1e3, "plugin-cpu-µs/op")
		})
	}
}

// newHostB starts a host for the misbehave plugin serving protocol v, and
// stops it when the benchmark ends.
func newHostB(b *testing.B, cfg Config, v int) *Host {
	b.Helper()
	var env []string
	if v == 1 {
		env = append(env, "MISBEHAVE_PROTOCOL=1")
	}
	if path := os.Getenv("HYMICAL_BENCH_PLUGIN_CPUPROFILE"); path != "" {
		env = append(env, fmt.Sprintf("MISBEHAVE_CPUPROFILE=%s-protocol=%d", path, v))
	}
	cfg.PluginEnv = func(string) []string { return env }
	h, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	if got := h.slots["misbehave"].cur.protocol; got != v {
		b.Fatalf("negotiated protocol %d, want %d", got, v)
	}
	return h
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procSyscalls is how many read and write system calls process pid has
// made so far, from /proc: unlike CPU time, a count that the machine's
// other load does not blur.
func procSyscalls(b *testing.B, pid int) int64 {
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(string(io), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && (k == "syscr" || k == "syscw") {
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
	}
	return n
}

// procCPU is the CPU time of process pid so far, from /proc.
func procCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the whole line, in clock ticks (100 a
	// second on Linux).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
