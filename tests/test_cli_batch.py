"""``safeact resolve --keys-from``: one decision for a reviewed set of keys in doubt."""

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from safeact import Record, State, Store, StoreError, get_store, safe
from safeact._cli import main
from safeact._cli_batch import Decision, Verdict, apply_items, check_items, read_items
from safeact._cli_json import SCHEMAS
from safeact._history import Event
from tests.actions import bury_owners, expire_leases
from tests.test_operator_seat import undocumented

DOUBTS = ["pay-2", "pay-3", "pay-4"]
"""The keys left in doubt by a dead owner, in the order doubt lists them."""


def pay(key: str, amount: int) -> int:
    return amount


def make_doubts(ledger: str | Path, keys: list[str] = DOUBTS) -> None:
    """Tool ``pay`` (-> int): pay-1 succeeded; each of ``keys`` in doubt, its owner dead."""
    with get_store(ledger) as store:
        safe(store, name="pay")(pay)("pay-1", 5)
        for key in keys:
            store._claim(key, "pay", "h", attempt_id=f"dead-{key}", previous=None)
        bury_owners(store)


@pytest.fixture
def doubts(ledger: Path) -> Path:
    make_doubts(ledger)
    return ledger


def run(*args: str | Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``python -m safeact ARGS`` to the end, with ``stdin`` as its standard input."""
    return subprocess.run(
        [sys.executable, "-m", "safeact", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def doubt_json(ledger: str | Path) -> str:
    """What `safeact doubt LEDGER --json` prints."""
    return run("doubt", ledger, "--json").stdout


def lines_of(keys: list[str]) -> str:
    return "".join(json.dumps({"key": key}) + "\n" for key in keys)


def ledger_now(ledger: str | Path) -> tuple[list[Record], dict[str, list[Event]]]:
    """Every record, and every key's history: what a refused or dry run must leave alone."""
    with get_store(ledger) as store:
        records = store.records()
        return records, {r.key: store.history(r.key) for r in records}


def decided(event: Event) -> tuple[object, ...]:
    """What an operator's decision records, beyond when and by which process."""
    return (event.why, event.by, event.from_state, event.to_state, event.attempt_id, event.note)


# Applying a set.


def test_a_dry_run_checks_every_key_and_changes_nothing(doubts: Path) -> None:
    """--dry-run says what each key would become and leaves every record and history as it was."""
    before = ledger_now(doubts)
    result = run(
        "resolve", doubts, "--keys-from", "-", "--happened", "--result", "7", "--dry-run",
        stdin=doubt_json(doubts),
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        *(f"{key}: in_doubt → succeeded (dry run)" for key in DOUBTS),
        "dry run: 3 keys would be resolved as happened; nothing was changed",
    ]
    assert ledger_now(doubts) == before


def test_every_key_of_the_set_is_resolved_with_the_result(doubts: Path) -> None:
    """--happened --result records each listed key as SUCCEEDED with that result."""
    result = run(
        "resolve", doubts, "--keys-from", "-", "--happened", "--result", "7",
        stdin=doubt_json(doubts),
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        *(f"{key}: in_doubt → succeeded" for key in DOUBTS),
        "resolved 3 keys as happened",
    ]
    with get_store(doubts) as store:
        assert [(r.state, r.result) for r in map(store.get, DOUBTS) if r] == [
            (State.SUCCEEDED, 7)
        ] * 3


def test_each_key_is_in_its_history_as_a_single_resolve_records_it(ledger: Path) -> None:
    """Each key's decision event is the one `resolve KEY` writes: the operator, the note."""
    make_doubts(ledger, [*DOUBTS, "pay-single"])
    note = ["--note", "provider: none arrived"]
    single = run("resolve", ledger, "pay-single", "--not-happened", *note)
    batch = run(
        "resolve", ledger, "--keys-from", "-", "--not-happened", *note, stdin=lines_of(DOUBTS)
    )
    assert (single.returncode, batch.returncode) == (0, 0), batch.stderr
    with get_store(ledger) as store:
        (alone,) = store.history("pay-single")[-1:]
        events = [store.history(key)[-1] for key in DOUBTS]
    expected = [attrs.evolve(alone, attempt_id=f"dead-{key}") for key in DOUBTS]
    assert [decided(e) for e in events] == [decided(e) for e in expected]
    assert alone.note == "provider: none arrived"


def test_the_input_may_come_straight_from_doubt_json_in_a_file(
    doubts: Path, tmp_path: Path
) -> None:
    """`doubt --json > FILE`, then `resolve --keys-from FILE --not-happened` releases each key."""
    reviewed = tmp_path / "reviewed.jsonl"
    reviewed.write_text(doubt_json(doubts))
    result = run("resolve", doubts, "--keys-from", reviewed, "--not-happened")
    assert (result.returncode, result.stderr) == (0, "")
    with get_store(doubts) as store:
        assert [r.state for r in map(store.get, DOUBTS) if r] == [State.RELEASED] * 3


def test_objects_printed_over_several_lines_are_read_as_jq_prints_them(doubts: Path) -> None:
    """The default output of jq (an object over many lines, not -c) is read object by object."""
    pretty = "".join(
        json.dumps(json.loads(line), indent=2) + "\n" for line in doubt_json(doubts).splitlines()
    )
    result = run("resolve", doubts, "--keys-from", "-", "--not-happened", "--dry-run", stdin=pretty)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:3] == [
        f"{key}: in_doubt → released (dry run)" for key in DOUBTS
    ]


def test_json_prints_one_documented_object_per_key(doubts: Path) -> None:
    """--json prints, per item, its key, status, states and record, in the documented shape."""
    result = run(
        "resolve", doubts, "--keys-from", "-", "--not-happened", "--json", stdin=doubt_json(doubts)
    )
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 0, result.stderr
    assert [(o["key"], o["status"], o["from_state"], o["to_state"]) for o in objects] == [
        (key, "resolved", "in_doubt", "released") for key in DOUBTS
    ]
    assert [o["record"]["state"] for o in objects] == ["released"] * 3
    assert undocumented("resolve", objects) == set()
    assert "--keys-from" in SCHEMAS["resolve"]


def test_force_releases_keys_whose_owners_are_not_proven_finished(ledger: Path) -> None:
    """--not-happened --force releases keys out of lease, and the history keeps it as forced."""
    with get_store(ledger) as store:
        for key in DOUBTS:
            store._claim(key, "pay", "h", attempt_id=f"frozen-{key}", previous=None)
        expire_leases(store)
    result = run(
        "resolve", ledger, "--keys-from", "-", "--not-happened", "--force", stdin=lines_of(DOUBTS)
    )
    assert result.returncode == 0, result.stderr
    with get_store(ledger) as store:
        assert {store.history(key)[-1].why.value for key in DOUBTS} == {"forced_release"}


# Refusing a set.

BAD = {
    "an unknown key": (
        [{"key": "pay-2"}, {"key": "pay-9"}],
        [],
        "pay-9 (line 2): refused: cannot resolve key 'pay-9': the ledger has no such key",
    ),
    "a key not in doubt": (
        [{"key": "pay-1"}, {"key": "pay-2"}],
        [],
        "pay-1 (line 1): refused: cannot resolve key 'pay-1': it is succeeded, not in doubt",
    ),
    "a result that does not fit": (
        [{"key": "pay-2"}],
        ["--happened", "--result", '"seven"'],
        (
            "pay-2 (line 1): refused: the result does not fit the return type of pay: $: "
            'expected an integer, got "seven"'
        ),
    ),
    "a key listed twice": (
        [{"key": "pay-2"}, {"key": "pay-3"}, {"key": "pay-2"}],
        [],
        "pay-2 (line 3): refused: key 'pay-2' is listed twice: also item 1 (line 1)",
    ),
    "an attempt that is over": (
        [{"key": "pay-2", "attempt_id": "reviewed-before"}],
        [],
        (
            "pay-2 (line 1): refused: cannot resolve key 'pay-2': attempt reviewed-before is "
            "over, the key is now at attempt dead-pay-2"
        ),
    ),
    "a member that would decide": (
        [{"key": "pay-2"}, {"key": "pay-3", "happened": True}],
        [],
        (
            "pay-3 (line 2): refused: it has member 'happened', which no line of safeact "
            "doubt --json has"
        ),
    ),
    "an item that names no key": (
        [{"key": "pay-2"}, {"tool": "pay"}],
        [],
        'item 2 (line 2): refused: it has no "key"',
    ),
}


@pytest.mark.parametrize(("items", "decision", "says"), BAD.values(), ids=BAD.keys())
def test_one_bad_item_refuses_the_set_naming_it_and_nothing_changes(
    doubts: Path, items: list[dict[str, object]], decision: list[str], says: str
) -> None:
    """An item a single resolve would refuse (or a misuse of the list) refuses every key."""
    before = ledger_now(doubts)
    stdin = "".join(json.dumps(item) + "\n" for item in items)
    result = run(
        "resolve", doubts, "--keys-from", "-", *(decision or ["--not-happened"]), stdin=stdin
    )
    assert result.returncode == 2
    assert [line for line in result.stdout.splitlines() if says in line] != [], result.stdout
    (error,) = result.stderr.splitlines()
    assert error.startswith("safeact: error: 1 of ")
    assert "refused, so nothing was changed: " in error
    assert says.split(": refused: ")[1] in error
    assert ledger_now(doubts) == before


def test_a_release_without_proof_is_refused_as_a_single_one_is(ledger: Path) -> None:
    """--not-happened without --force refuses a set with a key whose owner is only out of lease."""
    make_doubts(ledger)
    with get_store(ledger) as store:
        store._claim("frozen", "pay", "h", attempt_id="frozen", previous=None)
        expire_leases(store)
    before = ledger_now(ledger)
    result = run(
        "resolve", ledger, "--keys-from", "-", "--not-happened", stdin=lines_of(["pay-2", "frozen"])
    )
    assert result.returncode == 2
    assert (
        "frozen (line 2): refused: cannot release key 'frozen': its owner, process "
        in result.stdout
    )
    assert ledger_now(ledger) == before


def test_an_empty_set_is_refused(doubts: Path) -> None:
    """Input with no item (a filter that matched nothing) is an error, not a success."""
    result = run("resolve", doubts, "--keys-from", "-", "--not-happened", stdin="\n")
    assert result.returncode == 2
    assert "it holds no items" in result.stderr


def test_input_that_is_not_json_is_refused_naming_its_line(doubts: Path) -> None:
    """A line that is not JSON refuses the set, saying which line."""
    result = run(
        "resolve", doubts, "--keys-from", "-", "--not-happened", stdin='{"key": "pay-2"}\npay-3\n'
    )
    assert result.returncode == 2
    assert "--keys-from - (standard input): line 2: not JSON" in result.stderr


# A key that changes between the check and its own transaction.


def meanwhile(
    ledger: Path, change: Callable[[Store], None], monkeypatch: pytest.MonkeyPatch
) -> list[Record | None]:
    """Run ``change`` on the ledger (another operator, a caller) just after the set is checked.

    White box: the command's seam between the check and the apply. Returns a list that then
    holds pay-3's row as ``change`` left it.
    """
    left: list[Record | None] = []

    def check_then_change(*args: Any, **kwargs: Any) -> list[Verdict]:
        checked = check_items(*args, **kwargs)
        with get_store(ledger) as other:
            change(other)
            left.append(other._stored("pay-3"))
        return checked

    monkeypatch.setattr("safeact._cli.check_items", check_then_change)
    return left


def resolved_by_someone_else(store: Store) -> None:
    store.resolve("pay-3", happened=True, result=3, note="the other operator")


def released_and_claimed_again(store: Store) -> None:
    store.resolve("pay-3", happened=False, note="the other operator")
    store._claim("pay-3", "pay", "h", attempt_id="again", previous=store._stored("pay-3"))
    bury_owners(store)  # the new attempt's owner dies too: pay-3 is in doubt, at attempt "again"


@pytest.mark.parametrize("change", [resolved_by_someone_else, released_and_claimed_again])
def test_a_key_that_changed_after_the_check_is_reported_and_left_as_it_is(
    doubts: Path,
    change: Callable[[Store], None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The changed key is refused (exit 1) and left as changed; the other keys are resolved."""
    reviewed = doubts.parent / "reviewed.jsonl"
    reviewed.write_text(lines_of(DOUBTS))
    left = meanwhile(doubts, change, monkeypatch)
    code = main(["resolve", str(doubts), "--keys-from", str(reviewed), "--not-happened"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[0] == "pay-2: in_doubt → released"
    assert out[1].startswith("pay-3 (line 2): not resolved: cannot resolve key 'pay-3': ")
    assert out[2:] == [
        "pay-4: in_doubt → released",
        (
            "resolved 2 of 3 keys as not happened; 1 was not (changed since the check, see "
            "above): look at it again with safeact show"
        ),
    ]
    with get_store(doubts) as store:
        assert [store._stored("pay-3")] == left
        notes = [e.note for e in store.history("pay-3") if e.by == "operator"]
    assert notes == ["the other operator"]


def test_a_key_running_under_a_live_owner_refuses_the_set(doubts: Path) -> None:
    """A key this process is acting on is running, not in doubt: the set is refused whole."""
    with get_store(doubts) as store:
        store._claim("pay-9", "pay", "h", attempt_id="live", previous=None)  # owner: this test
    before = ledger_now(doubts)
    result = run("resolve", doubts, "--keys-from", "-", "--not-happened", stdin=lines_of(["pay-9"]))
    assert result.returncode == 2
    assert "its action is running right now" in result.stdout
    assert ledger_now(doubts) == before


def test_a_refused_verdict_is_passed_on_never_applied(doubts: Path) -> None:
    """apply_items gives back a verdict the check refused, and the key stays as it was."""
    with get_store(doubts) as store:
        items = read_items(lines_of(["pay-2"]))
        decision = Decision(happened=False)
        (checked,) = check_items(store, items, decision, lambda _: (None, None))
        refused = attrs.evolve(checked, status="refused", reason="the operator's review")
        assert list(apply_items(store, [refused], decision)) == [refused]
        assert store.get("pay-2") == checked.before


def test_a_ledger_that_fails_stops_the_set_after_the_keys_resolved(
    doubts: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ledger error is no key's change: the keys before stay resolved, none after is tried."""
    tried: list[str] = []
    decide = Store._decide

    def failing_after_the_first(store: Store, key: str, **kwargs: Any) -> Record:
        tried.append(key)
        if len(tried) > 1:
            raise StoreError("disk I/O error")
        return decide(store, key, **kwargs)

    monkeypatch.setattr(Store, "_decide", failing_after_the_first)
    reviewed = doubts.parent / "reviewed.jsonl"
    reviewed.write_text(lines_of(DOUBTS))
    code = main(["resolve", str(doubts), "--keys-from", str(reviewed), "--not-happened"])
    captured = capsys.readouterr()
    assert code == 2
    assert tried == ["pay-2", "pay-3"]
    assert captured.out.splitlines() == ["pay-2: in_doubt → released"]
    assert "disk I/O error" in captured.err


# The command line itself.


def test_options_may_come_before_the_key(doubts: Path) -> None:
    """`resolve LEDGER --not-happened KEY` still takes KEY, now that it may be left out."""
    result = run("resolve", doubts, "--not-happened", "--note", "n", "pay-2")
    assert (result.returncode, result.stdout) == (0, "pay-2: in_doubt → released\n")


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["pay-2", "--keys-from", "-"], "argument --keys-from: not allowed with argument KEY"),
        (["--keys-from", "-", "--attempt", "a"], "--attempt goes with a KEY"),
        (["pay-2", "--dry-run"], "--dry-run goes with --keys-from"),
    ],
    ids=["KEY and --keys-from", "--attempt with --keys-from", "--dry-run with a KEY"],
)
def test_a_set_and_a_single_key_options_do_not_mix(
    doubts: Path, words: list[str], says: str
) -> None:
    """An option of the single resolve with --keys-from, or the reverse, is one line and exit 2."""
    result = run("resolve", doubts, *words, "--not-happened", stdin=lines_of(["pay-2"]))
    assert (result.returncode, result.stdout) == (2, "")
    assert says in result.stderr
    assert ledger_now(doubts)[0][1].state is State.IN_DOUBT


def test_help_shows_both_forms_and_what_a_set_is(capsys: pytest.CaptureFixture[str]) -> None:
    """`resolve --help` gives the KEY and the --keys-from forms, and how a set is checked."""
    with pytest.raises(SystemExit):
        main(["resolve", "--help"])
    out = capsys.readouterr().out
    assert out.startswith(
        "usage: safeact resolve LEDGER KEY (--happened --result JSON | --not-happened [--force])\n"
    )
    assert "       safeact resolve LEDGER --keys-from FILE\n" in out
    assert "--keys-from FILE (- for standard input) reads the keys as safeact doubt --json" in out
    assert "safeact resolve agent.db --keys-from reviewed.jsonl --not-happened" in out


def test_a_set_is_resolved_on_postgresql(postgres_ledger: str) -> None:
    """On a PostgreSQL ledger, `doubt --json | resolve --keys-from -` releases every key."""
    make_doubts(postgres_ledger)
    result = run(
        "resolve",
        postgres_ledger,
        "--keys-from",
        "-",
        "--not-happened",
        stdin=doubt_json(postgres_ledger),
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[-1] == "resolved 3 keys as not happened"
    with get_store(postgres_ledger) as store:
        assert [store.history(key)[-1].why.value for key in DOUBTS] == ["resolved"] * 3
        assert store.list_in_doubt() == []
