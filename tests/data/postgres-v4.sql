-- What a safeact of schema 4 created in an empty PostgreSQL schema (safeact._tables.postgres_ddl()
-- before schema 5, issue 30), and its version row. Run as one script; history, never edited.

CREATE TABLE safeact_meta (
    singleton   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    application TEXT NOT NULL,
    version     INTEGER NOT NULL
);

CREATE TABLE calls (
    key TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('attempting', 'succeeded', 'failed', 'in_doubt', 'released')),
    attempt_id TEXT NOT NULL,
    attempted_at TEXT NOT NULL,
    finished_at TEXT,
    result TEXT,
    error_type TEXT,
    error_message TEXT,
    owner_host TEXT NOT NULL,
    owner_boot TEXT NOT NULL,
    owner_pid BIGINT NOT NULL,
    owner_started BIGINT NOT NULL,
    lease_until TEXT NOT NULL,
    doubt_reason TEXT,
    schema_version INTEGER NOT NULL,
    owner_machine TEXT NOT NULL DEFAULT '',
    owner_pidns TEXT NOT NULL DEFAULT '',
    owner_group BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (key)
);

CREATE INDEX calls_unsettled ON calls (attempted_at) WHERE state IN ('attempting', 'in_doubt');

CREATE TABLE late_completions (
    key TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    state TEXT NOT NULL,
    result TEXT,
    error_type TEXT,
    error_message TEXT,
    finished_at TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    PRIMARY KEY (key, attempt_id)
);

CREATE TABLE sagas (
    saga_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'compensating', 'compensated', 'rollback_incomplete')),
    started_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    aborted_step TEXT,
    abort_reason TEXT,
    schema_version INTEGER NOT NULL,
    PRIMARY KEY (saga_id)
);

CREATE INDEX sagas_by_state ON sagas (state, started_at);

CREATE TABLE saga_steps (
    saga_id TEXT NOT NULL REFERENCES sagas (saga_id),
    step_index INTEGER NOT NULL,
    name TEXT NOT NULL,
    key TEXT NOT NULL,
    compensation TEXT,
    PRIMARY KEY (saga_id, step_index)
);

CREATE TABLE history (
    seq BIGINT GENERATED ALWAYS AS IDENTITY NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('key', 'saga')),
    subject TEXT NOT NULL,
    attempt_id TEXT,
    from_state TEXT,
    to_state TEXT,
    at TEXT NOT NULL,
    by_kind TEXT NOT NULL CHECK (by_kind IN ('process', 'operator')),
    by_host TEXT NOT NULL,
    by_pid BIGINT NOT NULL,
    why TEXT NOT NULL,
    note TEXT,
    PRIMARY KEY (seq)
);

CREATE INDEX history_by_subject ON history (kind, subject, seq);

CREATE FUNCTION safeact_history_is_append_only() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'the safeact history is append-only'; END $$;

CREATE TRIGGER history_is_append_only BEFORE UPDATE OR DELETE ON history
FOR EACH STATEMENT EXECUTE FUNCTION safeact_history_is_append_only();

INSERT INTO safeact_meta (application, version) VALUES ('safeact', 4);
