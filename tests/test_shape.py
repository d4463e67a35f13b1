"""A tool's results described as JSON (``shape_of``), and operators' values checked by it.

The description is what the command line checks an operator's result against without
importing the tool, so it must say exactly what the codec writes: every value the codec
stores fits it (a Hypothesis property), and what does not fit says where and why.
"""

import dataclasses
import datetime as dt
import decimal
import enum
import json
import typing
import uuid
from types import NoneType
from typing import Annotated, Any, Literal, NamedTuple, NotRequired, Optional, TypedDict

import attrs
import pydantic
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from safeact import register_type
from safeact._codec import ResultNotStorableError, encode
from safeact._protocol import JSON
from safeact._shape import Fit, check, problems, shape_of, shape_text

T = typing.TypeVar("T")


@attrs.frozen
class Item:
    sku: str
    amount: decimal.Decimal


@attrs.frozen
class Order:
    items: list[Item]
    when: dt.datetime
    tags: frozenset[str]
    note: str | None = None


@attrs.frozen
class Tree:
    label: str
    children: "list[Tree]"


@attrs.frozen
class Box(typing.Generic[T]):
    content: T


@attrs.define
class Counted:
    name: str
    seen: int = attrs.field(init=False, default=0)
    last: str = attrs.field(init=False)


@attrs.frozen
class Checked:
    amount: int = attrs.field(validator=attrs.validators.gt(0))


@attrs.frozen
class SpecialOrder(Order):
    rush: bool = False


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str = dataclasses.field(init=False, default="")


class Color(enum.Enum):
    RED = "red"
    TWO = 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Delivery(TypedDict):
    to: str
    note: NotRequired[str]


class Pair(NamedTuple):
    left: int
    right: str


class Refund(pydantic.BaseModel):
    to: str
    amount: int = pydantic.Field(gt=0)
    reference: str = pydantic.Field(alias="ref")
    secret: str = pydantic.Field(default="", exclude=True)
    at: dt.datetime

    @pydantic.computed_field  # type: ignore[prop-decorator] # pydantic's documented form
    @property
    def cents(self) -> int:
        return self.amount * 100


class Open(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    name: str


class Judged(pydantic.BaseModel):
    code: str
    shown: int

    @pydantic.field_validator("code")
    @classmethod
    def known(cls, value: str) -> str:
        return value

    @pydantic.field_serializer("shown")
    def as_text(self, value: int) -> str:
        return str(value)


class Cents:
    """A type stored by its own register_type rule: its JSON is the tool's code's to judge."""

    def __init__(self, value: int) -> None:
        self.value = value


register_type(Cents, to_json=lambda cents: cents.value, from_json=Cents)


STR = {"type": "str"}
INT = {"type": "int"}


def member(shape: object, *, required: bool = True) -> dict[str, object]:
    return {"shape": shape, "required": required}


SHAPES: dict[str, tuple[object, object]] = {
    "None": (None, {"type": "null"}),
    "NoneType": (NoneType, {"type": "null"}),
    "bool": (bool, {"type": "bool"}),
    "int": (int, INT),
    "float": (float, {"type": "number"}),
    "str": (str, STR),
    "bytes": (bytes, {"type": "str", "format": "bytes"}),
    "datetime": (dt.datetime, {"type": "str", "format": "datetime"}),
    "date": (dt.date, {"type": "str", "format": "date"}),
    "UUID": (uuid.UUID, {"type": "str", "format": "uuid"}),
    "Decimal": (decimal.Decimal, {"type": "str", "format": "decimal"}),
    "list": (list[int], {"type": "array", "items": INT}),
    "tuple of any length": (tuple[str, ...], {"type": "array", "items": STR}),
    "fixed tuple": (tuple[int, str], {"type": "tuple", "items": [INT, STR]}),
    "NamedTuple": (Pair, {"type": "tuple", "items": [INT, STR]}),
    "set": (set[int], {"type": "set", "items": INT}),
    "frozenset": (frozenset[str], {"type": "set", "items": STR}),
    "Sequence": (typing.Sequence[int], {"type": "array", "items": INT}),
    "dict": (dict[str, int], {"type": "dict", "keys": STR, "values": INT}),
    "dict with int keys": (
        dict[int, str],
        {"type": "dict", "keys": {"type": "str", "format": "int"}, "values": STR},
    ),
    "Optional": (Optional[int], {"type": "union", "of": [INT, {"type": "null"}]}),  # noqa: UP045 - the spelling under test
    "union": (int | str, {"type": "union", "of": [INT, STR]}),
    "Literal": (Literal["a", 1, None], {"type": "literal", "values": ["a", 1, None]}),  # noqa: PYI061 - None among the values
    "enum": (Color, {"type": "enum", "name": "Color", "values": ["red", 2]}),
    "IntEnum": (Level, {"type": "enum", "name": "Level", "values": [1, 2]}),
    "Annotated": (Annotated[int, "meta"], INT),
    "NewType": (typing.NewType("OrderId", str), STR),
    "TypedDict": (
        Delivery,
        {
            "type": "object",
            "name": "Delivery",
            "fields": {"to": member(STR), "note": member(STR, required=False)},
            "extra": False,
        },
    ),
    "attrs class": (
        Item,
        {
            "type": "object",
            "name": "Item",
            "fields": {"sku": member(STR), "amount": member({"type": "str", "format": "decimal"})},
            "extra": False,
            "tag": "safeact:class",
        },
    ),
    "generic attrs class": (
        Box[int],
        {
            "type": "object",
            "name": "Box",
            "fields": {"content": member(INT)},
            "extra": False,
            "tag": "safeact:class",
        },
    ),
    "recursive attrs class": (
        Tree,
        {
            "type": "object",
            "name": "Tree",
            "fields": {
                "label": member(STR),
                "children": member({"type": "array", "items": {"type": "ref", "name": "Tree"}}),
            },
            "extra": False,
            "tag": "safeact:class",
        },
    ),
    "init=False field": (
        Counted,
        {
            "type": "object",
            "name": "Counted",
            "fields": {
                "name": member(STR),
                "seen": member(INT),
                "last": member(STR, required=False),
            },
            "extra": False,
            "tag": "safeact:class",
        },
    ),
    "dataclass": (
        Point,
        {
            "type": "object",
            "name": "Point",
            "fields": {
                "x": member({"type": "number"}),
                "y": member({"type": "number"}),
                "label": member(STR),
            },
            "extra": False,
            "tag": "safeact:class",
        },
    ),
    "register_type": (
        Cents,
        {
            "type": "unchecked",
            "why": "Cents is stored by the register_type functions of Cents (the tool's code)",
        },
    ),
    "a class safeact does not know": (
        complex,
        {"type": "unchecked", "why": "safeact does not know how complex is stored"},
    ),
}


@pytest.mark.parametrize(("annotation", "expected"), SHAPES.values(), ids=SHAPES)
def test_each_kind_of_return_type_has_its_shape(annotation: object, expected: object) -> None:
    """shape_of describes each supported kind of return type as the grammar says."""
    assert shape_of(annotation) == expected


def test_a_pydantic_model_is_described_as_the_codec_dumps_it() -> None:
    """Aliases, excluded and computed fields, validators and pydantic's datetimes, as written."""
    assert shape_of(Refund) == {
        "type": "object",
        "name": "Refund",
        "fields": {
            "to": member(STR),
            "amount": member(
                {**INT, "unverified": "not run: the constraint Gt(gt=0) of Refund.amount"}
            ),
            "ref": member(STR),
            "at": member({"type": "str", "format": "datetime", "dialect": "pydantic"}),
            "cents": member(
                {**INT, "unverified": "not compared: Refund.cents, computed by the tool's code"}
            ),
        },
        "extra": False,
        "tag": "safeact:class",
    }


def test_pydantic_validators_and_serializers_are_reported_not_checked() -> None:
    """A field's validator leaves its shape checked; a serializer leaves the field unchecked."""
    shape = shape_of(Judged)
    assert check(shape, {"code": "x", "shown": "7"}) == Fit(
        unchecked=(
            "$.code: not run: the validator known of Judged.code",
            "$.shown: Judged.shown is written by its serializer as_text",
        )
    )
    assert problems(shape, {"code": 1, "shown": "7"}) == ["$.code: expected a string, got 1"]


def test_an_attrs_validator_is_reported_not_run() -> None:
    """A field with a validator is checked for its shape, and its validator said not run."""
    assert check(shape_of(Checked), {"amount": 0}) == Fit(
        unchecked=(
            "$.amount: not run: the validator or converter of Checked.amount (the tool's code)",
        )
    )


def test_extra_members_fit_a_model_that_allows_them() -> None:
    """A pydantic model with extra="allow" keeps undeclared members: they fit."""
    assert problems(shape_of(Open), {"name": "a", "colour": "red"}) == []
    assert problems(shape_of(Item), {"sku": "a", "amount": "1", "colour": "red"}) == [
        "$.colour: not a member of Item (its members: sku, amount)"
    ]


SAME_ITEM = (
    "$[1]: the same item as $[0] in a set (true is 1 there, and 1 is 1.0): a set holds each "
    "item once"
)

MISFITS: dict[str, tuple[object, JSON, list[str]]] = {
    "a string for a number": (float, "12", ['$: expected a number, got "12"']),
    "a bool for an int": (int, True, ["$: expected an integer, got true"]),
    "a fraction for an int": (int, 9.5, ["$: expected an integer, got 9.5"]),
    "a number for a string": (str, 5, ["$: expected a string, got 5"]),
    "null for a bool": (bool, None, ["$: expected true or false, got null"]),
    "a datetime as Z": (
        dt.datetime,
        "2026-01-31T12:00:00Z",
        [
            (
                "$: expected a date and time as safeact stores it (ISO 8601, "
                '"2026-01-31T12:00:00+00:00"), got "2026-01-31T12:00:00Z"'
            )
        ],
    ),
    "an upper-case UUID": (
        uuid.UUID,
        "123E4567-E89B-12D3-A456-426614174000",
        [
            (
                "$: expected a UUID as safeact stores it (lower case, "
                '"123e4567-e89b-12d3-a456-426614174000"), got '
                '"123E4567-E89B-12D3-A456-426614174000"'
            )
        ],
    ),
    "a number for a Decimal": (
        decimal.Decimal,
        12.5,
        ['$: expected a decimal number as a string ("12.50"), got 12.5'],
    ),
    "a date that is no date": (
        dt.date,
        "2026-02-30",
        ['$: expected a date as safeact stores it ("2026-01-31"), got "2026-02-30"'],
    ),
    "a wrong item": (list[int], [1, "2", 3], ['$[1]: expected an integer, got "2"']),
    "a short fixed tuple": (tuple[int, str], [1], ["$: expected an array of 2 items, got 1"]),
    "an unsorted set": (
        set[int],
        [2, 1],
        [
            (
                "$[0]: after $[1]: a set is stored sorted (false, true, numbers, strings, then "
                "the rest by their JSON), each item once"
            )
        ],
    ),
    "true and 1 in one set": (
        set[bool | int],
        [True, 1],
        [SAME_ITEM],
    ),
    "a repeated set item": (
        frozenset[str],
        ["a", "a"],
        [SAME_ITEM],
    ),
    "a key that is not an int": (
        dict[int, str],
        {"01": "a"},
        ['$["01"] (its name): expected an integer written as a string ("42"), got "01"'],
    ),
    "a value not of the enum": (Color, "blue", ['$: expected one of "red", 2 (Color), got "blue"']),
    "a value not of the literal": (
        Literal["a", 1],
        "b",
        ['$: expected one of "a", 1, got "b"'],
    ),
    "no member of a union": (
        int | None,
        "x",
        ['$: expected an integer or null, got "x"'],
    ),
    "a float in a union of scalars": (
        int | str,
        9.0,
        ["$: expected an integer or a string, got 9.0"],
    ),
    "nested misfits, each with its path": (
        Order,
        {
            "items": [{"sku": "a", "amount": "1.50"}, {"sku": 7, "amount": 12}],
            "when": "2026-01-31T12:00:00+00:00",
            "tags": ["a"],
            "note": None,
            "colour": "red",
        },
        [
            "$.items[1].sku: expected a string, got 7",
            '$.items[1].amount: expected a decimal number as a string ("12.50"), got 12',
            "$.colour: not a member of Order (its members: items, when, tags, note)",
        ],
    ),
    "an init=False field with a default, left out (it is always set)": (
        Counted,
        {"name": "a"},
        ["$.seen: missing (Counted always has it)"],
    ),
    "a missing member": (
        Item,
        {"sku": "a"},
        ["$.amount: missing (Item always has it)"],
    ),
    "a defaulted member left out (the codec writes every field)": (
        Order,
        {"items": [], "when": "2026-01-31T12:00:00+00:00", "tags": []},
        ["$.note: missing (Order always has it)"],
    ),
    "inside an Optional object": (
        Item | None,
        {"sku": "a", "amount": 1},
        ['$.amount: expected a decimal number as a string ("12.50"), got 1'],
    ),
    "deep in a recursive type": (
        Tree,
        {"label": "a", "children": [{"label": "b", "children": [{"label": 3, "children": []}]}]},
        ["$.children[0].children[0].label: expected a string, got 3"],
    ),
    "a member with an odd name": (
        dict[str, int],
        {"a b": "1"},
        ['$["a b"]: expected an integer, got "1"'],
    ),
    "pydantic's alias, not the field's name": (
        Refund,
        {"to": "bob", "amount": 5, "reference": "r", "at": "2026-01-31T12:00:00Z", "cents": 500},
        [
            "$.ref: missing (Refund always has it)",
            "$.reference: not a member of Refund (its members: to, amount, ref, at, cents)",
        ],
    ),
    "pydantic's datetime with +00:00": (
        Refund,
        {"to": "bob", "amount": 5, "ref": "r", "at": "2026-01-31T12:00:00+00:00", "cents": 500},
        [
            (
                "$.at: expected a date and time as pydantic writes it (ISO 8601, "
                '"2026-01-31T12:00:00Z" for UTC), got "2026-01-31T12:00:00+00:00"'
            )
        ],
    ),
    "a subclass's name that is not a string": (
        Order,
        {"safeact:class": 5},
        ['$["safeact:class"]: expected the name of a subclass of Order, got 5'],
    ),
}


@pytest.mark.parametrize(("annotation", "value", "expected"), MISFITS.values(), ids=MISFITS)
def test_a_value_that_does_not_fit_is_described_by_path(
    annotation: object, value: JSON, expected: list[str]
) -> None:
    """problems() names each misfit by its path, with what was expected and what was given."""
    assert problems(shape_of(annotation), value) == expected


@pytest.mark.parametrize(("annotation", "value", "expected"), MISFITS.values(), ids=MISFITS)
def test_the_codec_refuses_every_value_the_shape_refuses(
    annotation: object, value: JSON, expected: list[str]
) -> None:
    """Each misfit above is one the codec would not replay: refusing it loses nothing."""
    from safeact import StoreError
    from safeact._codec import decode

    assert expected
    with pytest.raises(StoreError):
        decode(value, annotation, key="k", tool="t")


FITS: dict[str, tuple[object, JSON]] = {
    "9.0 for an int (it replays as 9)": (int, 9.0),
    "an int for a float": (float, 3),
    "the codec's datetime": (dt.datetime, "2026-01-31T12:00:00+00:00"),
    "a datetime in a named zone": (dt.datetime, "2026-01-31T12:00:00+01:00[Europe/Paris]"),
    "pydantic's datetime": (
        Refund,
        {"to": "bob", "amount": 5, "ref": "r", "at": "2026-01-31T12:00:00Z", "cents": 500},
    ),
    "an init=False field never set, left out": (Counted, {"name": "a", "seen": 0}),
    "an init=False field set": (Counted, {"name": "a", "seen": 3, "last": "b"}),
    "an optional TypedDict key left out": (Delivery, {"to": "bob"}),
    "a sorted set of mixed kinds": (set[bool | int | str], [False, True, 2, "a", "b"]),
    "a number equal to an enum's": (Color, 2.0),
    "any JSON where the type says Any": (dict[str, Any], {"a": [1, {"b": None}]}),
}


@pytest.mark.parametrize(("annotation", "value"), FITS.values(), ids=FITS)
def test_a_value_that_fits_has_no_problems(annotation: object, value: JSON) -> None:
    """A value the codec replays exactly, written as the codec writes it, fits."""
    assert problems(shape_of(annotation), value) == []


@pytest.mark.parametrize(("annotation", "value"), FITS.values(), ids=FITS)
def test_the_codec_replays_every_value_that_fits_above(annotation: object, value: JSON) -> None:
    """Each fitting value above is one the codec rebuilds and writes back the same."""
    from safeact._codec import decode

    decode(value, annotation, key="k", tool="t")


def test_a_subclass_instance_is_checked_up_to_its_name() -> None:
    """A value stored as a subclass (named by safeact:class) fits; its members are not checked."""
    value = encode(
        SpecialOrder([], dt.datetime(2026, 1, 31, tzinfo=dt.UTC), frozenset(), rush=True), Order
    )
    assert isinstance(value, dict)
    assert value["safeact:class"] == "tests.test_shape:SpecialOrder"
    assert check(shape_of(Order), value) == Fit(
        unchecked=(
            "$: the members of tests.test_shape:SpecialOrder, stored as a subclass of Order",
        )
    )


def test_a_register_type_part_is_reported_unchecked_once_per_array() -> None:
    """What register_type stores is the tool's code's: not checked, said once for all items."""
    assert check(shape_of(list[Cents]), [1, "x", None]) == Fit(
        unchecked=(
            "$[*]: Cents is stored by the register_type functions of Cents (the tool's code)",
        )
    )


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        ({"type": "hologram"}, '$: described by a newer safeact ("hologram")'),
        ("not a node", "$: the recorded description cannot be read"),
        ({"type": "object"}, "$: the recorded description cannot be read"),
    ],
    ids=["a newer node", "not a node", "a node without its parts"],
)
def test_a_description_that_cannot_be_read_checks_nothing_and_says_so(
    shape: object, why: str
) -> None:
    """An unknown node (a newer safeact's) or a broken description leaves the value unchecked."""
    fit = check(shape, {"a": 1})  # type: ignore[arg-type] # what a ledger may hold
    assert fit.problems == ()
    (said,) = fit.unchecked
    assert said.startswith(why)


def test_the_shape_text_is_canonical() -> None:
    """The same type gives the same text, so an unchanged description is never written again."""
    assert shape_text(Order) == shape_text(Order)
    assert json.loads(shape_text(Order)) == shape_of(Order)
    assert " " not in shape_text(dict[str, int])


def test_shape_of_never_raises() -> None:
    """A type whose introspection fails becomes an unchecked node, not an error at the claim."""

    class Broken:
        __origin__ = property(lambda _: 1 / 0)

    shape = shape_of(Broken)
    assert isinstance(shape, dict)
    assert shape["type"] == "unchecked"


# The property: every value the codec stores fits the description of its type.

LEAVES: list[tuple[object, st.SearchStrategy[Any]]] = [
    (int, st.integers()),
    (float, st.floats(allow_nan=False, allow_infinity=False)),
    (str, st.text()),
    (bool, st.booleans()),
    (NoneType, st.none()),
    (bytes, st.binary(max_size=20)),
    (dt.date, st.dates()),
    (dt.datetime, st.datetimes(timezones=st.none() | st.just(dt.UTC) | st.timezones())),
    (uuid.UUID, st.uuids()),
    (decimal.Decimal, st.decimals(allow_nan=False, allow_infinity=False)),
    (Color, st.sampled_from(Color)),
    (Level, st.sampled_from(Level)),
    (Literal["a", 1, None], st.sampled_from(["a", 1, None])),  # noqa: PYI061 - None among them
]
MIXED: tuple[object, st.SearchStrategy[Any]] = (
    bool | int | str,
    st.booleans() | st.integers() | st.text(max_size=2),
)
"""Items of every kind a set orders: false and true, then numbers, then strings."""
HASHABLE = [0, 2, 3, 4, 6, 8]  # int, str, bool, bytes, dates, UUIDs: LEAVES that sets may hold
PYDANTIC_LEAVES = [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]  # no bytes (pydantic writes them as UTF-8)

Drawn = tuple[object, st.SearchStrategy[Any]]


def pydantic_datetimes() -> st.SearchStrategy[dt.datetime]:
    """Datetimes that pydantic rebuilds in their own zone: naive, UTC or a fixed offset."""
    offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))
    return st.datetimes(timezones=st.none() | st.just(dt.UTC) | offsets)


@st.composite
def types_and_values(  # noqa: C901, PLR0911, PLR0912 - one arm per kind of type
    draw: st.DrawFn, depth: int = 2, *, in_pydantic: bool = False
) -> Drawn:
    """A return type, and a strategy of its values."""
    if in_pydantic:
        index = draw(st.sampled_from(PYDANTIC_LEAVES))
        leaf = LEAVES[index]
        if leaf[0] is dt.datetime:
            leaf = (dt.datetime, pydantic_datetimes())
    else:
        leaf = draw(st.sampled_from(LEAVES))
    if depth == 0:
        return leaf
    kind = draw(
        st.sampled_from(
            ["leaf", "list", "tuple", "fixed", "set", "set", "dict", "intdict", "optional", "union"]
            + ([] if in_pydantic else ["attrs", "dataclass", "typeddict", "model"])
        )
    )
    inner: Drawn = draw(types_and_values(depth - 1, in_pydantic=in_pydantic))
    match kind:
        case "leaf":
            return leaf
        case "list":
            return list[inner[0]], st.lists(inner[1], max_size=3)  # type: ignore[valid-type]
        case "tuple":
            return tuple[inner[0], ...], st.lists(inner[1], max_size=3).map(tuple)  # type: ignore[valid-type]
        case "fixed":
            return tuple[inner[0], leaf[0]], st.tuples(inner[1], leaf[1])  # type: ignore[valid-type]
        case "set":
            item = draw(st.sampled_from([LEAVES[i] for i in HASHABLE]) | st.just(MIXED))
            kind_of = draw(st.sampled_from([set, frozenset]))
            return kind_of[item[0]], st.frozensets(item[1], max_size=4).map(kind_of)  # type: ignore[index]
        case "dict":
            return dict[str, inner[0]], st.dictionaries(st.text(max_size=3), inner[1], max_size=3)  # type: ignore[valid-type]
        case "intdict":
            return dict[int, inner[0]], st.dictionaries(st.integers(), inner[1], max_size=3)  # type: ignore[valid-type]
        case "optional":
            return Optional[inner[0]], st.none() | inner[1]  # noqa: UP045 - both spellings are seen
        case "union":
            scalar = LEAVES[draw(st.sampled_from([0, 2, 3]))]
            return leaf[0] | scalar[0], leaf[1] | scalar[1]  # type: ignore[operator]
        case _:
            return draw(record_class(kind, depth))


@st.composite
def record_class(draw: st.DrawFn, kind: str, depth: int) -> Drawn:
    """An attrs class, dataclass, TypedDict or pydantic model with drawn fields."""
    names = draw(
        st.lists(st.from_regex(r"f_[a-z0-9]{0,4}", fullmatch=True), max_size=3, unique=True)
    )
    fields = [draw(types_and_values(depth - 1, in_pydantic=kind == "model")) for _ in names]
    values = {name: drawn[1] for name, drawn in zip(names, fields, strict=True)}
    annotations = {name: drawn[0] for name, drawn in zip(names, fields, strict=True)}
    if kind == "attrs":
        cls: Any = attrs.make_class(
            "Drawn",
            {n: attrs.field(type=t) for n, t in annotations.items()},  # type: ignore[call-overload] # a runtime annotation
        )
        return cls, st.fixed_dictionaries(values).map(lambda kw: cls(**kw))
    if kind == "dataclass":
        made: Any = dataclasses.make_dataclass("Drawn", list(annotations.items()))
        return made, st.fixed_dictionaries(values).map(lambda kw: made(**kw))
    if kind == "typeddict":
        return TypedDict("Drawn", annotations), st.fixed_dictionaries(values)  # type: ignore[operator]
    declared: dict[str, Any] = {n: (t, ...) for n, t in annotations.items()}
    model: Any = pydantic.create_model("Drawn", **declared)
    return model, st.fixed_dictionaries(values).map(lambda kw: model(**kw))


RECORDS = ["attrs", "dataclass", "typeddict", "model"]
RETURN_TYPES = st.one_of(
    types_and_values(), st.sampled_from(RECORDS).flatmap(lambda kind: record_class(kind, 2))
)
"""Any type of types_and_values, and as often a class whose fields are drawn."""


@settings(
    max_examples=500, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(st.data(), RETURN_TYPES)
def test_every_value_the_codec_stores_fits_the_description_of_its_type(
    data: st.DataObject, drawn: Drawn
) -> None:
    """problems(shape_of(T), encode(v, T)) == [], and nothing is left unchecked."""
    annotation, values = drawn
    value = data.draw(values)
    try:
        stored = encode(value, annotation)
    except ResultNotStorableError:
        reject()
    assert check(shape_of(annotation), stored) == Fit(), (shape_of(annotation), stored)
