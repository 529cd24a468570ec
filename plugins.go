package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/pluginhost"
)

func runPlugins(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runGroup(ctx, "plugins", []subcommand{
		{"list", "the transport plugins serve would run, started to prove they answer, with their SHA-256 (takes serve's flags)", runPluginsList},
		{"check", "check a plugin you wrote against what the server needs of it, through the real host: a pass/fail table", runPluginsCheck},
	}, args, stdout, stderr)
}

// runPluginsList lists the transport plugins a server with this
// configuration would run, after starting each one to prove it answers. It
// reads the configuration as serve does, so --help lists serve's keys.
func runPluginsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, _, err := config.Load(config.LoadOptions{
		Environ: serverEnviron(os.Environ()), Args: args, Program: "hymical plugins list", Output: stdout,
		// Listing plugins needs no API, so no token either.
		GenerateAdminToken: randomToken,
	})
	if err != nil {
		return err
	}
	hostCfg := cfg.PluginHost()
	if hostCfg.BuiltIn, err = builtInTransports(); err != nil {
		return err
	}
	host, err := pluginhost.New(ctx, hostCfg, cfg.Log.NewLogger(stderr))
	if err != nil {
		return err
	}
	defer host.Close()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tFROM\tPINNED\tSHA-256 OF THE FILE NOW\tRUNS")
	for _, p := range host.Plugins() {
		sum, err := pluginhost.FileSHA256(p.Path)
		if err != nil {
			sum = "unreadable: " + err.Error()
		}
		// A file in plugins.dir or a configured path overrides the
		// built-in of its name: FROM says which one runs.
		from := "file"
		if p.BuiltIn {
			from = "built-in"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", p.Name, from, p.Pinned, sum, strings.Join(append([]string{p.Path}, p.Args...), " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "To pin a plugin, put the SHA-256 you trust (from your build, not from this listing of the installed file) in plugins.list[].sha256; a built-in's is the hymical executable's.")
	// A plugin whose Configure hung or crashed does not stop the host
	// (serve starts without it), but this listing exists to prove each
	// plugin answers, so it says which did not and fails.
	if err := host.Up(ctx); err != nil {
		return fmt.Errorf("%w; serve would start without it and keep trying to start it, so fix the plugin or its settings", err)
	}
	return nil
}
