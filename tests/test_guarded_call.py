"""The contract of a guarded call, one rule at a time, in one process."""

import functools
import importlib.machinery
import subprocess
import sys
import types
from datetime import UTC
from pathlib import Path

import attrs
import pytest

from safeact import (
    AsyncSafeTool,
    DoubtReason,
    Failed,
    InDoubt,
    KeyConflictError,
    SafeTool,
    State,
    Store,
    StoreError,
    Succeeded,
    Why,
    get_store,
    safe,
)
from tests.actions import Receipt, bury_owners, expire_leases


def make_charge(store: Store, runs: list[str]) -> SafeTool[..., Receipt]:
    @safe(store)
    def charge(key: str, to: str, amount: int = 50) -> Receipt:
        runs.append(key)
        return Receipt(to, amount)

    return charge


def test_first_call_runs_and_records_success(store: Store) -> None:
    """A new key runs the action once and records its result."""
    runs: list[str] = []
    outcome = make_charge(store, runs)("k", "a@b.c", 7)
    assert outcome == Succeeded("k", Receipt("a@b.c", 7), replayed=False)
    assert runs == ["k"]
    record = store.get("k")
    assert record is not None
    assert (record.state, record.result) == (State.SUCCEEDED, {"to": "a@b.c", "amount": 7})


def test_key_is_passed_to_the_function(store: Store) -> None:
    """The function receives the key as its first argument."""
    seen: list[str] = []

    @safe(store)
    def forward(key: str) -> str:
        seen.append(key)
        return key.upper()

    assert forward("refund-8842") == Succeeded("refund-8842", "REFUND-8842")
    assert seen == ["refund-8842"]


def test_second_call_replays_without_running(store: Store) -> None:
    """A SUCCEEDED key returns its stored result, rebuilt as the return type, and runs nothing."""
    runs: list[str] = []
    charge = make_charge(store, runs)
    charge("k", "a@b.c", 7)
    replay = charge("k", "a@b.c", 7)
    assert replay == Succeeded("k", Receipt("a@b.c", 7), replayed=True)
    assert isinstance(replay, Succeeded)
    assert type(replay.value) is Receipt
    assert runs == ["k"]


def test_replay_after_reopening_the_store(any_ledger: str) -> None:
    """The record outlives the store object: a new store on the same ledger replays."""
    runs: list[str] = []
    with get_store(any_ledger) as first:
        make_charge(first, runs)("k", "a@b.c", 7)
    with get_store(any_ledger) as second:
        replay = make_charge(second, runs)("k", "a@b.c", 7)
    assert replay == Succeeded("k", Receipt("a@b.c", 7), replayed=True)
    assert runs == ["k"]


def test_defaults_and_keywords_bind_to_the_same_call(store: Store) -> None:
    """f(k, x), f(k, x, 50) and f(k, to=x, amount=50) are one call, not a conflict."""
    runs: list[str] = []
    charge = make_charge(store, runs)
    charge("k", "a@b.c")
    replay = Succeeded("k", Receipt("a@b.c", 50), replayed=True)
    assert charge("k", "a@b.c", 50) == replay
    assert charge("k", to="a@b.c", amount=50) == replay
    assert runs == ["k"]


def test_raising_action_is_recorded_failed_and_never_rerun(store: Store) -> None:
    """An action that raises returns Failed with the live exception, and is not re-run."""
    runs: list[str] = []
    error = ValueError("card declined")

    @safe(store, name="decline")
    def decline(key: str) -> None:
        runs.append(key)
        raise error

    first = decline("k")
    assert first == Failed("k", "decline", "ValueError", "card declined", replayed=False)
    assert isinstance(first, Failed)
    assert first.exception is error
    second = decline("k")
    assert second == Failed("k", "decline", "ValueError", "card declined", replayed=True)
    assert isinstance(second, Failed)
    assert second.exception is None
    assert runs == ["k"]
    record = store.get("k")
    assert record is not None
    assert (record.state, record.error_type, record.error_message) == (
        State.FAILED,
        "ValueError",
        "card declined",
    )


def test_error_type_names_module_and_class_outside_builtins(store: Store) -> None:
    """error_type is the qualified class name for non-builtin exceptions."""

    class DeclinedError(Exception):
        pass

    @safe(store)
    def decline(key: str) -> None:
        raise DeclinedError(key)

    outcome = decline("k")
    assert isinstance(outcome, Failed)
    assert outcome.error_type == f"{__name__}.{DeclinedError.__qualname__}"


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_interrupt_propagates_and_leaves_key_in_doubt(
    store: Store, interrupt: type[BaseException]
) -> None:
    """A BaseException from the action propagates; the key is IN_DOUBT, never run again."""
    runs: list[str] = []

    @safe(store)
    def stop(key: str) -> int:
        runs.append(key)
        raise interrupt

    with pytest.raises(interrupt):
        stop("k")
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT
    outcome = stop("k")
    assert isinstance(outcome, InDoubt)
    assert runs == ["k"]


def test_attempting_key_is_reported_in_doubt_with_receipt(store: Store) -> None:
    """A key left ATTEMPTING by a caller that died is InDoubt (crashed), marked so, not run."""
    runs: list[str] = []
    charge = make_charge(store, runs)
    store._claim("k", charge.name, _hash_of(charge, "a@b.c", 7), attempt_id="dead", previous=None)
    bury_owners(store)
    outcome = charge("k", "a@b.c", 7)
    assert isinstance(outcome, InDoubt)
    record = store.get("k")
    assert record is not None
    assert outcome == InDoubt(
        "k", charge.name, record.attempted_at, record.args_hash, DoubtReason.CRASHED, None, "dead"
    )
    assert record.doubt_reason is DoubtReason.CRASHED
    assert outcome.attempted_at.tzinfo is UTC
    assert record.state is State.IN_DOUBT
    assert charge("k", "a@b.c", 7) == outcome
    assert runs == []


def test_caller_that_runs_out_of_wait_gets_in_flight_and_marks_nothing(store: Store) -> None:
    """A caller that finds a live owner and wait=0 gets InDoubt (in flight); nothing is marked."""
    inner: list[object] = []

    @safe(store, wait=0)
    def charge(key: str) -> int:
        inner.append(charge(key))  # a second caller arrives while the first is running
        record = store.get(key)
        assert record is not None
        inner.append(record.state)
        return 1

    assert charge("k") == Succeeded("k", 1)
    assert len(inner) == 2
    assert isinstance(inner[0], InDoubt)
    assert inner[0].reason is DoubtReason.IN_FLIGHT
    assert inner[1] is State.ATTEMPTING
    assert charge("k") == Succeeded("k", 1, replayed=True)


def test_owner_completion_replaces_in_doubt(store: Store) -> None:
    """If the key was marked IN_DOUBT while the owner ran, the owner's success still lands."""

    @safe(store)
    def charge(key: str) -> int:
        record = store.get(key)
        assert record is not None
        store._mark_in_doubt(key, record.attempt_id, DoubtReason.LEASE_EXPIRED)
        return 1

    assert charge("k") == Succeeded("k", 1)
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.SUCCEEDED, None)
    assert charge("k") == Succeeded("k", 1, replayed=True)


def test_owner_failure_replaces_in_doubt(store: Store) -> None:
    """The owner's FAILED record also replaces an IN_DOUBT mark made meanwhile."""

    @safe(store)
    def charge(key: str) -> int:
        record = store.get(key)
        assert record is not None
        store._mark_in_doubt(key, record.attempt_id, DoubtReason.CRASHED)
        raise RuntimeError("declined")

    assert isinstance(charge("k"), Failed)
    record = store.get("k")
    assert record is not None
    assert record.state is State.FAILED


def test_key_reused_for_another_tool_conflicts(store: Store) -> None:
    """A key recorded for one tool raises KeyConflictError for another, and nothing runs."""
    runs: list[str] = []
    make_charge(store, runs)("k", "a@b.c", 7)

    @safe(store)
    def other(key: str, to: str, amount: int = 50) -> Receipt:
        runs.append("other")
        return Receipt(to, amount)

    with pytest.raises(KeyConflictError, match="already recorded for tool"):
        other("k", "a@b.c", 7)
    assert runs == ["k"]


def test_key_reused_with_other_arguments_conflicts(store: Store) -> None:
    """A key recorded with some arguments raises KeyConflictError for others; nothing runs."""
    runs: list[str] = []
    charge = make_charge(store, runs)
    charge("k", "a@b.c", 7)
    with pytest.raises(KeyConflictError, match="other arguments"):
        charge("k", "a@b.c", 8)
    assert runs == ["k"]


def test_conflict_is_checked_for_in_doubt_keys_too(store: Store) -> None:
    """Other arguments on an unsettled key are a conflict, not a doubt."""
    runs: list[str] = []
    charge = make_charge(store, runs)
    store._claim("k", charge.name, _hash_of(charge, "a@b.c", 7), attempt_id="dead", previous=None)
    bury_owners(store)
    with pytest.raises(KeyConflictError):
        charge("k", "a@b.c", 8)
    record = store._stored("k")  # the row as written: the conflict marked nothing
    assert record is not None
    assert record.state is State.ATTEMPTING


@pytest.mark.parametrize(
    ("key", "error"), [(None, TypeError), (42, TypeError), (b"k", TypeError), ("", ValueError)]
)
def test_bad_key_is_refused_before_anything_runs(
    store: Store, key: object, error: type[Exception]
) -> None:
    """A key that is not a non-empty str raises before the ledger or the action is touched."""
    runs: list[str] = []
    with pytest.raises(error, match="key"):
        make_charge(store, runs)(key, "a@b.c", 7)  # type: ignore[arg-type] # the misuse under test
    assert runs == []
    assert store.list_in_doubt() == []


def test_key_of_another_type_is_refused_naming_its_type(store: Store) -> None:
    """A key that is not a str raises TypeError naming its type and showing a key that works."""
    with pytest.raises(TypeError) as caught:
        make_charge(store, [])(42, "a@b.c", 7)  # type: ignore[arg-type] # the misuse under test
    expected = "the key must be a str, got int: pass a string that names it, such as 'refund-8842'"
    assert expected == str(caught.value)


def test_key_that_is_not_valid_unicode_is_refused_naming_it(store: Store) -> None:
    """A key holding a lone surrogate raises ValueError naming the key and the fix."""
    expected = (
        r"^the key 'k\\udc80' is not valid Unicode text \(surrogates not allowed\); "
        r"decode it properly before using it$"
    )
    with pytest.raises(ValueError, match=expected):
        make_charge(store, [])("k\udc80", "a@b.c", 7)


def test_arguments_that_do_not_fit_are_a_type_error(store: Store) -> None:
    """Calling a tool with arguments its function does not take raises TypeError; nothing runs."""
    runs: list[str] = []
    with pytest.raises(TypeError, match="charge: missing a required argument: 'to'"):
        make_charge(store, runs)("k")
    assert runs == []
    assert store.get("k") is None


def test_tool_name_defaults_to_module_and_qualname(store: Store) -> None:
    """The default name is module.qualname; name= pins it."""
    runs: list[str] = []
    assert make_charge(store, runs).name == f"{__name__}.make_charge.<locals>.charge"

    @safe(store, name="billing.charge")
    def charge(key: str) -> None:
        pass

    assert charge.name == "billing.charge"
    charge("k")
    record = store.get("k")
    assert record is not None
    assert record.tool == "billing.charge"


class Mailer:
    """A callable object: neither it nor a partial of it is a function with annotations."""

    def __call__(self, key: str, to: str) -> str:
        return f"{key} to {to}"


def test_what_is_not_a_function_is_refused_with_how_to_wrap_it(store: Store) -> None:
    """A partial or a callable object is refused, sync or async, by a message with the fix."""
    async_tool = functools.partial(AsyncSafeTool, store=store)
    for tool in (safe(store), safe(store, name="mail.send"), async_tool):
        for unnamed in (functools.partial(Mailer(), to="ada@example.com"), Mailer()):
            with pytest.raises(TypeError, match=r"is not a function .* wrap it in one, e\.g\."):
                tool(unnamed)  # type: ignore[arg-type] # the misuse under test
    assert store.records() == []


def test_tool_keeps_the_function_identity(store: Store) -> None:
    """A tool exposes the wrapped function's name, docstring and __wrapped__."""

    def charge(key: str) -> None:
        """Charge a card."""

    tool = safe(store)(charge)
    assert (tool.__name__, tool.__doc__, tool.__wrapped__) == ("charge", "Charge a card.", charge)  # type: ignore[attr-defined] # set by update_wrapper


def test_an_async_tool_keeps_the_function_identity_and_its_settings(store: Store) -> None:
    """An async tool exposes the same: name, docstring, __wrapped__, and its compensation."""

    async def charge(key: str) -> None:
        """Charge a card."""

    def refund(key: str, charged: None) -> None:
        """Give the money back."""

    tool = safe(store, compensate=refund)(charge)
    assert isinstance(tool, AsyncSafeTool)
    assert (tool.__name__, tool.__doc__, tool.__wrapped__) == ("charge", "Charge a card.", charge)  # type: ignore[attr-defined] # set by update_wrapper
    assert tool.compensate is refund


def test_safe_accepts_a_path_string_and_keyword(tmp_path: Path) -> None:
    """safe("file"), safe(store="file") and safe(Path) all open the ledger at that path."""
    decorators = [
        (tmp_path / "a.db", safe(str(tmp_path / "a.db"))),
        (tmp_path / "b.db", safe(tmp_path / "b.db")),
        (tmp_path / "c.db", safe(store=str(tmp_path / "c.db"))),
    ]
    for target, decorator in decorators:

        @decorator
        def act(key: str) -> int:
            return 1

        assert act("k") == Succeeded("k", 1)
        act.store.close()
        with get_store(target) as reopened:
            assert reopened.get("k") is not None


def test_unstorable_result_is_returned_and_key_left_in_doubt(store: Store) -> None:
    """A result that does not fit its annotation is returned now; the key is never re-run."""
    runs: list[str] = []

    @safe(store)
    def lie(key: str) -> int:
        runs.append(key)
        return "not an int"  # type: ignore[return-value] # the bug under test

    outcome: object = lie("k")
    assert outcome == Succeeded("k", "not an int", recorded=False)
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT
    assert record.error_type == "safeact.ResultNotStorable"
    assert isinstance(lie("k"), InDoubt)
    assert runs == ["k"]


def _hash_of(tool: SafeTool[..., Receipt], to: str, amount: int) -> str:
    from safeact._keys import args_hash

    return args_hash(tool._signature, (to, amount), {})


def test_empty_name_is_refused(store: Store) -> None:
    """name="" is a ValueError: a tool needs a name to own its keys."""
    with pytest.raises(ValueError, match="non-empty"):
        safe(store, name="")


def test_outcome_is_returned_when_its_record_cannot_be_written(
    any_ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """If the SUCCEEDED commit fails, the caller gets Succeeded(recorded=False); key in doubt."""
    store = get_store(any_ledger)

    @safe(store)
    def act(key: str) -> int:
        store.close()  # the ledger goes away while the action runs
        return 1

    assert act("k") == Succeeded("k", 1, recorded=False)
    assert "could not record succeeded for key 'k'" in caplog.text
    either = f"{act.name}: could not mark key 'k' in doubt either; it looks busy until its lease"
    assert either in caplog.text
    with get_store(any_ledger) as reopened:
        record = reopened.get("k")
        assert record is not None
        assert record.state is State.ATTEMPTING


@pytest.mark.parametrize(
    ("raises", "did", "reason"),
    [
        (False, "ran", DoubtReason.RESULT_NOT_STORED),
        (True, "raised", DoubtReason.FAILURE_NOT_STORED),
    ],
    ids=["returned", "raised"],
)
def test_an_outcome_the_ledger_refused_leaves_the_key_in_doubt_saying_what_the_action_did(
    store: Store, monkeypatch: pytest.MonkeyPatch, raises: bool, did: str, reason: DoubtReason
) -> None:
    """The outcome's write fails, the mark after it does not: in doubt, with what is known."""

    def refused(*_: object, **__: object) -> bool:
        raise StoreError("disk full")

    monkeypatch.setattr(store, "_finish", refused)

    @safe(store, name="act")
    def act(key: str) -> int:
        if raises:
            raise RuntimeError("declined")
        return 1

    act("k")
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, reason)
    assert (
        record.error_message == f"the action {did}, but its outcome could not be stored: disk full"
    )


def test_interrupt_propagates_even_if_the_doubt_cannot_be_recorded(
    any_ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An interrupt is re-raised as itself, not replaced by the ledger's error."""
    store = get_store(any_ledger)

    @safe(store)
    def act(key: str) -> int:
        store.close()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        act("k")
    assert f"{act.name}: could not mark key 'k' in doubt" in caplog.text


def test_completion_after_release_and_new_claim_is_kept_as_late(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A stale owner cannot overwrite a newer attempt; its completion is kept for the operator."""
    runs: list[int] = []

    @safe(store, wait=0)
    def act(key: str) -> int:
        runs.append(len(runs) + 1)
        if runs == [1]:
            expire_leases(store)  # the owner looks frozen past its lease...
            store.resolve(key, happened=False, force=True)  # ...an operator forces it
            assert act(key) == Succeeded(key, 2)  # a new attempt claims and finishes
            return 1
        return 2

    assert act("k") == Succeeded("k", 1)
    record = store.get("k")
    assert record is not None
    assert (record.state, record.result) == (State.SUCCEEDED, 2)
    (late,) = store.late_completions("k")
    assert (late.state, late.result) == (State.SUCCEEDED, 1)
    assert late.attempt_id != record.attempt_id
    assert store.late_completions("other") == []
    assert "kept in the ledger's late completions" in caplog.text


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (OSError("bad byte \udcff"), "bad byte \\udcff"),
        (UnprintableError(), "<str() of the exception raised RuntimeError>"),
    ],
)
def test_failure_with_an_unstorable_message_is_still_recorded(
    store: Store, error: Exception, message: str
) -> None:
    """An exception whose text cannot be stored as is still gives Failed, replayed later."""
    runs: list[str] = []

    @safe(store, name="act")
    def act(key: str) -> None:
        runs.append(key)
        raise error

    assert act("k") == Failed("k", "act", _type_name(error), message)
    assert act("k") == Failed("k", "act", _type_name(error), message, replayed=True)
    assert runs == ["k"]


def _type_name(error: Exception) -> str:
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{__name__}.{cls.__qualname__}"


@pytest.mark.parametrize("text", ["refund-\udcff"])
def test_key_and_name_must_be_valid_text(store: Store, text: str) -> None:
    """A key or tool name with a lone surrogate is a ValueError before anything runs."""
    with pytest.raises(ValueError, match="not valid Unicode"):
        safe(store, name=text)
    runs: list[str] = []
    with pytest.raises(ValueError, match="not valid Unicode"):
        make_charge(store, runs)(text, "a@b.c")
    assert runs == []


def test_default_name_is_the_same_run_as_a_script_or_with_m(tmp_path: Path) -> None:
    """A tool is named after the module its file is imported as, whether run with -m or as a script.

    Its keys must not move when a crashed ``python agent.py`` is resumed as ``python -m agent``.
    """
    root = Path(__file__).resolve().parent.parent
    arguments = [str(tmp_path / "agent.db"), str(tmp_path / "effects"), "k"]
    names = [
        subprocess.run(
            [sys.executable, *how, *arguments, "--print-default-name"],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
        ).stdout.strip()
        for how in (["-m", "tests.child"], [str(root / "tests" / "child.py")])
    ]
    assert names == ["tests.child.main.<locals>.probe", "tests.child.main.<locals>.probe"]


@pytest.mark.parametrize(
    ("main_spec", "module", "expected"),
    [
        ("app.cli", "__main__", "app.cli.refund"),
        (None, "__main__", "__main__.refund"),
        ("app.cli", "billing", "billing.refund"),
    ],
    ids=["python -m", "script", "imported"],
)
def test_the_default_name_reads_the_real_module_of_main_alone(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    main_spec: str | None,
    module: str,
    expected: str,
) -> None:
    """Whatever runs this process: __main__'s spec names a tool of __main__, and only it."""
    main = types.ModuleType("__main__")
    main.__spec__ = None if main_spec is None else importlib.machinery.ModuleSpec(main_spec, None)
    monkeypatch.setitem(sys.modules, "__main__", main)

    def refund(key: str) -> None:
        pass

    refund.__module__, refund.__qualname__ = module, "refund"
    assert safe(store)(refund).name == expected


def test_a_waiter_that_finds_the_owner_finished_after_all_replays_its_outcome(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read ATTEMPTING, then the owner finished and exited: the caller replays, not InDoubt."""

    @safe(store, name="act")
    def act(key: str) -> int:
        return 1

    act("k")
    settled = store.get("k")
    assert settled is not None
    # What a waiter read just before the owner recorded its outcome and exited.
    stale = attrs.evolve(
        settled, state=State.ATTEMPTING, owner=attrs.evolve(settled.owner, started=-2)
    )
    reads = iter([stale])
    read = store.get
    monkeypatch.setattr(store, "get", lambda key: next(reads, None) or read(key))
    assert act("k") == Succeeded("k", 1, replayed=True)
    assert [e.why for e in store.history("k")] == [Why.CLAIMED, Why.RAN]


def test_keyword_only_arguments_reach_the_action(store: Store) -> None:
    """A keyword-only argument given by keyword is passed on to the action."""

    @safe(store)
    def send(key: str, *, to: str) -> str:
        return to

    assert Succeeded("k", "a", replayed=False) == send("k", to="a")
