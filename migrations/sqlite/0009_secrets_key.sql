-- Endpoint signing secrets at rest. While this table is empty they are kept
-- in plaintext; once it holds its one row, every endpoint's secrets column
-- is a secretbox envelope sealed under the key it names (only the key's id,
-- never the key), and the triggers refuse any row that is not: a process
-- without the key, or with another one, can then write no plaintext secret
-- and no secret a later reader could not open.
CREATE TABLE hymical_secrets_key (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    key_id     TEXT NOT NULL CHECK (length(key_id) = 16),
    changed_at INTEGER NOT NULL
) STRICT;

CREATE TRIGGER webhook_endpoints_secrets_sealed_insert BEFORE INSERT ON webhook_endpoints
WHEN EXISTS (SELECT 1 FROM hymical_secrets_key)
    AND (json_type(NEW.secrets) IS NOT 'text'
        OR substr(json_extract(NEW.secrets, '$'), 1, 22) IS NOT (SELECT 'hsb1:' || key_id || ':' FROM hymical_secrets_key))
BEGIN
    SELECT RAISE(ABORT, 'endpoint secrets must be encrypted under the key recorded in hymical_secrets_key: configure that key (secrets.key or secrets.key_file)');
END;

CREATE TRIGGER webhook_endpoints_secrets_sealed_update BEFORE UPDATE OF secrets ON webhook_endpoints
WHEN EXISTS (SELECT 1 FROM hymical_secrets_key)
    AND (json_type(NEW.secrets) IS NOT 'text'
        OR substr(json_extract(NEW.secrets, '$'), 1, 22) IS NOT (SELECT 'hsb1:' || key_id || ':' FROM hymical_secrets_key))
BEGIN
    SELECT RAISE(ABORT, 'endpoint secrets must be encrypted under the key recorded in hymical_secrets_key: configure that key (secrets.key or secrets.key_file)');
END;
