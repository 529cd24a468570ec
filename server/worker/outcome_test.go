package worker_test

import (
	"strings"
	"testing"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/transport/transportpb"
	"github.com/hymical/hymical/storage"
)

// The worker records a plugin's outcome by converting transport.OutcomeKind
// to storage.OutcomeKind (Pool.finish), and storage bounds error text the
// transport bounded already. Both are declared twice because storage may
// not import the plugin contract; this test holds the two declarations
// equal, so a kind added or renamed on one side only, or a limit changed
// on one side only, fails here rather than as an attempt recorded wrong.
func TestOutcomeKindsAndErrorLimitAgreeWithStorage(t *testing.T) {
	t.Parallel()
	same := []struct {
		transport transport.OutcomeKind
		storage   storage.OutcomeKind
	}{
		{transport.OutcomeDelivered, storage.OutcomeDelivered},
		{transport.OutcomeRetryable, storage.OutcomeRetryable},
		{transport.OutcomePermanent, storage.OutcomePermanent},
	}
	candidates := []string{"", "unknown", "DELIVERED"}
	for _, k := range same {
		if string(k.transport) != string(k.storage) {
			t.Errorf("transport's %q is storage's %q: the worker's conversion would record another kind", k.transport, k.storage)
		}
		candidates = append(candidates, string(k.transport), string(k.storage))
	}
	// Every kind the wire can carry, named as the plugin contract names
	// them (OUTCOME_KIND_DELIVERED is "delivered").
	for name := range transportpb.OutcomeKind_value {
		candidates = append(candidates, strings.ToLower(strings.TrimPrefix(name, "OUTCOME_KIND_")))
	}
	for _, k := range candidates {
		if tv, sv := transport.OutcomeKind(k).Valid(), storage.OutcomeKind(k).Valid(); tv != sv {
			t.Errorf("kind %q: valid in sdk/transport %v, in storage %v; declare it on both sides or neither", k, tv, sv)
		}
	}
	if transport.MaxErrorBytes != storage.MaxErrorBytes {
		t.Errorf("transport.MaxErrorBytes is %d, storage.MaxErrorBytes %d: a plugin's error would be cut twice, differently", transport.MaxErrorBytes, storage.MaxErrorBytes)
	}
}
