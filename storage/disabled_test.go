package storage_test

import (
	"testing"

	"github.com/hymical/hymical/storage"
)

func TestDisabledReasonValid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason storage.DisabledReason
		valid  bool
	}{
		{storage.DisabledByOperator, true},
		{storage.DisabledGone, true},
		{storage.DisabledFailing, true},
		// Empty is not a reason: an enabled endpoint has none, and a
		// disabled one without one is normalized to the operator's.
		{"", false},
		{"Gone", false},
		{"bored", false},
	} {
		if got := tc.reason.Valid(); got != tc.valid {
			t.Errorf("DisabledReason(%q).Valid() = %v, want %v", tc.reason, got, tc.valid)
		}
	}
}
