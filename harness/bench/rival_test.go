package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/sdk/transport"
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

// A rival can send through the real plugin as hymical does: the messages
// SignedMessage builds pass the receiver's verification, and the plugin is
// the child process whose CPU Stop counts.
func TestRivalSendsThroughThePlugin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := NewRival(ctx, pgtest.BaseDSN(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	host, err := StartPluginHost(ctx, pluginDir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	// Other tests running in parallel may have plugins of their own.
	if plugins, _ := processCPU(map[int]bool{os.Getpid(): true}, 0); len(plugins) == 0 {
		t.Error("no plugin process among this process's children: Stop cannot count the plugin's CPU")
	}

	body, err := r.Body()
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	r.Start(n)
	for i := range n {
		url, secret := r.Endpoint(i % 2)
		msg, err := SignedMessage(fmt.Sprintf("dlv_%d", i), 1, url, secret, body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if out := host.Send(ctx, "http", msg, time.Now().Add(10*time.Second)); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("message %d: outcome %s: %s", i, out.Kind, out.Error)
		}
	}
	if u := r.Stop(); u.Arrived != n || u.Again != 0 || u.Bad != 0 {
		t.Errorf("Stop() = %+v, want %d arrived once each and none refused", u, n)
	}
}

// Without the plugin, StartPluginHost says how to build it.
func TestStartPluginHostSaysHowToBuildAMissingPlugin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := StartPluginHost(context.Background(), dir, slog.New(slog.DiscardHandler))
	want := "go build -o " + filepath.Join(dir, "hymical-plugin-http") + " ./plugins/http"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("StartPluginHost(%s) = %v, want an error saying %q", dir, err, want)
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
