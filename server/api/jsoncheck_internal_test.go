package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// readableJSON is the reference for checkJSON, written another way: for a
// well-formed JSON text b, it decodes b with encoding/json and looks at
// what came out. It returns every kind of problem that keeps a receiver
// from reading b; none when it can.
func readableJSON(b []byte, maxDepth int) map[string]bool {
	found := map[string]bool{}
	if !utf8.Valid(b) {
		found["invalid_utf8"] = true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		found["not JSON: "+err.Error()] = true
		return found
	}
	// encoding/json decodes a lone surrogate escape, and a byte that is
	// not UTF-8, as U+FFFD: more of them decoded than b spells is one.
	if replacementsIn(v) > spelledReplacements(b) && !found["invalid_utf8"] {
		found["lone_surrogate"] = true
	}
	walkJSON(v, 1, maxDepth, found)
	if duplicateKeys(b) {
		found["duplicate_key"] = true
	}
	return found
}

// duplicateKeys reports whether an object of the well-formed JSON text b
// has a key twice, by the keys encoding/json's tokenizer decodes.
func duplicateKeys(b []byte) bool {
	type frame struct {
		keys    map[string]bool // nil for an array
		wantKey bool
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		top := func() *frame {
			if len(stack) == 0 {
				return nil
			}
			return stack[len(stack)-1]
		}
		if f := top(); f != nil && f.keys != nil && f.wantKey {
			if k, ok := tok.(string); ok {
				if f.keys[k] {
					return true
				}
				f.keys[k] = true
				f.wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: an object that holds it wants its next key.
		if f := top(); f != nil && f.keys != nil {
			f.wantKey = true
		}
		if len(stack) == 0 {
			return false
		}
	}
}

func walkJSON(v any, depth, maxDepth int, found map[string]bool) {
	switch v := v.(type) {
	case string:
		if strings.ContainsRune(v, 0) {
			found["nul_character"] = true
		}
	case json.Number:
		if _, err := strconv.ParseFloat(string(v), 64); errors.Is(err, strconv.ErrRange) {
			found["number_out_of_range"] = true
		}
	case map[string]any:
		if depth > maxDepth {
			found["too_deep"] = true
		}
		for k, e := range v {
			if strings.ContainsRune(k, 0) {
				found["nul_character"] = true
			}
			walkJSON(e, depth+1, maxDepth, found)
		}
	case []any:
		if depth > maxDepth {
			found["too_deep"] = true
		}
		for _, e := range v {
			walkJSON(e, depth+1, maxDepth, found)
		}
	}
}

// replacementsIn counts U+FFFD in the strings and keys of v.
func replacementsIn(v any) int {
	n := 0
	switch v := v.(type) {
	case string:
		n = strings.Count(v, "\ufffd")
	case map[string]any:
		for k, e := range v {
			n += strings.Count(k, "\ufffd") + replacementsIn(e)
		}
	case []any:
		for _, e := range v {
			n += replacementsIn(e)
		}
	}
	return n
}

// spelledReplacements counts the U+FFFD that the well-formed JSON text b
// spells out: as UTF-8, or as the escape \ufffd.
func spelledReplacements(b []byte) int {
	n := bytes.Count(b, []byte("\ufffd"))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		// Inside a string, as every backslash of well-formed JSON is.
		if b[i+1] == 'u' && strings.EqualFold(string(b[i+2:i+6]), "fffd") {
			n++
		}
		if b[i+1] == 'u' {
			i += 5
		} else {
			i++
		}
	}
	return n
}

// jsonNumber is JSON's grammar for a number.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`)

// justified checks that a problem checkJSON reports is there in b, at the
// offset it names, whether or not b is well-formed JSON.
func justified(b []byte, p *jsonProblem) error {
	if p.offset < 0 || p.offset >= len(b) {
		return fmt.Errorf("offset %d outside the body of %d bytes", p.offset, len(b))
	}
	at := b[p.offset:]
	surrogate := func() bool {
		r, ok := hex4(at, 2)
		return bytes.HasPrefix(at, []byte(`\u`)) && ok && r >= 0xd800 && r < 0xe000
	}
	ok := false
	switch p.code {
	case "invalid_utf8":
		r, size := utf8.DecodeRune(at)
		ok = r == utf8.RuneError && size == 1
	case "nul_character":
		ok = at[0] == 0 || bytes.HasPrefix(at, []byte(`\u0000`))
	case "lone_surrogate":
		ok = surrogate()
	case "number_out_of_range":
		f, err := strconv.ParseFloat(string(jsonNumber.Find(at)), 64)
		ok = errors.Is(err, strconv.ErrRange) && (f > 1 || f < -1)
	case "too_deep":
		ok = at[0] == '{' || at[0] == '['
	case "duplicate_key":
		ok = at[0] == '"'
	}
	if !ok {
		return fmt.Errorf("%s is not at byte %d: %q", p.code, p.offset, at[:min(len(at), 16)])
	}
	if !strings.HasPrefix(p.path, "$") {
		return fmt.Errorf("path %q does not start at $", p.path)
	}
	return nil
}

// FuzzCheckJSON holds checkJSON to the reference: on well-formed JSON it
// refuses exactly what readableJSON finds unreadable, and for the same
// reason; on any input, a problem it reports is there at the offset it
// names; and it never changes the body. Its seeds run in every go test;
// explore with
//
//	go test -run '^$' -fuzz FuzzCheckJSON ./server/api
func FuzzCheckJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"a":"b"}`, `{"a":[1,-2.5e10,true,false,null,{"b":"c"}]}`,
		`{"pair":"\ud83d\ude00","e":"\u00e9","esc":"\"\\\/\b\f\n\r\t"}`,
		"{\"raw\":\"caf\u00e9 \xf0\x9f\x98\x80\"}",
		"{\"a\":\"caf\xe9\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xc0\xaf\"}",
		`{"a":"\ud800"}`, `{"a":"\udc00"}`, `{"a":"\ud800\u0041"}`, `{"a":"\ud800\ud800"}`, `{"\udbff":1}`,
		`{"a":"\u0000"}`, "{\"a\":\"\x00\"}", `{"\u0000":1}`,
		`{"n":1e999999}`, `{"n":-1E400}`, `{"n":1e-400}`, `{"n":1.7976931348623157e308}`, `{"n":1.8e308}`,
		`{"n":` + strings.Repeat("9", 309) + `}`, `{"n":` + strings.Repeat("9", 308) + `}`,
		`[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]`, `{"a":{"b":{"c":{"d":{}}}}}`,
		`{"\ufffd":"\uFFFD\\ufffd` + "\ufffd" + `"}`, `{"a":"\\ud800"}`,
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":{"b":1,"c":[{"d":1,"d":2}]}}`, `{"a":{"x":1},"b":{"x":1}}`,
		`[{"k":1},{"k":1}]`, `{"A":1,"a":2}`, `{"e\u0301":1,"\u00e9":2}`, `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"a":19}`,
		`{"a":`, `{"a" 1}`, `{"a":"\ud800`, `{"a":1e}`, `{"a":01}`, `{"a":"x"} trailing`, "\xff", ``,
	} {
		f.Add([]byte(seed), uint8(4))
	}
	f.Fuzz(func(t *testing.T, b []byte, depth uint8) {
		maxDepth := int(depth)%8 + 1
		before := bytes.Clone(b)
		p := checkJSON(b, maxDepth)
		if !bytes.Equal(b, before) {
			t.Fatal("checkJSON changed the body")
		}
		if p != nil {
			if err := justified(b, p); err != nil {
				t.Fatalf("checkJSON(%q, %d) = %s %q at %d (%s): %v", b, maxDepth, p.code, p.what, p.offset, p.path, err)
			}
			if e := p.apiError(); e.status() != 400 || !strings.Contains(e.Message, fmt.Sprintf("at byte %d ", p.offset)) {
				t.Fatalf("the answer for %s is %d %q", p.code, e.status(), e.Message)
			}
		}
		if !json.Valid(b) {
			return
		}
		found := readableJSON(b, maxDepth)
		switch {
		case p == nil && len(found) > 0:
			t.Fatalf("checkJSON(%q, %d) found nothing; the reference finds %v", b, maxDepth, found)
		case p != nil && !found[string(p.code)] && !(p.code == "lone_surrogate" && found["invalid_utf8"]):
			// (Where bytes are not UTF-8, the reference cannot tell a lone
			// surrogate by counting U+FFFD; justified has checked it.)
			t.Fatalf("checkJSON(%q, %d) = %s at %d; the reference finds %v", b, maxDepth, p.code, p.offset, found)
		}
	})
}

func TestRenderPathKeepsLongPathsShort(t *testing.T) {
	steps := []pathStep{{key: []byte("simple")}, {index: 3, array: true}, {key: []byte("with space")}, {key: []byte("9lives")}}
	if got, want := renderPath(steps), `$.simple[3]["with space"]["9lives"]`; got != want {
		t.Fatalf("renderPath = %s, want %s", got, want)
	}
	long := bytes.Repeat([]byte("k"), 100)
	if got := renderPath([]pathStep{{key: long}}); got != `$["`+strings.Repeat("k", 40)+`…"]` {
		t.Fatalf("a long key renders as %s", got)
	}
	var deep []pathStep
	for range 500 {
		deep = append(deep, pathStep{key: []byte("a")})
	}
	if got := renderPath(deep); len(got) > maxPathBytes+len("…") || !strings.HasPrefix(got, "$.a.a") || !strings.Contains(got, "…") {
		t.Fatalf("a path 500 steps long renders as %d bytes: %s", len(got), got)
	}
}
