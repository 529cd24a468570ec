package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hymical/hymical/plugins/shipped"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/pluginhost"
)

// pluginCommand is the command the plugin host runs a built-in transport
// with: EXECUTABLE plugin NAME.
const pluginCommand = "plugin"

// pluginUsage is the command's help, naming the shipped transports.
func pluginUsage() string {
	return `usage: hymical plugin NAME

Serves the shipped transport NAME (` + strings.Join(shipped.Names(), ", ") + `) as a
transport plugin over go-plugin's handshake, exactly as hymical-plugin-NAME
does. hymical serve starts it as a child process of its own executable, so
one file carries every shipped transport and each still runs in a process
of its own. It is not meant to be run by hand: run so, it says what it is
for and exits with status 1.`
}

// runPlugin is `hymical plugin NAME`, the only place the hymical command
// links the transports: everything else reaches them as child processes.
func runPlugin(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(pluginCommand, pluginUsage())
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.printUsage(stderr)
		return fmt.Errorf("plugin takes one transport name, one of %s; got %q", strings.Join(shipped.Names(), ", "), fs.Args())
	}
	name := fs.Arg(0)
	if !slices.Contains(shipped.Names(), name) {
		return shipped.Serve(name) // says which are shipped
	}
	if os.Getenv(transport.MagicCookieKey) != transport.MagicCookieValue {
		// go-plugin would say only that this is a plugin; this says
		// which, and what runs it.
		fmt.Fprintf(stderr, "hymical plugin %s serves the %s transport to a hymical server, which starts it itself\n(hymical serve runs it as a child process). There is nothing to do by hand:\nrun hymical serve, and see hymical plugins list for the transports it runs.\n", name, name)
		return fmt.Errorf("plugin %s was not started by a hymical server (no go-plugin handshake in its environment)", name)
	}
	return shipped.Serve(name)
}

// builtInTransports is the shipped transports, served by this executable
// as `hymical plugin NAME`, for the plugin host. The executable is found
// as plugins.dir's default is, symlinks resolved, so the file the host
// runs and pins is the one on disk.
func builtInTransports() (pluginhost.BuiltIn, error) {
	exe, err := os.Executable()
	if err != nil {
		return pluginhost.BuiltIn{}, fmt.Errorf("finding this executable, which serves the built-in transports: %w; install hymical-plugin-NAME executables in plugins.dir instead", err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return pluginhost.BuiltIn{
		Executable: exe,
		Names:      shipped.Names(),
		Args:       func(name string) []string { return []string{pluginCommand, name} },
	}, nil
}
