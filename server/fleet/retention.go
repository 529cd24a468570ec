package fleet

import (
	"context"
	"log/slog"
	"time"

	"github.com/hymical/hymical/storage"
)

// Pruner is what the retention job needs of the store.
type Pruner interface {
	DeliveryPrune(ctx context.Context, p storage.DeliveryPruneParams) (int, error)
	AccessPrune(ctx context.Context, p storage.AccessPruneParams) (int, error)
}

// AccessKeptExpired is how long an expired scoped credential stays listed
// before retention removes it, so an admin who lists tokens sees the ones
// that stopped working recently and why a customer's calls fail.
const AccessKeptExpired = 7 * 24 * time.Hour

// pruneBatch is how many deliveries one prune transaction removes: small
// enough that a run never holds locks for long.
const pruneBatch = 1000

// RunRetention removes, every interval until ctx ends, the scoped
// credentials expired longer than AccessKeptExpired ago and, when maxAge
// is set, delivered deliveries older than maxAge (zero keeps every
// delivery). A failed run is logged and tried again at the next
// interval: nothing is lost by removing later.
func RunRetention(ctx context.Context, store Pruner, maxAge, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if maxAge > 0 {
			cutoff := time.Now().Add(-maxAge)
			if n, err := PruneDelivered(ctx, store, cutoff); err != nil && ctx.Err() == nil {
				log.Warn("retention: removing old delivered deliveries failed; trying again at the next run", "removed", n, "error", err, "next_run_in", interval)
			} else if n > 0 {
				log.Info("retention: removed old delivered deliveries", "removed", n, "delivered_before", cutoff.UTC().Format(time.RFC3339))
			}
		}
		cutoff := time.Now().Add(-AccessKeptExpired)
		if n, err := PruneAccess(ctx, store, cutoff); err != nil && ctx.Err() == nil {
			log.Warn("retention: removing expired access tokens and portal sessions failed; trying again at the next run", "removed", n, "error", err, "next_run_in", interval)
		} else if n > 0 {
			log.Info("retention: removed expired access tokens and portal sessions", "removed", n, "expired_before", cutoff.UTC().Format(time.RFC3339))
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// PruneDelivered removes, batch by batch, every delivered delivery
// completed before cutoff, and returns how many it removed.
func PruneDelivered(ctx context.Context, store Pruner, cutoff time.Time) (int, error) {
	total := 0
	for ctx.Err() == nil {
		n, err := store.DeliveryPrune(ctx, storage.DeliveryPruneParams{CompletedBefore: cutoff, Limit: pruneBatch})
		total += n
		if err != nil || n < pruneBatch {
			return total, err
		}
	}
	return total, ctx.Err()
}

// PruneAccess removes, batch by batch, every scoped credential (API
// token, portal link, portal session) that expired before cutoff, and
// returns how many it removed.
func PruneAccess(ctx context.Context, store Pruner, cutoff time.Time) (int, error) {
	total := 0
	for ctx.Err() == nil {
		n, err := store.AccessPrune(ctx, storage.AccessPruneParams{ExpiredBefore: cutoff, Limit: pruneBatch})
		total += n
		if err != nil || n < pruneBatch {
			return total, err
		}
	}
	return total, ctx.Err()
}
