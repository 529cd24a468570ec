package endpoint

import (
	"fmt"
	"testing"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage"
)

// TestRotationKeepsAtMostMaxLiveSecrets rotates endpoints of both schemes,
// with and without an idempotency key, n times within the grace, and
// checks after every rotation that at most MaxLiveSecrets are active, the
// new one first and current, then the newest of the ones before it with
// their expiries unmoved, and that Retired counts what the cap stopped.
func TestRotationKeepsAtMostMaxLiveSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rotations int
		keyed     bool
	}{
		{1, false}, {MaxLiveSecrets - 1, false}, {MaxLiveSecrets, false}, {MaxLiveSecrets + 1, false},
		{50, false}, {50, true},
	} {
		for _, scheme := range webhook.Schemes() {
			t.Run(fmt.Sprintf("%d %s rotations keyed=%t", tc.rotations, scheme, tc.keyed), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				s, ep, first := newSchemeEndpoint(t, scheme)
				start := time.Now()
				made := []string{first} // every secret, oldest first
				expiry := map[string]time.Time{}
				for i := range tc.rotations {
					// A millisecond apart, so every rotation's grace ends at
					// its own time and a moved expiry shows.
					now := start.Add(time.Duration(i) * time.Millisecond)
					var (
						rot Rotation
						err error
					)
					if tc.keyed {
						rot, err = RotateSecret(ctx, s, ep.ID, time.Hour, now, &storage.Idempotency{
							Key: fmt.Sprintf("rotate-%d", i), RequestHash: "h"}, nil)
					} else {
						rot, err = RotateSecret(ctx, s, ep.ID, time.Hour, now, nil, nil)
					}
					if err != nil {
						t.Fatalf("rotation %d: %v", i+1, err)
					}
					made = append(made, rot.Secret)
					live := min(len(made), MaxLiveSecrets)
					// Once the cap is reached, each rotation retires one.
					wantRetired := 0
					if len(made) > MaxLiveSecrets {
						wantRetired = 1
					}
					if rot.Retired != wantRetired {
						t.Fatalf("rotation %d retired %d secrets, want %d", i+1, rot.Retired, wantRetired)
					}
					got, err := s.EndpointGet(ctx, ep.ID)
					if err != nil {
						t.Fatal(err)
					}
					if len(got.Secrets) != live {
						t.Fatalf("after rotation %d: %d secrets stored, want %d", i+1, len(got.Secrets), live)
					}
					for j, sec := range got.Secrets {
						want := made[len(made)-1-j] // newest first
						if sec.Reveal() != want || !sec.ActiveAt(now) {
							t.Fatalf("after rotation %d: secret %d is not the %d-th newest, or not active", i+1, j, j+1)
						}
						switch {
						case j == 0 && sec.ExpiresAt != nil:
							t.Fatalf("after rotation %d: the new secret expires", i+1)
						case j == 0:
						case j == 1:
							expiry[want] = *sec.ExpiresAt
						case !sec.ExpiresAt.Equal(expiry[want]):
							t.Fatalf("after rotation %d: secret %d's expiry moved from %s to %s", i+1, j, expiry[want], sec.ExpiresAt)
						}
					}
					if CurrentSecret(got).Reveal() != rot.Secret || Scheme(got) != scheme {
						t.Fatalf("after rotation %d: the new secret is not the current one", i+1)
					}
					if pks := PublicKeys(got, now); scheme == webhook.SchemeV1a && len(pks) != live {
						t.Fatalf("after rotation %d: %d public keys, want %d", i+1, len(pks), live)
					}
				}
			})
		}
	}
}
