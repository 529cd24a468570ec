-- Fan-out by index. A create used to read every endpoint that is not
-- deleted and match each in Go, so its cost grew with the endpoints
-- registered anywhere. Now it reads only the endpoints that can match: those
-- listed under the form ids of its events here, those of every form (an
-- empty form_ids, found through webhook_endpoints_every_form) and those its
-- events name. Event types are still matched in Go, among those few.
--
-- The triggers keep this table to form_ids in the transaction of every
-- write of an endpoint, whichever statement makes it (a create, an update,
-- a rotation, a soft delete, a hand-written row): a deleted endpoint has no
-- rows, so it is not found. Its primary key is the fan-out's lookup; the
-- second index is the triggers'.
CREATE TABLE webhook_endpoint_forms (
    form_id     TEXT NOT NULL,
    endpoint_id TEXT NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    PRIMARY KEY (form_id, endpoint_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX webhook_endpoint_forms_endpoint ON webhook_endpoint_forms (endpoint_id);

-- The endpoints of every form. The store writes an empty list as '[]'.
CREATE INDEX webhook_endpoints_every_form ON webhook_endpoints (id)
    WHERE deleted_at IS NULL AND form_ids = '[]';

CREATE TRIGGER webhook_endpoint_forms_insert AFTER INSERT ON webhook_endpoints
WHEN NEW.deleted_at IS NULL
BEGIN
    INSERT OR IGNORE INTO webhook_endpoint_forms (form_id, endpoint_id)
        SELECT value, NEW.id FROM json_each(CASE WHEN json_valid(NEW.form_ids) THEN NEW.form_ids ELSE '[]' END) WHERE type = 'text';
END;

-- An update that writes the same form_ids (every EndpointUpdate does) and
-- leaves deleted_at alone changes nothing here.
CREATE TRIGGER webhook_endpoint_forms_update AFTER UPDATE OF form_ids, deleted_at ON webhook_endpoints
WHEN OLD.form_ids IS NOT NEW.form_ids OR OLD.deleted_at IS NOT NEW.deleted_at
BEGIN
    DELETE FROM webhook_endpoint_forms WHERE endpoint_id = OLD.id;
    INSERT OR IGNORE INTO webhook_endpoint_forms (form_id, endpoint_id)
        SELECT value, NEW.id FROM json_each(CASE WHEN json_valid(NEW.form_ids) THEN NEW.form_ids ELSE '[]' END) WHERE type = 'text' AND NEW.deleted_at IS NULL;
END;

-- The endpoints registered before this step.
INSERT OR IGNORE INTO webhook_endpoint_forms (form_id, endpoint_id)
    SELECT j.value, e.id FROM webhook_endpoints AS e, json_each(CASE WHEN json_valid(e.form_ids) THEN e.form_ids ELSE '[]' END) AS j
    WHERE e.deleted_at IS NULL AND j.type = 'text';
