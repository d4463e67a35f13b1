"""Every return type either replays exactly or is refused when the tool is made.

Exactly: an equal value of the same type, subclasses, ``init=False`` fields, zones and
``fold`` included. Refused: a ``TypeError`` from ``safe()`` that names the part and what to
write instead (``Any`` inside, mixed mapping keys, secrets, state a model's JSON leaves out).
"""

import collections
import dataclasses
import datetime as dt
import decimal
import enum
import gc
import logging
import subprocess
import sys
import typing
import zoneinfo
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from types import NoneType
from typing import Any, Optional, cast

import attrs
import pydantic
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from safeact import InDoubt, SafeTool, StoreError, Succeeded
from safeact._codec import (
    ResultNotStorableError,
    check_return_type,
    decode,
    encode,
    register_type,
)
from safeact._exact import difference
from safeact._store import Store
from tests.test_codec import tool_returning


def refusal_of(return_type: object) -> str:
    """The TypeError a tool annotated ``-> return_type`` is refused with when it is made."""

    def act(key: str) -> Any:
        raise AssertionError

    act.__annotations__["return"] = return_type
    with pytest.raises(TypeError) as refused:
        check_return_type(act, "act")
    return str(refused.value)


def replayed(store: Store, return_type: object, value: object) -> Any:
    """What a tool annotated ``-> return_type`` that returned ``value`` replays."""
    tool = tool_returning(store, return_type, value)
    first = tool("k")
    assert isinstance(first, Succeeded)
    assert first.recorded
    again = tool("k")
    assert isinstance(again, Succeeded)
    assert again.replayed
    return again.value


class Secret(pydantic.BaseModel):
    token: pydantic.SecretStr


class Excluded(pydantic.BaseModel):
    shown: int
    hidden: int = pydantic.Field(default=0, exclude=True)


class Private(pydantic.BaseModel):
    shown: int
    _cache: int = pydantic.PrivateAttr(default=0)


class Open(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    shown: int


class Loose(pydantic.BaseModel):
    payload: dict[str, Any]


class Pair(enum.Enum):
    ORIGIN = (0, 0)


class Perm(enum.IntFlag):
    READ = 1


@pytest.mark.parametrize(
    ("return_type", "named"),
    [
        pytest.param(dict[str, Any], "Any in the result's values", id="dict-of-any"),
        pytest.param(dict, "bare dict", id="bare-dict"),
        pytest.param(list, "bare list", id="bare-list"),
        pytest.param(Optional[Any], "Any in the result", id="optional-any"),  # noqa: UP045 - the spelling users write
        pytest.param(list[tuple[int, Any]], "Any in the result's items[1]", id="any-in-a-tuple"),
        pytest.param(Loose, "Any in tests.test_exact_replay.Loose.payload", id="any-in-a-model"),
        pytest.param(dict[str | int, int], "keys typed str | int", id="mixed-keys"),
        pytest.param(dict[tuple[int, int], int], "keys typed tuple[int, int]", id="tuple-keys"),
        pytest.param(dict[Perm, int], "keys typed tests.test_exact_replay.Perm", id="flag-keys"),
        pytest.param(Pair, "member ORIGIN whose value (0, 0)", id="enum-tuple-values"),
        pytest.param(Secret, "SecretStr in tests.test_exact_replay.Secret.token", id="secret"),
        pytest.param(Excluded, "Excluded.hidden is excluded", id="excluded-field"),
        pytest.param(Private, "private attributes (_cache)", id="private-attribute"),
        pytest.param(Open, "allows extra fields", id="extra-fields"),
    ],
)
def test_a_type_that_would_not_replay_exactly_is_refused_when_the_tool_is_made(
    return_type: object, named: str
) -> None:
    """The refusal names the part of the type and says what to write instead."""
    message = refusal_of(return_type)
    assert named in message
    assert "would not replay exactly" in message


def test_a_secret_is_never_stored_as_its_mask() -> None:
    """The refusal of a SecretStr says why: the ledger would hold, and replay, the mask."""
    assert "only its mask" in refusal_of(Secret)


def test_a_generator_function_is_refused_whatever_it_is_annotated() -> None:
    """A generator function annotated -> list[int] would hand its caller a spent generator."""

    def numbers(key: str) -> Iterator[int]:
        yield 1

    numbers.__annotations__["return"] = list[int]
    with pytest.raises(TypeError, match="generator function"):
        check_return_type(numbers, "numbers")


@attrs.define
class Node:
    value: int
    children: list["Node"]


def test_a_recursive_attrs_class_replays(store: Store) -> None:
    """A class whose fields hold itself (a tree) is stored and replayed, not refused."""
    tree = Node(1, [Node(2, []), Node(3, [Node(4, [])])])
    assert replayed(store, Node, tree) == tree


@attrs.define
class Counter:
    start: int
    total: int = attrs.field(init=False, default=0)


@dataclasses.dataclass
class Tally:
    start: int
    total: int = dataclasses.field(init=False, default=0)


@pytest.mark.parametrize("kind", [Counter, Tally])
def test_a_field_set_after_init_replays_as_set(store: Store, kind: Any) -> None:
    """An init=False field comes back with the value it had, not its default."""
    counted = kind(1)
    counted.total = 41
    assert replayed(store, kind, counted).total == 41


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str


@dataclasses.dataclass(frozen=True)
class Circle(Shape):
    radius: float


def test_a_dataclass_subclass_replays_as_itself_inside_a_list(store: Store) -> None:
    """Subclass instances inside a container replay as their own class, fields and all."""
    shapes = [Shape("dot"), Circle("wheel", 2.5)]
    got = replayed(store, list[Shape], shapes)
    assert got == shapes
    assert [type(shape) for shape in got] == [Shape, Circle]


class Aliased(pydantic.BaseModel):
    first_name: str = pydantic.Field(alias="firstName")


def test_a_model_with_aliases_replays(store: Store) -> None:
    """A model whose fields have aliases is stored by alias, as it reads its JSON back."""
    person = Aliased(firstName="Ada")
    assert replayed(store, Aliased, person) == person


@pytest.mark.parametrize("number", [3, 3.0, -0.0])
def test_a_number_under_float_replays_as_it_was(store: Store, number: float) -> None:
    """``3`` under ``-> float`` replays as the int 3 (PEP 484 lets float take ints), 3.0 as 3.0."""
    got = replayed(store, float, number)
    assert (got, type(got), str(got)) == (number, type(number), str(number))


PARIS = zoneinfo.ZoneInfo("Europe/Paris")


@pytest.mark.parametrize(
    "moment",
    [
        pytest.param(dt.datetime(2026, 7, 1, 12, tzinfo=PARIS), id="zone"),
        pytest.param(dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS, fold=1), id="zone-second-2-30"),
        pytest.param(dt.datetime(2026, 10, 25, 2, 30, fold=1), id="naive-fold"),  # noqa: DTZ001 - naive on purpose
        pytest.param(
            dt.datetime(2026, 7, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=-3))), id="offset"
        ),
    ],
)
def test_a_datetime_replays_in_its_zone_and_fold(store: Store, moment: dt.datetime) -> None:
    """A zone's name and ``fold`` come back: Europe/Paris is not a fixed +02:00."""
    got = replayed(store, dt.datetime, moment)
    assert isinstance(got, dt.datetime)
    assert (got, got.tzinfo, got.fold) == (moment, moment.tzinfo, moment.fold)


def test_a_result_of_another_type_says_why_it_was_not_recorded(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``str`` from ``-> int``: Succeeded(recorded=False), and a warning that says why."""
    tool = tool_returning(store, int, "12")
    with caplog.at_level(logging.WARNING, logger="safeact"):
        outcome = tool("k")
    assert outcome == Succeeded("k", "12", recorded=False)
    assert any(
        "'12' does not fit int" in record.getMessage() and "resolve" in record.getMessage()
        for record in caplog.records
        if record.name == "safeact"
    )


def test_a_value_whose_zone_pydantic_would_drop_is_not_stored() -> None:
    """Pydantic writes a datetime by its offset: a zoned one in a model is refused, not bent."""

    class Meeting(pydantic.BaseModel):
        at: dt.datetime

    with pytest.raises(Exception, match=r"would not replay as itself: result\.at"):
        encode(Meeting(at=dt.datetime(2026, 7, 1, 12, tzinfo=PARIS)), Meeting)


# The property: a return type drawn from the whole grammar replays exactly, or is refused.

SCALARS: list[tuple[object, st.SearchStrategy[Any]]] = [
    (int, st.integers()),
    (float, st.floats(allow_nan=False, allow_infinity=False) | st.integers(-9, 9)),
    (str, st.text(max_size=5)),
    (bool, st.booleans()),
    (decimal.Decimal, st.decimals(allow_nan=False, allow_infinity=False, places=2)),
    (dt.datetime, st.datetimes(timezones=st.none() | st.just(dt.UTC) | st.timezones())),
    (Any, st.integers() | st.text(max_size=3)),
]
"""Field types and their values; ``Any`` is there to be refused."""


@st.composite
def field_kinds(draw: st.DrawFn) -> tuple[object, st.SearchStrategy[Any]]:
    annotation, values = draw(st.sampled_from(SCALARS))
    wrap = draw(st.sampled_from(["plain", "list", "dict", "mixed-dict", "optional"]))
    if wrap == "list":
        return list[annotation], st.lists(values, max_size=2)  # type: ignore[valid-type] # built at run time
    if wrap == "dict":
        return dict[str, annotation], st.dictionaries(st.text(max_size=2), values, max_size=2)  # type: ignore[valid-type] # built at run time
    if wrap == "mixed-dict":
        keys = st.text(max_size=2) | st.integers(0, 3)
        return dict[str | int, annotation], st.dictionaries(keys, values, max_size=2)  # type: ignore[valid-type] # built at run time
    if wrap == "optional":
        return Optional[annotation], st.none() | values  # noqa: UP045 - built at run time
    return annotation, values


_classes_made = iter(range(10**9))


@st.composite
def record_classes(draw: st.DrawFn) -> tuple[type[Any], st.SearchStrategy[Any]]:
    """An attrs class, dataclass or pydantic model, maybe with a subclass, and its values."""
    flavour = draw(st.sampled_from(["attrs", "dataclass", "pydantic"]))
    kinds = draw(st.lists(field_kinds(), min_size=1, max_size=3))
    names = [f"f{i}" for i in range(len(kinds))]
    late = flavour != "pydantic" and draw(st.booleans())
    slots = draw(st.booleans())  # a slotted class is a new class, the first one left behind
    excluded = flavour == "pydantic" and draw(st.booleans())
    name = f"Drawn{next(_classes_made)}"
    if flavour == "attrs":
        fields: dict[str, Any] = {
            n: attrs.field(type=cast("type", k)) for n, (k, _) in zip(names, kinds, strict=True)
        }
        if late:
            fields["late"] = attrs.field(type=int, init=False, default=0)
        base: type[Any] = attrs.make_class(name, fields, slots=slots)
        sub: type[Any] = attrs.make_class(
            f"{name}Sub", {"extra": attrs.field(type=int)}, bases=(base,), slots=slots
        )
    elif flavour == "dataclass":
        specs: list[Any] = [(n, k) for n, (k, _) in zip(names, kinds, strict=True)]
        if late:
            specs.append(("late", int, dataclasses.field(init=False, default=0)))
        base = dataclasses.make_dataclass(name, specs, slots=slots)
        sub = dataclasses.make_dataclass(f"{name}Sub", [("extra", int)], bases=(base,), slots=slots)
    else:
        model_fields: dict[str, Any] = {n: (k, ...) for n, (k, _) in zip(names, kinds, strict=True)}
        if excluded:
            model_fields["hidden"] = (int, pydantic.Field(default=0, exclude=True))
        base = pydantic.create_model(name, **model_fields)
        sub = pydantic.create_model(f"{name}Sub", __base__=base, extra=(int, ...))
    for made in (base, sub):
        made.__module__ = __name__
        globals()[made.__qualname__] = made  # a replay finds subclasses by module and name

    def instances(cls: type[Any], *extra: str) -> st.SearchStrategy[Any]:
        given = {n: v for n, (_, v) in zip(names, kinds, strict=True)}
        given.update(dict.fromkeys(extra, st.integers()))
        built = st.builds(cls, **given)
        if late:
            return st.tuples(built, st.integers()).map(lambda pair: _set_late(*pair))
        return built

    return base, instances(base) | instances(sub, "extra")


def _set_late(value: Any, late: int) -> Any:
    object.__setattr__(value, "late", late)
    return value


@settings(max_examples=300)
@given(st.data())
def test_every_return_type_replays_exactly_or_is_refused_when_made(data: st.DataObject) -> None:
    """Never a third outcome: a type accepted when the tool is made replays every value exactly."""
    cls, values = data.draw(record_classes(), label="class")
    stored: list[object] = [
        cls,
        list[cls],  # type: ignore[valid-type] # built at run time
        Optional[cls],  # noqa: UP045 - built at run time
    ]
    refused: list[object] = [
        Sequence[cls],  # type: ignore[valid-type] # built at run time
        dict[bool, cls],  # type: ignore[valid-type] # built at run time
    ]
    annotation = data.draw(
        st.sampled_from(stored) | st.sampled_from(refused),
        label="annotation",
    )

    def act(key: str) -> Any:
        raise AssertionError

    act.__annotations__["return"] = annotation
    try:
        check_return_type(act, "act")
    except TypeError:
        event("refused when made")
        return
    value = data.draw(values, label="value")
    if _pydantic_drops_zone(value):
        event("a zone in a model")
        return  # pydantic's own datetime JSON: refused per value, tested above
    event("replayed a subclass" if type(value).__name__.endswith("Sub") else "replayed")
    if typing_origin(annotation) is list:
        value = [value]
    got = decode(encode(value, annotation), annotation, key="k", tool="act")
    assert difference(value, got, opaque=lambda _: False) is None


def typing_origin(annotation: object) -> object:
    return typing.get_origin(annotation)


def _pydantic_drops_zone(value: object) -> bool:
    if not isinstance(value, pydantic.BaseModel):
        return False
    return any(
        isinstance(item, dt.datetime) and (item.fold or isinstance(item.tzinfo, zoneinfo.ZoneInfo))
        for item in _leaves(value.model_dump())
    )


def _leaves(value: object) -> Iterator[object]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple | set):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents


register_type(Money, to_json=lambda money: money.cents, from_json=Money)


def test_a_registered_type_is_compared_by_its_own_rule(store: Store) -> None:
    """A type taught with register_type has no __eq__: its JSON check is the whole check."""
    got = replayed(store, Money, Money(250))
    assert isinstance(got, Money)
    assert got.cents == 250


def test_safe_refuses_at_decoration(store: Store) -> None:
    """The refusal comes from safe() itself, before any call: the tool is never made."""

    def act(key: str) -> dict[str, Any]:
        return {}

    with pytest.raises(TypeError, match="would not replay exactly"):
        SafeTool(act, store)


class Cents:
    def __init__(self, cents: int) -> None:
        self.cents = cents


def _cents(data: Any) -> Cents:
    if not isinstance(data, int):
        raise TypeError(f"cents must be a whole number, got {data!r}")
    return Cents(data)


register_type(Cents, to_json=lambda money: money.cents, from_json=_cents)


def test_a_from_json_that_raises_is_named_and_amend_is_advised(store: Store) -> None:
    """When a registered from_json cannot read what is stored, the error says so, not 'restore'."""
    tool_returning(store, str, "twelve")("k")
    with pytest.raises(StoreError) as refused:
        tool_returning(store, Cents, None)("k")
    message = str(refused.value)
    assert "the from_json registered for tests.test_exact_replay.Cents raised TypeError" in message
    assert "correct it with safeact amend" in message


def test_a_result_edited_to_null_advises_amend(store: Store) -> None:
    """A stored null under a type that takes no None: the advice covers a wrong stored value."""
    tool_returning(store, int | None, None)("k")
    with pytest.raises(StoreError, match="if not, the stored result is wrong"):
        tool_returning(store, int, None)("k")


@pytest.mark.parametrize("number", ["NaN", "-0", "1.50"])
def test_a_decimal_replays_as_written(store: Store, number: str) -> None:
    """A Decimal NaN (never == itself), a negative zero and trailing zeros replay as they were."""
    got = replayed(store, decimal.Decimal, decimal.Decimal(number))
    assert str(got) == number


def test_a_subclass_of_a_builtin_under_its_base_is_not_stored_and_the_fix_is_named(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A defaultdict under -> dict[str, int] would replay without its factory: say to convert."""
    counts = collections.defaultdict(int, {"a": 2})
    with caplog.at_level(logging.WARNING, logger="safeact"):
        outcome = tool_returning(store, dict[str, int], counts)("k")
    assert outcome == Succeeded("k", counts, recorded=False)
    assert any("return a plain dict (dict(value))" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("return_type", "value"),
    [
        pytest.param(collections.Counter[str], collections.Counter("aab"), id="counter"),
        pytest.param(collections.OrderedDict[str, int], collections.OrderedDict(a=1), id="ordered"),
        pytest.param(tuple[int, ...], (1, 2), id="tuple"),
        pytest.param(frozenset[str], frozenset({"b", "a"}), id="frozenset"),
        pytest.param(bytes, b"\x00\xff", id="bytes"),
    ],
)
def test_containers_and_bytes_replay_as_their_own_type(
    store: Store, return_type: object, value: object
) -> None:
    """Each comes back equal and of its own type: a Counter is not a dict, a tuple not a list."""
    got = replayed(store, return_type, value)
    assert (got, type(got)) == (value, type(value))


@pytest.mark.parametrize(
    ("return_type", "named"),
    [
        pytest.param(Sequence[int], "annotate the type itself, e.g. list[int]", id="sequence"),
        pytest.param(AbstractSet[int], "e.g. set[int] or frozenset[int]", id="abstract-set"),
        pytest.param(dict[bool, int], "keys typed bool", id="bool-keys"),
        pytest.param(dict[float, int], "keys typed float", id="float-keys"),
        pytest.param(typing.NewType("Payload", dict[str, Any]), "Any in", id="new-type"),
    ],
)
def test_a_type_whose_values_come_back_as_another_type_is_refused_when_made(
    return_type: object, named: str
) -> None:
    """A list under Sequence[int] would come back a tuple; {False: 1} under bool keys True."""
    assert named in refusal_of(return_type)


T = typing.TypeVar("T")


@attrs.define
class Envelope(typing.Generic[T]):
    item: T
    meta: dict[str, Any]


@attrs.define
class Box(typing.Generic[T]):
    item: T
    opened: int = attrs.field(init=False, default=0)


@attrs.define
class LabelledBox(Box[int]):
    label: str = ""


def test_a_generic_class_is_walked_with_its_type_arguments() -> None:
    """Envelope[int]'s own fields are looked into, its T bound to int."""
    assert "Any in tests.test_exact_replay.Envelope.meta's values" in refusal_of(Envelope[int])


@pytest.mark.parametrize(
    "value", [pytest.param(Box(1), id="box"), pytest.param(LabelledBox(2, "x"), id="subclass")]
)
def test_a_generic_class_replays_its_late_fields_and_subclasses(
    store: Store, value: Box[int]
) -> None:
    """Under Box[int], an init=False field and a subclass instance come back as they were."""
    value.opened = 3
    got = replayed(store, Box[int], value)
    assert (got, type(got), got.opened) == (value, type(value), 3)


@attrs.define
class Draft:
    text: str
    sent_at: int = attrs.field(init=False)


def test_a_late_field_never_set_stays_unset(store: Store) -> None:
    """An init=False field with no default that was never set is stored and stays unset."""
    got = replayed(store, Draft, Draft("hi"))
    assert got.text == "hi"
    assert not hasattr(got, "sent_at")


def test_a_subclass_is_found_though_the_class_attrs_replaced_is_still_alive(
    store: Store,
) -> None:
    """Attrs makes a new class; the one it replaced, same name, stays listed until collected."""
    gc.disable()  # the replaced classes stay among __subclasses__, as between collections
    try:

        @attrs.frozen
        class Parcel:
            weight: int

        @attrs.frozen
        class Insured(Parcel):
            cover: int

        value = Insured(1, 100)
        got = replayed(store, Parcel, value)
    finally:
        gc.enable()
    assert (got, type(got)) == (value, Insured)


def test_a_default_factory_that_would_change_is_not_stored() -> None:
    """A defaultdict(list) under defaultdict[str, int] would replay as defaultdict(int)."""
    with pytest.raises(ResultNotStorableError, match="default_factory"):
        encode(collections.defaultdict(list), collections.defaultdict[str, int])


def test_a_named_fixed_offset_is_not_stored_as_an_unnamed_one() -> None:
    """timezone(+1h, "CET") is written by its offset: a replay would call it UTC+01:00."""
    cet = dt.timezone(dt.timedelta(hours=1), "CET")
    with pytest.raises(ResultNotStorableError, match="would replay as"):
        encode(dt.datetime(2026, 1, 1, tzinfo=cet), dt.datetime)


SCRIPT = """
import sys
import attrs
from safeact import safe

@attrs.frozen
class Parcel:
    weight: int

@attrs.frozen
class Insured(Parcel):
    cover: int

@safe(sys.argv[1], name="ship")
def ship(key: str) -> Parcel:
    print("shipped")
    return Insured(1, 100)

if __name__ == "__main__":
    outcome = ship("p-1")
    print(type(outcome.unwrap()).__name__, outcome.replayed)
"""


def test_a_scripts_subclass_replays_whether_run_as_a_file_or_a_module(tmp_path: Path) -> None:
    """Stored by ``python agent.py``, replayed by ``python -m agent``: one class name."""
    (tmp_path / "agent.py").write_text(SCRIPT)
    ledger = str(tmp_path / "agent.db")
    ran = [
        subprocess.run(
            [sys.executable, *command, ledger],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for command in (["agent.py"], ["-m", "agent"])
    ]
    assert ran == ["shipped\nInsured False\n", "Insured True\n"]


class Count(enum.IntEnum):
    ONE = 1


class Name(str):
    __slots__ = ()


@pytest.mark.parametrize(
    ("return_type", "value", "stored"),
    [
        pytest.param(int, 7, True, id="int"),
        pytest.param(str, "\ud800 \x00 é", True, id="str"),
        pytest.param(bool, False, True, id="bool"),
        pytest.param(type(None), None, True, id="none"),
        pytest.param(int, 10**5000, False, id="int-too-long-for-json"),
        pytest.param(int, True, False, id="bool-under-int"),
        pytest.param(int, Count.ONE, False, id="int-enum-under-int"),
        pytest.param(str, Name("a"), False, id="str-subclass-under-str"),
    ],
)
def test_a_plain_value_under_its_own_type_is_stored_as_itself_and_nothing_else_is(
    store: Store, return_type: type, value: object, stored: bool
) -> None:
    """The short way for int, str, bool and None keeps every refusal of the checked way.

    A value of exactly its annotated type replays as itself, of that type; a subclass, a
    bool under int, or an int json cannot write is not stored (its replay is in doubt).
    """
    tool = tool_returning(store, return_type, value)
    first = tool("k")
    assert isinstance(first, Succeeded)
    assert first.recorded is stored
    again = tool("k")
    replayed = (type(again), type(getattr(again, "value", None)), getattr(again, "value", None))
    assert replayed == ((Succeeded, return_type, value) if stored else (InDoubt, NoneType, None))
