package sdkdrivers_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// submissionBody is a payload shaped the way the server writes it.
func submissionBody(id string) []byte {
	return []byte(`{"type":"submission.received","submission":{"id":"` + id +
		`","form_id":"form_contact","data":{"name":"Ada Lovelace","email":"ada@example.com"},"created_at":"2026-03-01T12:00:00.123Z"}}`)
}

func mustSecret(t *testing.T) string {
	t.Helper()
	s, err := webhook.NewSecret()
	if err != nil {
		t.Fatalf("NewSecret: %v", err)
	}
	return s
}

func mustVerifier(t *testing.T, secrets []string) *webhook.Verifier {
	t.Helper()
	v, err := webhook.NewVerifier(secrets)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func signed(t *testing.T, msgID string, ts time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	h, err := webhook.SignHeaders(msgID, ts, body, secrets...)
	if err != nil {
		t.Fatalf("SignHeaders: %v", err)
	}
	return h
}

// post sends body with headers and returns the status and response text.
func post(t *testing.T, url string, h http.Header, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(text)
}

// The transactional handler on a real SQLite file: the handler's row and the
// recorded id commit together, and a failure leaves neither.
func TestTxHandlerOnSQLite(t *testing.T) {
	t.Parallel()
	db := openDB(t, "sqlite", sqliteDSN(filepath.Join(t.TempDir(), "receiver.db")))
	createSideTable(t, db)
	d := newSQLDeduper(t, db, webhook.DialectSQLite, webhook.SQLOptions{})
	secret := mustSecret(t)
	var fail atomic.Bool
	h, err := webhook.NewTxHandler(mustVerifier(t, []string{secret}), d, func(ctx context.Context, tx *sql.Tx, ev webhook.Event) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+sideTable+` (id, note) VALUES (?, ?)`, ev.Submission.ID, ev.Submission.FormID); err != nil {
			return err
		}
		if fail.Load() {
			return fmt.Errorf("failing after the insert")
		}
		return nil
	}, webhook.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	body := submissionBody(subID)
	hdr := signed(t, "dlv_1", time.Now(), body, secret)
	fail.Store(true)
	if status, _ := post(t, srv.URL, hdr, body); status != http.StatusInternalServerError {
		t.Fatalf("failing handler: %d, want 500", status)
	}
	if n := count(t, db, `SELECT count(*) FROM `+sideTable); n != 0 {
		t.Fatalf("a failed handler's row survived: %d", n)
	}
	fail.Store(false)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if status, text := post(t, srv.URL, hdr, body); status != http.StatusNoContent && status != http.StatusOK {
				t.Errorf("redelivery: %d %q", status, text)
			}
		})
	}
	wg.Wait()
	if n := count(t, db, `SELECT count(*) FROM `+sideTable+` WHERE note = 'form_contact'`); n != 1 {
		t.Fatalf("the handler's row was written %d times, want 1", n)
	}
	if n := count(t, db, `SELECT count(*) FROM `+d.Table()); n != 1 {
		t.Fatalf("%d recorded ids, want 1", n)
	}
}
