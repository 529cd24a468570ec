// Command hymical is the Hymical delivery server: it delivers every form
// submission, as a signed event, at least once to the endpoints its users
// register.
//
//	hymical serve   [--config FILE] [--KEY=VALUE…]   run the delivery server
//	hymical plugins list                        the transport plugins it would run
//	hymical plugin NAME                         a shipped transport, as serve runs it
//	hymical migrate [--database URL] [--to N]   apply pending schema migrations
//	hymical secrets rotate-key --new-key-file F re-encrypt endpoint secrets under a new key
//	hymical backup  --to FILE [--config FILE]   copy a SQLite database while serve runs
//	hymical demo    [--database URL]            deliver a sample submission end to end
//	hymical version                             print the build and schema version
//
// and the operator commands (submit, endpoints, deliveries, replay) that talk
// to a running server's API. Every command and subcommand takes --help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hymical/hymical/internal/buildinfo"
	"github.com/hymical/hymical/sdk/redact"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/server/fleet"
	"github.com/hymical/hymical/storage"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == pluginCommand {
		// A built-in transport keeps the signals' default actions, as a
		// standalone hymical-plugin-NAME does: go-plugin ignores
		// interrupts itself, and the host stops it over gRPC or kills
		// its process group. Caught here, a SIGTERM would stop nothing.
		exit(runPlugin(context.Background(), os.Args[2:], os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	exit(err)
}

// exit ends the process with the status a command's error calls for.
func exit(err error) {
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hymical:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

const usage = `usage: hymical COMMAND [flags]

hymical delivers form submissions, signed, at least once.

Commands:
  serve        run the server: HTTP API, delivery workers, transport plugins
               (with no configuration: SQLite hymical.db here, on 127.0.0.1:8080)
  plugins      list: the transport plugins found, started, with their SHA-256
               check PATH: hold a plugin you wrote to the host's rules, row by row
  plugin       NAME: serve a shipped transport as a plugin process (serve runs
               these as child processes of itself; not meant to be run by hand)
  migrate      apply pending schema migrations and report what was done
  demo         run the server on a SQLite file and deliver a sample submission
               to a receiver on loopback that verifies its signature
  secrets      rotate-key: encrypt the endpoints' signing secrets under a new key
  backup       --to FILE: a consistent copy of the SQLite database, taken while
               serve runs (PostgreSQL: use pg_dump)
  version      print the build (version, revision, time) and the schema version it needs

Operator commands, talking to a running server's API (--server, FORMS_SERVER_ADMIN_TOKEN):
  submit       send a sample (or your own) form submission
  endpoints    add | list | set | disable | enable | rotate-secret | delete
  deliveries   list [--state …] | show DELIVERY_ID (with its attempt history)
  replay       DELIVERY_ID | --state failed [--endpoint ID] [--form ID]
  tokens       create --form ID --expires-in 720h | list | revoke TOKEN_ID (scoped tokens)
  portal       link --form ID --ttl 1h | list | revoke LINK_ID (portal links)

Run 'hymical COMMAND --help' (or 'hymical help COMMAND') for a command's flags.
`

// commands are the top-level commands, by name.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"serve":      runServe,
	"migrate":    runMigrate,
	"plugins":    runPlugins,
	"plugin":     runPlugin,
	"demo":       runDemo,
	"submit":     runSubmit,
	"endpoints":  runEndpoints,
	"deliveries": runDeliveries,
	"replay":     runReplay,
	"tokens":     runTokens,
	"portal":     runPortal,
	"version":    runVersion,
	"secrets":    runSecrets,
	"backup":     runBackup,
}

// run is the whole command line. Asked for help, at any level, a command
// prints its usage on stdout and returns flag.ErrHelp, which main turns into
// exit status 0; a command it does not know prints the usage on stderr and
// fails.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		if cmd == "help" && len(rest) > 0 {
			// hymical help endpoints list = hymical endpoints list --help
			return run(ctx, append(slices.Clone(rest), "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	case "-version", "--version":
		return runVersion(ctx, rest, stdout, stderr)
	}
	if fn, ok := commands[cmd]; ok {
		return fn(ctx, rest, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// flagSet is one command's flags and its usage text: a synopsis line and
// what the command does, printed above the flags.
type flagSet struct {
	*flag.FlagSet
	usage string
}

// newFlagSet makes the flags of the command name ("endpoints list"). The
// flag package prints nothing itself: parse says where the usage goes.
func newFlagSet(name, usage string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, usage: usage}
}

// parse reads args. Asked for help (-h, --help), it prints the usage on
// stdout and returns flag.ErrHelp; after a mistake it prints the usage on
// stderr and returns the mistake, which main prints last.
func (fs *flagSet) parse(args []string, stdout, stderr io.Writer) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.printUsage(stdout)
	case err != nil:
		fs.printUsage(stderr)
	}
	return err
}

// parseWithArg reads args with one positional argument (an id) allowed
// before, between or after the flags, and returns it; "" when there is none.
func (fs *flagSet) parseWithArg(args []string, stdout, stderr io.Writer) (string, error) {
	if err := fs.parse(args, stdout, stderr); err != nil {
		return "", err
	}
	if fs.NArg() == 0 {
		return "", nil
	}
	arg := fs.Arg(0)
	if err := fs.parse(fs.Args()[1:], stdout, stderr); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return "", fmt.Errorf("%s takes one argument, got %q and %q", fs.Name(), arg, fs.Args())
	}
	return arg, nil
}

// parseWithID is parseWithArg for a command that cannot run without the id
// of its object (what: "delivery", "endpoint").
func (fs *flagSet) parseWithID(args []string, stdout, stderr io.Writer, what string) (string, error) {
	id, err := fs.parseWithArg(args, stdout, stderr)
	if err == nil && id == "" {
		fs.printUsage(stderr)
		err = fmt.Errorf("%s needs the %s id", fs.Name(), what)
	}
	return id, err
}

func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprint(w, strings.TrimRight(fs.usage, "\n")+"\n")
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// subcommand is one command of a group such as endpoints.
type subcommand struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// runGroup runs the subcommand args names. The group itself takes no
// flags: --help lists its subcommands.
func runGroup(ctx context.Context, group string, subs []subcommand, args []string, stdout, stderr io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: hymical %s COMMAND [flags]\n\nCommands:\n", group)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, s := range subs {
		fmt.Fprintf(tw, "  %s\t%s\n", s.name, s.summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "\nRun 'hymical %s COMMAND --help' for a command's flags.\n", group)
	groupUsage := b.String()

	if len(args) == 0 {
		fmt.Fprint(stderr, groupUsage)
		return fmt.Errorf("%s needs a command", group)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, groupUsage)
		return flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprint(stderr, groupUsage)
	return fmt.Errorf("unknown command %q for hymical %s", args[0], group)
}

const migrateUsage = `usage: hymical migrate [flags]

Applies the pending schema migrations to the database and says what it did.
It refuses while workers of another build are live, unless --force.`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", migrateUsage)
	dbURL := fs.String("database", databaseURLDefault(), "database URL: sqlite:PATH or postgres://USER@HOST/DB (env FORMS_DATABASE_URL)")
	to := fs.Int("to", 0, "stop at this schema version (0: the newest this build has)")
	force := fs.Bool("force", false, "migrate even while workers of another build are registered as live")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("migrate takes no arguments, got %q", fs.Args())
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
	return config.Default().Database.URL.Reveal()
}

const versionUsage = `usage: hymical version

Prints the build: its identity and the schema version it needs, then the
module version, the VCS revision it was built from, the build time and the
Go toolchain. hymical --version is the same.

The build time is the revision's commit time: Go records no clock of the
build itself. A build records its revision only when go build runs in a git
checkout with -buildvcs on (not -buildvcs=false, not in a linked git
worktree); otherwise both are unknown.`

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", versionUsage)
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("version takes no arguments, got %q", fs.Args())
	}
	v, err := migrations.Latest()
	if err != nil {
		return err
	}
	writeVersion(stdout, buildinfo.Read(), buildinfo.String(), v)
	return nil
}

// writeVersion writes what hymical version prints: the build's identity
// and schema version on the first line, as it always was, then the parts.
func writeVersion(w io.Writer, b buildinfo.Info, identity string, schema int) {
	fmt.Fprintf(w, "hymical %s (schema version %d)\n", identity, schema)
	fmt.Fprintf(w, "version   %s\n", b.Version)
	switch {
	case b.Revision == "":
		fmt.Fprintln(w, "revision  unknown: the build recorded none (go build outside a git checkout, in a linked worktree, or with -buildvcs=false)")
	case b.Modified:
		fmt.Fprintf(w, "revision  %s, with uncommitted changes\n", b.Revision)
	default:
		fmt.Fprintf(w, "revision  %s\n", b.Revision)
	}
	if b.Time.IsZero() {
		fmt.Fprintln(w, "built     unknown (the build time is the revision's commit time, and there is none)")
	} else {
		fmt.Fprintf(w, "built     %s (the revision's commit time; Go records no build clock)\n", b.Time.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "go        %s\n", b.GoVersion)
}
