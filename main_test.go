package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hymical/hymical/harness/e2etest"
)

// TestDemoDeliversASampleSubmission runs the README's run command the way a
// newcomer does: the real http plugin binary, through the server serve
// runs. The demo keeps its database in a temporary directory of its own,
// removes it, and leaves nothing in the working directory.
//
// With no plugin file the http transport is the one built into the
// executable (here the test binary, which TestMain makes answer `plugin
// NAME` as hymical does); a hymical-plugin-http beside it overrides that.
func TestDemoDeliversASampleSubmission(t *testing.T) {
	withFile := t.TempDir()
	if err := e2etest.BuildPlugins(withFile, map[string]string{"http": "github.com/hymical/hymical/plugins/http"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, transports string
	}{
		{"the built-in http transport", t.TempDir(), "transports amqp, http, kafka, mqtt, nats, redis built in ("},
		{"a hymical-plugin-http file", withFile, "http from " + withFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			demoDelivers(t, tt.dir, tt.transports)
		})
	}
}

func demoDelivers(t *testing.T, dir, transports string) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"demo", "--plugins", dir}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"listening on http://127.0.0.1:", transports, "attempt 1: delivered, HTTP 204", "receiver verified the signature", "delivered: attempts=1 cycle_attempts=1"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout.String())
		}
	}
	db := regexp.MustCompile(`database sqlite:(\S+)`).FindStringSubmatch(stdout.String())
	if db == nil {
		t.Fatalf("demo did not say where its database is:\n%s", stdout.String())
	}
	if _, err := os.Stat(filepath.Dir(db[1])); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the demo's directory %s is still there (%v)", filepath.Dir(db[1]), err)
	}
	if left, err := os.ReadDir(cwd); err != nil || len(left) > 0 {
		t.Errorf("the demo left %v in the working directory (%v)", left, err)
	}
}

func TestMigrateReportsWhatItDid(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"migrate", "--database", db, "--to", "2"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "from schema version 0 to 2, applied: 0001_initial, 0002_claim_token") {
		t.Fatalf("first run: %s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"migrate", "--database", db}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "from schema version 2 to 19, applied: 0003_cycle_attempts, 0004_workers, 0005_claim_order_indexes, 0006_endpoint_controls, 0007_unsent_reason, 0008_fair_share, 0009_secrets_key, 0010_endpoint_delete, 0011_operation_keys, 0012_promote_of, 0013_endpoint_forms, 0014_endpoint_queues, 0015_queue_versions, 0016_access, 0017_endpoint_headers, 0018_console_sessions, 0019_portal_link_sessions") {
		t.Fatalf("second run: %s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"migrate", "--database", db}, &out, &out); err != nil || !strings.Contains(out.String(), "nothing to apply") {
		t.Fatalf("third run: %v %s", err, out.String())
	}
}
