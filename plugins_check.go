package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/hymical/hymical/server/plugincheck"
)

const pluginsCheckUsage = `usage: hymical plugins check [flags] PATH

Checks the transport plugin at PATH against what the server needs of it,
through the server's own plugin host, and prints a pass/fail table:
handshake (and Configure), Validate of a good and a bad endpoint config, a
send to a receiver it starts (the body and webhook-* headers must arrive as
sent), a target the plugin must refuse (the outcome must say no request was
made), a receiver that hangs (the send must end by its deadline), and
shutdown (the process must exit when the host stops it). It exits with
status 0 only when every row passes. Everything it sends to is on loopback
or in a temporary directory.`

// runPluginsCheck is `hymical plugins check`, for plugin authors: the
// checking is server/plugincheck's, this only reads the flags and prints.
func runPluginsCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plugins check", pluginsCheckUsage)
	tg := fs.String("target", string(plugincheck.TargetHTTP), "what the plugin sends to: http (the endpoint URL; setting allowed_networks=127.0.0.1/32) or jsonl (the file endpoint config path names; setting root)")
	name := fs.String("name", "", "the transport name to give it (default: the file name after hymical-plugin-)")
	deadline := fs.Duration("deadline", plugincheck.DefaultDeadline, "the deadline of the send to the receiver that hangs")
	verbose := fs.Bool("v", false, "print the plugin host's log, the plugin's own included, on stderr")
	settings, config := keyValues{}, keyValues{}
	fs.Var(settings, "setting", "KEY=VALUE: a plugin setting, added to the target's (repeatable)")
	fs.Var(config, "config", "KEY=VALUE: added to every endpoint config the check uses (repeatable)")
	path, err := fs.parseWithArg(args, stdout, stderr)
	if err != nil {
		return err
	}
	if path == "" {
		fs.printUsage(stderr)
		return fmt.Errorf("plugins check needs the path of the plugin's executable")
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	report, err := plugincheck.Run(ctx, plugincheck.Options{
		Path: path, Name: *name, Target: plugincheck.Target(*tg),
		Settings: settings, Config: config, Deadline: *deadline, Logger: logger,
	})
	if err != nil {
		return err
	}
	if err := report.Write(stdout); err != nil {
		return err
	}
	if failed := report.Failed(); len(failed) > 0 {
		return fmt.Errorf("plugin %s failed %d of %d checks: %s (run with -v to see its log)", path, len(failed), len(report.Rows), strings.Join(failed, ", "))
	}
	fmt.Fprintf(stdout, "all %d checks passed\n", len(report.Rows))
	return nil
}

// keyValues is a repeatable KEY=VALUE flag.
type keyValues map[string]string

var _ flag.Value = keyValues{}

func (kv keyValues) String() string { return "" }

func (kv keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	kv[k] = v
	return nil
}
