// Package migrations holds the numbered SQL migrations of both backends,
// embedded into the binary, and reads them in order. Applying them is the
// backend's job (storage/postgres, storage/sqlite); this package only knows
// which files exist and what version each one brings the schema to.
//
// The files replay the real history of the schema: 1 the initial schema (a
// lease, one attempt counter), 2 the claim token, 3 cycle_attempts backfilled
// from attempts, 4 the live worker registry, 5 the claim's ordered partial
// indexes, 6 the endpoint controls, 7 the reason a claim ended without a
// request, 8 the fair share's index, 9 the record of the key endpoint
// secrets are encrypted under, 10 deleted endpoints and the idempotency
// keys of endpoint creates, 11 those keys for rotations and replays too,
// 12 (PostgreSQL only) a completion's promote as one function call,
// 13 the index from form id to endpoint that fan-out reads, backfilled
// from the endpoints and kept by triggers. A database stopped at any step
// upgrades by applying the rest.
// Never edit a released file: add a new one.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Migration is one numbered step.
type Migration struct {
	Version int
	// Name is the file name without the number and extension, e.g. "claim_token".
	Name string
	SQL  string
}

// Postgres returns the PostgreSQL migrations in version order.
func Postgres() ([]Migration, error) { return load("postgres") }

// SQLite returns the SQLite migrations in version order.
func SQLite() ([]Migration, error) { return load("sqlite") }

func load(dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, fmt.Errorf("read embedded %s migrations: %w", dir, err)
	}
	var out []Migration
	for _, e := range entries {
		base := e.Name()
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration file %s/%s: name must be NNNN_name.sql", dir, base)
		}
		body, err := files.ReadFile(path.Join(dir, base))
		if err != nil {
			return nil, fmt.Errorf("read migration %s/%s: %w", dir, base, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("%s migrations: expected version %d, found %d (%s): versions must run 1, 2, 3… without gaps", dir, i+1, m.Version, m.Name)
		}
	}
	return out, nil
}

// Latest is the newest schema version this build knows. Both backends
// have the same numbered steps (the package's test holds them to it).
func Latest() (int, error) {
	ms, err := Postgres()
	if err != nil {
		return 0, err
	}
	return len(ms), nil
}
