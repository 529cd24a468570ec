package telemetry

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// TraceIDPlaceholder is what a trace URL template holds where the trace id goes.
const TraceIDPlaceholder = "{trace_id}"

// TraceURLTemplate turns a trace id into a link to the trace in a tracing
// UI (Jaeger, Tempo through Grafana, Honeycomb, …), e.g.
// "https://jaeger.example.com/trace/{trace_id}". The zero value links
// nowhere.
type TraceURLTemplate struct {
	template string
}

// ParseTraceURLTemplate checks a template: an absolute http:// or https://
// URL that holds TraceIDPlaceholder. An empty template is valid and links
// nowhere. The error says what is wrong and gives an example, to follow the
// key's name in a message.
func ParseTraceURLTemplate(s string) (TraceURLTemplate, error) {
	if s == "" {
		return TraceURLTemplate{}, nil
	}
	const example = "e.g. https://jaeger.example.com/trace/" + TraceIDPlaceholder
	if !strings.Contains(s, TraceIDPlaceholder) {
		return TraceURLTemplate{}, fmt.Errorf("has no %s placeholder for the trace id: write the trace UI's URL for one trace with %s in place of the id, %s", TraceIDPlaceholder, TraceIDPlaceholder, example)
	}
	// A sample id stands in, so the check sees the URL a link will have.
	u, err := url.Parse(strings.ReplaceAll(s, TraceIDPlaceholder, "4bf92f3577b34da6a3ce929d0e0e4736"))
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return TraceURLTemplate{}, fmt.Errorf("is not a URL (%w): %s", err, example)
	case u.Scheme != "http" && u.Scheme != "https":
		return TraceURLTemplate{}, fmt.Errorf("is not an http:// or https:// URL: %s", example)
	case u.Host == "":
		return TraceURLTemplate{}, fmt.Errorf("has no host: %s", example)
	}
	return TraceURLTemplate{template: s}, nil
}

// URL is the link to the trace with this id, or "" when there is no
// template or no id. The id is path-escaped, though real ids are hex.
func (t TraceURLTemplate) URL(traceID string) string {
	if t.template == "" || traceID == "" {
		return ""
	}
	return strings.ReplaceAll(t.template, TraceIDPlaceholder, url.PathEscape(traceID))
}

// String is the template as configured.
func (t TraceURLTemplate) String() string { return t.template }
