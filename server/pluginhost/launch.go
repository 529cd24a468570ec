package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/hashicorp/go-plugin"

	"github.com/hymical/hymical/sdk/transport"
)

// instance is one running plugin process.
type instance struct {
	client *plugin.Client
	proc   *os.Process
	rpc    *transport.GRPCClient
	// protocol is the version negotiated with the plugin: 2 carries the
	// sends on a stream, 1 (a plugin built against an older SDK) makes
	// each its own call.
	protocol int
}

func (i *instance) exited() bool { return i.client.Exited() }

// kill stops the process. force skips go-plugin's graceful shutdown, which
// waits up to two seconds: a plugin that crashed or hung gets no grace.
func (i *instance) kill(force bool) {
	if force && i.proc != nil {
		_ = i.proc.Kill()
	}
	i.client.Kill()
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
	cmd := exec.Command(sp.path)
	cmd.Env = pluginEnv()
	if h.pluginEnv != nil {
		cmd.Env = append(cmd.Env, h.pluginEnv(sp.name)...)
	}
	logger := h.logger.With("plugin", sp.name)
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  transport.Handshake(),
		VersionedPlugins: transport.HostPlugins(h.tracer),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		GRPCDialOptions:  transport.HostDialOptions(h.tracer),
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     h.startTimeout,
		Logger:           newHCLogAdapter(logger),
		SyncStdout:       io.Discard,
		SyncStderr:       &lineLogger{logger: logger},
	}
	if sp.sum != nil {
		// The pin comes from the config, never from the file about to run;
		// go-plugin hashes the file and compares before executing it.
		cfg.SecureConfig = &plugin.SecureConfig{Checksum: sp.sum, Hash: sha256.New()}
	}
	client := plugin.NewClient(cfg)
	inst, err := h.connect(ctx, client, cmd, sp)
	if err != nil {
		client.Kill()
		return nil, err
	}
	return inst, nil
}

func (h *Host) connect(ctx context.Context, client *plugin.Client, cmd *exec.Cmd, sp spec) (*instance, error) {
	rpcClient, err := client.Client()
	if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
		return nil, fmt.Errorf("%w: plugin %q at %s: the config pins SHA-256 %s but the file's is %s; "+
			"if this build was installed on purpose, update the plugin's sha256 in the config, otherwise the file was changed and must not be run",
			ErrChecksumMismatch, sp.name, sp.path, hex.EncodeToString(sp.sum), fileSum(sp.path))
	}
	if err != nil {
		return nil, fmt.Errorf("starting transport plugin %q (%s): %w", sp.name, sp.path, err)
	}
	raw, err := rpcClient.Dispense(transport.PluginName)
	if err != nil {
		return nil, fmt.Errorf("transport plugin %q (%s) does not serve %q: %w", sp.name, sp.path, transport.PluginName, err)
	}
	rpc, ok := raw.(*transport.GRPCClient)
	if !ok {
		return nil, fmt.Errorf("transport plugin %q (%s): dispensed %T, not a transport client", sp.name, sp.path, raw)
	}
	cctx, cancel := context.WithTimeout(ctx, h.startTimeout)
	defer cancel()
	if err := rpc.Configure(cctx, sp.settings); err != nil {
		return nil, fmt.Errorf("configuring transport plugin %q (%s): %w", sp.name, sp.path, err)
	}
	return &instance{client: client, proc: cmd.Process, rpc: rpc, protocol: rpc.Protocol()}, nil
}

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
