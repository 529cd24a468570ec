package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/transport"
)

// These tests call the transport in-process; plugin_test.go runs the built
// binary under the server's plugin host.

func newJSONL(t *testing.T, settings transport.Settings) *JSONL {
	t.Helper()
	j := NewJSONL(slog.New(slog.DiscardHandler))
	if err := j.Configure(t.Context(), settings); err != nil {
		t.Fatalf("Configure(%v): %v", settings, err)
	}
	return j
}

func readLines(t *testing.T, path string) []Line {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []Line
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d is not a JSON line: %v: %q", len(lines)+1, err, sc.Text())
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

func TestConfigure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		settings transport.Settings
		says     string // empty: accepted
	}{
		{"no settings", nil, ""},
		{"an existing root", transport.Settings{SettingRoot: dir}, ""},
		{"a relative root", transport.Settings{SettingRoot: "outbox"}, "absolute"},
		{"a root that is missing", transport.Settings{SettingRoot: filepath.Join(dir, "nope")}, "create the directory"},
		{"a root that is a file", transport.Settings{SettingRoot: file}, "not a directory"},
		{"an unknown setting", transport.Settings{"rooot": dir}, `unknown setting "rooot"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := NewJSONL(slog.New(slog.DiscardHandler)).Configure(t.Context(), tc.settings)
			if tc.says == "" {
				if err != nil {
					t.Fatalf("Configure: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Configure = %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	free := newJSONL(t, nil)
	rooted := newJSONL(t, transport.Settings{SettingRoot: root})
	cases := []struct {
		name   string
		j      *JSONL
		config map[string]string
		says   string // empty: accepted
	}{
		{"an absolute file", free, map[string]string{ConfigPath: filepath.Join(root, "out.jsonl")}, ""},
		{"a file inside the root", rooted, map[string]string{ConfigPath: filepath.Join(root, "a", "out.jsonl")}, ""},
		{"no config", free, nil, `"path" is missing`},
		{"an empty path", free, map[string]string{ConfigPath: ""}, `"path" is missing`},
		{"a relative path", free, map[string]string{ConfigPath: "out.jsonl"}, "relative path"},
		{"a dot-relative path", free, map[string]string{ConfigPath: "./out.jsonl"}, "relative path"},
		{"an unclean path", free, map[string]string{ConfigPath: root + "/a/../out.jsonl"}, "write it clean"},
		{"a directory", free, map[string]string{ConfigPath: root}, "a directory"},
		{"outside the root", rooted, map[string]string{ConfigPath: "/tmp/elsewhere.jsonl"}, "outside the directory"},
		{"the root itself", rooted, map[string]string{ConfigPath: root}, "outside the directory"},
		{"a sibling sharing the root's prefix", rooted, map[string]string{ConfigPath: root + "-evil/out.jsonl"}, "outside the directory"},
		{"an unknown key", free, map[string]string{ConfigPath: filepath.Join(root, "x"), "url": "http://x"}, `unknown endpoint config "url"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.j.Validate(t.Context(), transport.Endpoint{Config: tc.config})
			if tc.says == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Validate = %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

func TestSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	msg := func(path string, body []byte) transport.Message {
		return transport.Message{
			DeliveryID: "dlv_1",
			Attempt:    3,
			Endpoint:   transport.Endpoint{Config: map[string]string{ConfigPath: path}},
			Headers: []transport.Header{
				{Name: "webhook-id", Value: "dlv_1"},
				{Name: "webhook-signature", Value: "v1,AAAA v1,BBBB"},
				{Name: "x-repeat", Value: "1"},
				{Name: "x-repeat", Value: "2"},
			},
			Body:     body,
			Deadline: time.Now().Add(5 * time.Second),
		}
	}

	t.Run("appends the exact headers and body and reports delivered", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "out.jsonl")
		j := newJSONL(t, nil)
		bodies := [][]byte{
			[]byte(`{"type":"submission.received",  "submission":{"id":"sub_1","data":{"name":"Zoë"}}}`),
			{},
		}
		for _, b := range bodies {
			if out := j.Send(ctx, msg(path, b)); out.Kind != transport.OutcomeDelivered {
				t.Fatalf("Send = %+v, want delivered", out)
			}
		}
		lines := readLines(t, path)
		if len(lines) != len(bodies) {
			t.Fatalf("%d lines, want %d", len(lines), len(bodies))
		}
		for i, l := range lines {
			got, err := l.DecodeBody()
			if err != nil || string(got) != string(bodies[i]) {
				t.Errorf("line %d body %q (%v), want the exact %q", i+1, got, err, bodies[i])
			}
			if l.DeliveryID != "dlv_1" || l.Attempt != 3 || len(l.Headers) != 4 || l.Headers[3] != (Header{"x-repeat", "2"}) {
				t.Errorf("line %d = %+v", i+1, l)
			}
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("file mode %v (%v), want 0600", fi.Mode().Perm(), err)
		}
	})

	t.Run("a body that is not UTF-8 travels as base64", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "out.jsonl")
		body := []byte{0xff, 0x00, '{'}
		if out := newJSONL(t, nil).Send(ctx, msg(path, body)); out.Kind != transport.OutcomeDelivered {
			t.Fatalf("Send = %+v", out)
		}
		l := readLines(t, path)[0]
		if got, _ := l.DecodeBody(); string(got) != string(body) || l.Body != nil {
			t.Fatalf("line = %+v", l)
		}
	})

	t.Run("an unusable endpoint is permanent", func(t *testing.T) {
		t.Parallel()
		out := newJSONL(t, nil).Send(ctx, msg("relative.jsonl", []byte("{}")))
		if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "relative") {
			t.Fatalf("Send = %+v, want permanent", out)
		}
	})

	t.Run("a file that cannot be opened is retryable, and the error holds no header", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "missing-dir", "out.jsonl")
		out := newJSONL(t, nil).Send(ctx, msg(path, []byte("{}")))
		if out.Kind != transport.OutcomeRetryable || !strings.Contains(out.Error, "missing-dir") {
			t.Fatalf("Send = %+v, want retryable naming the file", out)
		}
		if strings.Contains(out.Error, "AAAA") {
			t.Fatalf("error %q leaks the signature", out.Error)
		}
	})

	t.Run("a send whose context has ended appends nothing", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "out.jsonl")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if out := newJSONL(t, nil).Send(cctx, msg(path, []byte("{}"))); out.Kind != transport.OutcomeRetryable {
			t.Fatalf("Send = %+v, want retryable", out)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("the file exists: %v", err)
		}
	})

	t.Run("concurrent sends each append one whole line", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "out.jsonl")
		j := newJSONL(t, nil)
		big := []byte(`{"pad":"` + strings.Repeat("x", 64<<10) + `"}`)
		var wg sync.WaitGroup
		const n = 20
		for range n {
			wg.Go(func() {
				if out := j.Send(ctx, msg(path, big)); out.Kind != transport.OutcomeDelivered {
					t.Errorf("Send = %+v", out)
				}
			})
		}
		wg.Wait()
		if lines := readLines(t, path); len(lines) != n {
			t.Fatalf("%d lines, want %d", len(lines), n)
		}
	})
}
