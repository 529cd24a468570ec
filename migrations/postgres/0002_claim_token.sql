-- Every claim mints a token; completions are fenced on it. A request made
-- under a superseded token is still recorded, marked late.
ALTER TABLE webhook_deliveries ADD COLUMN claim_token text;
ALTER TABLE webhook_delivery_attempts ADD COLUMN late boolean NOT NULL DEFAULT false;
