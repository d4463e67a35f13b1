"""keyed(): a guarded tool as frameworks see tools, its key from a policy."""

import asyncio
import inspect
import typing
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from safeact import (
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    NoRunKeyError,
    Store,
    ToolCall,
    each_call,
    get_store,
    keyed,
    run_scope,
    safe,
    template,
)


@attrs.frozen
class Refund:
    to: str
    amount: int


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


PAID: list[tuple[str, int]] = []
"""What ``send_refund`` paid, in this test."""


def send_refund(key: str, to: str, amount: int = 10) -> Refund:
    """Refund ``amount`` to ``to``."""
    PAID.append((to, amount))
    return Refund(to, amount)


@pytest.fixture
def paid() -> Iterator[list[tuple[str, int]]]:
    PAID.clear()
    yield PAID
    PAID.clear()


def test_signature_hides_the_key_and_keeps_the_rest(store: Store) -> None:
    """The keyed function shows the tool's parameters without the key, and its return type."""
    plain = keyed(safe(store)(send_refund))
    assert str(inspect.signature(plain)) == "(to: str, amount: int = 10) -> tests.test_keyed.Refund"
    assert typing.get_type_hints(plain) == {"to": str, "amount": int, "return": Refund}
    assert (plain.__name__, plain.__doc__) == ("send_refund", "Refund ``amount`` to ``to``.")
    assert not inspect.iscoroutinefunction(plain)
    assert inspect.unwrap(plain) is plain


def test_keyword_calls_work_and_return_the_value(store: Store, paid: list[tuple[str, int]]) -> None:
    """A framework's keyword call runs the action and gets the value, not an Outcome."""
    plain = keyed(safe(store)(send_refund), key=template("refund:{to}"))
    assert plain(to="ada", amount=5) == Refund("ada", 5)
    assert plain(to="ada", amount=5) == Refund("ada", 5)
    assert paid == [("ada", 5)]
    record = store.get("refund:ada")
    assert record is not None


def test_template_key_conflicts_on_other_arguments(
    store: Store, paid: list[tuple[str, int]]
) -> None:
    """A business key reused with other arguments raises KeyConflictError, nothing runs."""
    plain = keyed(safe(store)(send_refund), key=template("refund:{to}"))
    plain("ada", 5)
    with pytest.raises(KeyConflictError):
        plain("ada", 6)
    assert paid == [("ada", 5)]


def test_template_naming_an_unknown_argument_is_refused(store: Store) -> None:
    """A template field the tool does not take is a ValueError when keyed() is called."""
    with pytest.raises(ValueError, match="names order_id, which it does not take"):
        keyed(safe(store)(send_refund), key=template("refund:{order_id}"))


@pytest.mark.parametrize("pattern", ["refund", "refund:{}", "refund:{0}", "refund:{to"])
def test_template_without_named_fields_is_refused(pattern: str) -> None:
    """A template must name arguments: no field, a positional field or bad braces are refused."""
    with pytest.raises(ValueError, match="key template"):
        template(pattern)


def test_template_fields_may_reach_into_an_argument(store: Store) -> None:
    """``{order.id}`` uses the argument ``order``."""
    assert template("r:{order.id}").fields == frozenset({"order"})


def test_run_scope_keys_the_same_call_in_a_run_as_one_action(
    store: Store, paid: list[tuple[str, int]]
) -> None:
    """In a run scope, an identical call and a re-run of the run key replay; another run runs."""
    plain = keyed(safe(store)(send_refund))
    with run_scope("run-1"):
        plain("ada", 5)
        plain("ada", 5)
        plain("ada", 6)
    with run_scope("run-1"):
        plain("ada", 5)
    assert paid == [("ada", 5), ("ada", 6)]
    with run_scope("run-2"):
        plain("ada", 5)
    assert len(paid) == 3


def test_each_call_counts_identical_calls_in_a_run(
    store: Store, paid: list[tuple[str, int]]
) -> None:
    """Keyed by each_call, the n-th identical call is its own action; a re-run replays them."""
    plain = keyed(safe(store)(send_refund), key=each_call)
    with run_scope("run-1"):
        plain("ada", 5)
        plain("ada", 5)
    with run_scope("run-1"):
        plain("ada", 5)
        plain("ada", 5)
        plain("ada", 5)
    assert paid == [("ada", 5)] * 3
    assert sorted(r.key.rsplit(":", 1)[1] for r in store.records()) == ["0", "1", "2"]


def test_a_parameter_added_with_a_default_keeps_the_run_key(store: Store) -> None:
    """A deploy that adds ``memo: str = ""`` between a crash and the re-run finds the same key."""
    paid: list[str] = []

    @safe(store, name="refund")
    def refund_v1(key: str, to: str) -> str:
        paid.append(to)
        return "ok"

    @safe(store, name="refund")
    def refund_v2(key: str, to: str, memo: str = "") -> str:
        paid.append(f"{to}:{memo}")
        return "ok"

    with run_scope("run-1"):
        keyed(refund_v1)("ada")
    with run_scope("run-1"):
        keyed(refund_v2)("ada")
    assert paid == ["ada"]


def test_keyed_outside_a_run_scope_is_refused(store: Store, paid: list[tuple[str, int]]) -> None:
    """Without run_scope or a policy there is no key: NoRunKeyError, nothing runs."""
    with pytest.raises(NoRunKeyError, match="run_scope"):
        keyed(safe(store)(send_refund))("ada", 5)
    assert paid == []


def test_policy_sees_the_bound_arguments_and_the_digest(store: Store) -> None:
    """A custom policy gets the tool name, arguments with defaults, and the ledger's digest."""
    seen: list[ToolCall] = []

    def policy(call: ToolCall) -> str:
        seen.append(call)
        return "k"

    tool = safe(store)(send_refund)
    keyed(tool, key=policy)("ada")
    (call,) = seen
    assert (call.tool, dict(call.arguments)) == (tool.name, {"to": "ada", "amount": 10})
    record = store.get("k")
    assert record is not None
    assert call.digest == record.args_hash


def test_a_policy_returning_no_key_is_refused(store: Store, paid: list[tuple[str, int]]) -> None:
    """A policy that returns an empty key raises ValueError before anything runs."""
    with pytest.raises(ValueError, match="non-empty"):
        keyed(safe(store)(send_refund), key=lambda _: "")("ada")
    assert paid == []


def test_failure_and_doubt_raise(store: Store) -> None:
    """A failed action raises FailedCallError; a key in doubt raises InDoubtError."""

    @safe(store)
    def flaky(key: str, n: int) -> int:
        if n == 1:
            raise RuntimeError("bank down")
        raise KeyboardInterrupt

    plain = keyed(flaky, key=template("f:{n}"))
    with pytest.raises(FailedCallError, match="bank down"):
        plain(1)
    with pytest.raises(KeyboardInterrupt):
        plain(2)
    with pytest.raises(InDoubtError) as doubt:
        plain(2)
    record = store.get("f:2")
    assert record is not None
    assert (doubt.value.key, doubt.value.attempt_id) == ("f:2", record.attempt_id)


def test_async_tool_stays_a_coroutine_function(store: Store) -> None:
    """An async tool becomes a coroutine function with the same honest signature."""
    paid: list[int] = []

    @safe(store)
    async def charge(key: str, amount: int) -> int:
        paid.append(amount)
        return amount

    plain = keyed(charge, key=template("c:{amount}"))
    assert inspect.iscoroutinefunction(plain)
    assert str(inspect.signature(plain)) == "(amount: int) -> int"

    async def twice() -> list[int]:
        return [await plain(3), await plain(amount=3)]

    assert asyncio.run(twice()) == [3, 3]
    assert paid == [3]


def test_keyed_refuses_a_plain_function() -> None:
    """keyed() needs a guarded tool: a plain function is a TypeError that says to guard it."""

    def plain(key: str) -> int:
        return 1

    with pytest.raises(TypeError, match="@safe"):
        keyed(plain)  # type: ignore[call-overload] # the misuse under test
