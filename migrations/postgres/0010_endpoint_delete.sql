-- Deleting an endpoint is soft: deleted_at is set, the row stays so its
-- deliveries and attempts stay readable and its id is never handed out
-- again, and lists and fan-out leave it out.
ALTER TABLE webhook_endpoints ADD COLUMN deleted_at timestamptz;

-- An Idempotency-Key of a create that is not an ingest (POST /v1/endpoints),
-- scoped by the API to its route, with what it created and a fingerprint of
-- the request it came with. Only the id of what was created is kept, never
-- an answer: a replay reads the endpoint again, so no secret is copied here.
CREATE TABLE webhook_idempotency_keys (
    key          text COLLATE "C" PRIMARY KEY,
    endpoint_id  text COLLATE "C" NOT NULL REFERENCES webhook_endpoints (id),
    request_hash text NOT NULL,
    created_at   timestamptz NOT NULL
);
