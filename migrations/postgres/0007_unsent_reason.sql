-- Why a delivery's last claim ended without a request (its transport plugin
-- was not running, the transport is unknown, the target was refused before
-- sending, the message could not be signed). Such a claim records no
-- attempt, so the reason is kept on the delivery instead; the owner's next
-- attempt and a replay clear it. A constant default adds the column without
-- rewriting the table.
ALTER TABLE webhook_deliveries ADD COLUMN unsent_reason text NOT NULL DEFAULT '';
