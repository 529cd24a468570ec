package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"

	"github.com/hymical/hymical/internal/gctarget"
	"github.com/hymical/hymical/server"
	"github.com/hymical/hymical/server/config"
)

// runServe runs the server until ctx ends: the configuration from the
// built-in defaults, the file, the FORMS_* environment and the flags, then
// server.New and Run.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	generated := false
	cfg, warnings, err := config.Load(config.LoadOptions{
		Environ: serverEnviron(os.Environ()),
		Args:    args,
		Program: "hymical serve",
		Output:  stdout,
		GenerateAdminToken: func() (string, error) {
			generated = true
			return randomToken()
		},
	})
	if err != nil {
		return err
	}
	log := cfg.Log.NewLogger(stderr)
	for _, w := range warnings {
		log.Warn(w)
	}
	gc := gctarget.Apply(os.Getenv)
	builtIn, err := builtInTransports()
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, cfg, log, server.WithBuiltInTransports(builtIn))
	if err != nil {
		return err
	}
	srv.Describe(stdout)
	fmt.Fprintf(stdout, "  go collector %s\n", gc)
	if generated {
		fmt.Fprintf(stdout, "  admin token for this run (shown once; set FORMS_SERVER_ADMIN_TOKEN to choose one): %s\n", cfg.Server.AdminToken.Reveal())
	}
	quiet, stopQuiet := context.WithCancel(ctx)
	var returner sync.WaitGroup
	returner.Go(func() { returnMemoryWhenQuiet(quiet, readHeap, debug.FreeOSMemory) })
	defer func() {
		stopQuiet()
		returner.Wait()
	}()
	return srv.Run(ctx)
}

// randomToken makes an admin token for a server started without one.
func randomToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
