package config

import (
	"errors"
	"fmt"
	"strings"
)

// Kinds of Problem; check them with errors.Is on the error Load returns.
var (
	// ErrUnknownKey: a key in the file, a FORMS_* variable or a flag that
	// names no setting. Typos are refused rather than ignored, because an
	// ignored typo silently runs the default.
	ErrUnknownKey = errors.New("unknown configuration key")
	// ErrInvalid: a value that cannot be read, or that breaks a rule.
	ErrInvalid = errors.New("invalid configuration value")
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Key is the key the problem is about ("worker.lease_seconds"), or the
	// variable or flag when that names no key.
	Key string
	// Kind is ErrUnknownKey or ErrInvalid.
	Kind error
	// Message names the key, says what is wrong and what to do. It never
	// holds a secret.
	Message string
}

func (p Problem) Error() string { return p.Message }

// Unwrap makes errors.Is(p, ErrUnknownKey) and the like work.
func (p Problem) Unwrap() error { return p.Kind }

// Error is every problem Load found, so that one run reports them all.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "configuration: " + e.Problems[0].Message
	}
	var b strings.Builder
	fmt.Fprintf(&b, "configuration: %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.Message)
	}
	return b.String()
}

// Unwrap returns each problem, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}

// report collects problems and warnings.
type report struct {
	problems []Problem
	warnings []string
	// bad marks keys that already have a problem, so later rules that
	// depend on them stay quiet rather than pile on.
	bad map[string]bool
}

func newReport() *report { return &report{bad: map[string]bool{}} }

func (r *report) invalid(key, format string, args ...any) {
	r.bad[key] = true
	r.problems = append(r.problems, Problem{Key: key, Kind: ErrInvalid, Message: fmt.Sprintf(format, args...)})
}

func (r *report) unknown(key, format string, args ...any) {
	r.problems = append(r.problems, Problem{Key: key, Kind: ErrUnknownKey, Message: fmt.Sprintf(format, args...)})
}

func (r *report) warn(format string, args ...any) {
	r.warnings = append(r.warnings, fmt.Sprintf(format, args...))
}

func (r *report) err() error {
	if len(r.problems) == 0 {
		return nil
	}
	return &Error{Problems: r.problems}
}

// suggest returns " (did you mean X?)" for the candidate closest to name,
// when one is close enough to be a likely typo.
func suggest(name string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := distance(strings.ToLower(name), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > max(2, len(name)/4) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// quote shows a non-secret value in a message, cut short so that a pasted
// blob does not flood the terminal.
func quote(s string) string {
	const limit = 80
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return fmt.Sprintf("%q", s)
}
