-- Scoped access: API tokens, portal links and portal sessions, each bound
-- to a set of form ids. One table, since the three share one shape and
-- one lookup by hash; kind keeps a secret of one kind from opening
-- another. Only the SHA-256 of a secret is kept, so a copy of the
-- database opens nothing. expires_at is indexed for pruning.
CREATE TABLE hymical_access (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('token', 'portal_link', 'portal_session')),
    name        TEXT NOT NULL DEFAULT '',
    hash        BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),
    forms       TEXT NOT NULL CHECK (json_valid(forms) AND json_type(forms) = 'array' AND json_array_length(forms) > 0),
    read_only   INTEGER NOT NULL DEFAULT 0,
    expires_at  INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER,
    -- A portal link's: how long its session lasts, and when it was spent.
    session_ttl_ms INTEGER NOT NULL DEFAULT 0 CHECK (session_ttl_ms >= 0),
    used_at     INTEGER
) STRICT;
CREATE INDEX hymical_access_expires ON hymical_access (expires_at);
