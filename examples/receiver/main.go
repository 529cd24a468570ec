// Command receiver is an example webhook receiver for Hymical: a small HTTP
// service that verifies each delivery's signature, deduplicates on the
// submission id and stores each submission exactly once in a SQLite file,
// however often it is delivered.
//
// It uses sdk/webhook only: the Handler for verification and the response
// codes, and the SQL deduper, whose transaction also carries the insert of
// the submission, so "recorded as processed" and "stored" commit together.
// It must not import anything from the delivery server; a receiver runs on
// the other side of the wire.
//
//	receiver [serve] [-addr 127.0.0.1:8080] [-db receiver.db]   run the receiver
//	receiver send [-url URL] [-times 2]                         sign a sample submission and POST it
//	receiver new-secret                                         print a fresh whsec_ secret
//
// The signing secret comes from HYMICAL_WEBHOOK_SECRET, never from a flag
// (flags show in ps). During a rotation give both, separated by a space.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite"

	"github.com/hymical/hymical/sdk/webhook"
)

// SecretEnv names the variable holding the endpoint's signing secret(s).
const SecretEnv = "HYMICAL_WEBHOOK_SECRET"

// WebhookPath is where the receiver takes deliveries.
const WebhookPath = "/webhooks/hymical"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return runServe(ctx, args, getenv, stderr)
	case "send":
		return runSend(ctx, args, getenv, stdout, stderr)
	case "new-secret":
		s, err := webhook.NewSecret()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, s)
		return nil
	default:
		return fmt.Errorf("unknown command %q: use serve, send or new-secret", cmd)
	}
}

func secrets(getenv func(string) string) ([]string, error) {
	s := strings.Fields(getenv(SecretEnv))
	if len(s) == 0 {
		return nil, fmt.Errorf("%s is not set: export the endpoint's signing secret (whsec_...), or mint one with `receiver new-secret`", SecretEnv)
	}
	return s, nil
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	dbPath := fs.String("db", "receiver.db", "SQLite file holding the submissions and the processed ids")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sec, err := secrets(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	log.Info("receiver listening", "url", "http://"+ln.Addr().String()+WebhookPath, "db", *dbPath)
	return serve(ctx, ln, *dbPath, sec, log)
}

// serve runs the receiver on ln until ctx ends.
func serve(ctx context.Context, ln net.Listener, dbPath string, secrets []string, log *slog.Logger) error {
	a, err := openApp(ctx, dbPath, secrets, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer a.close()
	srv := &http.Server{
		Handler:           a.routes(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		// A delivery cut off here is not recorded and Hymical sends it
		// again, so a short grace is enough.
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	err = srv.Serve(ln)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// app is the receiver: its database and its webhook handler.
type app struct {
	db      *sql.DB
	log     *slog.Logger
	webhook http.Handler
}

// sqliteDSN opens the file for concurrent deliveries with modernc.org/sqlite:
// a busy timeout so that a second writer waits rather than fails, WAL so
// readers do not block the writer, and immediate transactions so the write
// lock is taken at BEGIN.
func sqliteDSN(path string) string {
	return path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

func openApp(ctx context.Context, dbPath string, secrets []string, log *slog.Logger) (*app, error) {
	verifier, err := webhook.NewVerifier(secrets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SecretEnv, err)
	}
	db, err := sql.Open("sqlite", sqliteDSN(dbPath))
	if err != nil {
		return nil, err
	}
	a := &app{db: db, log: log}
	if err := a.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	dedupe, err := webhook.NewSQLDeduper(db, webhook.SQLOptions{Dialect: webhook.DialectSQLite})
	if err == nil {
		err = dedupe.CreateTable(ctx)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	a.webhook, err = webhook.NewTxHandler(verifier, dedupe, a.store, webhook.WithLogger(log))
	if err != nil {
		db.Close()
		return nil, err
	}
	return a, nil
}

func (a *app) close() { a.db.Close() }

// migrate creates the receiver's own table. It deliberately has no unique
// key on submission_id: the deduper alone is what keeps it to one row per
// submission, which is what the tests check.
func (a *app) migrate(ctx context.Context) error {
	_, err := a.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS submissions (
	submission_id TEXT NOT NULL,
	form_id TEXT NOT NULL,
	data TEXT NOT NULL,
	created_at TEXT NOT NULL,
	received_at TEXT NOT NULL
)`)
	if err != nil {
		return fmt.Errorf("creating the submissions table: %w", err)
	}
	return nil
}

// store is the receiver's work for one new submission. It runs inside the
// transaction that records the submission id, so the row and the record
// commit together, or, when anything fails, neither does and Hymical's retry
// brings the submission back.
func (a *app) store(ctx context.Context, tx *sql.Tx, ev webhook.Event) error {
	_, err := tx.ExecContext(ctx,
		`INSERT INTO submissions (submission_id, form_id, data, created_at, received_at) VALUES (?, ?, ?, ?, ?)`,
		ev.Submission.ID, ev.Submission.FormID, string(ev.Submission.Data),
		ev.Submission.CreatedAt.UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return fmt.Errorf("storing submission %s: %w", ev.Submission.ID, err)
	}
	a.log.Info("stored submission", "submission_id", ev.Submission.ID, "form_id", ev.Submission.FormID, "webhook_id", ev.MessageID)
	return nil
}

func (a *app) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST "+WebhookPath, a.webhook)
	mux.HandleFunc("GET /submissions", a.listSubmissions)
	return mux
}

// listSubmissions shows what was stored, one line per row, so a person
// trying the example can see that a repeat added nothing.
func (a *app) listSubmissions(w http.ResponseWriter, r *http.Request) {
	rows, err := a.db.QueryContext(r.Context(), `SELECT submission_id, form_id, data FROM submissions ORDER BY rowid`)
	if err != nil {
		a.log.Error("listing submissions", "error", err)
		http.Error(w, "could not list submissions", http.StatusInternalServerError)
		return
	}
	defer rows.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for rows.Next() {
		var id, form, data string
		if err := rows.Scan(&id, &form, &data); err != nil {
			a.log.Error("listing submissions", "error", err)
			return
		}
		fmt.Fprintf(w, "%s %s %s\n", id, form, data)
	}
	if err := rows.Err(); err != nil {
		a.log.Error("listing submissions", "error", err)
	}
}
