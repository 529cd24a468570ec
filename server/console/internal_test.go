package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage"
)

func TestSessionsExpireAndStayBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ss := newSessions(e2etest.Backends()["sqlite"](t), time.Hour, 3)
	get := func(id string, at time.Time) *session {
		t.Helper()
		s, err := ss.get(ctx, id, at)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first, s, err := ss.create(ctx, "alice", now)
	if err != nil {
		t.Fatal(err)
	}
	if s.csrf == "" || s.csrf == first || s.operator != "alice" {
		t.Fatalf("session %+v: want its own CSRF token and the operator", s)
	}
	if got := get(first, now.Add(59*time.Minute)); got == nil || *got != *s {
		t.Fatalf("a live session read back as %+v, want %+v", got, s)
	}
	if get(first, now.Add(time.Hour)) != nil {
		t.Fatal("a session outlived its lifetime")
	}

	// At the cap, a new login drops the session closest to expiry.
	var ids []string
	for i := range 4 {
		id, _, err := ss.create(ctx, fmt.Sprint(i), now.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	at := now.Add(5 * time.Minute)
	if get(ids[0], at) != nil || get(ids[1], at) == nil || get(ids[3], at) == nil {
		t.Fatalf("after 4 logins with room for 3 the oldest was kept, or a newer one dropped")
	}
	if err := ss.end(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if get(ids[3], at) != nil {
		t.Fatal("an ended session is still live")
	}
	if get("", at) != nil {
		t.Fatal("an empty id found a session")
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/console/deliveries?state=failed": "/console/deliveries?state=failed",
		"/console/":                        "/console/",
		"/console/../v1/endpoints":         "/console/",
		"//evil.example.com/console/":      "/console/",
		"https://evil.example.com/":        "/console/",
		"/consolex/":                       "/console/",
		"/console/\r\nSet-Cookie: x":       "/console/",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestCountFailedSinceIsBounded(t *testing.T) {
	t.Parallel()
	store := e2etest.Backends()["sqlite"](t)
	ctx := t.Context()
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://hooks.example.com/", Config: map[string]string{},
		Secrets: []storage.Secret{storage.NewSecret(secret, nil)}}}); err != nil {
		t.Fatal(err)
	}
	ids := e2etest.Submit(t, store, "contact", 7)
	claims, err := store.DeliveryClaim(ctx, storage.DeliveryClaimParams{Limit: 100, Lease: time.Minute})
	if err != nil || len(claims) != len(ids) {
		t.Fatalf("claimed %d of %d: %v", len(claims), len(ids), err)
	}
	for _, c := range claims {
		now := time.Now()
		if _, _, err := store.DeliveryComplete(ctx, storage.DeliveryCompleteParams{DeliveryID: c.Delivery.ID, Token: c.Token,
			Outcome: storage.OutcomePermanent, HTTPStatus: 400, StartedAt: now, FinishedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now().Add(-time.Hour)
	tests := []struct {
		pageSize, limit, want int
		capped                bool
	}{
		{1000, 10000, 7, false},
		{3, 10000, 7, false}, // several pages, the last one short
		{7, 10000, 7, false}, // a full page, then an empty one
		{3, 7, 7, false},     // exactly the cap: one more row says there is no more
		{3, 6, 6, true},
		{2, 5, 5, true},
	}
	for _, tt := range tests {
		n, capped, err := countFailedSince(ctx, store, since, tt.pageSize, tt.limit)
		if err != nil || n != tt.want || capped != tt.capped {
			t.Errorf("pages of %d up to %d: %d, capped %v, %v; want %d, capped %v", tt.pageSize, tt.limit, n, capped, err, tt.want, tt.capped)
		}
	}
	if n, capped, err := countFailedSince(ctx, store, time.Now().Add(time.Hour), 3, 10); n != 0 || capped || err != nil {
		t.Errorf("none since an hour ahead: %d, %v, %v", n, capped, err)
	}
}
