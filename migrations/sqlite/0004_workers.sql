-- Live server processes, so a migration can refuse to run under an older build.
CREATE TABLE hymical_workers (
    id             TEXT PRIMARY KEY,
    build          TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    host           TEXT NOT NULL DEFAULT '',
    started_at     INTEGER NOT NULL,
    heartbeat_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX hymical_workers_heartbeat ON hymical_workers (heartbeat_at);
