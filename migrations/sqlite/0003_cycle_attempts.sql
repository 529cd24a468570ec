-- The retry allowance is measured against cycle_attempts, which replay
-- resets; attempts keeps numbering the audit trail. Until now the two were
-- the same number, so the new one starts from the old.
ALTER TABLE webhook_deliveries ADD COLUMN cycle_attempts INTEGER NOT NULL DEFAULT 0
    CHECK (cycle_attempts >= 0);
UPDATE webhook_deliveries SET cycle_attempts = attempts;
