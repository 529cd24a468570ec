package transport

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// PluginName is the name the one plugin a transport binary serves is
// dispensed under. Host and plugin both take it from here, so they cannot
// disagree.
const PluginName = "transport"

// ProtocolVersion is the newest version of the plugin protocol this SDK
// speaks. A change old plugins cannot ignore gets a new number and a new
// entry in VersionedPlugins, so hosts keep serving plugins built against
// an older SDK.
//
// Version 1 sends every attempt as its own unary Send call. Version 2 adds
// SendStream, which carries every attempt of a host on one long-lived
// stream per plugin process; it is what a host and a plugin both built
// against this SDK speak. Either side built against an older SDK gets
// version 1, from the same binary.
const ProtocolVersion = 2

// tracerScope is the instrumentation scope of the spans this package makes.
const tracerScope = "github.com/hymical/hymical/sdk/transport"

// The magic cookie tells a plugin binary that it was started by a Hymical
// host. It is a UX guard, not security: it only lets a binary run by hand
// print a helpful message instead of waiting for a handshake nobody sends.
// Trust in the binary comes from the host's SHA-256 pin, and the connection
// is authenticated by go-plugin's AutoMTLS.
const (
	MagicCookieKey   = "HYMICAL_TRANSPORT_PLUGIN"
	MagicCookieValue = "6f1d0c8e4b2a4f7fa3c1d9e85b7a2c40"
)

// Handshake is the configuration host and plugin must agree on before any
// call. It is a function so no caller can change the shared value. Its
// ProtocolVersion is only go-plugin's fallback for a peer that does not
// negotiate; VersionedPlugins is what the two sides agree a version from.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   MagicCookieKey,
		MagicCookieValue: MagicCookieValue,
	}
}

// VersionedPlugins is the plugin set for every protocol version this SDK
// speaks. A plugin passes its implementation; a host passes nil, or uses
// HostPlugins to have the sends on a stream traced.
func VersionedPlugins(impl Transport) map[int]plugin.PluginSet {
	return versionedPlugins(impl, nil)
}

// HostPlugins is VersionedPlugins for a host: each Send carried on a
// stream gets a client span from tp (nil means none; the caller's trace
// context crosses either way). Dial with HostDialOptions(tp) too, for the
// unary calls.
func HostPlugins(tp trace.TracerProvider) map[int]plugin.PluginSet {
	return versionedPlugins(nil, tp)
}

func versionedPlugins(impl Transport, tp trace.TracerProvider) map[int]plugin.PluginSet {
	sets := make(map[int]plugin.PluginSet, ProtocolVersion)
	for v := 1; v <= ProtocolVersion; v++ {
		sets[v] = plugin.PluginSet{PluginName: &Plugin{Impl: impl, Protocol: v, TracerProvider: tp}}
	}
	return sets
}

// Serve runs impl as a transport plugin. Call it from the plugin's main; it
// returns when the host stops the plugin. Run by hand, outside a host, it
// prints a message and exits.
//
// The plugin's log output goes to its standard error, which the host reads
// and logs under the plugin's name; anything a plugin writes to stdout is
// discarded.
//
// Serve sets up the plugin's tracing from the OTEL_* environment the host
// gives it (see EnvTracesExporter): each call's context carries the host's
// trace context and a server span of the plugin's own, and the spans are
// flushed when the host stops the plugin. A tracing set-up that fails is
// reported on standard error and leaves tracing off; it never stops the
// plugin.
func Serve(impl Transport) {
	go exitWhenOrphaned(time.Second)
	ctx := context.Background()
	tp, shutdown, err := pluginTracing(ctx, os.Getenv, stderr{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "hymical transport plugin: tracing is off: %v\n", err)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake(),
		VersionedPlugins: versionedPlugins(impl, tp),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, serverOptions(tp)...)...)
		},
	})
	if shutdown != nil {
		ctx, cancel := context.WithTimeout(ctx, flushTimeout)
		defer cancel()
		_ = shutdown(ctx) // nothing is left to report a failed flush to
	}
}
