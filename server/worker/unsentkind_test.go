package worker

import (
	"testing"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/telemetry"
)

func TestUnsentOfClassifiesWhatMadeNoRequest(t *testing.T) {
	tests := []struct {
		name   string
		out    transport.Outcome
		kind   unsentKind
		unsent bool
	}{
		{"a retryable refusal before sending is unavailable", transport.Outcome{Kind: transport.OutcomeRetryable, NoRequest: true}, unsentUnavailable, true},
		{"a permanent refusal before sending is refused", transport.Outcome{Kind: transport.OutcomePermanent, NoRequest: true}, unsentRefused, true},
		{"a retryable failure after sending is an attempt", transport.Outcome{Kind: transport.OutcomeRetryable}, 0, false},
		{"a permanent failure after sending is an attempt", transport.Outcome{Kind: transport.OutcomePermanent}, 0, false},
		{"a delivered outcome is an attempt whatever NoRequest says", transport.Outcome{Kind: transport.OutcomeDelivered, NoRequest: true}, 0, false},
		{"an unknown kind is an attempt, recorded as retryable by finish", transport.Outcome{Kind: "maybe", NoRequest: true}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kind, unsent := unsentOf(tc.out)
			if kind != tc.kind || unsent != tc.unsent {
				t.Fatalf("unsentOf(%+v) = %d, %v; want %d, %v", tc.out, kind, unsent, tc.kind, tc.unsent)
			}
		})
	}
}

func TestUnsentKindDecidesAndLabels(t *testing.T) {
	tests := []struct {
		kind    unsentKind
		label   string
		passing bool
	}{
		{unsentUnavailable, telemetry.UnsentUnavailable, true},
		{unsentRefused, telemetry.UnsentRefused, false},
		{unsentUnsignable, telemetry.UnsentUnsignable, false},
		// Unset, it is none of them: not a cause to give the claim back for.
		{0, "unknown", false},
	}
	for _, tc := range tests {
		t.Run(tc.label, func(t *testing.T) {
			if got := tc.kind.label(); got != tc.label {
				t.Fatalf("kind %d is labelled %q, want %q", tc.kind, got, tc.label)
			}
			if got := tc.kind.passing(); got != tc.passing {
				t.Fatalf("kind %d passing = %v, want %v", tc.kind, got, tc.passing)
			}
		})
	}
}
