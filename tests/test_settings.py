"""Every setting a caller gets wrong is one clear error naming it, before anything is made.

``safe(...)``, ``get_store(...)`` and an operator's ``resolve``/``amend`` take numbers of
seconds, flags, names, notes and functions: a ``str`` where a number goes, a NaN, ``None``
for an iterable, a function that is not one, or bytes for a note are each refused with
``TypeError``/``ValueError`` naming the parameter, and no ledger file is created.
"""

import math
from pathlib import Path

import pytest

from safeact import InDoubt, State, Store, get_store, safe
from tests.actions import expire_leases


def seven(key: str) -> int:
    return 7


@pytest.mark.parametrize(
    ("setting", "error", "said"),
    [
        ({"name": 123}, TypeError, "name takes text"),
        ({"name": "a\udcff"}, ValueError, "name 'a\\\\udcff' is not valid Unicode"),
        ({"wait": "5"}, TypeError, "wait takes a number of seconds, not '5'"),
        ({"wait": True}, TypeError, "wait takes a number of seconds"),
        ({"wait": math.nan}, ValueError, "wait must be 0 or more seconds, got nan"),
        ({"wait": -1}, ValueError, "wait must be 0 or more seconds"),
        ({"ignore": None}, TypeError, "ignore takes parameter names, not None"),
        ({"reconcile": 5}, TypeError, "reconcile takes a function"),
        ({"compensate": "undo"}, TypeError, "compensate takes a function"),
    ],
    ids=str,
)
def test_a_wrong_setting_of_safe_is_refused_before_a_ledger_is_made(
    tmp_path: Path, setting: dict[str, object], error: type[Exception], said: str
) -> None:
    """Each wrong setting of safe() raises, naming it; the ledger file is never created."""
    ledger = tmp_path / "agent.db"
    with pytest.raises(error, match=said):
        safe(ledger, **setting)(seven)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_an_unbounded_wait_is_a_wait() -> None:
    """Infinity is a number of seconds: wait for a live owner for as long as it takes."""
    assert safe(":unused:", wait=math.inf)(seven).wait == math.inf


@pytest.mark.parametrize(
    ("setting", "error", "said"),
    [
        ({"lease": "30"}, TypeError, "lease takes a number of seconds, not '30'"),
        ({"lease": math.nan}, ValueError, "lease must be more than 0 seconds, got nan"),
        ({"heartbeat": "1"}, TypeError, "heartbeat takes a number of seconds"),
        ({"heartbeat": math.nan}, ValueError, "heartbeat must be more than 0 seconds"),
        ({"host": 5}, TypeError, "host takes text"),
        ({"host": "a\udcff"}, ValueError, "host 'a\\\\udcff' is not valid Unicode"),
        ({"fsync_attempts": "no"}, TypeError, "fsync_attempts must be True or False"),
    ],
    ids=str,
)
def test_a_wrong_setting_of_a_store_is_refused_before_its_file_is_made(
    tmp_path: Path, setting: dict[str, object], error: type[Exception], said: str
) -> None:
    """Each wrong setting of get_store() raises, naming it; the file is never created."""
    with pytest.raises(error, match=said):
        get_store(tmp_path / "agent.db", **setting)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("setting", "error", "said"),
    [
        ({"connect_timeout": "5"}, TypeError, "connect_timeout takes a whole number"),
        ({"connect_timeout": 0}, ValueError, "connect_timeout must be 1 or more"),
        ({"pool_size": 0}, ValueError, "pool_size must be 1 or more"),
        ({"pool_size": 2.5}, TypeError, "pool_size takes a whole number"),
    ],
    ids=str,
)
def test_a_wrong_setting_of_a_postgres_store_is_refused(
    postgres_ledger: str, setting: dict[str, object], error: type[Exception], said: str
) -> None:
    """connect_timeout and pool_size are whole numbers, 1 or more."""
    from safeact.postgres import PostgresStore

    with pytest.raises(error, match=said):
        PostgresStore(postgres_ledger, **setting)  # type: ignore[arg-type]


@pytest.fixture
def in_doubt(store: Store) -> str:
    """A key of tool "seven" in doubt: its owner (this process) let its lease run out."""
    tool = safe(store, name="seven")(seven)
    claimed = store._claim("k", "seven", tool._digest("k", (), {}), attempt_id="a", previous=None)
    assert claimed is not None
    expire_leases(store)
    outcome = tool("k")
    assert isinstance(outcome, InDoubt)
    return "k"


@pytest.mark.parametrize(
    ("note", "error", "said"),
    [
        (b"checked at the bank", TypeError, "note takes text .* decode the bytes first"),
        (42, TypeError, "note takes text"),
        ("checked \udcff", ValueError, "note 'checked \\\\udcff' is not valid Unicode"),
    ],
    ids=str,
)
def test_a_note_that_is_not_text_is_refused_and_nothing_changes(
    store: Store, in_doubt: str, note: object, error: type[Exception], said: str
) -> None:
    """Resolving and amending, on the store or a tool, take a str note; the key is unchanged."""
    tool = safe(store, name="seven")(seven)
    before = store.get(in_doubt)
    history = store.history(in_doubt)
    with pytest.raises(error, match=said):
        store.resolve(in_doubt, happened=True, result=7, note=note)  # type: ignore[arg-type]
    with pytest.raises(error, match=said):
        tool.resolve(in_doubt, happened=True, result=7, note=note)  # type: ignore[call-overload]
    assert (store.get(in_doubt), store.history(in_doubt)) == (before, history)
    store.resolve(in_doubt, happened=True, result=7)
    with pytest.raises(error, match=said):
        store.amend(in_doubt, result=8, note=note)  # type: ignore[arg-type]
    with pytest.raises(error, match=said):
        tool.amend(in_doubt, 8, note=note)  # type: ignore[arg-type]
    record = store.get(in_doubt)
    assert record is not None
    assert (record.state, record.result) == (State.SUCCEEDED, 7)
