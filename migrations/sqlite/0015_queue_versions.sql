-- On PostgreSQL, queue heads get a version so that a claim need not hold
-- them locked while other processes claim. SQLite has one writer at a
-- time: a claim's transaction keeps every other write out until it
-- commits, so its heads need none. This keeps both histories the same.
SELECT 1;
