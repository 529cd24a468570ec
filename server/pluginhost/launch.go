package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/hymical/hymical/sdk/transport"
)

// instance is one running plugin process.
type instance struct {
	client *plugin.Client
	runner *procRunner
	proc   *os.Process
	rpc    *transport.GRPCClient
	logger *slog.Logger
	// protocol is the version negotiated with the plugin: 2 carries the
	// sends on a stream, 1 (a plugin built against an older SDK) makes
	// each its own call.
	protocol int
}

// exited reports whether the process has ended. go-plugin's own Exited
// waits for the process's pipes to close, which a child holding them
// delays for ever.
func (i *instance) exited() bool { return i.runner.hasExited() }

// kill stops the process and its process group, and returns within
// KillBound. Without force, go-plugin asks the plugin to exit and waits up
// to gracefulExit before the runner kills the group; force kills the group
// at once, for a plugin that crashed or hung and gets no grace.
func (i *instance) kill(force bool) {
	if force {
		_ = i.runner.Kill(context.Background())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		i.client.Kill()
	}()
	t := time.NewTimer(KillBound)
	defer t.Stop()
	select {
	case <-done:
		// A plugin that exited within its grace may have left children
		// (not holding its pipes, or go-plugin would have waited);
		// the group goes now. A no-op when the runner killed it already.
		_ = i.runner.Kill(context.Background())
	case <-t.C:
		// The process was SIGKILLed and its pipes closed; what is left
		// is the kernel reaping it, which a process stuck in an
		// uninterruptible wait does not allow. go-plugin's goroutines
		// finish whenever it does.
		i.logger.Warn("transport plugin process did not go away after SIGKILL; no longer waiting for it", "pid", i.runner.ID(), "waited", KillBound)
	}
}

// pluginEnv is what a plugin inherits from the server's environment. The
// server's environment holds database DSNs and other secrets that a plugin
// must never see, so it is not passed on whole; these are what the Go
// runtime and TLS need to work as the operator set them up. go-plugin adds
// its own handshake variables.
func pluginEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "TMPDIR", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// launch starts one plugin process, dispenses its client and configures it.
// On any failure the process is killed.
func (h *Host) launch(ctx context.Context, sp spec) (*instance, error) {
	env := pluginEnv()
	if h.pluginEnv != nil {
		env = append(env, h.pluginEnv(sp.name)...)
	}
	logger := h.logger.With("plugin", sp.name)
	// The runner checks the SHA-256 pin, as go-plugin's SecureConfig
	// would were it not the runner that starts the process.
	r := newProcRunner(sp, env, h.spawn)
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  transport.Handshake(),
		VersionedPlugins: transport.HostPlugins(h.tracer),
		RunnerFunc:       r.attach,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		GRPCDialOptions:  transport.HostDialOptions(h.tracer),
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     h.startTimeout,
		Logger:           newHCLogAdapter(logger),
		SyncStdout:       io.Discard,
		SyncStderr:       newLineLogger(logger, h.spanOut),
	}
	inst := &instance{client: plugin.NewClient(cfg), runner: r, logger: logger}
	if err := h.connect(ctx, inst, sp); err != nil {
		inst.kill(false)
		return nil, err
	}
	return inst, nil
}

func (h *Host) connect(ctx context.Context, inst *instance, sp spec) error {
	rpcClient, err := inst.client.Client()
	if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
		return fmt.Errorf("%w: plugin %q at %s: the config pins SHA-256 %s but the file's is %s; "+
			"if this build was installed on purpose, update the plugin's sha256 in the config, otherwise the file was changed and must not be run",
			ErrChecksumMismatch, sp.name, sp.path, hex.EncodeToString(sp.sum), fileSum(sp.path))
	}
	if err != nil {
		return fmt.Errorf("starting transport plugin %q (%s): %w", sp.name, sp.path, err)
	}
	raw, err := rpcClient.Dispense(transport.PluginName)
	if err != nil {
		return fmt.Errorf("transport plugin %q (%s) does not serve %q: %w", sp.name, sp.path, transport.PluginName, err)
	}
	rpc, ok := raw.(*transport.GRPCClient)
	if !ok {
		return fmt.Errorf("transport plugin %q (%s): dispensed %T, not a transport client", sp.name, sp.path, raw)
	}
	cctx, cancel := context.WithTimeout(ctx, h.startTimeout)
	defer cancel()
	if err := rpc.Configure(cctx, sp.settings); err != nil {
		return configureError{fmt.Errorf("configuring transport plugin %q (%s): %w", sp.name, sp.path, err)}
	}
	inst.proc, inst.rpc, inst.protocol = inst.runner.cmd.Process, rpc, rpc.Protocol()
	return nil
}

// configureError is a plugin that started but whose Configure failed.
type configureError struct{ error }

func (e configureError) Unwrap() error { return e.error }

// fileSum is the SHA-256 of the file at path, for the mismatch error only:
// it is what tells an operator whether the file or the pin is stale.
func fileSum(path string) string {
	sum, err := FileSHA256(path)
	if err != nil {
		return "unreadable (" + err.Error() + ")"
	}
	return sum
}

// FileSHA256 is the hex SHA-256 of the file at path. It describes the file
// as it is now; a pin must come from a trusted source, never from this.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
