"""After the action has run, the call returns an Outcome whatever goes wrong while recording it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any, NoReturn

import attrs
import pytest

from safeact import DoubtReason, Failed, InDoubt, State, Store, Succeeded, safe
from safeact._codec import ResultNotStorableError, encode
from safeact._tool import AsyncSafeTool, SafeTool


@dataclasses.dataclass
class Receipt:
    to: str
    amount: int


@attrs.frozen
class Invoice:
    to: str
    amount: int


@dataclasses.dataclass
class Secret:
    """A result whose repr refuses, and whose amount would replay as another number."""

    amount: int

    def __repr__(self) -> NoReturn:
        raise RuntimeError("not for logs")


class Digits(str):
    """A str subclass whose repr and str refuse."""

    __slots__ = ()

    def __repr__(self) -> NoReturn:
        raise RuntimeError("not for logs")

    __str__ = __repr__


class Price(float):
    """A float subclass whose repr refuses."""

    def __repr__(self) -> NoReturn:
        raise RuntimeError("not for logs")


class Unprintable(Exception):  # noqa: N818 - named for what it does in the tests
    """An exception whose str refuses."""

    def __str__(self) -> NoReturn:
        raise RuntimeError("not for logs")


class Refusing(list[int]):
    """A list that raises an unprintable exception when read."""

    def __iter__(self) -> Iterator[int]:
        raise Unprintable


@attrs.frozen
class Tree:
    children: list[Tree]


def nested(depth: int) -> Tree:
    """Return a tree ``depth`` deep, too deep to encode without recursing past the limit."""
    value = Tree([])
    for _ in range(depth):
        value = Tree([value])
    return value


UNSTORABLE = [
    pytest.param(int, 10**5000, id="int-too-long-for-str"),
    pytest.param(Tree, nested(100_000), id="tree-nested-100k-deep"),
    pytest.param(Receipt, Receipt.__new__(Receipt), id="dataclass-without-attributes"),
    pytest.param(Invoice, Invoice.__new__(Invoice), id="attrs-without-attributes"),
    pytest.param(int, Price(9.5), id="float-with-broken-repr-as-int"),
    pytest.param(int, Digits("9"), id="str-with-broken-repr-as-int"),
    pytest.param(Secret, Secret(9.5), id="dataclass-with-broken-repr"),  # type: ignore[arg-type] # the bug under test
    pytest.param(list[int], Refusing([1]), id="unprintable-exception-while-encoding"),
]


def counted(store: Store, return_type: object, value: object, runs: list[str]) -> SafeTool[[], Any]:
    """A tool ``act``, annotated ``-> return_type``, that counts its runs and returns ``value``."""

    def act(key: str) -> Any:
        runs.append(key)
        return value

    act.__annotations__["return"] = return_type
    tool: SafeTool[[], Any] = safe(store, name="act")(act)
    return tool


def counted_async(
    store: Store, return_type: object, value: object, runs: list[str]
) -> AsyncSafeTool[[], Any]:
    """The async twin of ``counted``."""

    async def act(key: str) -> Any:
        runs.append(key)
        await asyncio.sleep(0)
        return value

    act.__annotations__["return"] = return_type
    return safe(store, name="act")(act)


@pytest.mark.parametrize(("return_type", "value"), UNSTORABLE)
def test_an_unstorable_result_is_returned_live_and_unrecorded(
    store: Store, return_type: object, value: object
) -> None:
    """The action runs once and its very value comes back as Succeeded(recorded=False)."""
    runs: list[str] = []
    outcome = counted(store, return_type, value, runs)("k")
    assert isinstance(outcome, Succeeded)
    assert (outcome.key, outcome.recorded, outcome.replayed) == ("k", False, False)
    assert outcome.value is value
    assert runs == ["k"]


@pytest.mark.parametrize(("return_type", "value"), UNSTORABLE)
def test_an_unstorable_result_leaves_the_key_in_doubt(
    store: Store, return_type: object, value: object
) -> None:
    """The key is left IN_DOUBT because its result was not stored, with a reason naming a type."""
    counted(store, return_type, value, [])("k")
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.RESULT_NOT_STORED)
    assert record.error_type == "safeact.ResultNotStorable"
    assert "the action ran but its result could not be stored" in (record.error_message or "")


@pytest.mark.parametrize(("return_type", "value"), UNSTORABLE)
def test_a_second_call_after_an_unstorable_result_is_in_doubt(
    store: Store, return_type: object, value: object
) -> None:
    """Calling again with the key returns InDoubt and does not run the action again."""
    runs: list[str] = []
    tool = counted(store, return_type, value, runs)
    tool("k")
    record = store.get("k")
    assert record is not None
    assert tool("k") == InDoubt(
        "k",
        "act",
        record.attempted_at,
        record.args_hash,
        DoubtReason.RESULT_NOT_STORED,
        attempt_id=record.attempt_id,
    )
    assert runs == ["k"]


def test_a_mismatch_message_names_types_when_repr_refuses(store: Store) -> None:
    """A result that would replay differently is explained by type names when its repr raises."""
    counted(store, int, Price(9.5), [])("k")
    record = store.get("k")
    assert record is not None
    expected = "a Price does not fit int: it would replay as 9"
    assert expected in (record.error_message or "")


def test_an_unstorable_result_of_an_async_tool_is_returned_live(store: Store) -> None:
    """An async tool's unstorable result comes back unrecorded, the key in doubt, run once."""
    runs: list[str] = []
    value = Receipt.__new__(Receipt)
    tool = counted_async(store, Receipt, value, runs)
    outcome = asyncio.run(tool("k"))
    assert isinstance(outcome, Succeeded)
    assert (outcome.value is value, outcome.recorded) == (True, False)
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.RESULT_NOT_STORED)
    assert isinstance(asyncio.run(tool("k")), InDoubt)
    assert runs == ["k"]


def test_a_storable_str_subclass_with_a_broken_repr_is_recorded(store: Store) -> None:
    """A str subclass is stored as its text and replays as itself, whatever its repr does."""
    runs: list[str] = []
    tool = counted(store, Digits, Digits("9"), runs)
    assert tool("k") == Succeeded("k", "9")
    replayed = tool("k")
    assert replayed == Succeeded("k", "9", replayed=True)
    assert type(replayed.unwrap()) is Digits
    assert runs == ["k"]


def test_a_str_subclass_under_str_is_not_stored_whatever_its_repr_does(store: Store) -> None:
    """Under ``-> str`` it would replay as a plain str: not stored, and saying so needs no repr."""
    runs: list[str] = []
    tool = counted(store, str, Digits("9"), runs)
    assert tool("k") == Succeeded("k", "9", recorded=False)
    assert isinstance(tool("k"), InDoubt)
    assert runs == ["k"]


def test_an_exception_with_a_broken_str_is_recorded_as_failed(store: Store) -> None:
    """An action raising an exception whose str raises gets a recorded Failed naming its type."""

    @safe(store, name="act")
    def act(key: str) -> int:
        raise Unprintable

    message = "<str() of the exception raised RuntimeError>"
    outcome = act("k")
    assert outcome == Failed("k", "act", f"{__name__}.Unprintable", message)
    assert act("k") == Failed("k", "act", f"{__name__}.Unprintable", message, replayed=True)


def test_an_exception_with_odd_args_is_recorded_as_failed(store: Store) -> None:
    """An exception whose args are not text is recorded with str() of them."""

    @safe(store, name="act")
    def act(key: str) -> int:
        raise ValueError(b"\xff", None, 7)

    message = "(b'\\xff', None, 7)"
    assert act("k") == Failed("k", "act", "ValueError", message)
    assert act("k") == Failed("k", "act", "ValueError", message, replayed=True)


def test_an_exception_whose_message_holds_nul_is_recorded_as_failed(store: Store) -> None:
    """A NUL in an exception's message is escaped, so PostgreSQL records the failure too."""

    @safe(store, name="act")
    def act(key: str) -> int:
        raise ValueError("card\x00declined")

    assert act("k") == Failed("k", "act", "ValueError", "card\\x00declined")
    record = store.get("k")
    assert record is not None
    assert record.state is State.FAILED


def test_a_long_result_is_cut_short_in_the_mismatch_message(store: Store) -> None:
    """The reason quotes at most 200 characters of a result's repr."""
    counted(store, list[int], [1.5] * 1000, [])("k")
    record = store.get("k")
    assert record is not None
    assert f"{[1.5] * 1000!r}"[:197] + "... does not fit" in (record.error_message or "")


@pytest.mark.parametrize("digits", [198, 199])
def test_a_repr_of_200_characters_is_quoted_whole_and_a_longer_one_cut_to_200(
    digits: int,
) -> None:
    """The limit itself: a repr of 200 characters is kept, one of 201 cut to 197 and '...'."""
    value = "1" * digits  # its repr is digits + 2 characters long
    shown = repr(value) if digits + 2 <= 200 else repr(value)[:197] + "..."
    with pytest.raises(ResultNotStorableError) as raised:
        encode(value, int)
    assert str(raised.value) == f"{shown} does not fit int: it would replay as {value}"
