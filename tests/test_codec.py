"""Return types: what can be stored and rebuilt, and what is refused before anything runs."""

import dataclasses
import datetime as dt
import decimal
import enum
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from functools import partial
from typing import Any, Literal, TypedDict, TypeVar

import attrs
import pytest

from safeact import AsyncSafeTool, InDoubt, SafeTool, State, Store, StoreError, Succeeded, safe


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Line:
    sku: str
    price: decimal.Decimal


@dataclasses.dataclass(frozen=True)
class Order:
    id: uuid.UUID
    placed: dt.datetime
    lines: list[Line]
    colour: Colour | None


class Summary(TypedDict):
    total: int
    tags: list[str]


ORDER = Order(
    uuid.UUID(int=7),
    dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC),
    [Line("a", decimal.Decimal("1.10")), Line("b", decimal.Decimal("0.3"))],
    Colour.BLUE,
)

ROUND_TRIPS: list[tuple[object, object]] = [
    (Order, ORDER),
    (Summary, Summary(total=3, tags=["x"])),
    (dict[str, int], {"a": 1}),
    (list[dt.date], [dt.date(2026, 1, 1)]),
    (tuple[int, str], (1, "x")),
    (int | None, None),
    (int | str, "x"),
    (Literal["sent", "queued"], "queued"),
    (None, None),
    (float, 1.5),
    (bool, True),
]


def tool_returning(store: Store, return_type: object, value: object) -> SafeTool[[], Any]:
    """A tool annotated ``-> return_type`` that returns ``value``, whatever it is."""

    def act(key: str) -> Any:
        return value

    act.__annotations__["return"] = return_type
    return SafeTool(act, store)


@pytest.mark.parametrize(("return_type", "value"), ROUND_TRIPS)
def test_replay_rebuilds_the_annotated_type(
    store: Store, return_type: object, value: object
) -> None:
    """A stored result replays equal to the original and of the same type."""
    tool = tool_returning(store, return_type, value)
    assert tool("k") == Succeeded("k", value)
    replay = tool("k")
    assert replay == Succeeded("k", value, replayed=True)
    assert isinstance(replay, Succeeded)
    assert type(replay.value) is type(value)


class Plain:
    pass


T = TypeVar("T")


@pytest.mark.parametrize(
    ("return_type", "message"),
    [
        (Plain, "cannot store and rebuild"),
        (list[Plain], "cannot store and rebuild"),
        (Any, "too loose"),
        (object, "too loose"),
        (T, "too loose"),
        (Awaitable[int], "not something to await"),
        (Iterator[int], "not something to await"),
    ],
)
def test_unsupported_return_type_is_refused_at_decoration(
    store: Store, return_type: object, message: str
) -> None:
    """A return type that cannot be stored is a TypeError when the tool is made."""

    def act(key: str) -> Any:
        raise AssertionError

    act.__annotations__["return"] = return_type
    with pytest.raises(TypeError, match=message):
        safe(store)(act)


def test_missing_return_annotation_is_refused(store: Store) -> None:
    """A function without a return annotation cannot become a tool; the error shows the fix."""

    def act(key):  # type: ignore[no-untyped-def] # noqa: ANN001, ANN202 - the misuse under test
        return 1

    with pytest.raises(TypeError, match=r"has no return annotation.*annotate it"):
        safe(store)(act)


def test_async_function_makes_an_async_tool(store: Store) -> None:
    """safe() on an async def gives an AsyncSafeTool; SafeTool itself refuses one."""

    async def act(key: str) -> int:
        return 1

    assert isinstance(safe(store)(act), AsyncSafeTool)
    with pytest.raises(TypeError, match="is async: make it a tool with safe"):
        SafeTool(act, store)


def test_async_generator_is_refused_by_both_tools(store: Store) -> None:
    """An async generator has no one result to record: both tools say to return it instead."""

    async def stream(key: str) -> AsyncIterator[int]:
        yield 1

    for make in (safe(store), partial(SafeTool, store=store), partial(AsyncSafeTool, store=store)):
        with pytest.raises(TypeError, match=r"stream is an async generator: .* async def that"):
            make(stream)  # type: ignore[arg-type] # the misuse under test


def test_async_tool_refuses_a_plain_function(store: Store) -> None:
    """AsyncSafeTool is for ``async def``: a plain function would run before awaiting failed."""

    def act(key: str) -> int:
        return 1

    with pytest.raises(TypeError, match="act is not async: make it a tool with safe"):
        AsyncSafeTool(act, store)  # type: ignore[arg-type] # the misuse under test


@pytest.mark.parametrize("signature", ["", "*, key: str", "*keys: str"])
def test_function_without_positional_key_is_refused(store: Store, signature: str) -> None:
    """The first parameter must be positional, to receive the key."""
    namespace: dict[str, object] = {}
    exec(f"def act({signature}) -> int:\n    return 1", namespace)  # noqa: S102 - builds the signatures under test
    with pytest.raises(TypeError, match="first positional parameter"):
        safe(store)(namespace["act"])  # type: ignore[call-overload] # the misuse under test


def test_result_that_no_longer_decodes_raises_store_error_and_does_not_rerun(
    store: Store,
) -> None:
    """A stored result that does not fit a changed return type raises StoreError; nothing runs."""
    runs: list[str] = []

    @safe(store, name="act")
    def old(key: str) -> int:
        runs.append(key)
        return 1

    old("k")

    @safe(store, name="act")
    def new(key: str) -> Line:
        runs.append(key)
        return Line("x", decimal.Decimal(1))

    with pytest.raises(StoreError, match=r"cannot be rebuilt as .*Line.*not run again"):
        new("k")
    assert runs == ["k"]


def test_result_with_nan_is_not_storable(store: Store) -> None:
    """NaN is not JSON: the result is returned, the key left in doubt for a person."""

    @safe(store)
    def act(key: str) -> float:
        return float("nan")

    outcome = act("k")
    assert isinstance(outcome, Succeeded)
    record = store.get("k")
    assert record is not None
    assert record.error_message is not None
    assert "could not be stored" in record.error_message


@pytest.mark.parametrize("new_type", [None, uuid.UUID, decimal.Decimal, dt.datetime])
def test_stored_value_of_another_type_is_a_store_error(store: Store, new_type: object) -> None:
    """A stored 1 replayed as None, UUID, Decimal or datetime raises StoreError naming the key."""

    @safe(store, name="act")
    def old(key: str) -> int:
        return 1

    old("k")

    def new(key: str) -> Any:
        raise AssertionError

    new.__annotations__["return"] = new_type
    with pytest.raises(StoreError, match="for key 'k' cannot be rebuilt"):
        safe(store, name="act")(new)("k")


@attrs.frozen
class Charge:
    amount: int


@pytest.mark.parametrize(
    ("return_type", "value"),
    [(int, 9.99), (str, None), (bool, "false"), (Charge, Charge(12.75)), (list[int], [1.5])],  # type: ignore[arg-type] # the bug under test
)
def test_result_that_would_replay_differently_is_not_stored(
    store: Store, return_type: object, value: object
) -> None:
    """A value cattrs would coerce (9.99 as 9 for int) comes back unrecorded, never replayed."""
    tool = tool_returning(store, return_type, value)
    assert tool("k") == Succeeded("k", value, recorded=False)
    record = store.get("k")
    assert record is not None
    assert record.error_message is not None
    assert "would replay as" in record.error_message
    assert isinstance(tool("k"), InDoubt)


def test_infinity_is_not_storable(store: Store) -> None:
    """Infinity is not JSON either: the result is returned, the key left in doubt for a person."""
    outcome = tool_returning(store, float, float("inf"))("k")
    assert outcome == Succeeded("k", float("inf"), recorded=False)
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT


@attrs.frozen
class PricedLine(Line):
    discount: decimal.Decimal


def test_instance_of_a_subclass_replays_as_that_subclass(store: Store) -> None:
    """A tool annotated -> Line that returns a subclass replays the subclass, all its fields."""
    priced = PricedLine("a", decimal.Decimal(2), decimal.Decimal(1))
    tool = tool_returning(store, Line, priced)
    tool("k")
    replayed = tool("k")
    assert replayed == Succeeded("k", priced, replayed=True)
    assert type(replayed.unwrap()) is PricedLine


def test_why_a_result_is_not_storable_is_recorded(store: Store) -> None:
    """The in-doubt row of an unstorable result says what cattrs found wrong with it."""
    tool_returning(store, int, "x")("k")
    record = store.get("k")
    assert record is not None
    expected = (
        "the action ran but its result could not be stored: "
        "ValueError: invalid literal for int() with base 10: 'x'"
    )
    assert expected == record.error_message


MISSING_FIELDS = "required field missing @ $.sku; required field missing @ $.price"


@pytest.mark.parametrize(
    ("old_type", "stored", "new_type", "why"),
    [
        (dict[str, int], {}, Line, MISSING_FIELDS),
        (str, "x", None, "ValueError: expected null, got 'x'"),
        (int, 1, uuid.UUID, "TypeError: expected a UUID string, got 1"),
        (int, 1, decimal.Decimal, "TypeError: expected a decimal string, got 1"),
    ],
)
def test_store_error_says_why_the_stored_result_does_not_fit(
    store: Store, old_type: object, stored: object, new_type: object, why: str
) -> None:
    """The StoreError of a result that no longer fits its type says why, field by field."""
    tool_returning(store, old_type, stored)("k")
    with pytest.raises(StoreError) as caught:
        tool_returning(store, new_type, None)("k")
    fix = (
        "The action already ran and is not run again. If the tool's return type changed "
        "since the result was stored, restore it; if not, the stored result is wrong (edited "
        "by hand, or misread by a register_type from_json): correct it with safeact amend"
    )
    assert str(caught.value).endswith(f": {why}. {fix}")


def test_unresolvable_return_annotation_is_refused(store: Store) -> None:
    """A return annotation naming nothing importable is a TypeError that says how to fix it."""

    def act(key: str) -> "Missing":  # type: ignore[name-defined] # noqa: F821 - the misuse under test
        raise AssertionError

    expected = (
        r"cannot resolve its annotations \(name 'Missing' is not defined\); "
        r"make the return type importable where the function is defined$"
    )
    with pytest.raises(TypeError, match=expected):
        safe(store)(act)
