package telemetry_test

import (
	"strings"
	"testing"

	"github.com/hymical/hymical/server/telemetry"
)

func TestTraceURLTemplate(t *testing.T) {
	t.Parallel()
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	good := map[string]string{
		"": "",
		"https://jaeger.example.com/trace/{trace_id}":                                                   "https://jaeger.example.com/trace/" + id,
		"http://grafana:3000/explore?left=%7B%22queries%22:%5B%7B%22query%22:%22{trace_id}%22%7D%5D%7D": "http://grafana:3000/explore?left=%7B%22queries%22:%5B%7B%22query%22:%22" + id + "%22%7D%5D%7D",
	}
	for tmpl, want := range good {
		tt, err := telemetry.ParseTraceURLTemplate(tmpl)
		if err != nil {
			t.Errorf("ParseTraceURLTemplate(%q): %v", tmpl, err)
			continue
		}
		if got := tt.URL(id); got != want {
			t.Errorf("%q: URL = %q, want %q", tmpl, got, want)
		}
		if got := tt.URL(""); got != "" {
			t.Errorf("%q: URL of no trace id = %q, want none", tmpl, got)
		}
	}
	bad := map[string]string{
		"https://jaeger.example.com/trace/":     "{trace_id} placeholder",
		"javascript:alert(1)//{trace_id}":       "http:// or https://",
		"ftp://traces.example.com/{trace_id}":   "http:// or https://",
		"https:///trace/{trace_id}":             "no host",
		"https://jaeger example.com/{trace_id}": "not a URL",
	}
	for tmpl, want := range bad {
		_, err := telemetry.ParseTraceURLTemplate(tmpl)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "e.g. https://") {
			t.Errorf("ParseTraceURLTemplate(%q) = %v, want an error saying %q with an example", tmpl, err, want)
		}
	}
}
