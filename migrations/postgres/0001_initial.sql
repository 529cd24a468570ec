-- The first schema: one attempt counter and a lease, no claim token.
CREATE TABLE webhook_endpoints (
    id          text COLLATE "C" PRIMARY KEY,
    transport   text NOT NULL,
    url         text NOT NULL DEFAULT '',
    config      jsonb NOT NULL DEFAULT '{}',
    event_types jsonb NOT NULL DEFAULT '[]',
    form_ids    jsonb NOT NULL DEFAULT '[]',
    secrets     jsonb NOT NULL,
    description text NOT NULL DEFAULT '',
    disabled_at timestamptz,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

CREATE TABLE webhook_events (
    id              text COLLATE "C" PRIMARY KEY,
    type            text NOT NULL,
    form_id         text NOT NULL DEFAULT '',
    submission_id   text NOT NULL DEFAULT '',
    -- bytea, not jsonb: every attempt must sign the exact bytes ingested.
    payload         bytea NOT NULL,
    idempotency_key text,
    trace_parent    text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX webhook_events_idempotency_key ON webhook_events (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX webhook_events_form ON webhook_events (form_id, id);

CREATE TABLE webhook_deliveries (
    id               text COLLATE "C" PRIMARY KEY,
    endpoint_id      text COLLATE "C" NOT NULL REFERENCES webhook_endpoints (id),
    event_id         text COLLATE "C" NOT NULL REFERENCES webhook_events (id),
    state            text NOT NULL CHECK (state IN ('pending', 'processing', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL,
    claim_expires_at timestamptz,
    created_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    UNIQUE (event_id, endpoint_id)
);
-- Partial indexes keep claims an index scan however many rows are terminal.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_lease ON webhook_deliveries (claim_expires_at)
    WHERE state = 'processing';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);
CREATE INDEX webhook_deliveries_state ON webhook_deliveries (state, id);

CREATE TABLE webhook_delivery_attempts (
    delivery_id text COLLATE "C" NOT NULL REFERENCES webhook_deliveries (id),
    number      integer NOT NULL CHECK (number >= 1),
    outcome     text NOT NULL CHECK (outcome IN ('delivered', 'retryable', 'permanent')),
    http_status integer CHECK (http_status BETWEEN 100 AND 599),
    error       text NOT NULL DEFAULT '' CHECK (octet_length(error) <= 1024),
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    trace_id    text NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, number)
);

CREATE TABLE webhook_delivery_replays (
    id             bigserial PRIMARY KEY,
    delivery_id    text COLLATE "C" NOT NULL REFERENCES webhook_deliveries (id),
    actor          text NOT NULL,
    previous_state text NOT NULL,
    replayed_at    timestamptz NOT NULL
);
CREATE INDEX webhook_delivery_replays_delivery ON webhook_delivery_replays (delivery_id, id);
