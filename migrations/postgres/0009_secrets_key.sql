-- Endpoint signing secrets at rest. While this table is empty they are kept
-- in plaintext; once it holds its one row, every endpoint's secrets column
-- is a secretbox envelope (a jsonb string) sealed under the key it names
-- (only the key's id, never the key), and the trigger refuses any row that
-- is not: a process without the key, or with another one, can then write
-- no plaintext secret and no secret a later reader could not open.
CREATE TABLE hymical_secrets_key (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    key_id     text NOT NULL CHECK (length(key_id) = 16),
    changed_at timestamptz NOT NULL
);

CREATE FUNCTION hymical_secrets_sealed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    k text;
BEGIN
    SELECT key_id INTO k FROM hymical_secrets_key;
    IF k IS NOT NULL AND (jsonb_typeof(NEW.secrets) <> 'string'
            OR left(NEW.secrets #>> '{}', 22) <> 'hsb1:' || k || ':') THEN
        RAISE EXCEPTION 'endpoint % secrets must be encrypted under the key recorded in hymical_secrets_key (id %): configure that key (secrets.key or secrets.key_file)', NEW.id, k;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER webhook_endpoints_secrets_sealed BEFORE INSERT OR UPDATE OF secrets ON webhook_endpoints
    FOR EACH ROW EXECUTE FUNCTION hymical_secrets_sealed();
