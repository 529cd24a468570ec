-- Custom headers an endpoint sends with every attempt: a JSON list of
-- name and value, "[]" for none. Values may be credentials, so once a
-- secrets key is recorded a non-empty list must be a secretbox envelope
-- under that key, as the secrets column must; "[]" hides nothing and is
-- what every row written before this column holds.
ALTER TABLE webhook_endpoints ADD COLUMN headers TEXT NOT NULL DEFAULT '[]';

CREATE TRIGGER webhook_endpoints_headers_sealed_insert BEFORE INSERT ON webhook_endpoints
WHEN EXISTS (SELECT 1 FROM hymical_secrets_key) AND NEW.headers IS NOT '[]'
    AND (json_type(NEW.headers) IS NOT 'text'
        OR substr(json_extract(NEW.headers, '$'), 1, 22) IS NOT (SELECT 'hsb1:' || key_id || ':' FROM hymical_secrets_key))
BEGIN
    SELECT RAISE(ABORT, 'endpoint custom headers must be encrypted under the key recorded in hymical_secrets_key: configure that key (secrets.key or secrets.key_file)');
END;

CREATE TRIGGER webhook_endpoints_headers_sealed_update BEFORE UPDATE OF headers ON webhook_endpoints
WHEN EXISTS (SELECT 1 FROM hymical_secrets_key) AND NEW.headers IS NOT '[]'
    AND (json_type(NEW.headers) IS NOT 'text'
        OR substr(json_extract(NEW.headers, '$'), 1, 22) IS NOT (SELECT 'hsb1:' || key_id || ':' FROM hymical_secrets_key))
BEGIN
    SELECT RAISE(ABORT, 'endpoint custom headers must be encrypted under the key recorded in hymical_secrets_key: configure that key (secrets.key or secrets.key_file)');
END;
