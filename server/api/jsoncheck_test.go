package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/faceopts"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

// nested is data nested depth levels deep: {"a":{"a":…{}…}}.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// Ingest refuses JSON that encoding/json would accept but a receiver
// cannot be trusted to read, with a 400 that names the problem, its byte
// offset and its JSON path, and writes nothing.
func TestIngestRefusesJSONReceiversCannotRead(t *testing.T) {
	f := newFixture(t, backends["sqlite"], nil)
	f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
	sub := "/v1/forms/contact/submissions"
	for _, tc := range []struct {
		name, path, body string
		code             string
		at               int    // byte offset
		where            string // JSON path
		says             string
	}{
		{"bytes that are not UTF-8", sub, "{\"name\":\"caf\xe9\"}", "invalid_utf8", 12, "$.name", "0xe9 that is not valid UTF-8"},
		{"a UTF-8 encoded surrogate", sub, "{\"name\":\"\xed\xa0\x80\"}", "invalid_utf8", 9, "$.name", "not valid UTF-8"},
		{"a lone high surrogate escape", sub, `{"a":"x\ud800y"}`, "lone_surrogate", 7, "$.a", `\ud800`},
		{"a high surrogate followed by no low one", sub, `{"a":"\uD800\u0041"}`, "lone_surrogate", 6, "$.a", "not followed by a low surrogate"},
		{"a lone low surrogate escape", sub, `{"a":["ok","\udc00"]}`, "lone_surrogate", 12, "$.a[1]", "not preceded by a high surrogate"},
		{"a lone surrogate in a key", sub, `{"ok":{"\ud800":1}}`, "lone_surrogate", 8, "$.ok", "in an object key"},
		{"an escaped NUL", sub, `{"a":{"b c":"x\u0000"}}`, "nul_character", 14, `$.a["b c"]`, `NUL character (\u0000) in a string`},
		{"a raw NUL", sub, "{\"a\":\"x\x00\"}", "nul_character", 7, "$.a", "raw NUL byte"},
		{"a number too large for a float64", sub, `{"n":1e999999}`, "number_out_of_range", 5, "$.n", "1e999999, too large"},
		{"a negative number too large", sub, `{"n":[0,-1.5E400]}`, "number_out_of_range", 8, "$.n[1]", "-1.5E400"},
		{"an integer of 400 digits", sub, `{"n":` + strings.Repeat("9", 400) + `}`, "number_out_of_range", 5, "$.n", "too large"},
		{"65 levels of nesting", sub, nested(65), "too_deep", 5 * 64, "$" + strings.Repeat(".a", 64), "more than 64 levels"},
		{"10,000 levels of nesting", sub, nested(10000), "too_deep", 5 * 64, "$.a.a.a", "server.max_nesting_depth"},
		{"an event's payload", "/v1/events", `{"type":"form.published","payload":{"x":"\udfff"}}`, "lone_surrogate", 41, "$.payload.x", `\udfff`},
		{"an event's type", "/v1/events", "{\"type\":\"a\xffb\",\"payload\":{}}", "invalid_utf8", 10, "$.type", "0xff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := f.count("webhook_events")
			r := f.send(req{method: "POST", path: tc.path, token: ingestKey, body: tc.body}).must(t, http.StatusBadRequest)
			code, msg := r.errorCode(t)
			if code != tc.code || !strings.Contains(msg, fmt.Sprintf("at byte %d ", tc.at)) ||
				!strings.Contains(msg, "(at "+tc.where) || !strings.Contains(msg, tc.says) {
				t.Fatalf("answer %s %q, want %s at byte %d (at %s) saying %q", code, msg, tc.code, tc.at, tc.where, tc.says)
			}
			if n := f.count("webhook_events"); n != events {
				t.Fatalf("a refused body wrote %d events", n-events)
			}
		})
	}

	t.Run("what receivers can read is accepted and stored as sent", func(t *testing.T) {
		for _, body := range []string{
			`{"pair":"\ud83d\ude00","text":"caf\u00e9 ` + "caf\u00e9" + `","ctl":"\u0001\t","tiny":1e-400,"big":1.7976931348623157e308}`,
			`{"n":` + strings.Repeat("9", 308) + `,"e":-0.0e+0}`,
			nested(64),
		} {
			r := f.send(req{method: "POST", path: sub, token: ingestKey, body: body}).must(t, http.StatusAccepted)
			ev, err := f.store.EventGet(t.Context(), r.str("event_id"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(ev.Payload), `"data":`+body+`,`) {
				t.Fatalf("stored payload %.200s does not carry the data as it was sent: %.200s", ev.Payload, body)
			}
		}
	})

	t.Run("the limit is the configured one", func(t *testing.T) {
		f := newFixture(t, backends["sqlite"], func(o *api.Options) { o.MaxNestingDepth = 3 })
		f.submit("contact", nested(3)).must(t, http.StatusAccepted)
		r := f.send(req{method: "POST", path: sub, token: ingestKey, body: nested(4)}).must(t, http.StatusBadRequest)
		if _, msg := r.errorCode(t); !strings.Contains(msg, "more than 3 levels") || !strings.Contains(msg, "raise server.max_nesting_depth") {
			t.Fatalf("over a limit of 3: %q", msg)
		}
		// The event route's body is the envelope: its payload is level 2.
		f.send(req{method: "POST", path: "/v1/events", token: ingestKey,
			body: `{"type":"a.b","payload":` + nested(2) + `}`}).must(t, http.StatusAccepted)
		f.send(req{method: "POST", path: "/v1/events", token: ingestKey,
			body: `{"type":"a.b","payload":` + nested(3) + `}`}).must(t, http.StatusBadRequest)
	})
}

func TestNewRefusesANestingLimitOutOfRange(t *testing.T) {
	for _, depth := range []int{-1, faceopts.MaxNestingDepthLimit + 1} {
		_, err := api.New(api.Options{Store: sqlitetest.New(t), Transports: loopbackHost, AdminToken: adminToken, MaxNestingDepth: depth})
		if err == nil || !strings.Contains(err.Error(), "MaxNestingDepth") || !strings.Contains(err.Error(), fmt.Sprint(faceopts.MaxNestingDepthLimit)) {
			t.Errorf("MaxNestingDepth %d: New = %v, want an error naming it and its range", depth, err)
		}
	}
}

// An object with the same key twice is refused with a 400 naming the key
// and where it is, on every route that takes a body: receivers disagree
// on which of the two they read (encoding/json and JavaScript the last,
// others the first, strict ones refuse), so one delivery would be read
// two ways. Keys are compared as decoded, so an escape does not hide one;
// the same key in two objects is no duplicate.
func TestDuplicateKeysAreRefused(t *testing.T) {
	f := newFixture(t, backends["sqlite"], nil)
	f.createEndpoint(map[string]any{"url": "https://hooks.example.com/in"})
	sub := "/v1/forms/contact/submissions"
	for _, tc := range []struct {
		name, path, token, body string
		// second is the text whose last occurrence in body is the
		// duplicate key, where the answer must point.
		second, where, says string
	}{
		{"at the top", sub, ingestKey, `{"email":"a@example.com","name":"Ada","email":"b@example.com"}`, `"email"`, "$.email", `the key "email" twice`},
		{"in a nested object", sub, ingestKey, `{"a":{"b":{"c":1,"d":2,"c":3}}}`, `"c"`, "$.a.b.c", `the key "c" twice`},
		{"in an object in an array", sub, ingestKey, `{"items":[{"sku":"x"},{"sku":"y","qty":1,"sku":"z"}]}`, `"sku"`, "$.items[1].sku", `the key "sku" twice`},
		{"in arrays of arrays", sub, ingestKey, `{"m":[[],[{"k":1,"k":1}]]}`, `"k"`, "$.m[1][0].k", `the key "k" twice`},
		{"spelled with an escape", sub, ingestKey, `{"admin":false,"\u0061dmin":true}`, `"\u0061dmin"`, `$["\u0061dmin"]`, `written "admin" the first time`},
		{"with an odd name", sub, ingestKey, `{"a b":1,"a b":2}`, `"a b"`, `$["a b"]`, `the key "a b" twice`},
		{"after seventeen other keys", sub, ingestKey, `{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k3":3}`, `"k3"`, "$.k3", `the key "k3" twice`},
		{"in an event's payload", "/v1/events", ingestKey, `{"type":"form.published","payload":{"x":1,"x":2}}`, `"x"`, "$.payload.x", `the key "x" twice`},
		{"an event's own field", "/v1/events", ingestKey, `{"type":"form.published","type":"form.deleted","payload":{}}`, `"type"`, "$.type", `the key "type" twice`},
		{"an endpoint's own field", "/v1/endpoints", adminToken, `{"url":"https://hooks.example.com/a","url":"https://hooks.example.com/b"}`, `"url"`, "$.url", `the key "url" twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, endpoints := f.count("webhook_events"), f.count("webhook_endpoints")
			r := f.send(req{method: "POST", path: tc.path, token: tc.token, body: tc.body}).must(t, http.StatusBadRequest)
			code, msg := r.errorCode(t)
			at := strings.LastIndex(tc.body, tc.second)
			if code != "duplicate_key" || !strings.Contains(msg, fmt.Sprintf("at byte %d ", at)) ||
				!strings.Contains(msg, "(at "+tc.where+")") || !strings.Contains(msg, tc.says) || !strings.Contains(msg, "send each key once") {
				t.Fatalf("answer %s %q, want duplicate_key at byte %d (at %s) saying %q", code, msg, at, tc.where, tc.says)
			}
			if f.count("webhook_events") != events || f.count("webhook_endpoints") != endpoints {
				t.Fatal("a refused body wrote rows")
			}
		})
	}

	t.Run("the same key in different objects, or in another case or form, is accepted as sent", func(t *testing.T) {
		for _, body := range []string{
			`{"a":{"x":1},"b":{"x":1},"x":{"x":{"x":1}}}`,
			`{"list":[{"k":1},{"k":1}]}`,
			`{"Email":"a","email":"b","EMAIL":"c"}`,
			`{"e\u0301":1,"\u00e9":2}`,
			`{"a\\":1,"a":2,"a\"":3}`,
		} {
			r := f.send(req{method: "POST", path: sub, token: ingestKey, body: body}).must(t, http.StatusAccepted)
			ev, err := f.store.EventGet(t.Context(), r.str("event_id"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(ev.Payload), `"data":`+body+`,`) {
				t.Fatalf("stored payload %.200s does not carry the data as it was sent: %s", ev.Payload, body)
			}
		}
	})
}
