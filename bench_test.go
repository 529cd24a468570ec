package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
)

// The bench command runs from its flags and prints the table; the phases
// themselves are tested in harness/bench.
func TestBenchCommandRunsAndPrintsTheTable(t *testing.T) {
	t.Parallel()
	args := []string{"bench", "--sqlite-dir", t.TempDir(), "--submissions", "10", "--endpoints", "2",
		"--concurrency", "2", "--batch", "2", "--transport", "inprocess", "--send-only=false", "--quiet"}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"ceiling: bare loop", "end to end: in-process", "10 submissions x 2 endpoints = 20 deliveries",
		"end to end, in-process / ceiling", "command   hymical bench --sqlite-dir"} {
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
	if err := run(context.Background(), []string{"bench", "--help"}, &out, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("bench --help = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"usage: hymical bench", "-cpuprofile", "-backend", "FORMS_DATABASE_URL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench --help lacks %q", want)
		}
	}
	err := run(context.Background(), []string{"bench", "--backend", "postgres", "--database", ""}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "--database") {
		t.Errorf("bench on postgres without a URL = %v, want an error naming --database", err)
	}
	if got := shownArgs([]string{"--database=postgres://u:hunter2@h/db", "postgres://u:hunter2@h/db"}); strings.Contains(got, "hunter2") {
		t.Errorf("shownArgs kept the password: %s", got)
	}
}
