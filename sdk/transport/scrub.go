package transport

import "github.com/hymical/hymical/sdk/redact"

// ScrubError makes error text safe to report in m's Outcome, should an
// error ever have quoted the message: every header value and the body are
// replaced by their names ("[header webhook-signature]", "[body]"), by the
// rule of redact.Replace, and the text is bounded (BoundError). The
// contract forbids both in Outcome.Error: the headers carry the signature
// and the body the submission. Secrets of the plugin's own, such as a
// broker password, are the caller's to hide first (redact.Hide).
func ScrubError(text string, m Message) string {
	rs := make([]redact.Replacement, 0, len(m.Headers)+1)
	for _, h := range m.Headers {
		rs = append(rs, redact.Replacement{Value: h.Value, With: "[header " + h.Name + "]"})
	}
	// A body longer than the text cannot be quoted in it; converting a
	// large one to look would be wasted.
	if len(m.Body) <= len(text) {
		rs = append(rs, redact.Replacement{Value: string(m.Body), With: "[body]"})
	}
	return BoundError(redact.Replace(text, rs...))
}
