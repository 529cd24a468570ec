-- Scoped access: API tokens, portal links and portal sessions, each bound
-- to a set of form ids. One table, since the three share one shape and
-- one lookup by hash; kind keeps a secret of one kind from opening
-- another. Only the SHA-256 of a secret is kept, so a copy of the
-- database opens nothing. expires_at is indexed for pruning.
CREATE TABLE hymical_access (
    id          text COLLATE "C" PRIMARY KEY,
    kind        text COLLATE "C" NOT NULL CHECK (kind IN ('token', 'portal_link', 'portal_session')),
    name        text NOT NULL DEFAULT '',
    hash        bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    forms       jsonb NOT NULL CHECK (jsonb_typeof(forms) = 'array' AND jsonb_array_length(forms) > 0),
    read_only   boolean NOT NULL DEFAULT false,
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    -- A portal link's: how long its session lasts, and when it was spent.
    session_ttl_ms bigint NOT NULL DEFAULT 0 CHECK (session_ttl_ms >= 0),
    used_at     timestamptz
);
CREATE INDEX hymical_access_expires ON hymical_access (expires_at);
