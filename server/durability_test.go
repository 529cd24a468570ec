package server_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/server"
)

// lockedBuffer is a log destination the plugin host's goroutines may write
// to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Start-up says, in the log with the fix and in the banner, which
// PostgreSQL settings can lose an accepted submission: exactly those the
// cluster runs with off (read here apart from the server), so on the CI
// cluster (fsync and full_page_writes off for speed) both, on a durable
// one nothing.
func TestStartUpSaysWhenPostgreSQLCanLoseAcceptedSubmissions(t *testing.T) {
	t.Parallel()
	dsn, _ := migratedPostgres(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	var off []string
	for _, name := range []string{"fsync", "full_page_writes"} {
		var v string
		if err := conn.QueryRow(t.Context(), "SHOW "+name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v == "off" {
			off = append(off, name)
		}
	}
	conn.Close(t.Context())

	var logs lockedBuffer
	srv, err := server.New(t.Context(), testConfig(dsn), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Run(ctx)
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Error("the server did not stop")
		}
	}()
	var banner strings.Builder
	srv.Describe(&banner)

	for _, name := range []string{"fsync", "full_page_writes", "synchronous_commit"} {
		want := strings.Contains(strings.Join(off, " "), name)
		fix := fmt.Sprintf("ALTER SYSTEM SET %s = on; SELECT pg_reload_conf();", name)
		if got := strings.Contains(logs.String(), fix); got != want {
			t.Errorf("%s: the log warns with its fix: %v, want %v (off on the cluster: %v)\n%s", name, got, want, off, logs.String())
		}
		if got := strings.Contains(banner.String(), name+"=off"); got != want {
			t.Errorf("%s: the banner names it: %v, want %v (off on the cluster: %v)\n%s", name, got, want, off, banner.String())
		}
	}
	if strings.Contains(banner.String(), "NOT DURABLE") != (len(off) > 0) {
		t.Errorf("the banner says NOT DURABLE exactly when a setting is off (%v):\n%s", off, banner.String())
	}
}
