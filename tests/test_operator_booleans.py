"""An operator's decision takes real booleans: anything else is a TypeError, and nothing changes.

Taken by truthiness, ``force="false"`` would force the release of a key whose owner is not
proven gone, ``happened=None`` would release, ``happened="false"`` would record a success.
"""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from safeact import Record, Store, get_store, safe
from safeact._cli import main
from tests.actions import expire_leases

BAD_DECISIONS: list[dict[str, Any]] = [
    {"happened": False, "force": "false"},
    {"happened": False, "force": 1},
    {"happened": None},
    {"happened": "false", "result": 1},
    {"happened": 0},
]


def suspect(store: Store) -> None:
    """Leave "k" of tool "act" ATTEMPTING under this live process, its lease run out.

    Its owner is not proven gone: only ``force=True`` releases it.
    """
    assert store._claim("k", "act", "h", attempt_id="a1", previous=None) is not None
    expire_leases(store)


def deciders(store: Store) -> dict[str, Callable[..., Record]]:
    """Each way to resolve "k": the store's, a sync tool's and an async tool's ``resolve``."""

    @safe(store, name="act")
    def act(key: str) -> int:
        return 1

    @safe(store, name="act")
    async def act_async(key: str) -> int:
        await asyncio.sleep(0)
        return 1

    return {"store": store.resolve, "tool": act.resolve, "async tool": act_async.resolve}


@pytest.mark.parametrize("decider", ["store", "tool", "async tool"])
@pytest.mark.parametrize("bad", BAD_DECISIONS, ids=repr)
def test_a_decision_that_is_not_a_bool_is_a_type_error_and_changes_nothing(
    store: Store, decider: str, bad: dict[str, Any]
) -> None:
    """``happened`` or ``force`` given as anything but a bool raises TypeError; "k" is as it was."""
    suspect(store)
    before = (store.get("k"), store.history("k"))
    with pytest.raises(TypeError, match=r"must be True or False, not .*: pass"):
        deciders(store)[decider]("k", **bad)
    assert (store.get("k"), store.history("k")) == before


def test_a_tool_given_a_location_creates_no_ledger_for_a_decision_that_is_not_a_bool(
    tmp_path: Path,
) -> None:
    """The check comes before the tool opens (and so creates) its ledger."""
    ledger = tmp_path / "agent.db"

    @safe(ledger)
    def act(key: str) -> int:
        return 1

    with pytest.raises(TypeError, match="happened must be True or False"):
        act.resolve("k", happened="false", result=1)  # type: ignore[call-overload] # the wrong type is the point
    assert not ledger.exists()


@pytest.mark.parametrize("flag", ["--force=false", "--not-happened=false"])
def test_the_command_lines_decision_flags_take_no_value(ledger: Path, flag: str) -> None:
    """``--force=false`` is a usage error (exit 2), never a force; "k" is as it was."""
    with get_store(ledger) as store:
        suspect(store)
        before = (store.get("k"), store.history("k"))
    with pytest.raises(SystemExit) as exited:
        main(["resolve", str(ledger), "k", "--not-happened", flag])
    with get_store(ledger) as store:
        after = (store.get("k"), store.history("k"))
    assert (exited.value.code, after) == (2, before)
