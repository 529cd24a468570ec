// Command hymical is the Hymical delivery server: it delivers every form
// submission, as a signed event, at least once to the endpoints its users
// register.
//
//	hymical serve   [--config FILE] [--KEY=VALUE…]   run the delivery server
//	hymical plugins list                        the transport plugins it would run
//	hymical migrate [--database URL] [--to N]   apply pending schema migrations
//	hymical demo    [--database URL]            deliver a sample submission end to end
//	hymical version                             print the build and schema version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hymical/hymical/internal/redact"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/storage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hymical:", err)
		os.Exit(1)
	}
}

const usage = `hymical delivers form submissions, signed, at least once.

Commands:
  serve        run the server: HTTP API, delivery workers, transport plugins
               (with no configuration: SQLite hymical.db here, on 127.0.0.1:8080)
  plugins      list: the transport plugins found, started, with their SHA-256
  migrate      apply pending schema migrations and report what was done
  demo         run the server on a SQLite file and deliver a sample submission
               to a receiver on loopback that verifies its signature
  bench        measure delivery throughput, latency and cost against a loopback receiver
  version      print the build and the schema version it needs

Operator commands, talking to a running server's API (--server, FORMS_SERVER_ADMIN_TOKEN):
  submit       send a sample (or your own) form submission
  endpoints    add | list
  deliveries   list [--state …] | show DELIVERY_ID (with its attempt history)
  replay       DELIVERY_ID | --state failed [--endpoint ID] [--form ID]

Run 'hymical COMMAND --help' for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, stdout, stderr)
	case "plugins":
		return runPlugins(ctx, rest, stdout, stderr)
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
	case "submit":
		return runSubmit(ctx, rest, stdout, stderr)
	case "endpoints":
		return runEndpoints(ctx, rest, stdout, stderr)
	case "deliveries":
		return runDeliveries(ctx, rest, stdout, stderr)
	case "replay":
		return runReplay(ctx, rest, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "version":
		v, err := migrations.Latest()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "hymical %s (schema version %d)\n", fleet.Build(), v)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database", databaseURLDefault(), "database URL: sqlite:PATH or postgres://USER@HOST/DB (env FORMS_DATABASE_URL)")
	to := fs.Int("to", 0, "stop at this schema version (0: the newest this build has)")
	force := fs.Bool("force", false, "migrate even while workers of another build are registered as live")
	if err := fs.Parse(args); err != nil {
		return err
	}
	store, err := database.Open(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer store.Close()
	if !*force {
		if err := fleet.CheckNoOtherBuilds(ctx, store, time.Now()); err != nil {
			return fmt.Errorf("migrate %s: %w", redact.URL(*dbURL), err)
		}
	}
	res, err := store.Migrate(ctx, storage.MigrateParams{To: *to})
	if err != nil {
		return fmt.Errorf("migrate %s: %w", redact.URL(*dbURL), err)
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(stdout, "%s is at schema version %d: nothing to apply\n", redact.URL(*dbURL), res.To)
		return nil
	}
	fmt.Fprintf(stdout, "migrated %s from schema version %d to %d, applied: %s\n", redact.URL(*dbURL), res.From, res.To, strings.Join(res.Applied, ", "))
	return nil
}

func databaseURLDefault() string {
	if v := os.Getenv("FORMS_DATABASE_URL"); v != "" {
		return v
	}
	return database.DefaultURL
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
