-- Console logins, kept in the database so that a login holds on every
-- server sharing it. Only the SHA-256 of the session id is kept, so a copy
-- of the database opens no session. expires_at is indexed for the bound
-- on live sessions, which removes the expired ones and those closest to
-- expiry.
CREATE TABLE hymical_console_sessions (
    hash        BLOB PRIMARY KEY CHECK (length(hash) = 32),
    csrf        TEXT NOT NULL CHECK (csrf <> ''),
    operator    TEXT NOT NULL DEFAULT '',
    expires_at  INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX hymical_console_sessions_expires ON hymical_console_sessions (expires_at);
