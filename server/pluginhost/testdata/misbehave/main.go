// Command misbehave is a transport plugin for the plugin host's tests,
// written only against sdk/transport as any third-party plugin would be.
// The endpoint's "mode" config says how to behave on Send:
//
//	ok          delivered, status 200
//	configured  delivered, with the "marker" setting from Configure as the
//	            error text; permanent if Configure never ran
//	deadline    delivered, with Message.Deadline and the context's deadline
//	            as the error text
//	env         delivered, with the process environment as the error text
//	log         writes a line to stderr, then delivered
//	slow        waits for the context to end, then retryable
//	hang        never answers, whatever the context says
//	log_hang    writes "misbehave hangs on ID" to stderr, then as hang
//	exit        exits the process mid-send
//	sigkill     SIGKILLs itself mid-send
//	panic       panics mid-send
//	refuse      refused before any request: permanent, NoRequest set
//	defer       not sent for now: retryable, NoRequest set
//	plain_fail  permanent, NoRequest left unset, as a plugin from before
//	            the field answers
//
//	spawn       starts a child (this binary again, sleeping ten minutes)
//	            that inherits the process's own stdout and stderr, the
//	            pipes go-plugin reads, then delivered with the child's pid
//	            as the error text; "setsid" in the endpoint config puts the
//	            child in a session of its own, out of the plugin's process
//	            group; "quiet" gives the child no stdout or stderr at
//	            all, so it holds none of the plugin's pipes
//	spew        writes a line of "bytes" bytes (the endpoint config) to
//	            stderr, without its newline when "newline" is "no", then
//	            "spew done for ID" on a line of its own, then delivered;
//	            "to" says which stderr: "sync" (the default) is os.Stderr
//	            once serving, which go-plugin carries over gRPC; "raw" is
//	            the process's own stderr, which go-plugin reads from a pipe;
//	            "stdout" is the process's own stdout, the handshake's pipe
//
// A "validate" config of "hang" makes Validate never answer. A
// "fail_configure" setting makes Configure refuse with its value. While
// the file a "configure_hang_while" setting names exists, Configure never
// answers, whatever its context says; while the file a
// "configure_exit_while" setting names exists, Configure exits the
// process. Removing the file lets the next start succeed.
//
// A "late" mode answers delivered only after its deadline has passed, by
// half the "late_by" setting's duration (so within the host's grace when
// late_by is the grace), ignoring its context. A "slow_ok" mode answers
// delivered after its endpoint config's "delay", ignoring its context.
//
// With MISBEHAVE_PROTOCOL=1 in its environment it serves protocol version 1
// only, as a plugin built against an SDK from before protocol 2 does. With
// MISBEHAVE_CPUPROFILE=path it writes a CPU profile of its whole run there,
// for profiling the plugin's side of the boundary (see BenchmarkSend).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/hymical/hymical/sdk/transport"
)

type misbehave struct {
	mu       sync.Mutex
	settings transport.Settings
	// rawStdout and rawStderr are the process's own stdout and stderr, the
	// pipes to the host, kept before go-plugin points os.Stdout and
	// os.Stderr at its gRPC stream.
	rawStdout, rawStderr *os.File
}

func (m *misbehave) Configure(_ context.Context, s transport.Settings) error {
	if reason := s["fail_configure"]; reason != "" {
		return errors.New(reason)
	}
	if exists(s["configure_hang_while"]) {
		select {}
	}
	if exists(s["configure_exit_while"]) {
		os.Exit(4)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settings = s
	return nil
}

func (m *misbehave) Validate(_ context.Context, e transport.Endpoint) error {
	if e.Config["validate"] == "hang" {
		select {}
	}
	modes := []string{"ok", "configured", "deadline", "env", "args", "log", "late", "slow_ok", "slow", "hang", "log_hang", "exit", "sigkill", "panic", "refuse", "defer", "plain_fail", "spawn", "spew"}
	for _, mode := range modes {
		if e.Config["mode"] == mode {
			return nil
		}
	}
	return fmt.Errorf("mode %q is not one of %s", e.Config["mode"], strings.Join(modes, ", "))
}

func (m *misbehave) Send(ctx context.Context, msg transport.Message) transport.Outcome {
	switch mode := msg.Endpoint.Config["mode"]; mode {
	case "ok":
		return transport.Delivered(200)
	case "configured":
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.settings == nil {
			return transport.Permanent(0, "not configured")
		}
		return transport.Outcome{Kind: transport.OutcomeDelivered, StatusCode: 200, Error: "marker=" + m.settings["marker"]}
	case "deadline":
		d, _ := ctx.Deadline()
		return transport.Outcome{Kind: transport.OutcomeDelivered, StatusCode: 200,
			Error: msg.Deadline.UTC().Format(time.RFC3339Nano) + " " + d.UTC().Format(time.RFC3339Nano)}
	case "env":
		return transport.Outcome{Kind: transport.OutcomeDelivered, StatusCode: 200, Error: strings.Join(os.Environ(), "\n")}
	case "args":
		// What it was started with: a built-in transport's arguments.
		return transport.Outcome{Kind: transport.OutcomeDelivered, StatusCode: 200, Error: strings.Join(os.Args[1:], " ")}
	case "log":
		fmt.Fprintln(os.Stderr, "misbehave says hello for", msg.DeliveryID)
		return transport.Delivered(200)
	case "late":
		m.mu.Lock()
		lateBy, _ := time.ParseDuration(m.settings["late_by"])
		m.mu.Unlock()
		time.Sleep(time.Until(msg.Deadline.Add(lateBy / 2)))
		return transport.Delivered(200)
	case "slow_ok":
		delay, _ := time.ParseDuration(msg.Endpoint.Config["delay"])
		time.Sleep(delay)
		return transport.Outcome{Kind: transport.OutcomeDelivered, StatusCode: 200, Error: msg.DeliveryID}
	case "slow":
		<-ctx.Done()
		return transport.Retryable(0, "gave up: "+ctx.Err().Error())
	case "hang":
		select {}
	case "log_hang":
		fmt.Fprintln(os.Stderr, "misbehave hangs on", msg.DeliveryID)
		select {}
	case "exit":
		os.Exit(3)
	case "sigkill":
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill()
		select {}
	case "panic":
		panic("misbehave: asked to panic")
	case "spawn":
		return m.spawn(msg.Endpoint.Config["setsid"] == "true", msg.Endpoint.Config["quiet"] == "true")
	case "spew":
		return m.spew(msg)
	case "refuse":
		return transport.Refused("misbehave refuses the target before connecting")
	case "defer":
		return transport.Deferred("misbehave is not sending for now")
	case "plain_fail":
		return transport.Permanent(0, "misbehave failed, and does not say whether a request went out")
	default:
		return transport.Permanent(0, fmt.Sprintf("unknown mode %q", mode))
	}
	return transport.Outcome{}
}

// spawn starts a child that lives ten minutes, holding the process's
// stdout and stderr open unless quiet, as a plugin's helper process or a
// forgotten grandchild would.
func (m *misbehave) spawn(setsid, quiet bool) transport.Outcome {
	self, err := os.Executable()
	if err != nil {
		return transport.Permanent(0, err.Error())
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"=sleep")
	if !quiet {
		cmd.Stdout, cmd.Stderr = m.rawStdout, m.rawStderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	if err := cmd.Start(); err != nil {
		return transport.Permanent(0, err.Error())
	}
	// Reaped in the background while the plugin lives; once it is gone,
	// the child is an orphan holding the pipes.
	go func() { _ = cmd.Wait() }()
	return transport.Outcome{Kind: transport.OutcomeDelivered, StatusCode: 200, Error: strconv.Itoa(cmd.Process.Pid)}
}

// spew writes one long line to stderr, then a short one that says it is
// done.
func (m *misbehave) spew(msg transport.Message) transport.Outcome {
	cfg := msg.Endpoint.Config
	n, err := strconv.Atoi(cfg["bytes"])
	if err != nil {
		return transport.Permanent(0, "bytes: "+err.Error())
	}
	w := os.Stderr
	switch cfg["to"] {
	case "raw":
		w = m.rawStderr
	case "stdout":
		w = m.rawStdout
	}
	line := strings.Repeat("y", n)
	if cfg["newline"] != "no" {
		line += "\n"
	}
	if _, err := io.WriteString(w, line); err != nil {
		return transport.Permanent(0, err.Error())
	}
	// After a line without its newline this one is a continuation of the
	// long one; it is still written.
	fmt.Fprintln(w, "spew done for", msg.DeliveryID)
	return transport.Delivered(200)
}

// exists reports whether path names a file that exists; "" names none.
func exists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}

// childEnv, set to "sleep", makes the binary the child spawn starts.
const childEnv = "MISBEHAVE_CHILD"

func main() {
	if os.Getenv(childEnv) == "sleep" {
		time.Sleep(10 * time.Minute)
		return
	}
	impl := &misbehave{rawStdout: os.Stdout, rawStderr: os.Stderr}
	if path := os.Getenv("MISBEHAVE_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "misbehave: no profile:", err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "misbehave: no profile:", err)
		} else {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	if os.Getenv("MISBEHAVE_PROTOCOL") == "1" {
		serveV1(impl)
		return
	}
	transport.Serve(impl)
}

// serveV1 serves protocol 1 only, as transport.Serve did before protocol 2:
// a host must negotiate it and send every attempt as its own call.
func serveV1(impl transport.Transport) {
	hs := transport.Handshake()
	hs.ProtocolVersion = 1
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: map[int]plugin.PluginSet{1: transport.VersionedPlugins(impl)[1]},
		GRPCServer:       plugin.DefaultGRPCServer,
	})
}
