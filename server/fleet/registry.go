// Package fleet runs the jobs that keep a fleet of server processes on
// one database in order, beside the delivery loop: the worker registry
// (who is live, on which build and schema, and the one-build-at-a-time
// check before a migration), endpoint health (disabling endpoints the
// server has given up on and telling the operator), and retention
// (removing old delivered deliveries). Each job talks to the store through
// the few methods it needs and owns no delivery state.
package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hymical/hymical/internal/buildinfo"
	"github.com/hymical/hymical/storage"
)

// HeartbeatInterval is how often a running server refreshes its row in the
// worker registry; a worker whose heartbeat is older than LiveWindow is
// taken for dead.
const (
	HeartbeatInterval = 10 * time.Second
	LiveWindow        = 3 * HeartbeatInterval
	// deregisterTimeout bounds the removal of this process's row on
	// shutdown.
	deregisterTimeout = 5 * time.Second
)

// registrySchemaVersion is the migration that added the worker registry.
const registrySchemaVersion = 4

// NewWorker describes this process for the registry.
func NewWorker(schemaVersion int, now time.Time) storage.Worker {
	host, _ := os.Hostname()
	return storage.Worker{
		ID:            storage.NewID("wrk"),
		Build:         buildinfo.String(),
		SchemaVersion: schemaVersion,
		Host:          host,
		StartedAt:     now,
		HeartbeatAt:   now,
	}
}

// RunHeartbeat keeps w registered as live, refreshing its heartbeat every
// interval (0 means HeartbeatInterval), until ctx ends, then removes it.
// Servers use HeartbeatInterval, which LiveWindow is measured in; a test
// may beat faster to see the heartbeat move.
func RunHeartbeat(ctx context.Context, store storage.Fleet, w storage.Worker, interval time.Duration, log *slog.Logger) {
	if interval <= 0 {
		interval = HeartbeatInterval
	}
	beat := func() {
		w.HeartbeatAt = time.Now()
		if err := store.WorkerHeartbeat(ctx, w); err != nil && ctx.Err() == nil {
			log.Warn("worker heartbeat failed", "worker_id", w.ID, "error", err)
		}
	}
	beat()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			beat()
		case <-ctx.Done():
			// Deregistering must happen although ctx has ended, but a
			// database that stopped answering must not hold up the
			// shutdown: the row then ages out of the registry.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deregisterTimeout)
			defer cancel()
			if err := store.WorkerDeregister(dctx, w.ID); err != nil {
				log.Warn("worker deregistration failed; it ages out of the registry", "worker_id", w.ID, "error", err)
			}
			return
		}
	}
}

// CheckNoOtherBuilds refuses to migrate while a live worker of a different
// build is registered: a worker older than the claim token neither writes
// nor checks it, and one left running beside newer ones defeats the fence.
// Before the registry existed (schema version < 4) there is nothing to
// check. The refusal is a *LiveError.
func CheckNoOtherBuilds(ctx context.Context, store storage.Fleet, now time.Time) error {
	mine := buildinfo.String()
	return refuseLive(ctx, store, now, func(w storage.Worker) bool { return w.Build != mine },
		"live workers of another build are running", "stop them, migrate, then start the new build")
}

// CheckNoneLive refuses while any server, of any build, is registered as
// live: for work that every server must be stopped for, such as moving
// endpoint secrets to a new key, which a running server would not know.
// why ends the advice to stop them ("since they would ..."). The refusal
// is a *LiveError.
func CheckNoneLive(ctx context.Context, store storage.Fleet, now time.Time, why string) error {
	return refuseLive(ctx, store, now, func(storage.Worker) bool { return true },
		"servers are running on this database", "stop them first, since "+why)
}

// LiveError is a refusal to work beside live servers. It names each of
// them and says that --force overrides it, for the case the operator
// knows: the servers are gone and only their registry rows remain.
type LiveError struct {
	// Workers are the live servers in the way.
	Workers []storage.Worker
	// what says who they are, fix what to do about them.
	what, fix string
}

func (e *LiveError) Error() string {
	names := make([]string, len(e.Workers))
	for i, w := range e.Workers {
		names[i] = fmt.Sprintf("%s on %s (build %s, schema %d)", w.ID, w.Host, w.Build, w.SchemaVersion)
	}
	return fmt.Sprintf("%s: %s; %s (or pass --force if they are gone and only their registry rows remain)", e.what, strings.Join(names, "; "), e.fix)
}

// refuseLive returns a *LiveError naming the live workers that in picks,
// or nil when there are none.
func refuseLive(ctx context.Context, store storage.Fleet, now time.Time, in func(storage.Worker) bool, what, fix string) error {
	v, err := store.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v < registrySchemaVersion {
		return nil
	}
	live, err := store.WorkerList(ctx, now.Add(-LiveWindow))
	if err != nil {
		return fmt.Errorf("list live workers: %w", err)
	}
	var picked []storage.Worker
	for _, w := range live {
		if in(w) {
			picked = append(picked, w)
		}
	}
	if len(picked) == 0 {
		return nil
	}
	return &LiveError{Workers: picked, what: what, fix: fix}
}
