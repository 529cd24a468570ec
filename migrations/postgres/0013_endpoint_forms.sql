-- Fan-out by index. A create used to read every endpoint that is not
-- deleted and match each in Go, so its cost grew with the endpoints
-- registered anywhere. Now it reads (hymical_fan_out, below) only the
-- endpoints that can match: those
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
    form_id     text COLLATE "C" NOT NULL,
    endpoint_id text COLLATE "C" NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    PRIMARY KEY (form_id, endpoint_id)
);
CREATE INDEX webhook_endpoint_forms_endpoint ON webhook_endpoint_forms (endpoint_id);

-- The endpoints of every form. The store writes an empty list as '[]'.
CREATE INDEX webhook_endpoints_every_form ON webhook_endpoints (id)
    WHERE deleted_at IS NULL AND form_ids = '[]'::jsonb;

CREATE FUNCTION hymical_endpoint_forms() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM webhook_endpoint_forms WHERE endpoint_id = OLD.id;
    END IF;
    IF NEW.deleted_at IS NULL AND jsonb_typeof(NEW.form_ids) = 'array' THEN
        INSERT INTO webhook_endpoint_forms (form_id, endpoint_id)
            SELECT DISTINCT f #>> '{}', NEW.id FROM jsonb_array_elements(NEW.form_ids) AS f
            WHERE jsonb_typeof(f) = 'string';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_endpoint_forms_insert AFTER INSERT ON webhook_endpoints
    FOR EACH ROW EXECUTE FUNCTION hymical_endpoint_forms();
-- An update that writes the same form_ids (every EndpointUpdate does) and
-- leaves deleted_at alone changes nothing here.
CREATE TRIGGER webhook_endpoint_forms_update AFTER UPDATE OF form_ids, deleted_at ON webhook_endpoints
    FOR EACH ROW WHEN (OLD.form_ids IS DISTINCT FROM NEW.form_ids OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at)
    EXECUTE FUNCTION hymical_endpoint_forms();

-- The read itself, as a function. Sent as a statement, with its arrays
-- of form ids and endpoint ids, PostgreSQL planned it afresh for every
-- batch of creates (it judged each custom plan cheaper than the generic
-- one), and planning took three times as long as running it: 160 µs a
-- call against 54 µs for this function (pgbench -M prepared, 10,000
-- endpoints). Inside the function one generic plan is kept, so its shape
-- must not depend on statistics either (a fresh table has none, and the
-- planner then hashed a scan of every endpoint): each form id and each
-- endpoint id found is looked up by its own probe (LATERAL, fenced by
-- OFFSET 0 so it is not flattened into a join the planner may turn into a
-- scan), and the index is the only sensible way to answer each probe. The
-- function only reads; the caller's transaction holds the fan-out lock.
CREATE FUNCTION hymical_fan_out(forms text[], addressed text[])
RETURNS TABLE (id text, event_types jsonb, form_ids jsonb, disabled_at timestamptz, ordered boolean)
LANGUAGE plpgsql STABLE ROWS 10 SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.id, e.event_types, e.form_ids, e.disabled_at, e.ordered
    FROM (
        SELECT f.endpoint_id FROM unnest(forms) AS k (form_id)
            CROSS JOIN LATERAL (SELECT f.endpoint_id FROM webhook_endpoint_forms AS f
                WHERE f.form_id = k.form_id OFFSET 0) AS f
        UNION
        SELECT a.id FROM webhook_endpoints AS a WHERE a.deleted_at IS NULL AND a.form_ids = '[]'::jsonb
        UNION
        SELECT x COLLATE "C" FROM unnest(addressed) AS x
    ) AS m (id)
    CROSS JOIN LATERAL (SELECT e.id, e.event_types, e.form_ids, e.disabled_at, e.ordered
        FROM webhook_endpoints AS e WHERE e.id = m.id AND e.deleted_at IS NULL OFFSET 0) AS e;
END
$$;

-- The endpoints registered before this step.
INSERT INTO webhook_endpoint_forms (form_id, endpoint_id)
    SELECT DISTINCT f #>> '{}', e.id
    FROM webhook_endpoints AS e, jsonb_array_elements(
        CASE WHEN jsonb_typeof(e.form_ids) = 'array' THEN e.form_ids ELSE '[]'::jsonb END) AS f
    WHERE e.deleted_at IS NULL AND jsonb_typeof(f) = 'string';
