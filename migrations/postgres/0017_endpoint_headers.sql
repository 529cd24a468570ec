-- Custom headers an endpoint sends with every attempt: a jsonb list of
-- name and value, '[]' for none. Values may be credentials, so once a
-- secrets key is recorded a non-empty list must be a secretbox envelope (a
-- jsonb string) under that key, as the secrets column must; '[]' hides
-- nothing and is what every row written before this column holds.
ALTER TABLE webhook_endpoints ADD COLUMN headers jsonb NOT NULL DEFAULT '[]';

CREATE FUNCTION hymical_headers_sealed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    k text;
BEGIN
    SELECT key_id INTO k FROM hymical_secrets_key;
    IF k IS NOT NULL AND NEW.headers <> '[]'::jsonb AND (jsonb_typeof(NEW.headers) <> 'string'
            OR left(NEW.headers #>> '{}', 22) <> 'hsb1:' || k || ':') THEN
        RAISE EXCEPTION 'endpoint % custom headers must be encrypted under the key recorded in hymical_secrets_key (id %): configure that key (secrets.key or secrets.key_file)', NEW.id, k;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER webhook_endpoints_headers_sealed BEFORE INSERT OR UPDATE OF headers ON webhook_endpoints
    FOR EACH ROW EXECUTE FUNCTION hymical_headers_sealed();
