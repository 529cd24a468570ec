package webhook_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// TestNodeReceiver runs the Node receiver package's tests (sdk/node) with
// `node --test`, against messages this package signed: valid, tampered,
// expired, from the future, signed during a rotation, v1 and v1a, and a
// submission delivered three times for its dedupe. Every case is first
// checked against this package's own Verifier, so the fixtures say what
// the Go SDK decides and the Node package must decide the same. Like the
// other interoperability tests it skips without node, and fails under
// CI=true (.ci/tools.sh installs it).
func TestNodeReceiver(t *testing.T) {
	t.Parallel()
	node := externalTool(t, "node", "nodejs")
	pkg, err := filepath.Abs(filepath.Join("..", "node"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := filepath.Glob(filepath.Join(pkg, "test", "*.test.js"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no tests in %s/test (%v)", pkg, err)
	}

	fx := nodeFixtures(t)
	data, err := json.MarshalIndent(fx, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fixtures.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(node, append([]string{"--test", "--test-reporter=tap"}, tests...)...)
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), "HYMICAL_WEBHOOK_FIXTURES="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	// Each fixture must have been run and passed, not skipped.
	for _, c := range fx.Cases {
		ok := regexp.MustCompile(`(?m)^\s*ok \d+ - ` + regexp.QuoteMeta(c.Name) + `$`)
		if !ok.Match(out) {
			t.Errorf("node did not pass the case %q:\n%s", c.Name, out)
		}
	}
	if !regexp.MustCompile(`(?m)^# fail 0$`).Match(out) || !regexp.MustCompile(`(?m)^# skipped 0$`).Match(out) {
		t.Errorf("node --test reports failures or skips:\n%s", out)
	}
	if m := regexp.MustCompile(`(?m)^# pass (\d+)$`).FindSubmatch(out); m == nil {
		t.Errorf("node --test printed no pass count:\n%s", out)
	} else {
		t.Logf("node --test: %s tests passed, %d of them on Go-signed fixtures", m[1], len(fx.Cases))
	}
}

// nodeFixture is one message for the Node package to verify: the keys the
// receiver holds, the clock it reads, what arrived, and what it must make
// of it. Exactly one of the want fields is set.
type nodeFixture struct {
	Name      string         `json:"name"`
	Keys      []string       `json:"keys"`
	Tolerance int            `json:"tolerance,omitempty"` // seconds; 0: the default
	NowMS     int64          `json:"now_ms,omitempty"`    // the receiver's clock; unset only with RealClock
	RealClock bool           `json:"real_clock,omitempty"`
	Headers   map[string]any `json:"headers"`
	Body      string         `json:"body"` // base64 of the raw bytes

	WantOK          *nodeWantOK `json:"want_ok,omitempty"`
	WantError       string      `json:"want_error,omitempty"`        // a WebhookError code from verify
	WantErrorHeader string      `json:"want_error_header,omitempty"` // for MISSING_HEADER
	WantKeyError    bool        `json:"want_key_error,omitempty"`    // the Verifier refuses the keys
}

type nodeWantOK struct {
	MessageID    string `json:"message_id"`
	Timestamp    int64  `json:"timestamp"`
	Type         string `json:"type"`
	SubmissionID string `json:"submission_id,omitempty"`
}

// nodeDedupe is one submission delivered several times (two endpoints, a
// replay): receive() must run the handler once and answer 204, 200, 200.
type nodeDedupe struct {
	Keys       []string       `json:"keys"`
	NowMS      int64          `json:"now_ms"`
	Deliveries []nodeDelivery `json:"deliveries"`
	Statuses   []int          `json:"statuses"`
	Handled    []string       `json:"handled"`
}

type nodeDelivery struct {
	Headers map[string]any `json:"headers"`
	Body    string         `json:"body"`
}

type nodeFixtureFile struct {
	Cases  []nodeFixture `json:"cases"`
	Dedupe nodeDedupe    `json:"dedupe"`
}

func nodeFixtures(t *testing.T) nodeFixtureFile {
	t.Helper()
	now := time.Unix(1767225600, 0) // 2026-01-01T00:00:00Z
	nowMS := now.UnixMilli()
	const subID = "sub_48984534f33749c49a88de2d59400dce"
	submission := []byte(`{"type":"submission.received","submission":{"id":"` + subID + `","form_id":"frm_contact","data":{"name":"Zoë","note":"<b>&amp;</b>","n":1.50},"created_at":"2026-01-01T00:00:00Z"}}`)
	disabled := []byte(`{"type":"hymical.endpoint.disabled","endpoint":{"id":"ep_0123"},"reason":"gone"}`)

	secret, oldSecret, otherSecret := mustSecret(t), mustSecret(t), mustSecret(t)
	sk, pk := mustKeyPair(t)
	oldSK, oldPK := mustKeyPair(t)
	_, otherPK := mustKeyPair(t)
	const msgID = "del_0123456789abcdef"

	sign := func(id string, ts time.Time, body []byte, keys ...string) map[string]any {
		t.Helper()
		h, err := webhook.SignHeaders(id, ts, body, keys...)
		if err != nil {
			t.Fatalf("SignHeaders: %v", err)
		}
		return map[string]any{
			"webhook-id":        h.Get(webhook.HeaderID),
			"webhook-timestamp": h.Get(webhook.HeaderTimestamp),
			"webhook-signature": h.Get(webhook.HeaderSignature),
		}
	}
	with := func(h map[string]any, key string, value any) map[string]any {
		out := make(map[string]any, len(h))
		for k, v := range h {
			out[k] = v
		}
		if value == nil {
			delete(out, key)
		} else {
			out[key] = value
		}
		return out
	}
	okSub := func(ts time.Time) *nodeWantOK {
		return &nodeWantOK{MessageID: msgID, Timestamp: ts.Unix(), Type: webhook.EventSubmissionReceived, SubmissionID: subID}
	}
	signed := sign(msgID, now, submission, secret)
	bareSecret := strings.TrimPrefix(secret, webhook.SecretPrefix)
	binary := []byte{0, 0xff, '.', '\n', 0x80}

	cases := []nodeFixture{
		{Name: "v1 valid", Keys: []string{secret}, Headers: signed, Body: b64(submission), WantOK: okSub(now)},
		{Name: "v1 valid against the real clock", Keys: []string{secret}, RealClock: true,
			Headers: sign(msgID, time.Now(), submission, secret), Body: b64(submission),
			// The timestamp is not known ahead; the Node test checks the rest.
			WantOK: &nodeWantOK{MessageID: msgID, Type: webhook.EventSubmissionReceived, SubmissionID: subID}},
		{Name: "v1 bare base64 secret without whsec_", Keys: []string{bareSecret}, Headers: signed, Body: b64(submission), WantOK: okSub(now)},
		{Name: "v1 tampered body", Keys: []string{secret}, Headers: signed,
			Body: b64([]byte(strings.Replace(string(submission), "Zoë", "Zoe", 1))), WantError: "NO_MATCHING_SIGNATURE"},
		{Name: "v1 body re-encoded", Keys: []string{secret}, Headers: signed,
			Body: b64([]byte(strings.Replace(string(submission), ":", ": ", -1))), WantError: "NO_MATCHING_SIGNATURE"},
		{Name: "v1 tampered webhook-id", Keys: []string{secret}, Headers: with(signed, "webhook-id", "del_fedcba9876543210"),
			Body: b64(submission), WantError: "NO_MATCHING_SIGNATURE"},
		{Name: "v1 timestamp moved by a second", Keys: []string{secret},
			Headers: with(signed, "webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10)), Body: b64(submission), WantError: "NO_MATCHING_SIGNATURE"},
		{Name: "v1 wrong secret", Keys: []string{otherSecret}, Headers: signed, Body: b64(submission), WantError: "NO_MATCHING_SIGNATURE"},
		{Name: "v1 expired by a second", Keys: []string{secret}, NowMS: nowMS + (5*time.Minute + time.Second).Milliseconds(),
			Headers: signed, Body: b64(submission), WantError: "TIMESTAMP_TOO_OLD"},
		{Name: "v1 exactly five minutes old", Keys: []string{secret}, NowMS: nowMS + (5 * time.Minute).Milliseconds(),
			Headers: signed, Body: b64(submission), WantOK: okSub(now)},
		{Name: "v1 from the future by five minutes and a second", Keys: []string{secret}, NowMS: nowMS - (5*time.Minute + time.Second).Milliseconds(),
			Headers: signed, Body: b64(submission), WantError: "TIMESTAMP_TOO_NEW"},
		{Name: "v1 custom tolerance of ten seconds", Keys: []string{secret}, Tolerance: 10, NowMS: nowMS + 11_000,
			Headers: signed, Body: b64(submission), WantError: "TIMESTAMP_TOO_OLD"},
		{Name: "v1 malformed timestamp with a plus sign", Keys: []string{secret},
			Headers: with(signed, "webhook-timestamp", "+"+strconv.FormatInt(now.Unix(), 10)), Body: b64(submission), WantError: "MALFORMED_TIMESTAMP"},
		{Name: "v1 malformed timestamp with a leading zero", Keys: []string{secret},
			Headers: with(signed, "webhook-timestamp", "0"+strconv.FormatInt(now.Unix(), 10)), Body: b64(submission), WantError: "MALFORMED_TIMESTAMP"},
		{Name: "missing webhook-id", Keys: []string{secret}, Headers: with(signed, "webhook-id", nil),
			Body: b64(submission), WantError: "MISSING_HEADER", WantErrorHeader: webhook.HeaderID},
		{Name: "missing webhook-timestamp", Keys: []string{secret}, Headers: with(signed, "webhook-timestamp", nil),
			Body: b64(submission), WantError: "MISSING_HEADER", WantErrorHeader: webhook.HeaderTimestamp},
		{Name: "missing webhook-signature", Keys: []string{secret}, Headers: with(signed, "webhook-signature", nil),
			Body: b64(submission), WantError: "MISSING_HEADER", WantErrorHeader: webhook.HeaderSignature},
		{Name: "headers in canonical case", Keys: []string{secret}, Headers: map[string]any{
			"Webhook-Id": signed["webhook-id"], "Webhook-Timestamp": signed["webhook-timestamp"], "Webhook-Signature": signed["webhook-signature"],
		}, Body: b64(submission), WantOK: okSub(now)},

		// A rotation on the sender: new and old secrets sign; a receiver
		// holding either one accepts.
		{Name: "rotation signed with new and old, receiver holds the old", Keys: []string{oldSecret},
			Headers: sign(msgID, now, submission, secret, oldSecret), Body: b64(submission), WantOK: okSub(now)},
		{Name: "rotation signed with new and old, receiver holds the new", Keys: []string{secret},
			Headers: sign(msgID, now, submission, secret, oldSecret), Body: b64(submission), WantOK: okSub(now)},
		{Name: "rotation signed with new and old, receiver holds neither", Keys: []string{otherSecret},
			Headers: sign(msgID, now, submission, secret, oldSecret), Body: b64(submission), WantError: "NO_MATCHING_SIGNATURE"},
		// A rotation on the receiver: it holds several, the sender signs
		// with one.
		{Name: "rotation receiver holds another and the right one", Keys: []string{otherSecret, secret},
			Headers: signed, Body: b64(submission), WantOK: okSub(now)},
		{Name: "rotation signatures in two header lines", Keys: []string{oldSecret}, Headers: with(signed, "webhook-signature", []string{
			sign(msgID, now, submission, secret)["webhook-signature"].(string), sign(msgID, now, submission, oldSecret)["webhook-signature"].(string),
		}), Body: b64(submission), WantOK: okSub(now)},

		{Name: "v1a valid", Keys: []string{pk}, Headers: sign(msgID, now, submission, sk), Body: b64(submission), WantOK: okSub(now)},
		{Name: "v1a tampered body", Keys: []string{pk}, Headers: sign(msgID, now, submission, sk),
			Body: b64(append([]byte(nil), submission[:len(submission)-1]...)), WantError: "NO_MATCHING_SIGNATURE"},
		{Name: "v1a wrong public key", Keys: []string{otherPK}, Headers: sign(msgID, now, submission, sk), Body: b64(submission), WantError: "NO_MATCHING_SIGNATURE"},
		{Name: "v1a expired", Keys: []string{pk}, NowMS: nowMS + (10 * time.Minute).Milliseconds(),
			Headers: sign(msgID, now, submission, sk), Body: b64(submission), WantError: "TIMESTAMP_TOO_OLD"},
		{Name: "v1a rotation receiver holds the old key", Keys: []string{oldPK},
			Headers: sign(msgID, now, submission, sk, oldSK), Body: b64(submission), WantOK: okSub(now)},
		{Name: "v1a rotation receiver holds another and the new key", Keys: []string{otherPK, pk},
			Headers: sign(msgID, now, submission, oldSK, sk), Body: b64(submission), WantOK: okSub(now)},
		{Name: "mixed v1 and v1a, receiver holds the public key", Keys: []string{pk},
			Headers: sign(msgID, now, submission, secret, sk), Body: b64(submission), WantOK: okSub(now)},
		{Name: "mixed v1 and v1a, receiver holds the secret", Keys: []string{secret},
			Headers: sign(msgID, now, submission, sk, secret), Body: b64(submission), WantOK: okSub(now)},
		{Name: "v1a signing key refused on the receiver", Keys: []string{sk}, Headers: sign(msgID, now, submission, sk),
			Body: b64(submission), WantKeyError: true},

		{Name: "another event type", Keys: []string{secret}, Headers: sign(msgID, now, disabled, secret), Body: b64(disabled),
			WantOK: &nodeWantOK{MessageID: msgID, Timestamp: now.Unix(), Type: "hymical.endpoint.disabled"}},
		{Name: "signed body that is not JSON", Keys: []string{secret}, Headers: sign(msgID, now, binary, secret), Body: b64(binary),
			WantError: "INVALID_EVENT"},
	}
	for i := range cases {
		if cases[i].NowMS == 0 && !cases[i].RealClock {
			cases[i].NowMS = nowMS
		}
		checkWithGo(t, cases[i])
	}

	// One submission, delivered to two endpoints (two webhook-ids, two
	// secrets) and then replayed to the first: the receiver holds both
	// secrets, as one service behind two endpoints would.
	secondSecret := mustSecret(t)
	dd := nodeDedupe{
		Keys:  []string{secret, secondSecret},
		NowMS: nowMS,
		Deliveries: []nodeDelivery{
			{Headers: sign("del_endpoint_one", now, submission, secret), Body: b64(submission)},
			{Headers: sign("del_endpoint_two", now.Add(time.Second), submission, secondSecret), Body: b64(submission)},
			{Headers: sign("del_endpoint_one", now.Add(time.Minute), submission, secret), Body: b64(submission)},
		},
		Statuses: []int{http.StatusNoContent, http.StatusOK, http.StatusOK},
		Handled:  []string{subID},
	}
	return nodeFixtureFile{Cases: cases, Dedupe: dd}
}

// checkWithGo asserts that this package decides a fixture as it says, so
// the Node package is held to the Go SDK's behaviour, not to a guess.
func checkWithGo(t *testing.T, c nodeFixture) {
	t.Helper()
	var opts []webhook.Option
	if c.NowMS != 0 {
		opts = append(opts, fixedNow(time.UnixMilli(c.NowMS)))
	}
	if c.Tolerance != 0 {
		opts = append(opts, webhook.WithTolerance(time.Duration(c.Tolerance)*time.Second))
	}
	v, err := webhook.NewVerifier(c.Keys, opts...)
	if c.WantKeyError {
		if !errors.Is(err, webhook.ErrInvalidSecret) {
			t.Fatalf("%s: the Go Verifier accepted the keys (%v); the fixture says it must not", c.Name, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	h := http.Header{}
	for k, val := range c.Headers {
		switch val := val.(type) {
		case string:
			h.Add(k, val)
		case []string:
			for _, s := range val {
				h.Add(k, s)
			}
		}
	}
	body, _ := base64.StdEncoding.DecodeString(c.Body)
	err = v.Verify(h, body)
	want := map[string]error{
		"":                      nil,
		"INVALID_EVENT":         nil, // the signature is fine; the event is not
		"MISSING_HEADER":        webhook.ErrMissingHeader,
		"MALFORMED_TIMESTAMP":   webhook.ErrMalformedTimestamp,
		"TIMESTAMP_TOO_OLD":     webhook.ErrTimestampTooOld,
		"TIMESTAMP_TOO_NEW":     webhook.ErrTimestampTooNew,
		"NO_MATCHING_SIGNATURE": webhook.ErrNoMatchingSignature,
	}[c.WantError]
	if (want == nil) != (err == nil) || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: the Go Verifier says %v; the fixture expects %q", c.Name, err, c.WantError)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
