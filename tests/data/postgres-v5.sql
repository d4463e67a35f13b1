-- What a safeact of schema 5 created in an empty PostgreSQL schema (safeact._tables.postgres_ddl()
-- at commit 60dc051, before schema 6, issue 33), its version row, and the rows it wrote for
-- processes of host ledger-v5-host: keys paid-5 (succeeded, 5), declined-5 (failed, ValueError),
-- doubt-5 (in doubt, interrupted) and running-5 (attempting; a child process exited inside the
-- action), all of tool tests.charge (``charge(key, amount: int) -> int``), with their history
-- (its seq numbered anew, in order) and the tool's description. Run as one script; history,
-- never edited.

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

CREATE TABLE tools (
    name TEXT NOT NULL,
    result_shape TEXT NOT NULL,
    written_at TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    PRIMARY KEY (name)
);

INSERT INTO safeact_meta (application, version) VALUES ('safeact', 5);

INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, finished_at, result, error_type, error_message, owner_host, owner_boot, owner_pid, owner_started, lease_until, doubt_reason, schema_version, owner_machine, owner_pidns, owner_group) VALUES ('declined-5', 'tests.charge', '7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf', 'failed', '58b02a5fccbe498cabf79964ab54f929', '2026-12-04T07:49:40.382845+00:00', '2026-12-04T07:49:40.383912+00:00', NULL, 'ValueError', 'card declined', 'ledger-v5-host', '0be2ccbe-152a-4ae7-9dd4-8dd9916e9936', 16824, 704398, '2026-12-04T07:50:10.382845+00:00', NULL, 5, 'safeact-c54dbf20512a4754efd89c3f060aadda', '4026531836', 16819);

INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, finished_at, result, error_type, error_message, owner_host, owner_boot, owner_pid, owner_started, lease_until, doubt_reason, schema_version, owner_machine, owner_pidns, owner_group) VALUES ('doubt-5', 'tests.charge', '7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf', 'in_doubt', 'bf21ed7554fd47b2a6140175789899ab', '2026-12-04T07:49:40.385165+00:00', NULL, NULL, NULL, NULL, 'ledger-v5-host', '0be2ccbe-152a-4ae7-9dd4-8dd9916e9936', 16824, 704398, '2026-12-04T07:50:10.385165+00:00', 'interrupted', 5, 'safeact-c54dbf20512a4754efd89c3f060aadda', '4026531836', 16819);

INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, finished_at, result, error_type, error_message, owner_host, owner_boot, owner_pid, owner_started, lease_until, doubt_reason, schema_version, owner_machine, owner_pidns, owner_group) VALUES ('paid-5', 'tests.charge', '7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf', 'succeeded', '7adf01b4c3664530a7c1a50e307f57e4', '2026-12-04T07:49:40.377194+00:00', '2026-12-04T07:49:40.380904+00:00', '5', NULL, NULL, 'ledger-v5-host', '0be2ccbe-152a-4ae7-9dd4-8dd9916e9936', 16824, 704398, '2026-12-04T07:50:10.377194+00:00', NULL, 5, 'safeact-c54dbf20512a4754efd89c3f060aadda', '4026531836', 16819);

INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, finished_at, result, error_type, error_message, owner_host, owner_boot, owner_pid, owner_started, lease_until, doubt_reason, schema_version, owner_machine, owner_pidns, owner_group) VALUES ('running-5', 'tests.charge', '7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf', 'attempting', '8fad4d3ecf874b4ab1aef108e18393ad', '2026-12-04T07:49:40.797656+00:00', NULL, NULL, NULL, NULL, 'ledger-v5-host', '0be2ccbe-152a-4ae7-9dd4-8dd9916e9936', 16849, 704437, '2026-12-04T07:50:10.797656+00:00', NULL, 5, 'safeact-c54dbf20512a4754efd89c3f060aadda', '4026531836', 16819);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'paid-5', '7adf01b4c3664530a7c1a50e307f57e4', NULL, 'attempting', '2026-12-04T07:49:40.377194+00:00', 'process', 'ledger-v5-host', 16824, 'claimed', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'paid-5', '7adf01b4c3664530a7c1a50e307f57e4', 'attempting', 'succeeded', '2026-12-04T07:49:40.380904+00:00', 'process', 'ledger-v5-host', 16824, 'ran', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'declined-5', '58b02a5fccbe498cabf79964ab54f929', NULL, 'attempting', '2026-12-04T07:49:40.382845+00:00', 'process', 'ledger-v5-host', 16824, 'claimed', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'declined-5', '58b02a5fccbe498cabf79964ab54f929', 'attempting', 'failed', '2026-12-04T07:49:40.383912+00:00', 'process', 'ledger-v5-host', 16824, 'raised', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'doubt-5', 'bf21ed7554fd47b2a6140175789899ab', NULL, 'attempting', '2026-12-04T07:49:40.385165+00:00', 'process', 'ledger-v5-host', 16824, 'claimed', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'doubt-5', 'bf21ed7554fd47b2a6140175789899ab', 'attempting', 'in_doubt', '2026-12-04T07:49:40.386119+00:00', 'process', 'ledger-v5-host', 16824, 'interrupted', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'running-5', '8fad4d3ecf874b4ab1aef108e18393ad', NULL, 'attempting', '2026-12-04T07:49:40.797656+00:00', 'process', 'ledger-v5-host', 16849, 'claimed', NULL);

INSERT INTO tools (name, result_shape, written_at, schema_version) VALUES ('tests.charge', '{"type":"int"}', '2026-12-04T07:49:40.377194+00:00', 5);
