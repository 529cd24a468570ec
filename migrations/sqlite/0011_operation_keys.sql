-- Idempotency-Key on every POST that does something once: besides
-- POST /v1/endpoints, a secret rotation and the two replays record their
-- keys here, in one key space (the API scopes each key to its route).
-- operation says which did; the columns it needs to answer a repeat are
-- set, and only ids, a count and a fingerprint are kept: a rotation keeps
-- the SHA-256 of the secret it made, never the secret, and a repeat reads
-- the endpoint again to find it. Nothing references delivery_id as a
-- foreign key: pruning removes deliveries, and a key must not stop that.
-- SQLite cannot drop a NOT NULL, so the table is rebuilt; nothing
-- references it.
CREATE TABLE webhook_idempotency_keys_0011 (
    key               TEXT PRIMARY KEY,
    operation         TEXT NOT NULL,
    endpoint_id       TEXT REFERENCES webhook_endpoints (id),
    request_hash      TEXT NOT NULL,
    created_at        INTEGER NOT NULL,
    delivery_id       TEXT,
    secret_sha256     TEXT CHECK (length(secret_sha256) = 64 AND secret_sha256 NOT GLOB '*[^0-9a-f]*'),
    secrets_expire_at INTEGER,
    replayed          INTEGER CHECK (replayed >= 0),
    CHECK (CASE operation
        WHEN 'endpoint.create' THEN endpoint_id IS NOT NULL
        WHEN 'endpoint.rotate_secret' THEN endpoint_id IS NOT NULL AND secret_sha256 IS NOT NULL
        WHEN 'delivery.replay' THEN delivery_id IS NOT NULL
        WHEN 'delivery.replay_many' THEN replayed IS NOT NULL
        ELSE 0 END)
) STRICT;
INSERT INTO webhook_idempotency_keys_0011 (key, operation, endpoint_id, request_hash, created_at)
    SELECT key, 'endpoint.create', endpoint_id, request_hash, created_at FROM webhook_idempotency_keys;
DROP TABLE webhook_idempotency_keys;
ALTER TABLE webhook_idempotency_keys_0011 RENAME TO webhook_idempotency_keys;
