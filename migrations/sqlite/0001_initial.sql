-- The first schema: one attempt counter and a lease, no claim token.
-- Times are INTEGER microseconds since the Unix epoch, UTC.
CREATE TABLE webhook_endpoints (
    id          TEXT PRIMARY KEY,
    transport   TEXT NOT NULL,
    url         TEXT NOT NULL DEFAULT '',
    config      TEXT NOT NULL DEFAULT '{}',
    event_types TEXT NOT NULL DEFAULT '[]',
    form_ids    TEXT NOT NULL DEFAULT '[]',
    secrets     TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    disabled_at INTEGER,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE webhook_events (
    id              TEXT PRIMARY KEY,
    type            TEXT NOT NULL,
    form_id         TEXT NOT NULL DEFAULT '',
    submission_id   TEXT NOT NULL DEFAULT '',
    payload         BLOB NOT NULL,
    idempotency_key TEXT,
    trace_parent    TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX webhook_events_idempotency_key ON webhook_events (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX webhook_events_form ON webhook_events (form_id, id);

CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY,
    endpoint_id      TEXT NOT NULL REFERENCES webhook_endpoints (id),
    event_id         TEXT NOT NULL REFERENCES webhook_events (id),
    state            TEXT NOT NULL CHECK (state IN ('pending', 'processing', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  INTEGER NOT NULL,
    claim_expires_at INTEGER,
    created_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    UNIQUE (event_id, endpoint_id)
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_lease ON webhook_deliveries (claim_expires_at)
    WHERE state = 'processing';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);
CREATE INDEX webhook_deliveries_state ON webhook_deliveries (state, id);

CREATE TABLE webhook_delivery_attempts (
    delivery_id TEXT NOT NULL REFERENCES webhook_deliveries (id),
    number      INTEGER NOT NULL CHECK (number >= 1),
    outcome     TEXT NOT NULL CHECK (outcome IN ('delivered', 'retryable', 'permanent')),
    http_status INTEGER CHECK (http_status BETWEEN 100 AND 599),
    error       TEXT NOT NULL DEFAULT '' CHECK (length(CAST(error AS BLOB)) <= 1024),
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    trace_id    TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, number)
) STRICT;

CREATE TABLE webhook_delivery_replays (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id    TEXT NOT NULL REFERENCES webhook_deliveries (id),
    actor          TEXT NOT NULL,
    previous_state TEXT NOT NULL,
    replayed_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX webhook_delivery_replays_delivery ON webhook_delivery_replays (delivery_id, id);
