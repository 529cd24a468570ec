package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The command runs from its flags and prints the table; the phases
// themselves are tested in harness/bench.
func TestBenchCommandRunsAndPrintsTheTable(t *testing.T) {
	t.Parallel()
	args := []string{"--sqlite-dir", t.TempDir(), "--submissions", "10", "--endpoints", "2",
		"--concurrency", "2", "--batch", "2", "--transport", "inprocess", "--send-only=false", "--quiet"}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"ceiling: bare loop", "end to end: in-process", "10 submissions x 2 endpoints = 20 deliveries",
		"end to end, in-process / ceiling", "command   hymical-bench --sqlite-dir"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, stdout.String())
		}
	}

	stdout.Reset()
	if err := run(context.Background(), append(args, "--json", "--ceiling=false"), &stdout, &stderr); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, stderr.String())
	}
	var rep struct {
		Deliveries int `json:"deliveries"`
		Phases     []struct {
			Name     string  `json:"name"`
			Rate     float64 `json:"rate_per_s"`
			Received int     `json:"received"`
		} `json:"phases"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("bench --json is not JSON: %v\n%s", err, stdout.String())
	}
	if rep.Deliveries != 20 || len(rep.Phases) != 1 || rep.Phases[0].Received != 20 || rep.Phases[0].Rate <= 0 {
		t.Errorf("bench --json = %+v", rep)
	}
}

func TestBenchCommandHelpAndMistakes(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("bench --help = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"usage: hymical-bench", "-cpuprofile", "-hymical", "-backend", "FORMS_DATABASE_URL", "-http", "-idle", "--rate 50"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench --help lacks %q", want)
		}
	}
	// The README's build puts hymical beside this command, where --http
	// looks for it unless told.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("(default %q)", filepath.Join(filepath.Dir(exe), "hymical")); !strings.Contains(out.String(), want) {
		t.Errorf("bench --help does not give -hymical's default as %s:\n%s", want, out.String())
	}
	err = run(context.Background(), []string{"--backend", "postgres", "--database", ""}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "--database") {
		t.Errorf("bench on postgres without a URL = %v, want an error naming --database", err)
	}
	if got := shownArgs([]string{"--database=postgres://u:hunter2@h/db", "postgres://u:hunter2@h/db"}); strings.Contains(got, "hunter2") {
		t.Errorf("shownArgs kept the password: %s", got)
	}
}

// With --http the pool flags a caller gives become serve's settings, and
// those that mean nothing to a serve process are refused by name.
func TestBenchHTTPModeFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want []string
		err  string
	}{
		{nil, nil, ""},
		{[]string{"--concurrency", "32", "--batch=64", "--poll-interval", "100ms", "--lease", "90s", "--log-level", "info", "--endpoint-share", "1"},
			// In the flags' lexical order, as flag.Visit goes.
			[]string{"--worker.batch_size=64", "--worker.concurrency=32", "--worker.endpoint_share=1", "--worker.lease_seconds=90", "--log.level=info", "--worker.poll_interval=100ms"}, ""},
		{[]string{"--transport", "plugin"}, nil, "--transport does not apply to --http"},
		{[]string{"--lease", "1500ms"}, nil, "whole seconds"},
	}
	for _, tt := range tests {
		fs := newFlagSet("")
		fs.Int("concurrency", 16, "")
		fs.Int("batch", 16, "")
		fs.Duration("poll-interval", 0, "")
		fs.Float64("endpoint-share", 0.25, "")
		fs.Duration("lease", 0, "")
		fs.String("log-level", "error", "")
		fs.String("transport", "", "")
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		got, err := httpModeFlags(fs)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%v: %v, want an error saying %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%v: serve flags %q, %v; want %q", tt.args, got, err, tt.want)
		}
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"--idle", "1s", "--preload"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "--preload does not apply to --http") {
		t.Errorf("bench --idle 1s --preload = %v, want it refused by name", err)
	}
}
