-- Idempotency-Key on every POST that does something once: besides
-- POST /v1/endpoints, a secret rotation and the two replays record their
-- keys here, in one key space (the API scopes each key to its route).
-- operation says which did; the columns it needs to answer a repeat are
-- set, and only ids, a count and a fingerprint are kept: a rotation keeps
-- the SHA-256 of the secret it made, never the secret, and a repeat reads
-- the endpoint again to find it. Nothing references delivery_id as a
-- foreign key: pruning removes deliveries, and a key must not stop that.
ALTER TABLE webhook_idempotency_keys
    ADD COLUMN operation text COLLATE "C" NOT NULL DEFAULT 'endpoint.create',
    ALTER COLUMN endpoint_id DROP NOT NULL,
    ADD COLUMN delivery_id text COLLATE "C",
    ADD COLUMN secret_sha256 text COLLATE "C" CHECK (secret_sha256 ~ '^[0-9a-f]{64}$'),
    ADD COLUMN secrets_expire_at timestamptz,
    ADD COLUMN replayed integer CHECK (replayed >= 0),
    ADD CONSTRAINT webhook_idempotency_keys_operation CHECK (CASE operation
        WHEN 'endpoint.create' THEN endpoint_id IS NOT NULL
        WHEN 'endpoint.rotate_secret' THEN endpoint_id IS NOT NULL AND secret_sha256 IS NOT NULL
        WHEN 'delivery.replay' THEN delivery_id IS NOT NULL
        WHEN 'delivery.replay_many' THEN replayed IS NOT NULL
        ELSE false END);
ALTER TABLE webhook_idempotency_keys ALTER COLUMN operation DROP DEFAULT;
