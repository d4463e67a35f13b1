-- What a safeact of schema 6 created in an empty PostgreSQL schema (safeact._tables.postgres_ddl()
-- before schema 7, issue 36), its version row, and the rows it wrote for processes of host
-- ledger-v6-host: keys paid-6 (succeeded, 6), declined-6 (failed, ValueError), doubt-6 (in
-- doubt, interrupted) and running-6 (attempting; a child process exited inside the action), of
-- tool tests.charge (``charge(key, amount: int) -> int``), and wire-6 of tool tests.wire (needs
-- approval, keeps its arguments: awaiting approval), with their history (its seq numbered anew,
-- in order) and the tools' descriptions. Run as one script; history, never edited.

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
    arguments TEXT,
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

CREATE TABLE approvals (
    key TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
    requested_at TEXT NOT NULL,
    decided_at TEXT,
    decided_by TEXT,
    note TEXT,
    attempt_id TEXT,
    arguments TEXT,
    schema_version INTEGER NOT NULL,
    PRIMARY KEY (key)
);

CREATE INDEX approvals_pending ON approvals (requested_at) WHERE state = 'pending';

INSERT INTO safeact_meta (application, version) VALUES ('safeact', 6);

INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, finished_at, result, error_type, error_message, owner_host, owner_boot, owner_pid, owner_started, lease_until, doubt_reason, schema_version, owner_machine, owner_pidns, owner_group, arguments) VALUES ('paid-6', 'tests.charge', 'e4d23a63558e6b649a1d0e17f8d4186c7070a8652ff5e22ebe944e77b9d14a11', 'succeeded', '78d1aebe86cd45a19924fc80c56124e4', '2026-12-05T03:17:57.310961+00:00', '2026-12-05T03:17:57.316396+00:00', '6', NULL, NULL, 'ledger-v6-host', '9ec363a2-488b-4f47-ba32-bee50be6b883', 6718, 52485, '2026-12-05T03:18:27.310961+00:00', NULL, 6, 'safeact-d22aacbe3ef100bf12c5982bbcd5d01b', '4026531836', 6715, NULL);

INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, finished_at, result, error_type, error_message, owner_host, owner_boot, owner_pid, owner_started, lease_until, doubt_reason, schema_version, owner_machine, owner_pidns, owner_group, arguments) VALUES ('declined-6', 'tests.charge', 'e4d23a63558e6b649a1d0e17f8d4186c7070a8652ff5e22ebe944e77b9d14a11', 'failed', '66b7b87bba2249de897bcb056ff4bbce', '2026-12-05T03:17:57.321165+00:00', '2026-12-05T03:17:57.325003+00:00', NULL, 'ValueError', 'card declined', 'ledger-v6-host', '9ec363a2-488b-4f47-ba32-bee50be6b883', 6718, 52485, '2026-12-05T03:18:27.321165+00:00', NULL, 6, 'safeact-d22aacbe3ef100bf12c5982bbcd5d01b', '4026531836', 6715, NULL);

INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, finished_at, result, error_type, error_message, owner_host, owner_boot, owner_pid, owner_started, lease_until, doubt_reason, schema_version, owner_machine, owner_pidns, owner_group, arguments) VALUES ('doubt-6', 'tests.charge', 'e4d23a63558e6b649a1d0e17f8d4186c7070a8652ff5e22ebe944e77b9d14a11', 'in_doubt', 'd538ebbdb32a492d9233ef5916bff5ea', '2026-12-05T03:17:57.330009+00:00', NULL, NULL, NULL, NULL, 'ledger-v6-host', '9ec363a2-488b-4f47-ba32-bee50be6b883', 6718, 52485, '2026-12-05T03:18:27.330009+00:00', 'interrupted', 6, 'safeact-d22aacbe3ef100bf12c5982bbcd5d01b', '4026531836', 6715, NULL);

INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, finished_at, result, error_type, error_message, owner_host, owner_boot, owner_pid, owner_started, lease_until, doubt_reason, schema_version, owner_machine, owner_pidns, owner_group, arguments) VALUES ('running-6', 'tests.charge', 'e4d23a63558e6b649a1d0e17f8d4186c7070a8652ff5e22ebe944e77b9d14a11', 'attempting', '49d047ec7a524b17b2fe28982d4904e8', '2026-12-05T03:17:58.051017+00:00', NULL, NULL, NULL, NULL, 'ledger-v6-host', '9ec363a2-488b-4f47-ba32-bee50be6b883', 6757, 52679, '2026-12-05T03:18:28.051017+00:00', NULL, 6, 'safeact-d22aacbe3ef100bf12c5982bbcd5d01b', '4026531836', 6715, NULL);

INSERT INTO approvals (key, tool, args_hash, state, requested_at, decided_at, decided_by, note, attempt_id, arguments, schema_version) VALUES ('wire-6', 'tests.wire', '0a3a091fb0fe1740c2496957abc1c798c9a506d3ce34066f8243e0a82742a645', 'pending', '2026-12-05T03:17:57.338080+00:00', NULL, NULL, NULL, NULL, '{"amount": 60}', 6);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'paid-6', '78d1aebe86cd45a19924fc80c56124e4', NULL, 'attempting', '2026-12-05T03:17:57.310961+00:00', 'process', 'ledger-v6-host', 6718, 'claimed', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'paid-6', '78d1aebe86cd45a19924fc80c56124e4', 'attempting', 'succeeded', '2026-12-05T03:17:57.316396+00:00', 'process', 'ledger-v6-host', 6718, 'ran', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'declined-6', '66b7b87bba2249de897bcb056ff4bbce', NULL, 'attempting', '2026-12-05T03:17:57.321165+00:00', 'process', 'ledger-v6-host', 6718, 'claimed', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'declined-6', '66b7b87bba2249de897bcb056ff4bbce', 'attempting', 'failed', '2026-12-05T03:17:57.325003+00:00', 'process', 'ledger-v6-host', 6718, 'raised', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'doubt-6', 'd538ebbdb32a492d9233ef5916bff5ea', NULL, 'attempting', '2026-12-05T03:17:57.330009+00:00', 'process', 'ledger-v6-host', 6718, 'claimed', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'doubt-6', 'd538ebbdb32a492d9233ef5916bff5ea', 'attempting', 'in_doubt', '2026-12-05T03:17:57.333138+00:00', 'process', 'ledger-v6-host', 6718, 'interrupted', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'wire-6', NULL, NULL, NULL, '2026-12-05T03:17:57.338097+00:00', 'process', 'ledger-v6-host', 6718, 'approval_requested', NULL);

INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, by_host, by_pid, why, note) VALUES ('key', 'running-6', '49d047ec7a524b17b2fe28982d4904e8', NULL, 'attempting', '2026-12-05T03:17:58.051017+00:00', 'process', 'ledger-v6-host', 6757, 'claimed', NULL);

INSERT INTO tools (name, result_shape, written_at, schema_version) VALUES ('tests.charge', '{"type":"int"}', '2026-12-05T03:17:57.310961+00:00', 6);
