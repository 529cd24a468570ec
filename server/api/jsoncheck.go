package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/faceopts"
)

// jsonProblem is something in a request body that a receiver cannot be
// trusted to read, though encoding/json would let it through: bytes that
// are not UTF-8, a lone UTF-16 surrogate escape (which encoding/json turns
// into U+FFFD without a word), a NUL character, a number no float64 holds,
// nesting deeper than the configured limit, or an object with the same key
// twice (encoding/json keeps the last; other parsers the first). Delivered as it is, such a
// body fails at the receiver on every attempt, or is read there as
// something else than was sent.
type jsonProblem struct {
	code apiwire.Code
	// what says what was found, fix what to do about it.
	what, fix string
	// offset is the byte offset of the problem in the body; path is the
	// JSON path of the value that holds it ($ is the body itself).
	offset int
	path   string
}

func (p *jsonProblem) Error() string { return p.what }

// apiError is the 400 that refuses the body for p.
func (p *jsonProblem) apiError() *apiError {
	return refuse(p.code, "the request body has %s at byte %d (at %s); %s", p.what, p.offset, p.path, p.fix)
}

// errJSONSyntax stops the check at the first byte that is not well-formed
// JSON: encoding/json reports syntax errors, in the words callers know.
var errJSONSyntax = errors.New("not well-formed JSON")

// checkJSON looks through body, without changing or copying it, for the
// first of the problems jsonProblem names, in the order they occur. It
// returns nil when there is none before the end of the first JSON value or
// the first syntax error. Its recursion is bounded by maxDepth.
func checkJSON(body []byte, maxDepth int) *jsonProblem {
	c := &jsonChecker{b: body, maxDepth: maxDepth}
	c.space()
	var p *jsonProblem
	if errors.As(c.value(1), &p) {
		return p
	}
	return nil
}

// jsonChecker is one pass of checkJSON over b; i is where it is.
type jsonChecker struct {
	b        []byte
	i        int
	maxDepth int
	// path is the way from the body to the value at i.
	path []pathStep
}

// pathStep is one step of a JSON path: an object member, by its key as
// written in the body (escapes and all), or an array element.
type pathStep struct {
	key   []byte
	index int
	array bool
}

func (c *jsonChecker) space() {
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// value checks the value at i, at depth levels of nesting if it is an
// object or an array.
func (c *jsonChecker) value(depth int) error {
	if c.i >= len(c.b) {
		return errJSONSyntax
	}
	switch ch := c.b[c.i]; {
	case ch == '{' || ch == '[':
		if depth > c.maxDepth {
			return c.problem(c.i, apiwire.CodeTooDeep,
				fmt.Sprintf("objects and arrays nested more than %d levels deep", c.maxDepth),
				fmt.Sprintf("send the data less deeply nested, or raise server.max_nesting_depth (at most %d)", faceopts.MaxNestingDepthLimit))
		}
		if ch == '{' {
			return c.object(depth)
		}
		return c.array(depth)
	case ch == '"':
		return c.str(false)
	case ch == '-' || ch >= '0' && ch <= '9':
		return c.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(c.b[c.i:], []byte(lit)) {
				c.i += len(lit)
				return nil
			}
		}
		return errJSONSyntax
	}
}

func (c *jsonChecker) object(depth int) error {
	c.i++ // {
	c.space()
	if c.i < len(c.b) && c.b[c.i] == '}' {
		c.i++
		return nil
	}
	var keys keySet
	for {
		if c.i >= len(c.b) || c.b[c.i] != '"' {
			return errJSONSyntax
		}
		// A problem in the key is at the object's path.
		at, start := c.i, c.i+1
		if err := c.str(true); err != nil {
			return err
		}
		key := c.b[start : c.i-1]
		c.path = append(c.path, pathStep{key: key})
		if first, dup := keys.add(c.b[at:c.i]); dup {
			return c.duplicate(at, key, first)
		}
		c.space()
		if c.i >= len(c.b) || c.b[c.i] != ':' {
			return errJSONSyntax
		}
		c.i++
		c.space()
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.space()
		if c.i >= len(c.b) {
			return errJSONSyntax
		}
		c.path = c.path[:len(c.path)-1]
		switch c.b[c.i] {
		case ',':
			c.i++
			c.space()
		case '}':
			c.i++
			return nil
		default:
			return errJSONSyntax
		}
	}
}

func (c *jsonChecker) array(depth int) error {
	c.i++ // [
	c.space()
	if c.i < len(c.b) && c.b[c.i] == ']' {
		c.i++
		return nil
	}
	c.path = append(c.path, pathStep{array: true})
	for {
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.space()
		if c.i >= len(c.b) {
			return errJSONSyntax
		}
		switch c.b[c.i] {
		case ',':
			c.i++
			c.space()
			c.path[len(c.path)-1].index++
		case ']':
			c.i++
			c.path = c.path[:len(c.path)-1]
			return nil
		default:
			return errJSONSyntax
		}
	}
}

// str checks the string at i, an object's key when key is set. It reads
// escapes from the bytes themselves: a decoder would have replaced a lone
// surrogate already.
func (c *jsonChecker) str(key bool) error {
	in := "in a string"
	if key {
		in = "in an object key"
	}
	c.i++ // "
	for c.i < len(c.b) {
		switch ch := c.b[c.i]; {
		case ch == '"':
			c.i++
			return nil
		case ch == '\\':
			if c.i+1 >= len(c.b) {
				return errJSONSyntax
			}
			switch c.b[c.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				c.i += 2
				continue
			case 'u':
			default:
				return errJSONSyntax
			}
			r, ok := hex4(c.b, c.i+2)
			if !ok {
				return errJSONSyntax
			}
			switch {
			case r == 0:
				return c.problem(c.i, apiwire.CodeNULCharacter, `a NUL character (\u0000) `+in,
					"many receivers and databases cannot store it: leave it out")
			case r >= 0xd800 && r < 0xdc00:
				// A high surrogate must be followed by a low one: together
				// they are one character beyond U+FFFF.
				if lo, ok := hex4(c.b, c.i+8); ok && c.b[c.i+6] == '\\' && c.b[c.i+7] == 'u' && lo >= 0xdc00 && lo < 0xe000 {
					c.i += 12
					continue
				}
				return c.problem(c.i, apiwire.CodeLoneSurrogate, fmt.Sprintf(`a lone UTF-16 surrogate escape \u%04x `+in+", not followed by a low surrogate (\\udc00 to \\udfff)", r),
					"it stands for no character, and receivers read it as U+FFFD or refuse it: send the character itself, or its full surrogate pair")
			case r >= 0xdc00 && r < 0xe000:
				return c.problem(c.i, apiwire.CodeLoneSurrogate, fmt.Sprintf(`a lone UTF-16 surrogate escape \u%04x `+in+", not preceded by a high surrogate (\\ud800 to \\udbff)", r),
					"it stands for no character, and receivers read it as U+FFFD or refuse it: send the character itself, or its full surrogate pair")
			}
			c.i += 6
		case ch == 0:
			return c.problem(c.i, apiwire.CodeNULCharacter, "a raw NUL byte "+in,
				"many receivers and databases cannot store it: leave it out")
		case ch < 0x20:
			return errJSONSyntax
		case ch < utf8.RuneSelf:
			c.i++
		default:
			r, size := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && size == 1 {
				return c.problem(c.i, apiwire.CodeInvalidUTF8, fmt.Sprintf("a byte 0x%02x that is not valid UTF-8 %s", ch, in),
					"JSON is UTF-8: encode the text as UTF-8 (not Latin-1 or another encoding), or escape the character as \\uXXXX")
			}
			c.i += size
		}
	}
	return errJSONSyntax
}

// keySet is the keys of one object so far, by what they decode to: "a"
// and "\u0061" are one key to every receiver. An object's first keys are
// kept in an array, looked through in order, without allocating; a map
// takes over for an object with more.
type keySet struct {
	few  [keySetFew]seenKey
	n    int
	many map[string][]byte
}

// seenKey is a key as it decodes (name) and as it was written (raw); they
// are the same bytes for a key without escapes.
type seenKey struct {
	name, raw []byte
}

// keySetFew is how many keys keySet looks through before it makes a map.
const keySetFew = 8

// add adds the key written quoted (a string checkJSON has found well
// formed) and reports whether the object has it already, and how it was
// spelled the first time.
func (s *keySet) add(quoted []byte) (first []byte, dup bool) {
	raw := quoted[1 : len(quoted)-1]
	name := raw
	if bytes.IndexByte(raw, '\\') >= 0 {
		// Its escapes are well formed, its surrogates paired and its bytes
		// UTF-8, or str would have stopped: it decodes exactly.
		var decoded string
		if err := json.Unmarshal(quoted, &decoded); err != nil {
			return nil, false
		}
		name = []byte(decoded)
	}
	if s.many != nil {
		if f, ok := s.many[string(name)]; ok {
			return f, true
		}
		s.many[string(name)] = raw
		return nil, false
	}
	for _, k := range s.few[:s.n] {
		if bytes.Equal(k.name, name) {
			return k.raw, true
		}
	}
	if s.n < keySetFew {
		s.few[s.n] = seenKey{name: name, raw: raw}
		s.n++
		return nil, false
	}
	s.many = make(map[string][]byte, 4*keySetFew)
	for _, k := range s.few {
		s.many[string(k.name)] = k.raw
	}
	s.many[string(name)] = raw
	return nil, false
}

// duplicate is the problem of an object that has the key written key at
// offset (the opening quote) a second time; first is how it was written
// the first time. The path is the member's.
func (c *jsonChecker) duplicate(offset int, key, first []byte) *jsonProblem {
	what := fmt.Sprintf(`the key "%s" twice in one object`, shortKey(key))
	if !bytes.Equal(key, first) {
		what += fmt.Sprintf(`, written "%s" the first time`, shortKey(first))
	}
	return c.problem(offset, apiwire.CodeDuplicateKey, what,
		"receivers disagree on which of the two they read (some the first, some the last, some refuse the body): send each key once")
}

// hex4 reads the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, h := range b[i : i+4] {
		switch {
		case h >= '0' && h <= '9':
			r = r<<4 | rune(h-'0')
		case h >= 'a' && h <= 'f':
			r = r<<4 | rune(h-'a'+10)
		case h >= 'A' && h <= 'F':
			r = r<<4 | rune(h-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// number checks the number at i: well-formed by JSON's grammar, and within
// what a float64, the number type of most receivers' parsers, can hold.
func (c *jsonChecker) number() error {
	start := c.i
	digits := func() int {
		n := 0
		for c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9' {
			c.i++
			n++
		}
		return n
	}
	if c.b[c.i] == '-' {
		c.i++
	}
	intDigits := digits()
	if intDigits == 0 || intDigits > 1 && c.b[c.i-intDigits] == '0' {
		return errJSONSyntax
	}
	if c.i < len(c.b) && c.b[c.i] == '.' {
		c.i++
		if digits() == 0 {
			return errJSONSyntax
		}
	}
	exponent := c.i < len(c.b) && (c.b[c.i] == 'e' || c.b[c.i] == 'E')
	if exponent {
		c.i++
		if c.i < len(c.b) && (c.b[c.i] == '+' || c.b[c.i] == '-') {
			c.i++
		}
		if digits() == 0 {
			return errJSONSyntax
		}
	}
	// Without an exponent, fewer than 309 digits before the point stay
	// below 1e309, and so below the largest float64 (about 1.8e308).
	if !exponent && intDigits <= 308 {
		return nil
	}
	text := c.b[start:c.i]
	if _, err := strconv.ParseFloat(string(text), 64); errors.Is(err, strconv.ErrRange) {
		shown := string(text)
		if len(shown) > 40 {
			shown = shown[:20] + "…" + shown[len(shown)-12:]
		}
		// A number too small is read as 0 (or the nearest float64) with no
		// error, like any number with more digits than a float64 keeps;
		// only one too large cannot be read at all.
		return c.problem(start, apiwire.CodeNumberOutOfRange, fmt.Sprintf("the number %s, too large for a 64-bit float (at most about 1.8e308)", shown),
			"most receivers cannot read it: send it as a string, or a smaller number")
	}
	return nil
}

// problem is a jsonProblem at offset, at the path the checker is at.
func (c *jsonChecker) problem(offset int, code apiwire.Code, what, fix string) *jsonProblem {
	return &jsonProblem{code: code, what: what, fix: fix, offset: offset, path: renderPath(c.path)}
}

// maxPathBytes bounds a JSON path in a message; a longer one keeps its
// start and its end.
const maxPathBytes = 200

// renderPath writes a JSON path: $ and then .key, ["key"] or [index] for
// each step. Keys are shown as they are written in the body, cut short when
// long.
func renderPath(steps []pathStep) string {
	var b strings.Builder
	b.WriteString("$")
	for _, s := range steps {
		switch {
		case s.array:
			fmt.Fprintf(&b, "[%d]", s.index)
		case plainKey(s.key):
			b.WriteByte('.')
			b.Write(s.key)
		default:
			b.WriteString(`["`)
			b.Write(shortKey(s.key))
			b.WriteString(`"]`)
		}
	}
	p := b.String()
	if len(p) > maxPathBytes {
		p = p[:maxPathBytes/4] + "…" + p[len(p)-maxPathBytes*3/4:]
	}
	return p
}

// plainKey reports whether k can follow a dot in a path: a short name of
// ASCII letters, digits and underscores, not starting with a digit.
func plainKey(k []byte) bool {
	if len(k) == 0 || len(k) > 40 || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, ch := range k {
		if !(ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
			return false
		}
	}
	return true
}

// shortKey cuts a long key to its first 40 bytes or so, never inside an
// escape or a UTF-8 sequence.
func shortKey(k []byte) []byte {
	const keep = 40
	if len(k) <= keep {
		return k
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(k[cut]) {
		cut--
	}
	if e := bytes.LastIndexByte(k[:cut], '\\'); e >= 0 && e > cut-6 {
		cut = e
	}
	return append(k[:cut:cut], "…"...)
}
