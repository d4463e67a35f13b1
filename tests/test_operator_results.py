"""An operator's decision is typed, checked against the tool's return type, and correctable."""

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from safeact import (
    InDoubt,
    SafeError,
    SafeTool,
    State,
    Store,
    StoreError,
    Succeeded,
    get_store,
    register_type,
    safe,
)
from safeact._cli import main
from safeact._history import Why
from tests.actions import Receipt, bury_owners

V4 = Path(__file__).with_name("data") / "ledger-v4.db"
"""A schema-4 ledger: key doubt-4 of tool tests.charge (-> int) in doubt (see test_migrate)."""


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


def in_doubt(store: Store, runs: list[str], key: str = "k") -> SafeTool[[], int]:
    """A tool ``charge`` -> int whose attempt for ``key`` is left in doubt (interrupted)."""

    @safe(store, name="charge")
    def charge(key: str) -> int:
        runs.append(key)
        if len(runs) == 1:
            raise KeyboardInterrupt
        return 100

    with pytest.raises(KeyboardInterrupt):
        charge(key)
    return charge


def test_tool_resolve_refuses_a_result_that_does_not_fit_and_changes_nothing(store: Store) -> None:
    """tool.resolve(happened=True, result=9.99) of a -> int tool raises TypeError; nothing moves."""
    runs: list[str] = []
    charge = in_doubt(store, runs)
    with pytest.raises(TypeError, match=r"charge: the result given does not fit.*9\.99"):
        charge.resolve("k", happened=True, result=9.99)  # type: ignore[call-overload] # the misuse
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT
    assert isinstance(charge("k"), InDoubt)


def test_tool_resolve_records_a_typed_result_that_replays_exactly(store: Store) -> None:
    """tool.resolve with a value of the return type closes the key; calls replay that value."""
    runs: list[str] = []

    @safe(store)
    def send(key: str, to: str) -> Receipt:
        runs.append(key)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        send("r", "bob")
    send.resolve("r", happened=True, result=Receipt("bob", 20), note="checked the bank")
    assert send("r", "bob") == Succeeded("r", Receipt("bob", 20), replayed=True)
    assert runs == ["r"]


def test_tool_resolve_releases_with_force(store: Store) -> None:
    """tool.resolve(happened=False) releases as Store.resolve does: the next call runs."""
    runs: list[str] = []
    charge = in_doubt(store, runs)
    assert charge.resolve("k", happened=False, force=True).state is State.RELEASED
    assert charge("k") == Succeeded("k", 100)
    assert runs == ["k", "k"]


def test_tool_resolve_refuses_another_tools_key(store: Store) -> None:
    """A tool cannot decide a key of another tool, whose return type may differ."""
    in_doubt(store, [])

    @safe(store, name="other")
    def other(key: str) -> int:
        return 1

    with pytest.raises(SafeError, match=r"^key 'k' belongs to tool charge, not other: decide"):
        other.resolve("k", happened=True, result=1)
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT


def test_a_misfit_operator_value_says_how_to_amend_it(store: Store) -> None:
    """Replaying a value an operator stored that does not fit raises StoreError naming amend."""
    charge = in_doubt(store, [])
    store.resolve("k", happened=True, result=9.99)
    with pytest.raises(StoreError, match=r"'k'.*int from 9\.99.*An operator.*amend") as raised:
        charge("k")
    fix = (
        f"An operator or a probe recorded this value; correct it with {charge.name}.amend('k', "
        "value) or `safeact amend LEDGER k --result JSON`"
    )
    assert fix in str(raised.value)


def test_amend_corrects_an_operator_value_and_keeps_the_old_one_in_history(store: Store) -> None:
    """Store.amend replaces an operator's result; calls replay it; history says what it was."""
    runs: list[str] = []
    charge = in_doubt(store, runs)
    store.resolve("k", happened=True, result=9.99)
    store.amend("k", result=999, note="cents, not dollars")
    assert charge("k") == Succeeded("k", 999, replayed=True)
    last = store.history("k")[-1]
    assert (last.why, last.by, last.from_state, last.to_state) == (
        Why.AMENDED,
        "operator",
        State.SUCCEEDED,
        State.SUCCEEDED,
    )
    assert last.note == "was 9.99; cents, not dollars"
    assert runs == ["k"]


def test_tool_amend_checks_the_result_type(store: Store) -> None:
    """tool.amend refuses a value that does not fit; the stored value stays."""
    charge = in_doubt(store, [])
    charge.resolve("k", happened=True, result=5)
    with pytest.raises(TypeError, match="does not fit"):
        charge.amend("k", "five")  # type: ignore[arg-type] # the misuse
    charge.amend("k", 6)
    assert charge("k") == Succeeded("k", 6, replayed=True)


def test_an_amended_value_can_be_amended_again(store: Store) -> None:
    """An amendment is itself an operator's decision, so it can be corrected."""
    charge = in_doubt(store, [])
    store.resolve("k", happened=True, result=1)
    store.amend("k", result=2)
    store.amend("k", result=3)
    assert charge("k") == Succeeded("k", 3, replayed=True)


def test_a_probes_value_can_be_amended(store: Store) -> None:
    """A result a probe recorded (reconciled) is a decision too, and can be corrected."""
    runs: list[str] = []
    in_doubt(store, runs)
    record = store.get("k")
    assert record is not None
    store._settle(record, State.SUCCEEDED, "7", why=Why.RECONCILED, note="probe said so")
    assert store.amend("k", result=8).result == 8


def test_the_actions_own_result_cannot_be_amended(store: Store) -> None:
    """A result the action returned is what happened: amend refuses it and changes nothing."""

    @safe(store)
    def charge(key: str) -> int:
        return 100

    charge("k")
    with pytest.raises(SafeError, match="the one its action returned"):
        store.amend("k", result=5)
    assert charge("k") == Succeeded("k", 100, replayed=True)


@pytest.mark.parametrize("state", ["unknown", "in_doubt"])
def test_amend_refuses_a_key_without_a_decided_result(store: Store, state: str) -> None:
    """Only a SUCCEEDED key can be amended: an unknown or in-doubt key is refused."""
    if state == "in_doubt":
        in_doubt(store, [])
    with pytest.raises(SafeError, match="cannot amend key 'k'"):
        store.amend("k", result=5)


def test_amend_is_refused_for_another_tools_key(store: Store) -> None:
    """tool.amend cannot touch a key of another tool."""
    in_doubt(store, [])
    store.resolve("k", happened=True, result=1)

    @safe(store, name="other")
    def other(key: str) -> int:
        return 1

    with pytest.raises(SafeError, match=r"^key 'k' belongs to tool charge"):
        other.amend("k", 2)


# The command line checks an operator's JSON against the description the tool's own process
# left in the ledger: it never imports the tool's module, which may print, exit, or not exist.

REFUNDS = textwrap.dedent(
    """
    import sys

    import attrs

    from safeact import safe


    @attrs.frozen
    class Refund:
        to: str
        amount: int


    @safe(sys.argv[1], name="refunds")
    def refund(key: str, to: str) -> Refund:
        if sys.argv[3] == "crash":
            raise KeyboardInterrupt
        raise AssertionError("ran again")


    try:
        print(refund(sys.argv[2], "bob"))
    except KeyboardInterrupt:
        print("interrupted")
    """
)
"""A script (not an importable module) whose tool is named with name=; it runs as a file."""


def script(where: Path, ledger: Path, key: str, mode: str) -> str:
    """Run the refunds script as ``python refunds.py``; return what it printed."""
    done = subprocess.run(
        [sys.executable, str(where / "refunds.py"), str(ledger), key, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


@pytest.fixture
def refunds(tmp_path: Path, ledger: Path) -> Path:
    """A project whose script refunds.py left key r-1 of its tool "refunds" in doubt."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "refunds.py").write_text(REFUNDS)
    assert script(project, ledger, "r-1", "crash") == "interrupted\n"
    return project


def cli(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m safeact`` in ``where``, as an operator in a project directory."""
    return subprocess.run(
        [sys.executable, "-m", "safeact", *args],
        cwd=where,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def stored(ledger: Path, key: str) -> tuple[State, object]:
    with get_store(ledger) as store:
        record = store._stored(key)  # the row as written
    assert record is not None
    return record.state, record.result


def events(ledger: Path, key: str) -> int:
    with get_store(ledger) as store:
        return len(store.history(key))


def test_cli_refuses_a_misfit_for_a_tool_made_in_a_script_and_changes_nothing(
    refunds: Path, ledger: Path, tmp_path: Path
) -> None:
    """A tool named with name= in a script is checked all the same: a misfit exits 2, one line."""
    before = (stored(ledger, "r-1"), events(ledger, "r-1"))
    done = cli(tmp_path, "resolve", str(ledger), "r-1", "--happened", "--result", '{"to": 7}')
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "safeact: error: the result does not fit the return type of refunds: $.to: expected a "
        "string, got 7; $.amount: missing (Refund always has it); nothing was changed\n"
    )
    assert (stored(ledger, "r-1"), events(ledger, "r-1")) == before
    assert before[0][0] is State.IN_DOUBT


def test_cli_stores_a_result_that_fits_a_tool_made_in_a_script(
    refunds: Path, ledger: Path, tmp_path: Path
) -> None:
    """A fitting --result is stored without a word on stderr, and the script replays it."""
    result = json.dumps({"to": "bob", "amount": 20})
    done = cli(tmp_path, "resolve", str(ledger), "r-1", "--happened", "--result", result)
    assert (done.returncode, done.stderr) == (0, "")
    assert stored(ledger, "r-1") == (State.SUCCEEDED, {"to": "bob", "amount": 20})
    replayed = script(refunds, ledger, "r-1", "replay")
    assert "Refund(to='bob', amount=20)" in replayed
    assert "replayed=True" in replayed


def test_cli_amend_checks_the_correction_too(refunds: Path, ledger: Path, tmp_path: Path) -> None:
    """`safeact amend` refuses a misfit (nothing changes) and stores a fitting correction."""
    first = json.dumps({"to": "bob", "amount": 2})
    assert (
        cli(tmp_path, "resolve", str(ledger), "r-1", "--happened", "--result", first).returncode
        == 0
    )
    kept = events(ledger, "r-1")
    refused = cli(
        tmp_path, "amend", str(ledger), "r-1", "--result", '{"to": "bob", "amount": "20"}'
    )
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "safeact: error: the result does not fit the return type of refunds: $.amount: expected "
        'an integer, got "20"; nothing was changed\n'
    )
    assert (stored(ledger, "r-1"), events(ledger, "r-1")) == (
        (State.SUCCEEDED, {"to": "bob", "amount": 2}),
        kept,
    )
    fixed = json.dumps({"to": "bob", "amount": 20})
    done = cli(tmp_path, "amend", str(ledger), "r-1", "--result", fixed, "--note", "typo")
    assert (done.returncode, done.stderr) == (0, "")
    assert stored(ledger, "r-1") == (State.SUCCEEDED, {"to": "bob", "amount": 20})
    with get_store(ledger) as store:
        last = store.history("r-1")[-1]
    assert (last.why, last.note) == (Why.AMENDED, 'was {"to": "bob", "amount": 2}; typo')


def test_cli_cuts_a_long_list_of_problems(store: Store, ledger: Path, tmp_path: Path) -> None:
    """Five misfits: the line names three and says how many more there are."""

    @safe(store, name="scores")
    def scores(key: str) -> list[int]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        scores("s-1")
    done = cli(
        tmp_path,
        "resolve",
        str(ledger),
        "s-1",
        "--happened",
        "--result",
        '["a", "b", "c", "d", "e"]',
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "safeact: error: the result does not fit the return type of scores: $[0]: expected an "
        'integer, got "a"; $[1]: expected an integer, got "b"; $[2]: expected an integer, got '
        '"c"; and 2 more; nothing was changed\n'
    )


NOISY = textwrap.dedent(
    """
    import pathlib
    import sys

    pathlib.Path("imported").write_text("shop was imported")
    print("shop says hello at import")
    sys.exit(0)
    """
)
"""A module that prints and exits when imported: what an operator's command must never run."""


@pytest.mark.parametrize("command", ["resolve", "amend"])
def test_cli_never_imports_the_tools_module(
    command: str, store: Store, ledger: Path, tmp_path: Path
) -> None:
    """A module named like the tool, printing and exiting at import, is not imported."""

    @safe(store, name="shop.refund")
    def refund(key: str, to: str) -> Receipt:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        refund("r-1", "bob")
    (tmp_path / "shop.py").write_text(NOISY)
    if command == "amend":
        store.resolve("r-1", happened=True, result={"to": "bob", "amount": 1})
    result = json.dumps({"to": "bob", "amount": 20})
    args = ["--happened", "--result", result] if command == "resolve" else ["--result", result]
    done = cli(tmp_path, command, str(ledger), "r-1", *args, "--json")
    assert (done.returncode, done.stderr) == (0, "")
    (line,) = done.stdout.splitlines()
    assert json.loads(line)["record"]["result"] == {"to": "bob", "amount": 20}
    assert not (tmp_path / "imported").exists()
    assert stored(ledger, "r-1") == (State.SUCCEEDED, {"to": "bob", "amount": 20})


class Points:
    """Stored by its own register_type rule: the command line cannot check its JSON."""

    def __init__(self, value: int) -> None:
        self.value = value


register_type(Points, to_json=lambda points: points.value, from_json=Points)


def test_cli_warns_which_part_it_could_not_check(
    store: Store, ledger: Path, tmp_path: Path
) -> None:
    """A part stored by register_type goes in unchecked, with a one-line warning naming it."""

    @safe(store, name="award")
    def award(key: str) -> dict[str, Points]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        award("a-1")
    done = cli(
        tmp_path, "resolve", str(ledger), "a-1", "--happened", "--result", '{"bob": 5}', "--json"
    )
    assert done.returncode == 0
    assert done.stderr == (
        "safeact: warning: part of the result is not checked against the return type of award: "
        "$.bob: Points is stored by the register_type functions of Points (the tool's code); if "
        "it does not fit, replaying 'a-1' says so: then correct it with safeact amend\n"
    )
    assert json.loads(done.stdout)["to_state"] == "succeeded"
    assert stored(ledger, "a-1") == (State.SUCCEEDED, {"bob": 5})


def test_cli_warns_for_a_key_recorded_before_tools_described_their_results(
    tmp_path: Path,
) -> None:
    """A key of a schema-4 ledger has no description: stored unchecked, said so; then checked."""
    ledger = tmp_path / "v4.db"
    shutil.copyfile(V4, ledger)
    assert cli(tmp_path, "migrate", str(ledger)).returncode == 0
    done = cli(tmp_path, "resolve", str(ledger), "doubt-4", "--happened", "--result", '"seven"')
    assert (done.returncode, done.stdout) == (0, "doubt-4: in_doubt → succeeded\n")
    assert done.stderr == (
        "safeact: warning: the result is not checked: the ledger has no description of "
        "tests.charge's results (it is written at the tool's first claim since the ledger "
        "reached schema 5); if it does not fit, replaying 'doubt-4' says so: then correct it "
        "with safeact amend\n"
    )
    assert stored(ledger, "doubt-4") == (State.SUCCEEDED, "seven")
    with get_store(ledger) as store:

        @safe(store, name="tests.charge")
        def charge(key: str, amount: int) -> int:
            return amount

        assert charge("new-5", 5).unwrap() == 5  # its first claim since the upgrade
    refused = cli(tmp_path, "amend", str(ledger), "doubt-4", "--result", '"seven"')
    assert refused.returncode == 2
    assert refused.stderr == (
        "safeact: error: the result does not fit the return type of tests.charge: $: expected "
        'an integer, got "seven"; nothing was changed\n'
    )
    assert cli(tmp_path, "amend", str(ledger), "doubt-4", "--result", "7").returncode == 0
    assert stored(ledger, "doubt-4") == (State.SUCCEEDED, 7)


def test_cli_happened_needs_an_explicit_result(
    full_ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`resolve --happened` without --result is a usage error saying so; the key stays."""
    assert main(["resolve", str(full_ledger), "r-1", "--happened"]) == 2
    assert "--happened needs --result JSON" in capsys.readouterr().err
    assert stored(full_ledger, "r-1") == (State.ATTEMPTING, None)


@pytest.fixture
def full_ledger(ledger: Path) -> Path:
    with get_store(ledger) as store:
        store._claim("r-1", "shop.refund", "h", attempt_id="a", previous=None)
        bury_owners(store)
    return ledger


def pay(key: str) -> int:
    return 1


def test_cli_amend_refuses_an_actions_own_result(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`safeact amend` on a key its action settled exits 2 with one line, changing nothing."""
    with get_store(ledger) as store:
        safe(store, name="pay")(pay)("p-1")
    assert main(["amend", str(ledger), "p-1", "--result", "2"]) == 2
    assert "cannot amend key 'p-1'" in capsys.readouterr().err
    assert stored(ledger, "p-1") == (State.SUCCEEDED, 1)


def test_a_method_is_refused_when_the_tool_is_made(store: Store) -> None:
    """@safe on a method (self first) raises TypeError at decoration, saying what to do."""
    with pytest.raises(TypeError, match=r"looks like a method .*'self'.*module-level function"):

        class Cart:
            @safe(store)  # type: ignore[arg-type] # mypy sees the misuse too
            def checkout(self, key: str) -> int:  # noqa: ARG002 - the misuse under test
                return 1


def test_an_unannotated_first_parameter_in_a_class_body_is_refused(store: Store) -> None:
    """In a class body, an unannotated first parameter is taken for self, whatever its name."""
    with pytest.raises(TypeError, match=r"looks like a method .*'this'"):

        class Cart:
            @safe(store)  # type: ignore[arg-type] # mypy sees the misuse too
            def checkout(this, key: str) -> int:  # noqa: N805, ARG002 - the misuse under test
                return 1


def test_a_static_function_in_a_class_body_is_a_tool(store: Store) -> None:
    """A key-first function in a class body (a @staticmethod) works, on the class and instances."""

    class Cart:
        @staticmethod
        @safe(store)
        def checkout(key: str, total: int) -> int:  # noqa: ARG004 - the key is the tool's
            return total

    assert Cart.checkout("c", 3) == Succeeded("c", 3)
    assert Cart().checkout("c", 3) == Succeeded("c", 3, replayed=True)


def test_tool_resolve_keeps_the_operators_note_in_the_history(store: Store) -> None:
    """tool.resolve logs the operator's note with the resolve event."""
    charge = in_doubt(store, [])
    charge.resolve("k", happened=True, result=5, note="checked the bank")
    last = store.history("k")[-1]
    assert (last.why, last.by, last.note) == (Why.RESOLVED, "operator", "checked the bank")


def test_tool_amend_keeps_the_note_and_the_records_attempt_in_the_history(store: Store) -> None:
    """tool.amend logs the operator's note, and the amended attempt, with the AMENDED event."""
    charge = in_doubt(store, [])
    charge.resolve("k", happened=True, result=5)
    record = charge.amend("k", 6, note="fixed")
    last = store.history("k")[-1]
    assert (last.why, last.note, last.attempt_id) == (
        Why.AMENDED,
        "was 5; fixed",
        record.attempt_id,
    )


def test_tool_resolve_refuses_an_attempt_that_is_not_the_keys(store: Store) -> None:
    """tool.resolve(attempt_id=...) of another attempt than the key's is refused; nothing moves."""
    charge = in_doubt(store, [])
    with pytest.raises(SafeError, match="attempt not-this-one is over"):
        charge.resolve("k", happened=True, result=5, attempt_id="not-this-one")
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT
