-- Live server processes, so a migration can refuse to run under an older build.
CREATE TABLE hymical_workers (
    id             text PRIMARY KEY,
    build          text NOT NULL,
    schema_version integer NOT NULL,
    host           text NOT NULL DEFAULT '',
    started_at     timestamptz NOT NULL,
    heartbeat_at   timestamptz NOT NULL
);
CREATE INDEX hymical_workers_heartbeat ON hymical_workers (heartbeat_at);
