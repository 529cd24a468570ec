package pluginkit

import (
	"cmp"
	"net/url"
	"slices"
	"strings"

	"github.com/hymical/hymical/sdk/transport"
)

// Redact replaces every non-empty secret in text with [redacted]: as
// given, and as a URL's query or path would carry it escaped, since a
// client library's error may quote the URL it was given or one it
// rebuilt (a password "p@ss" shows as p%40ss).
func Redact(text string, secrets ...string) string {
	var forms []string
	for _, s := range secrets {
		if s != "" {
			forms = append(forms, s, url.QueryEscape(s), url.PathEscape(s))
		}
	}
	// Longest first, so a form that holds a shorter one goes whole; equal
	// forms (a secret with nothing to escape is its own escaped form) end
	// up side by side, for Compact to drop.
	slices.SortFunc(forms, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	for _, f := range slices.Compact(forms) {
		text = strings.ReplaceAll(text, f, "[redacted]")
	}
	return text
}

// minQuoted is the shortest header value or body ScrubMessage replaces:
// shorter ones (a timestamp's digits, "{}") would mangle unrelated text
// and give nothing away.
const minQuoted = 8

// ScrubMessage makes an outcome's text safe to report, should an error
// ever have quoted the message: every header value and the body are
// replaced by their names, and the text is bounded (transport.BoundError).
// Secrets of the plugin's own, such as a password, are the caller's to
// Redact first.
func ScrubMessage(text string, msg transport.Message) string {
	for _, h := range msg.Headers {
		if len(h.Value) >= minQuoted {
			text = strings.ReplaceAll(text, h.Value, "[header "+h.Name+"]")
		}
	}
	if len(msg.Body) >= minQuoted {
		text = strings.ReplaceAll(text, string(msg.Body), "[body]")
	}
	return transport.BoundError(text)
}
