package pluginkit

import (
	"strings"

	"github.com/hymical/hymical/sdk/transport"
)

// Redact replaces every non-empty secret in text with [redacted].
func Redact(text string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, "[redacted]")
		}
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
