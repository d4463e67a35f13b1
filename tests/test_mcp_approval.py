"""safeact.mcp and approvals: a gated tool answers with the pending request, offline.

Real servers and the SDK's own in-memory clients, as tests/test_mcp.py has them (mcp 2.x
``MCPServer`` and ``Client``, or mcp 1.x ``FastMCP`` and its connected session: this file
runs on either). A call that waits for a person's approval is an error result naming the
request; a person decides through the store; the same call made again runs once, replays,
or gets the denial.
"""

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from safeact import AsyncSafeTool, SafeTool, Store, get_store, safe
from safeact.mcp import REPLAYED, add_tool
from tests.actions import Receipt, count_effects, record_effect
from tests.mcp_server_child import new_server
from tests.test_mcp import ARGS, calls, keyed_by, text

KEY = "k-1"
CALL = ("send_refund", ARGS, keyed_by(KEY))
RECEIPT = {"to": "a@example.com", "amount": 50}


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


def gated(store: Store, payments: Path, *, keep: bool = True) -> SafeTool[Any, Receipt]:
    """A refund that needs a person's approval (its arguments kept unless ``keep`` is false)."""

    @safe(store, name="refund", approval=True, keep_arguments=keep)
    def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        record_effect(payments, "refund")
        return Receipt(to, amount)

    return send_refund


def served(store: Store, payments: Path, *, keep: bool = True) -> Any:
    server = new_server()
    add_tool(server, gated(store, payments, keep=keep))
    return server


def test_a_gated_call_is_an_error_result_naming_the_request(store: Store, tmp_path: Path) -> None:
    """The first call records the request and answers with it as an error result; nothing ran."""
    effects = tmp_path / "e"
    [result] = calls(served(store, effects), CALL)
    [approval] = store.approvals()
    assert result["isError"] is True
    assert result["structuredContent"] == {
        "state": "awaiting_approval",
        "key": KEY,
        "tool": "refund",
        "requested_at": approval.requested_at.isoformat(),
        "args_hash": approval.args_hash,
        "arguments": ARGS,
    }
    assert count_effects(effects, "refund") == 0


def test_the_text_says_a_person_decides_and_how(store: Store, tmp_path: Path) -> None:
    """The error text says nothing ran, and names the command a person approves it with."""
    [result] = calls(served(store, tmp_path / "e"), CALL)
    said = text(result)
    assert said.startswith("send_refund waits for a person's approval (key 'k-1'); nothing ran.")
    assert f"safeact approve {store.location} k-1 --by NAME" in said
    assert "call it again with the same key and arguments" in said


def test_without_kept_arguments_the_request_says_none(store: Store, tmp_path: Path) -> None:
    """A tool that does not keep its arguments names the request with ``"arguments": None``."""
    [result] = calls(served(store, tmp_path / "e", keep=False), CALL)
    assert result["structuredContent"]["state"] == "awaiting_approval"
    assert result["structuredContent"]["arguments"] is None


def test_asked_again_before_a_decision_it_still_waits(store: Store, tmp_path: Path) -> None:
    """A call made again while the request is pending waits again: one request, nothing ran."""
    effects = tmp_path / "e"
    first, second = calls(served(store, effects), CALL, CALL)
    assert second["structuredContent"] == first["structuredContent"]
    assert len(store.approvals()) == 1
    assert count_effects(effects, "refund") == 0


def test_once_approved_the_call_made_again_runs_once(store: Store, tmp_path: Path) -> None:
    """Approved through the store, the same call made again runs the action, once."""
    effects = tmp_path / "e"
    server = served(store, effects)
    [pending] = calls(server, CALL)
    store.approve(KEY, by="ada", args_hash=pending["structuredContent"]["args_hash"])
    [result] = calls(server, CALL)
    assert result["isError"] is False
    assert result["structuredContent"] == RECEIPT
    assert result["_meta"] == {REPLAYED: False}
    assert count_effects(effects, "refund") == 1


def test_a_call_repeated_after_the_approved_run_replays(store: Store, tmp_path: Path) -> None:
    """After the approved run, the call made again replays its result; nothing runs again."""
    effects = tmp_path / "e"
    server = served(store, effects)
    calls(server, CALL)
    store.approve(KEY, by="ada")
    ran, again = calls(server, CALL, CALL)
    assert again["structuredContent"] == ran["structuredContent"] == RECEIPT
    assert again["_meta"] == {REPLAYED: True}
    assert count_effects(effects, "refund") == 1


def test_a_denied_call_is_a_failed_result_with_the_denial(store: Store, tmp_path: Path) -> None:
    """Denied, the call made again is a failed error result carrying who denied it and why."""
    effects = tmp_path / "e"
    server = served(store, effects)
    calls(server, CALL)
    store.deny(KEY, by="ada", note="not this customer")
    [result] = calls(server, CALL)
    assert result["isError"] is True
    assert result["structuredContent"] == {
        "state": "failed",
        "key": KEY,
        "tool": "refund",
        "error_type": "safeact.Denied",
        "message": "denied by ada: not this customer",
    }
    assert result["_meta"] == {REPLAYED: True}
    assert count_effects(effects, "refund") == 0


def test_the_denial_reads_as_a_persons_decision(store: Store, tmp_path: Path) -> None:
    """The denial's text says the tool did not run, who denied it, and not to call again."""
    server = served(store, tmp_path / "e")
    calls(server, CALL)
    store.deny(KEY, by="ada", note="not this customer")
    [result] = calls(server, CALL)
    assert text(result) == (
        "send_refund did not run: denied by ada: not this customer (a person's decision). "
        "It will not run under the key 'k-1'; do not call it again for this."
    )


def test_a_denied_key_never_runs_on_later_calls(store: Store, tmp_path: Path) -> None:
    """Every later call under the denied key gets the same denial; the action never runs."""
    effects = tmp_path / "e"
    server = served(store, effects)
    calls(server, CALL)
    store.deny(KEY, by="ada")
    first, second = calls(server, CALL, CALL)
    assert first == second
    assert count_effects(effects, "refund") == 0


def test_other_arguments_under_a_waiting_key_are_a_conflict(store: Store, tmp_path: Path) -> None:
    """A call with other arguments under the key of a pending request is refused; nothing ran."""
    effects = tmp_path / "e"
    server = served(store, effects)
    calls(server, CALL)
    other = ("send_refund", {**ARGS, "amount": 60}, keyed_by(KEY))
    [result] = calls(server, other)
    assert result["structuredContent"]["state"] == "conflict"
    assert result["structuredContent"]["recorded_args_hash"] == store.approvals()[0].args_hash
    assert store.approvals()[0].state.value == "pending"
    assert count_effects(effects, "refund") == 0


def test_an_async_gated_tool_waits_then_runs_once(store: Store, tmp_path: Path) -> None:
    """An async tool needing approval waits, then, approved, runs once."""
    effects = tmp_path / "e"

    @safe(store, name="refund", approval=True)
    async def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        record_effect(effects, "refund")
        await asyncio.sleep(0)
        return Receipt(to, amount)

    tool: AsyncSafeTool[Any, Receipt] = send_refund
    server = new_server()
    add_tool(server, tool)
    [waiting] = calls(server, CALL)
    assert waiting["structuredContent"]["state"] == "awaiting_approval"
    store.approve(KEY, by="ada")
    [result] = calls(server, CALL)
    assert result["structuredContent"] == RECEIPT
    assert count_effects(effects, "refund") == 1
