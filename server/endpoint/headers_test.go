package endpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/hymical/hymical/storage"
)

func TestCheckHeaders(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value-1b7"
	h := storage.NewHeader
	many := make([]storage.Header, MaxHeaders+1)
	for i := range many {
		many[i] = h("X-H"+strings.Repeat("a", i), "v")
	}
	big := make([]storage.Header, 3)
	for i := range big {
		big[i] = h("X-Big"+strings.Repeat("b", i), strings.Repeat("v", MaxHeaderValue))
	}
	for _, tc := range []struct {
		name    string
		headers []storage.Header
		// mention is in the error; "" means the headers are accepted.
		mention string
	}{
		{"none", nil, ""},
		{"an api key and a tenant", []storage.Header{h("Authorization", "Bearer "+secret), h("X-Tenant", "acme")}, ""},
		{"obs-text and a tab inside a value", []storage.Header{h("X-Note", "caf\xc3\xa9\tok")}, ""},
		{"user-agent may be set", []storage.Header{h("User-Agent", "acme-forms")}, ""},
		{"a webhook- header", []storage.Header{h("webhook-signature", secret)}, "webhook-signature cannot be set"},
		{"a webhook- header in any case", []storage.Header{h("Webhook-ID", secret)}, "Webhook-ID cannot be set"},
		{"host", []storage.Header{h("Host", "evil.example")}, "Host cannot be set"},
		{"content-length", []storage.Header{h("content-length", "3")}, "content-length cannot be set"},
		{"content-type", []storage.Header{h("Content-Type", "text/plain")}, "Content-Type cannot be set"},
		{"connection", []storage.Header{h("Connection", "close")}, "hop-by-hop"},
		{"keep-alive", []storage.Header{h("Keep-Alive", "timeout=5")}, "hop-by-hop"},
		{"te", []storage.Header{h("TE", "trailers")}, "hop-by-hop"},
		{"trailer", []storage.Header{h("Trailer", "x")}, "hop-by-hop"},
		{"transfer-encoding", []storage.Header{h("Transfer-Encoding", "chunked")}, "hop-by-hop"},
		{"upgrade", []storage.Header{h("Upgrade", "websocket")}, "hop-by-hop"},
		{"proxy-authorization", []storage.Header{h("Proxy-Authorization", secret)}, "Proxy-Authorization cannot be set"},
		{"traceparent", []storage.Header{h("traceparent", "00-x")}, "attempt's trace"},
		{"tracestate", []storage.Header{h("TraceState", "a=b")}, "attempt's trace"},
		{"a name with a space", []storage.Header{h("X Key", secret)}, `"X Key" is not a valid HTTP header name`},
		{"a name with a colon", []storage.Header{h("X-Key:", secret)}, "not a valid HTTP header name"},
		{"an empty name", []storage.Header{h("", secret)}, "custom header 1 has no name"},
		{"a name too long", []storage.Header{h(strings.Repeat("n", MaxHeaderNameBytes+1), "v")}, "at most 128"},
		{"a value with CR LF", []storage.Header{h("X-Key", secret+"\r\nX-Injected: 1")}, "X-Key holds a line break"},
		{"a value with LF", []storage.Header{h("X-Key", secret+"\nb")}, "X-Key holds a line break"},
		{"a value with NUL", []storage.Header{h("X-Key", secret+"\x00")}, "X-Key holds a line break or another control character"},
		{"an empty value", []storage.Header{h("X-Key", "")}, "X-Key has an empty value"},
		{"a value with outer spaces", []storage.Header{h("X-Key", " "+secret)}, "white space"},
		{"a value too long", []storage.Header{h("X-Key", strings.Repeat("v", MaxHeaderValue+1))}, "at most 4096"},
		{"a name twice, ignoring case", []storage.Header{h("X-Key", secret), h("x-key", "b")}, "x-key is given twice"},
		{"too many", many, "21 custom headers given, at most 20"},
		{"too many bytes in all", big, "at most 8192"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckHeaders(tc.headers)
			if tc.mention == "" {
				if err != nil {
					t.Fatalf("CheckHeaders = %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidHeader) {
				t.Fatalf("CheckHeaders = %v, want ErrInvalidHeader", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not say %q", err, tc.mention)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q holds the header's value", err)
			}
		})
	}
}
