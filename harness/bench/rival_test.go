package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage/postgres/pgtest"
)

// A rival sender is counted as the bench counts hymical: each message once,
// verified with its endpoint's secret, on a database of its own that Close
// drops.
func TestRivalCountsWhatItsSenderDelivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := NewRival(ctx, pgtest.BaseDSN(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, r.DatabaseURL())
	if err != nil {
		t.Fatalf("connect to the rival's database: %v", err)
	}
	conn.Close(ctx)

	body, err := r.Body()
	if err != nil {
		t.Fatal(err)
	}
	var ev struct{ Type string }
	if err := json.Unmarshal(body, &ev); err != nil || ev.Type != "submission.received" {
		t.Fatalf("Body() = %s (%v), want a submission.received event", body, err)
	}

	post := func(endpoint int, id, secret string) int {
		url, _ := r.Endpoint(endpoint)
		return postSigned(t, url, id, secret, body)
	}
	_, secret0 := r.Endpoint(0)
	_, secret1 := r.Endpoint(1)
	r.Start(2)
	for _, p := range []struct {
		endpoint int
		id       string
		secret   string
		want     int
	}{
		{0, "dlv_a", secret0, http.StatusNoContent},
		{1, "dlv_b", secret1, http.StatusNoContent},
		{1, "dlv_b", secret1, http.StatusNoContent},
		{0, "dlv_c", secret1, http.StatusUnauthorized},
	} {
		if got := post(p.endpoint, p.id, p.secret); got != p.want {
			t.Errorf("%s to endpoint %d: %d, want %d", p.id, p.endpoint, got, p.want)
		}
	}
	if got := r.Arrived(); got != 2 {
		t.Errorf("Arrived() = %d, want 2", got)
	}
	u := r.Stop()
	if u.Arrived != 2 || u.Again != 1 || u.Bad != 1 || u.Wall <= 0 {
		t.Errorf("Stop() = %+v, want 2 arrived, 1 again, 1 refused and a wall time", u)
	}

	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if conn, err := pgx.Connect(ctx, r.DatabaseURL()); err == nil {
		conn.Close(ctx)
		t.Error("the rival's database is still there after Close")
	}
}

// postSigned POSTs body to url signed with secret as message id, and
// returns the status the receiver answered.
func postSigned(t *testing.T, url, id, secret string, body []byte) int {
	t.Helper()
	h, err := webhook.SignHeaders(id, time.Now(), body, secret)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
