package endpoint

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/sqlite/sqlitetest"
)

// errOutside is what the tests' Allow answers for an endpoint outside
// form_a.
var errOutside = errors.New("outside the scope")

// TestAllowDecidesOnTheEndpointWritten: a change checked by an Allow
// applies to the endpoint the check saw. Here another writer moves the
// endpoint out of the scope right after the first check passed, the race
// of a scoped caller with an admin: the change's write conflicts, it reads
// again, the check refuses, and nothing of the change is written.
func TestAllowDecidesOnTheEndpointWritten(t *testing.T) {
	t.Parallel()
	changes := map[string]func(s storage.Store, id string, allow Allow) error{
		"disable": func(s storage.Store, id string, allow Allow) error {
			_, err := SetDisabled(t.Context(), s, id, true, time.Now(), allow)
			return err
		},
		"rotate": func(s storage.Store, id string, allow Allow) error {
			_, err := RotateSecret(t.Context(), s, id, time.Hour, time.Now(), nil, allow)
			return err
		},
		"delete": func(s storage.Store, id string, allow Allow) error {
			_, err := Delete(t.Context(), s, id, true, "", allow)
			return err
		},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := sqlitetest.Open(t)
			if _, err := s.Migrate(ctx, storage.MigrateParams{}); err != nil {
				t.Fatal(err)
			}
			created, err := s.EndpointCreate(ctx, storage.EndpointCreateParams{Endpoint: storage.Endpoint{Transport: "http", URL: "https://receiver.example/",
				FormIDs: []string{"form_a"}, Secrets: []storage.Secret{storage.NewSecret("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", nil)}}})
			if err != nil {
				t.Fatal(err)
			}
			before := created.Endpoint
			checks := 0
			allow := func(e storage.Endpoint) error {
				checks++
				if checks == 1 {
					// The admin's change lands between this check and the write.
					moved := e
					moved.FormIDs = []string{"form_a", "form_b"}
					if _, err := s.EndpointUpdate(ctx, moved); err != nil {
						t.Fatal(err)
					}
				}
				if !slices.Equal(e.FormIDs, []string{"form_a"}) {
					return errOutside
				}
				return nil
			}
			if err := change(s, before.ID, allow); !errors.Is(err, errOutside) {
				t.Fatalf("%s of an endpoint moved out of the scope after the first check: %v; want the check's refusal", name, err)
			}
			if checks != 2 {
				t.Errorf("the check ran %d times, want 2: once before the other writer, once on what it wrote", checks)
			}
			after, err := s.EndpointGet(ctx, before.ID)
			if err != nil {
				t.Fatal(err)
			}
			if after.DeletedAt != nil || after.DisabledAt != nil || len(after.Secrets) != len(before.Secrets) {
				t.Errorf("after the refused %s: deleted %v, disabled %v, %d secrets; want the endpoint as the other writer left it", name, after.DeletedAt, after.DisabledAt, len(after.Secrets))
			}
		})
	}
}
