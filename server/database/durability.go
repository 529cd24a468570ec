package database

import (
	"context"
	"fmt"

	"github.com/hymical/hymical/storage"
)

// DurabilityRisk is a database setting under which a write the server has
// acknowledged (a submission answered 202) can be lost.
type DurabilityRisk struct {
	Setting string // the PostgreSQL setting, as SHOW names it
	Value   string // its value as the server's sessions see it
	// Loss says what can be lost and when; Fix is the statement that
	// removes the risk.
	Loss, Fix string
}

// Message is the warning an operator reads: which setting, what can be
// lost, and the fix.
func (r DurabilityRisk) Message() string {
	return fmt.Sprintf("PostgreSQL %s is %s: %s. Fix: %s", r.Setting, r.Value, r.Loss, r.Fix)
}

// settingsReader is what CheckDurability needs of a store: the PostgreSQL
// store has it; SQLite has no server settings to read.
type settingsReader interface {
	Settings(ctx context.Context, names ...string) (map[string]string, error)
}

// durableSettings are the settings at-least-once depends on, each with the
// value that loses acknowledged writes and what it loses.
func durableSettings() []DurabilityRisk {
	return []DurabilityRisk{
		{
			Setting: "synchronous_commit", Value: "off",
			Loss: "a commit returns before it is on disk, so a PostgreSQL crash loses the accepted submissions answered 202 in the moments before it",
			Fix:  "ALTER SYSTEM SET synchronous_commit = on; SELECT pg_reload_conf(); and drop any ALTER DATABASE or ALTER ROLE ... SET synchronous_commit = off",
		},
		{
			Setting: "fsync", Value: "off",
			Loss: "nothing is forced to disk, so an operating-system crash or power loss can lose accepted submissions and corrupt the database",
			Fix:  "ALTER SYSTEM SET fsync = on; SELECT pg_reload_conf(); (a -c fsync=off on the postgres command line overrides it: remove that too)",
		},
		{
			Setting: "full_page_writes", Value: "off",
			Loss: "a page half-written when the operating system crashes or the power fails cannot be repaired from the WAL, so accepted submissions can be lost and the database corrupted",
			Fix:  "ALTER SYSTEM SET full_page_writes = on; SELECT pg_reload_conf(); (a -c full_page_writes=off on the postgres command line overrides it: remove that too)",
		},
	}
}

// CheckDurability reads the PostgreSQL settings an acknowledged write
// depends on and returns those set so that it can be lost; nothing for a
// store without server settings (SQLite). It warns rather than refuses:
// fsync and full_page_writes off lose data only when the machine itself
// fails, which throwaway and test clusters accept on purpose, and
// synchronous_commit off is already raised for the store's own sessions,
// so a risk reported for it means that did not take.
func CheckDurability(ctx context.Context, s storage.Store) ([]DurabilityRisk, error) {
	r, ok := s.(settingsReader)
	if !ok {
		return nil, nil
	}
	settings := durableSettings()
	names := make([]string, len(settings))
	for i, d := range settings {
		names[i] = d.Setting
	}
	got, err := r.Settings(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("read the settings an accepted submission's durability depends on: %w", err)
	}
	var out []DurabilityRisk
	for _, d := range settings {
		if v, ok := got[d.Setting]; ok && v == d.Value {
			out = append(out, d)
		}
	}
	return out, nil
}
