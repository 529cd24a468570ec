package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/pluginhost"
)

// runPlugins lists the transport plugins a server with this configuration
// would run, after starting each one to prove it answers.
func runPlugins(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "list" {
		return errors.New("usage: hymical plugins list [the serve flags, e.g. --plugins.dir DIR]")
	}
	cfg, _, err := config.Load(config.LoadOptions{
		Environ: os.Environ(), Args: args[1:], Program: "hymical plugins list", Output: stdout,
		// Listing plugins needs no API, so no token either.
		GenerateAdminToken: randomToken,
	})
	if err != nil {
		return err
	}
	host, err := pluginhost.New(ctx, cfg.PluginHost(), cfg.Log.NewLogger(stderr))
	if err != nil {
		return err
	}
	defer host.Close()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPINNED\tSHA-256 OF THE FILE NOW\tPATH")
	for _, p := range host.Plugins() {
		sum, err := pluginhost.FileSHA256(p.Path)
		if err != nil {
			sum = "unreadable: " + err.Error()
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", p.Name, p.Pinned, sum, p.Path)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "To pin a plugin, put the SHA-256 you trust (from your build, not from this listing of the installed file) in plugins.list[].sha256.")
	return nil
}
