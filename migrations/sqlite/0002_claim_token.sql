-- Every claim mints a token; completions are fenced on it. A request made
-- under a superseded token is still recorded, marked late.
ALTER TABLE webhook_deliveries ADD COLUMN claim_token TEXT;
ALTER TABLE webhook_delivery_attempts ADD COLUMN late INTEGER NOT NULL DEFAULT 0 CHECK (late IN (0, 1));
