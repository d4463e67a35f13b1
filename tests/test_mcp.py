"""safeact.mcp: guarded tools on real MCP servers, through the SDK's own clients, offline.

The same file runs against mcp 2.x (``MCPServer``, ``mcp.Client(server)``) and mcp 1.x
(``FastMCP``, ``create_connected_server_and_client_session``): the dev environment has 2.x,
``python3 tasks.py test`` runs this file again in .venv-mcp1 with 1.x. Results are compared
as the wire sees them (camelCase), which both majors dump alike. Crash tests SIGKILL a stdio
server process (tests/mcp_server_child.py) inside the tool, right after its side effect.
"""

import contextlib
import dataclasses
import importlib
import ipaddress
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

import anyio
import pydantic
import pytest

import safeact.mcp
from safeact import (
    AsyncSafeTool,
    DoubtReason,
    NoRunKeyError,
    Store,
    get_store,
    run_scope,
    safe,
    template,
)
from safeact.mcp import KEY, REPLAYED, add_tool, call_tool, key_for
from tests.actions import Receipt, count_effects, record_effect
from tests.fake_bank import async_refunds, refunds
from tests.mcp_server_child import MAJOR, new_server
from tests.processes import run_python

CHILD = Path(__file__).with_name("mcp_server_child.py")
ARGS = {"to": "a@example.com", "amount": 50}
Call = tuple[str, dict[str, Any], dict[str, Any] | None]


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


def wire(result: Any) -> dict[str, Any]:
    """A result as the wire has it, without the SDK's own ``_meta`` entries (2.x adds some)."""
    dumped: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    dumped.pop("resultType", None)  # 2.x only
    meta = {
        name: value
        for name, value in dumped.pop("_meta", {}).items()
        if not name.startswith("io.modelcontextprotocol/")
    }
    if meta:
        dumped["_meta"] = meta
    dumped.setdefault("isError", False)
    return dumped


@contextlib.asynccontextmanager
async def connect(server: Any) -> AsyncIterator[Any]:
    """An initialized in-memory client session on ``server``."""
    if MAJOR >= 2:
        from mcp import Client

        async with Client(server) as client:
            yield client
    else:
        memory = importlib.import_module("mcp.shared.memory")
        async with memory.create_connected_server_and_client_session(server._mcp_server) as s:
            yield s


def calls(server: Any, *requests: Call) -> list[dict[str, Any]]:
    """Make ``requests`` (name, arguments, _meta) in one session; their results."""

    async def session() -> list[dict[str, Any]]:
        async with connect(server) as client:
            return [
                wire(await client.call_tool(name, arguments, meta=meta))
                for name, arguments, meta in requests
            ]

    return anyio.run(session)


def listed(server: Any) -> dict[str, dict[str, Any]]:
    """The server's tools as the wire lists them, by name."""

    async def tools() -> list[Any]:
        return list(await server.list_tools())

    return {
        tool.name: tool.model_dump(by_alias=True, exclude_none=True, mode="json")
        for tool in anyio.run(tools)
    }


def text(result: dict[str, Any]) -> str:
    [content] = result["content"]
    assert content["type"] == "text"
    value: str = content["text"]
    return value


def keyed_by(key: str) -> dict[str, Any]:
    return {KEY: key}


def test_the_schema_has_the_arguments_without_the_key(store: Store, tmp_path: Path) -> None:
    """The tool lists the function's name, docstring and parameters, not the key nor a context."""
    server = new_server()
    add_tool(server, refunds(store, tmp_path / "e"))
    tool = listed(server)["send_refund"]
    assert tool["description"] == "Refund ``amount`` to ``to``."
    assert sorted(tool["inputSchema"]["properties"]) == ["amount", "to"]
    assert sorted(tool["inputSchema"]["required"]) == ["amount", "to"]
    assert "outputSchema" not in tool


def test_annotations_say_idempotent_and_destructive_as_declared(
    store: Store, tmp_path: Path
) -> None:
    """The hints: idempotent; destructive as declared, and absent when not declared."""
    server = new_server()
    tool = refunds(store, tmp_path / "e")
    add_tool(server, tool, name="plain")
    add_tool(server, tool, name="destructive", destructive=True)
    add_tool(server, tool, name="additive", destructive=False, title="Refund")
    tools = listed(server)
    assert tools["plain"]["annotations"] == {"idempotentHint": True}
    assert tools["destructive"]["annotations"] == {"idempotentHint": True, "destructiveHint": True}
    assert tools["additive"]["annotations"] == {"idempotentHint": True, "destructiveHint": False}
    assert tools["additive"]["title"] == "Refund"


def test_a_key_in_meta_runs_once_and_the_retry_replays(store: Store, tmp_path: Path) -> None:
    """The same _meta key twice: one refund; the second result is marked as a replay."""
    effects = tmp_path / "effects"
    server = new_server()
    add_tool(server, refunds(store, effects))
    request: Call = ("send_refund", ARGS, keyed_by("refund-1"))
    first, second = calls(server, request, request)
    assert first == {
        "content": [{"type": "text", "text": '{"to": "a@example.com", "amount": 50}'}],
        "structuredContent": ARGS,
        "isError": False,
        "_meta": {REPLAYED: False},
    }
    assert second == {**first, "_meta": {REPLAYED: True}}
    assert count_effects(effects, "refund") == 1
    assert [record.key for record in store.records()] == ["refund-1"]


@pytest.mark.parametrize("meta", [None, {"other": 1}, keyed_by(""), {KEY: 5}])
def test_a_call_without_a_key_is_refused(
    store: Store, tmp_path: Path, meta: dict[str, Any] | None
) -> None:
    """No usable key in _meta: an error result saying how to send one; nothing runs."""
    server = new_server()
    add_tool(server, refunds(store, tmp_path / "effects"))
    [result] = calls(server, ("send_refund", ARGS, meta))
    assert result["isError"]
    assert "nothing ran" in text(result)
    assert f"meta={{{KEY!r}: " in text(result)
    assert count_effects(tmp_path / "effects", "refund") == 0
    assert store.records() == []


def test_a_key_argument_is_required_and_not_passed_on(store: Store, tmp_path: Path) -> None:
    """key_argument: a required string in the schema, the call's key; the function never sees it."""
    effects = tmp_path / "effects"
    server = new_server()
    add_tool(server, refunds(store, effects), key_argument="idempotency_key")
    schema = listed(server)["send_refund"]["inputSchema"]
    assert schema["properties"]["idempotency_key"]["type"] == "string"
    assert sorted(schema["required"]) == ["amount", "idempotency_key", "to"]
    request: Call = ("send_refund", {**ARGS, "idempotency_key": "arg-1"}, keyed_by("ignored"))
    first, second, empty = calls(
        server, request, request, ("send_refund", {**ARGS, "idempotency_key": ""}, None)
    )
    assert (first["structuredContent"], first["_meta"]) == (ARGS, {REPLAYED: False})
    assert second["_meta"] == {REPLAYED: True}
    assert empty["isError"]
    assert "'idempotency_key'" in text(empty)
    assert count_effects(effects, "refund") == 1
    assert [record.key for record in store.records()] == ["arg-1"]


def test_a_template_keys_by_the_arguments(store: Store, tmp_path: Path) -> None:
    """A template key needs nothing from the client, and ignores what it sends."""
    effects = tmp_path / "effects"
    server = new_server()
    add_tool(server, refunds(store, effects), key=template("refund:{to}"))
    first, second = calls(
        server, ("send_refund", ARGS, None), ("send_refund", ARGS, keyed_by("other"))
    )
    assert (first["_meta"], second["_meta"]) == ({REPLAYED: False}, {REPLAYED: True})
    assert count_effects(effects, "refund") == 1
    assert [record.key for record in store.records()] == ["refund:a@example.com"]


def test_two_sessions_with_the_same_request_ids_do_not_share_keys(
    store: Store, tmp_path: Path
) -> None:
    """Request ids start again in each session; two sessions' calls are two refunds."""
    effects = tmp_path / "effects"
    server = new_server()
    add_tool(server, refunds(store, effects))
    other = {"to": "b@example.com", "amount": 7}
    [first] = calls(server, ("send_refund", ARGS, keyed_by("session-1")))
    [second] = calls(server, ("send_refund", other, keyed_by("session-2")))
    assert (first["structuredContent"], second["structuredContent"]) == (ARGS, other)
    assert (first["_meta"], second["_meta"]) == ({REPLAYED: False}, {REPLAYED: False})
    assert count_effects(effects, "refund") == 2


def test_a_key_reused_for_other_arguments_is_refused(store: Store, tmp_path: Path) -> None:
    """A client that sends one key for two different calls gets an error; nothing runs again."""
    effects = tmp_path / "effects"
    server = new_server()
    add_tool(server, refunds(store, effects))
    _, reused = calls(
        server,
        ("send_refund", ARGS, keyed_by("k")),
        ("send_refund", {**ARGS, "amount": 51}, keyed_by("k")),
    )
    assert reused["isError"]
    assert "'k'" in text(reused)
    assert "nothing ran" in text(reused)
    assert count_effects(effects, "refund") == 1


def test_in_doubt_is_an_error_with_the_receipt(store: Store, tmp_path: Path) -> None:
    """A key left in doubt: an error result carrying the receipt, telling the model not to retry."""
    effects = tmp_path / "effects"
    tool = refunds(store, effects, ["interrupt-after"])
    with pytest.raises(KeyboardInterrupt):  # the refund happened; its record did not
        tool("refund-1", **ARGS)  # type: ignore[call-arg] # ARGS holds to and amount
    server = new_server()
    add_tool(server, tool)
    [result] = calls(server, ("send_refund", ARGS, keyed_by("refund-1")))
    [record] = store.records()
    assert result["isError"]
    assert result["structuredContent"] == {
        "state": "in_doubt",
        "key": "refund-1",
        "tool": "refund",
        "attempted_at": record.attempted_at.isoformat(),
        "args_hash": record.args_hash,
        "attempt_id": record.attempt_id,
        "reason": "interrupted",
        "note": None,
    }
    assert "Do not call it again" in text(result)
    assert "a person must check" in text(result)
    assert count_effects(effects, "refund") == 1


def test_a_call_still_running_elsewhere_says_to_ask_again(store: Store, tmp_path: Path) -> None:
    """A key held by a live call: in doubt (in flight), and the text says to call again later."""
    entered, release = threading.Event(), threading.Event()

    @safe(store, name="slow", wait=0)
    def slow(key: str, n: int) -> int:
        entered.set()
        release.wait(10)
        return n

    running = threading.Thread(target=slow, args=("slow-1", 1))
    running.start()
    try:
        assert entered.wait(10)
        server = new_server()
        add_tool(server, slow)
        [result] = calls(server, ("slow", {"n": 1}, keyed_by("slow-1")))
    finally:
        release.set()
        running.join()
    assert result["isError"]
    assert result["structuredContent"]["reason"] == DoubtReason.IN_FLIGHT.value
    assert "Call again later with the same key" in text(result)


def test_a_failed_action_is_an_error_with_the_stored_error(store: Store, tmp_path: Path) -> None:
    """The action raised: an error result with its type and message, the same on a retry."""
    server = new_server()
    add_tool(server, refunds(store, tmp_path / "effects", ["fail", "ok"]))
    request: Call = ("send_refund", ARGS, keyed_by("refund-1"))
    first, retry = calls(server, request, request)
    assert first["isError"]
    assert "RuntimeError: card declined" in text(first)
    assert first["structuredContent"] == {
        "state": "failed",
        "key": "refund-1",
        "tool": "refund",
        "error_type": "RuntimeError",
        "message": "card declined",
    }
    assert (first["_meta"], retry["_meta"]) == ({REPLAYED: False}, {REPLAYED: True})
    assert {**retry, "_meta": None} == {**first, "_meta": None}
    assert count_effects(tmp_path / "effects", "refund") == 0


@dataclasses.dataclass(frozen=True)
class Note:
    text: str
    tags: list[str]


class Ticket(pydantic.BaseModel):
    id: str
    open: bool


@pytest.mark.parametrize(
    ("value", "structured", "shown"),
    [
        (Receipt("a", 1), {"to": "a", "amount": 1}, '{"to": "a", "amount": 1}'),
        (Note("hi", ["x"]), {"text": "hi", "tags": ["x"]}, '{"text": "hi", "tags": ["x"]}'),
        (Ticket(id="t-1", open=True), {"id": "t-1", "open": True}, '{"id": "t-1", "open": true}'),
        ("sent", {"result": "sent"}, "sent"),
        ([1, 2], {"result": [1, 2]}, "[1, 2]"),
    ],
)
def test_results_are_structured_as_safeact_stores_them(
    store: Store, value: object, structured: dict[str, Any], shown: str
) -> None:
    """attrs, dataclass and pydantic values are objects; others go under "result"; replays match."""
    returns: Any = type(value)
    if isinstance(value, list):
        returns = list[int]

    def make(key: str) -> Any:
        return value

    make.__annotations__ = {"key": str, "return": returns}
    server = new_server()
    add_tool(server, safe(store, name="make")(make))
    request: Call = ("make", {}, keyed_by("k"))
    first, replay = calls(server, request, request)
    assert (first["structuredContent"], text(first)) == (structured, shown)
    assert {**replay, "_meta": None} == {**first, "_meta": None}


def test_a_value_that_does_not_fit_its_type_is_sent_as_text(store: Store) -> None:
    """A value the ledger cannot store still reaches the client (as its repr): the action ran."""

    @safe(store, name="wrong")
    def wrong(key: str) -> int:
        return "not an int"  # type: ignore[return-value] # the mistake under test

    server = new_server()
    add_tool(server, wrong)
    [result] = calls(server, ("wrong", {}, keyed_by("k")))
    assert not result["isError"]
    assert text(result) == "'not an int'"
    assert "structuredContent" not in result


def test_a_key_recorded_for_other_arguments_is_an_error_result(
    store: Store, tmp_path: Path
) -> None:
    """A key reused with other arguments: an error result with both digests; nothing runs."""
    effects = tmp_path / "effects"
    server = new_server()
    add_tool(server, refunds(store, effects))
    other = {**ARGS, "amount": 60}
    first, second = calls(
        server, ("send_refund", ARGS, keyed_by("k")), ("send_refund", other, keyed_by("k"))
    )
    [record] = store.records()
    assert (first["isError"], second["isError"]) == (False, True)
    conflict = second["structuredContent"]
    assert (conflict["state"], conflict["key"]) == ("conflict", "k")
    assert conflict["recorded_args_hash"] == record.args_hash != conflict["args_hash"]
    assert count_effects(effects, "refund") == 1


def nested(depth: int) -> object:
    """A list holding a list ... ``depth`` levels deep."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (
            ("by_meta", {"address": "10.0.0.1", "data": 1, "to": "a"}, keyed_by("k")),
            (
                "TypeError: store: cannot hash parameter 'address': it is a value of type "
                "ipaddress.IPv4Address, which safeact cannot compare by content"
            ),
        ),
        (
            ("by_template", {"data": nested(150), "to": "a"}, None),
            (
                "TypeError: store: cannot hash parameter 'data': it holds a value nested "
                "more than 100 levels deep"
            ),
        ),
        (
            ("by_template", {"data": 1, "to": "a\ud800"}, None),
            "ValueError: the key 'store:a\\ud800' is not valid Unicode text",
        ),
        (
            ("by_meta", {"data": 1, "to": "a"}, keyed_by("k\ud800")),
            "ValueError: the key 'k\\ud800' is not valid Unicode text",
        ),
    ],
    ids=["unhashable", "too-deep", "template-lone-surrogate", "meta-lone-surrogate"],
)
def test_a_call_refused_before_it_runs_says_why(
    store: Store, tmp_path: Path, call: Call, reason: str
) -> None:
    """Arguments safeact cannot hash, or a key it cannot store: an error result with the reason."""
    effects = tmp_path / "effects"

    @safe(store, name="store")
    def store_value(
        key: str, data: object, to: str, address: ipaddress.IPv4Address | None = None
    ) -> int:
        record_effect(effects, "store")
        return 1

    server = new_server()
    add_tool(server, store_value, name="by_meta")
    add_tool(server, store_value, name="by_template", key=template("store:{to}"))
    [result] = calls(server, call)
    assert result["isError"]
    assert text(result).startswith(f"{call[0]} refused this call; nothing ran. {reason}")
    assert count_effects(effects, "store") == 0
    assert store.records() == []


class Price(float):
    """A float subclass whose repr refuses."""

    def __repr__(self) -> NoReturn:
        raise RuntimeError("not for logs")


def test_a_value_whose_repr_raises_is_still_sent(store: Store, tmp_path: Path) -> None:
    """An unstorable value whose repr raises reaches the client as text; the key is in doubt."""
    effects = tmp_path / "effects"

    @safe(store, name="quote")
    def quote(key: str) -> float:
        record_effect(effects, "quote")
        return Price("nan")

    server = new_server()
    add_tool(server, quote)
    first, again = calls(server, ("quote", {}, keyed_by("k")), ("quote", {}, keyed_by("k")))
    assert not first["isError"]
    assert text(first) == "a Price (its repr raised)"
    assert again["isError"]
    assert again["structuredContent"]["reason"] == "result_not_stored"
    assert count_effects(effects, "quote") == 1


def test_an_async_tool_runs_once(store: Store, tmp_path: Path) -> None:
    """An async guarded tool is an MCP tool like a sync one: one effect, then a replay."""
    effects = tmp_path / "effects"
    send_refund = async_refunds(store, effects, name="async_refund")
    assert isinstance(send_refund, AsyncSafeTool)
    server = new_server()
    add_tool(server, send_refund)
    request: Call = ("send_refund", ARGS, keyed_by("a-1"))
    first, second = calls(server, request, request)
    assert (first["structuredContent"], first["_meta"]) == (ARGS, {REPLAYED: False})
    assert second["_meta"] == {REPLAYED: True}
    assert count_effects(effects, "refund") == 1


def test_a_sync_tool_runs_off_the_event_loop(store: Store) -> None:
    """A sync tool runs in a worker thread (FastMCP 1.x would run it on the loop, blocking it)."""
    threads: list[threading.Thread] = []

    @safe(store, name="where")
    def where(key: str) -> bool:
        threads.append(threading.current_thread())
        return True

    server = new_server()
    add_tool(server, where)
    calls(server, ("where", {}, keyed_by("w")))
    assert threads != [threading.main_thread()]
    assert len(threads) == 1


def test_positional_only_parameters_are_passed_by_position(store: Store) -> None:
    """A parameter the function takes by position only gets its argument by position."""

    @safe(store, name="div")
    def div(key: str, a: int, /, b: int = 2) -> int:
        return a // b

    server = new_server()
    add_tool(server, div)
    [result] = calls(server, ("div", {"a": 9}, keyed_by("d")))
    assert result["structuredContent"] == {"result": 4}


def test_call_tool_sends_the_key_in_meta(store: Store, tmp_path: Path) -> None:
    """call_tool(..., key=) puts the key where the server reads it; extra _meta goes along."""
    effects = tmp_path / "effects"
    server = new_server()
    add_tool(server, refunds(store, effects))

    async def session() -> list[dict[str, Any]]:
        async with connect(server) as client:
            first = await call_tool(client, "send_refund", ARGS, key="c-1", meta={"x": 1})
            second = await call_tool(client, "send_refund", ARGS, key="c-1")
            return [wire(first), wire(second)]

    first, second = anyio.run(session)
    assert (first["_meta"], second["_meta"]) == ({REPLAYED: False}, {REPLAYED: True})
    assert [record.key for record in store.records()] == ["c-1"]


def test_call_tool_keys_the_same_call_in_a_run_alike(store: Store, tmp_path: Path) -> None:
    """In a run_scope, a host's retry and a re-run send the first call's key: one refund."""
    effects = tmp_path / "effects"
    server = new_server()
    add_tool(server, refunds(store, effects))

    async def host_run() -> list[bool]:
        replayed = []
        with run_scope("run-7"):
            async with connect(server) as client:
                for _ in range(2):  # a call, then the host's retry of it
                    result = wire(await call_tool(client, "send_refund", ARGS))
                    replayed.append(result["_meta"][REPLAYED])
        return replayed

    assert anyio.run(host_run) == [False, True]
    assert anyio.run(host_run) == [True, True]  # the run, started again
    assert count_effects(effects, "refund") == 1
    with run_scope("run-7"):
        assert key_for("send_refund", ARGS) == store.records()[0].key
    assert store.records()[0].key.startswith("run-7:send_refund:")


def test_call_tool_outside_a_run_needs_a_key() -> None:
    """Without key= and outside run_scope, call_tool says what to do; nothing is sent."""
    sent: list[tuple[str, object, object]] = []

    class Recorder:
        async def call_tool(
            self, name: str, arguments: dict[str, Any] | None = None, *, meta: Any = None
        ) -> None:
            sent.append((name, arguments, meta))

    with pytest.raises(NoRunKeyError, match=r"key=\.\.\., or call it inside"):
        anyio.run(lambda: call_tool(Recorder(), "send_refund", ARGS))
    assert sent == []


def test_registration_refuses_what_it_cannot_serve(store: Store, tmp_path: Path) -> None:
    """Misuse raises at registration: wrong server, two key sources, bad names, *args."""
    tool = refunds(store, tmp_path / "e")
    server = new_server()

    @safe(store, name="star")
    def star(key: str, *amounts: int) -> int:
        return sum(amounts)

    with pytest.raises(TypeError, match="server to register on"):
        add_tool(object(), tool)  # type: ignore[arg-type] # the mistake under test
    with pytest.raises(ValueError, match="not both"):
        add_tool(server, tool, key=template("r:{to}"), key_argument="k")
    with pytest.raises(ValueError, match="is a parameter of refund"):
        add_tool(server, tool, key_argument="amount")
    with pytest.raises(ValueError, match="not a name the client can pass"):
        add_tool(server, tool, key_argument="idempotency-key")
    with pytest.raises(ValueError, match="names order_id"):
        add_tool(server, tool, key=template("r:{order_id}"))
    with pytest.raises(TypeError, match=r"takes \*amounts: MCP calls tools with named"):
        add_tool(server, star)
    assert listed(server) == {}


def test_import_safeact_does_not_import_mcp() -> None:
    """`import safeact` loads no part of the MCP SDK."""
    code = "import sys, safeact; print(sorted(m for m in sys.modules if m.startswith('mcp')))"
    out = run_python("-c", code)
    assert out.stdout.strip() == "[]", out.stderr
    assert safeact.mcp.KEY == "io.safeact/key"


def stdio_call(
    tmp_path: Path, mode: str, key: str, env: Mapping[str, str] | None = None
) -> dict[str, Any] | str:
    """Start a server process, call its refund with ``key`` in _meta: its result, or the error.

    ``env`` adds to the server's environment.
    """
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    exceptions = importlib.import_module("mcp.shared.exceptions")
    closed = exceptions.MCPError if MAJOR >= 2 else exceptions.McpError
    files = [str(tmp_path / name) for name in ("ledger.db", "effects")]
    params = StdioServerParameters(
        command=sys.executable, args=[str(CHILD), *files, mode], env={**os.environ, **(env or {})}
    )

    async def session() -> dict[str, Any] | str:
        with (tmp_path / "server.log").open("a") as errlog, anyio.fail_after(60):
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                try:
                    return wire(await call_tool(client, "refund", ARGS, key=key))
                except closed as exc:  # the server process died
                    return str(exc)

    return anyio.run(session)


def test_sigkill_inside_the_tool_then_a_retry_gets_the_receipt(tmp_path: Path) -> None:
    """Killed right after the refund, the server restarts; the same call gets the receipt, once."""
    assert stdio_call(tmp_path, "kill", "refund-1") == "Connection closed"
    retry = stdio_call(tmp_path, "serve", "refund-1")
    assert isinstance(retry, dict)
    assert retry["isError"]
    receipt = retry["structuredContent"]
    assert (receipt["state"], receipt["key"], receipt["reason"]) == (
        "in_doubt",
        "refund-1",
        DoubtReason.CRASHED.value,
    )
    assert "Do not call it again" in text(retry)
    assert count_effects(tmp_path / "effects", "refund") == 1


def test_a_retry_on_a_restarted_server_replays(tmp_path: Path) -> None:
    """A call that finished, sent again to a new server process: the replay, no second refund."""
    first = stdio_call(tmp_path, "serve", "refund-2")
    retry = stdio_call(tmp_path, "serve", "refund-2")
    assert isinstance(first, dict)
    assert isinstance(retry, dict)
    assert (first["_meta"], retry["_meta"]) == ({REPLAYED: False}, {REPLAYED: True})
    assert retry["structuredContent"] == ARGS
    assert count_effects(tmp_path / "effects", "refund") == 1


def test_a_replay_only_server_replays_and_answers_a_new_call_with_an_error(
    tmp_path: Path,
) -> None:
    """A server under SAFEACT_REPLAY_ONLY replays a recorded call; a new one is an error result."""
    from safeact._replay_only import ENVIRONMENT
    from tests.test_replay_only import snapshot

    ledger = tmp_path / "ledger.db"
    first = stdio_call(tmp_path, "serve", "refund-1")
    assert isinstance(first, dict)
    assert first["_meta"] == {REPLAYED: False}
    before = snapshot(str(ledger))
    replay = stdio_call(tmp_path, "serve", "refund-1", {ENVIRONMENT: "1"})
    assert isinstance(replay, dict)
    assert (replay["_meta"], replay["structuredContent"]) == ({REPLAYED: True}, ARGS)
    new = stdio_call(tmp_path, "serve", "refund-2", {ENVIRONMENT: "1"})
    assert isinstance(new, dict)
    assert new["isError"]
    refusal = new["structuredContent"]
    assert (refusal["state"], refusal["key"], refusal["tool"]) == (
        "replay_only",
        "refund-2",
        "refund",
    )
    assert "nothing ran" in new["content"][0]["text"]
    assert count_effects(tmp_path / "effects", "refund") == 1
    assert snapshot(str(ledger)) == before
