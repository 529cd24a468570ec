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
}

// pruneBatch is how many deliveries one prune transaction removes: small
// enough that a run never holds locks for long.
const pruneBatch = 1000

// RunRetention removes delivered deliveries older than maxAge, every
// interval, until ctx ends. maxAge zero means keep everything and returns
// at once. A failed run is logged and tried again at the next interval:
// nothing is lost by removing later.
func RunRetention(ctx context.Context, store Pruner, maxAge, interval time.Duration, log *slog.Logger) {
	if maxAge <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		cutoff := time.Now().Add(-maxAge)
		if n, err := PruneDelivered(ctx, store, cutoff); err != nil && ctx.Err() == nil {
			log.Warn("retention: removing old delivered deliveries failed; trying again at the next run", "removed", n, "error", err, "next_run_in", interval)
		} else if n > 0 {
			log.Info("retention: removed old delivered deliveries", "removed", n, "delivered_before", cutoff.UTC().Format(time.RFC3339))
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
