"""What was stored is what replays: a stored result comes back exactly, or raises StoreError."""

import ast
import dataclasses
import datetime as dt
import decimal
import enum
import fractions
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypedDict

import attrs
import pydantic
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from pydantic import BeforeValidator, PlainSerializer

from safeact import (
    SafeTool,
    Store,
    StoreError,
    Succeeded,
    register_type,
)
from safeact._codec import (
    ResultNotStorableError,
    _hooks,
    _same_json,
    decode,
    encode,
)
from safeact._json_rules import converter
from safeact._protocol import JSON


def tool_returning(
    store: Store, return_type: object, value: object, runs: list[str] | None = None
) -> SafeTool[[], Any]:
    """A tool named ``act``, annotated ``-> return_type``, that returns ``value`` (noting runs)."""

    def act(key: str) -> Any:
        if runs is not None:
            runs.append(key)
        return value

    act.__annotations__["return"] = return_type
    return SafeTool(act, store, name="act")


# What cattrs on its own rebuilds as something else: (type stored under, value, type now).
COERCIONS = [
    pytest.param(str, "false", bool, id="'false'-as-bool"),
    pytest.param(float, 9.99, int, id="9.99-as-int"),
    pytest.param(int, 7, bool, id="7-as-bool"),
    pytest.param(int, 1, bool, id="1-as-bool"),
    pytest.param(list[int], [1, 1, 2], set[int], id="[1,1,2]-as-set"),
    pytest.param(decimal.Decimal, decimal.Decimal("1.10"), float, id="Decimal-as-float"),
    pytest.param(None, None, str, id="null-as-str"),
    pytest.param(bool, True, int, id="true-as-int"),
]


@pytest.mark.parametrize(("old_type", "value", "new_type"), COERCIONS)
def test_result_that_would_replay_as_another_value_raises_and_does_not_run(
    store: Store, old_type: object, value: object, new_type: object
) -> None:
    """A stored result that a new return type would change raises StoreError; nothing runs."""
    tool_returning(store, old_type, value)("k")
    runs: list[str] = []
    with pytest.raises(StoreError, match="cannot be rebuilt as"):
        tool_returning(store, new_type, value, runs)("k")
    assert runs == []


def test_number_replays_under_the_other_number_type(store: Store) -> None:
    """JSON has one number type: a stored 9 replays under -> float as 9.0."""
    tool_returning(store, int, 9)("k")
    assert tool_returning(store, float, None)("k") == Succeeded("k", 9.0, replayed=True)


def test_store_error_names_the_key_the_stored_value_the_type_and_the_fix(store: Store) -> None:
    """The StoreError names the key, the stored value, the return type, and what to do."""
    tool_returning(store, str, "false")("k")
    with pytest.raises(StoreError) as caught:
        tool_returning(store, bool, None)("k")
    expected = (
        "the stored result of act for key 'k' cannot be rebuilt as bool from 'false': "
        "it would replay as True. The action already ran and is not run again. If the "
        "tool's return type changed since the result was stored, restore it; if not, the "
        "stored result is wrong (edited by hand, or misread by a register_type from_json): "
        "correct it with safeact amend"
    )
    assert expected == str(caught.value)


def test_fix_replaces_the_default_advice() -> None:
    """A caller's fix (for a value an operator stored) ends the message instead of the default."""
    with pytest.raises(StoreError) as caught:
        decode(7, bool, key="k", tool="act", fix="Resolve it again with a bool")
    expected = (
        "the stored result of act for key 'k' cannot be rebuilt as bool from 7: "
        "it would replay as True. Resolve it again with a bool"
    )
    assert expected == str(caught.value)


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_store_error_even_when_the_annotation_cannot_be_printed() -> None:
    """A return type whose repr raises still gives StoreError, never the repr's error."""
    with pytest.raises(StoreError, match="cannot be rebuilt as a _AnnotatedAlias from 'x'"):
        decode("x", Annotated[int, Unprintable()], key="k", tool="act")


def test_bool_result_of_an_int_tool_is_not_stored(store: Store) -> None:
    """True returned under -> int would replay as 1, so it is not stored: recorded=False."""
    expected = Succeeded("k", value=True, recorded=False)
    assert expected == tool_returning(store, int, value=True)("k")


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        pytest.param({"b", 2, None, "a", 1.5, True}, [True, 1.5, 2, "a", "b", None], id="kinds"),
        # False sorts before -1 only as a bool; "\n" before " " only by its own text, not its
        # JSON ("\\n"); "z" before null only in the strings' own group.
        pytest.param({-1, 0.5, False}, [False, -1, 0.5], id="bools-before-numbers"),
        pytest.param({"z", " ", "\n", None}, ["\n", " ", "z", None], id="strings-by-text"),
    ],
)
def test_set_is_stored_sorted(members: set[object], expected: list[object]) -> None:
    """A set is stored sorted (bools, numbers, strings, then the rest), whatever its own order.

    The order is part of the format: ledgers written before hold their sets in it.
    """
    assert expected == encode(frozenset(members), frozenset[str | int | float | bool | None])


class Item(pydantic.BaseModel):
    name: str
    at: dt.datetime
    tags: set[str]
    count: int


ITEM = Item(name="x", at=dt.datetime(2026, 11, 30, tzinfo=dt.UTC), tags={"b", "a"}, count=3)


def test_pydantic_model_replays_as_itself(store: Store) -> None:
    """A pydantic model result is stored with model_dump and replays equal, as the model."""
    tool = tool_returning(store, Item, ITEM)
    tool("k")
    replay = tool("k")
    assert replay == Succeeded("k", ITEM, replayed=True)
    assert isinstance(replay, Succeeded)
    assert type(replay.value) is Item


@attrs.frozen
class Basket:
    first: Item | None
    items: list[Item]


def test_pydantic_model_inside_an_attrs_class_replays(store: Store) -> None:
    """A pydantic model in an attrs class's Optional and list fields replays equal."""
    basket = Basket(ITEM, [ITEM, ITEM])
    tool = tool_returning(store, Basket, basket)
    tool("k")
    assert tool("k") == Succeeded("k", basket, replayed=True)


class Special(Item):
    note: str


def test_pydantic_subclass_replays_as_that_subclass(store: Store) -> None:
    """An instance of a subclass replays as the subclass, its own fields included."""
    special = Special(**ITEM.model_dump(), note="extra")
    tool = tool_returning(store, Item, special)
    tool("k")
    replayed = tool("k").unwrap()
    assert type(replayed) is Special
    assert replayed == special


def join_tags(tags: set[str]) -> list[str]:
    return [",".join(sorted(tags))]


def split_tags(data: Any) -> Any:
    return set(data[0].split(",")) if isinstance(data, list) else data


class Joined(pydantic.BaseModel):
    tags: Annotated[
        set[str], PlainSerializer(join_tags, when_used="json"), BeforeValidator(split_tags)
    ]


def test_model_with_its_own_json_for_a_set_replays(store: Store) -> None:
    """A model that writes a set as other JSON (one joined string) is stored and replayed as is."""
    joined = Joined(tags={"b", "a", "c"})
    tool = tool_returning(store, Joined, joined)
    tool("k")
    assert tool("k") == Succeeded("k", joined, replayed=True)
    record = store.get("k")
    assert record is not None
    assert record.result == {"tags": ["a,b,c"]}


class Flat(pydantic.BaseModel):
    """A model whose set and dict fields write themselves as strings, beside a plain list."""

    tags: Annotated[
        set[str],
        PlainSerializer(lambda tags: ",".join(sorted(tags)), when_used="json"),
        BeforeValidator(lambda data: set(data.split(",")) if isinstance(data, str) else data),
    ]
    counts: Annotated[
        dict[str, int],
        PlainSerializer(lambda counts: f"{sorted(counts.items())}", when_used="json"),
        BeforeValidator(
            lambda data: dict(ast.literal_eval(data)) if isinstance(data, str) else data
        ),
    ]
    steps: list[str]


def test_a_models_own_json_and_its_lists_are_stored_as_the_model_writes_them(
    store: Store,
) -> None:
    """Only a model's sets are sorted; its lists and its fields' own JSON are kept as written.

    A field's serializer may write a string, even one as long as the set it stands for.
    """
    flat = Flat(tags={"a"}, counts={"b": 2}, steps=["pack", "ship", "bill"])
    stored = {"tags": "a", "counts": "[('b', 2)]", "steps": ["pack", "ship", "bill"]}
    assert encode(flat, Flat) == stored
    tool = tool_returning(store, Flat, flat)
    tool("k")
    assert tool("k") == Succeeded("k", flat, replayed=True)


ITEM_JSON = {"name": "x", "at": "2026-11-30T00:00:00Z", "tags": ["a", "b"], "count": 3}


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param({**ITEM_JSON, "count": "9"}, id="'9'-as-int"),
        pytest.param({**ITEM_JSON, "extra": "dropped"}, id="extra-key"),
        pytest.param({**ITEM_JSON, "tags": ["a", "a"]}, id="duplicate-in-set"),
    ],
)
def test_stored_json_a_model_would_change_raises(store: Store, stored: JSON) -> None:
    """Stored JSON that pydantic would coerce, drop from, or deduplicate raises StoreError."""
    tool_returning(store, dict[str, str | int | list[str]], stored)("k")
    with pytest.raises(StoreError, match=r"cannot be rebuilt as .*Item"):
        tool_returning(store, Item, None)("k")


def test_import_safeact_does_not_import_pydantic() -> None:
    """Importing safeact leaves pydantic unimported (it is an optional extra)."""
    code = "import sys, safeact; print('pydantic' in sys.modules)"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert child.stdout == "False\n"


TAGS = sorted(f"tag-{n}" for n in range(20))

SET_CHILD = """
import json, sys
from safeact import safe

@safe(sys.argv[1], name="tags")
def tags(key: str) -> {annotation}:
    return {value}

outcome = tags("k")
print(json.dumps([list({set_value}), outcome.replayed]))
"""

MODEL_CHILD = """
import pydantic

class Tagged(pydantic.BaseModel):
    tags: set[str]
"""


@pytest.mark.parametrize(
    ("prelude", "annotation", "value"),
    [
        pytest.param("", "set[str]", f"set({TAGS!r})", id="set"),
        pytest.param(MODEL_CHILD, "Tagged", f"Tagged(tags=set({TAGS!r}))", id="pydantic"),
    ],
)
def test_set_stored_in_one_process_replays_in_another(
    tmp_path: Path, prelude: str, annotation: str, value: str
) -> None:
    """A set stored by one process replays in another whose hash seed orders it differently."""
    body = SET_CHILD.format(annotation=annotation, value=value, set_value=f"set({TAGS!r})")
    script = tmp_path / "child.py"
    script.write_text(prelude + body)
    runs = [
        subprocess.run(
            [sys.executable, str(script), str(tmp_path / "agent.db")],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        for seed in ("1", "2")
    ]
    (first_order, first_replayed), (second_order, second_replayed) = (
        json.loads(run.stdout) for run in runs
    )
    assert first_order != second_order  # the two processes do iterate the set differently
    assert (first_replayed, second_replayed) == (False, True)


class Money:
    """A type of the user's own that neither cattrs nor pydantic knows."""

    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and other.cents == self.cents

    def __hash__(self) -> int:
        return hash(self.cents)


register_type(Money, to_json=lambda money: money.cents, from_json=Money)


@attrs.frozen
class Invoice:
    total: Money
    lines: list[Money]


def test_registered_type_is_stored_and_replayed(store: Store) -> None:
    """A type taught with register_type is stored through to_json and replays through from_json."""
    invoice = Invoice(Money(350), [Money(100), Money(250)])
    tool = tool_returning(store, Invoice, invoice)
    tool("k")
    assert tool("k") == Succeeded("k", invoice, replayed=True)
    record = store.get("k")
    assert record is not None
    assert record.result == {"total": 350, "lines": [100, 250]}


def test_result_whose_from_json_returns_another_type_is_not_stored(store: Store) -> None:
    """A registered type whose from_json returns another type leaves its results unstored."""

    class Cents:
        def __init__(self, value: int) -> None:
            self.value = value

    # from_json gives back the int itself, not a Cents: mypy cannot see it through Any.
    register_type(Cents, to_json=lambda cents: cents.value, from_json=lambda data: data)
    outcome = tool_returning(store, Cents, Cents(3))("k")
    assert isinstance(outcome, Succeeded)
    assert outcome.recorded is False
    record = store.get("k")
    assert record is not None
    cents = (
        f"{__name__}.test_result_whose_from_json_returns_another_type_is_not_stored.<locals>.Cents"
    )
    assert (record.error_message or "").endswith(f"from_json of {cents} returned 3, not a {cents}")


def test_a_to_json_whose_error_cannot_be_put_in_words_is_named_by_its_type() -> None:
    """An error whose own str() raises still says what went wrong: its type's name."""

    class UnsayableError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no words")

    class Token:
        pass

    def refuse(token: Token) -> JSON:
        raise UnsayableError

    register_type(Token, to_json=refuse, from_json=lambda _: Token())
    with pytest.raises(ResultNotStorableError) as raised:
        encode(Token(), Token)
    assert str(raised.value) == "UnsayableError"


def test_from_json_that_raises_is_a_store_error(store: Store) -> None:
    """A registered type's from_json that raises on replay gives StoreError, not its error."""

    class Code:
        def __init__(self, text: str) -> None:
            self.text = text

    def parse(data: Any) -> Code:
        if data == "gone":
            raise KeyError(data)
        return Code(data)

    register_type(Code, to_json=lambda code: code.text, from_json=parse)
    tool_returning(store, str, "gone")("k")
    with pytest.raises(
        StoreError, match=r"cannot be rebuilt as .*Code from 'gone': .*raised KeyError"
    ):
        tool_returning(store, Code, None)("k")


def test_late_registration_is_refused(store: Store) -> None:
    """Registering a type after making a tool whose result contains it is a ValueError."""

    @attrs.frozen
    class Amount:
        cents: int

    @attrs.frozen
    class Refund:
        amount: Amount

    tool_returning(store, Refund, Refund(Amount(1)))
    with pytest.raises(ValueError, match="before making any tool that returns it"):
        register_type(Amount, to_json=lambda amount: amount.cents, from_json=Amount)


def test_type_refused_by_a_tool_can_be_registered_then(store: Store) -> None:
    """A type no tool could store yet may be registered after a tool returning it was refused."""

    class Token:
        def __init__(self, text: str) -> None:
            self.text = text

    with pytest.raises(TypeError, match=r"safeact\.register_type"):
        tool_returning(store, Token, Token("t"))
    register_type(Token, to_json=lambda token: token.text, from_json=Token)
    tool_returning(store, Token, Token("t"))("k")
    record = store.get("k")
    assert record is not None
    assert record.result == "t"


def test_second_registration_is_refused() -> None:
    """A type is registered once: a second register_type for it is a ValueError."""

    class Once:
        pass

    register_type(Once, to_json=lambda _: None, from_json=lambda _: Once())
    with pytest.raises(ValueError, match="registered already"):
        register_type(Once, to_json=lambda _: None, from_json=lambda _: Once())


def test_builtin_type_cannot_be_registered() -> None:
    """A type safeact stores itself, such as datetime, cannot be given another rule."""
    with pytest.raises(ValueError, match=r"safeact stores datetime\.datetime itself"):
        register_type(
            dt.datetime, to_json=dt.datetime.timestamp, from_json=dt.datetime.fromtimestamp
        )


def test_a_registration_drops_the_hooks_looked_up_before() -> None:
    """After register_type, results are encoded and rebuilt with the hooks cattrs has now."""

    @attrs.frozen
    class Fee:
        cents: int

    class Stamp:
        pass

    encode(Fee(1), Fee)
    register_type(Stamp, to_json=lambda _: None, from_json=lambda _: Stamp())
    hooks = _hooks(Fee)
    now = (converter.get_structure_hook(Fee), converter.get_unstructure_hook(Fee))
    assert (hooks.structure, hooks.unstructure) == now


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param((list[int], len, list), id="generic-alias"),
        pytest.param((Money, "cents", Money), id="to_json-not-callable"),
    ],
)
def test_register_type_misuse_is_a_type_error(arguments: tuple[Any, Any, Any]) -> None:
    """register_type takes a class and two functions; anything else is a TypeError."""
    cls, to_json, from_json = arguments
    with pytest.raises(TypeError, match="register_type"):
        register_type(cls, to_json=to_json, from_json=from_json)


def test_register_type_of_a_generic_alias_names_what_it_was_given() -> None:
    """The refusal of an alias such as list[int] shows it, and says to register the class."""
    with pytest.raises(TypeError, match=r"takes a class, got list\[int\]: register the class"):
        register_type(list[int], to_json=len, from_json=list)


# The property: every return annotation of a family, every value of it.


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    S = 1
    M = 2


@attrs.frozen
class Point:
    x: int
    label: str | None


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    price: decimal.Decimal


class Summary(TypedDict):
    total: int
    tags: list[str]


@attrs.frozen
class Kind:
    """A return annotation, the values of it, and whether they are hashable (set members)."""

    annotation: Any
    values: st.SearchStrategy[Any]
    hashable: bool = True


finite = st.floats(allow_nan=False, allow_infinity=False)
datetimes = st.datetimes(timezones=st.none() | st.just(dt.UTC) | st.timezones())
pydantic_datetimes = st.datetimes(timezones=st.none() | st.just(dt.UTC)).map(
    lambda moment: moment.replace(fold=0)
)
"""pydantic writes a datetime by its offset alone: a zone's name and the fold are lost."""

LEAVES = [
    Kind(bool, st.booleans()),
    Kind(int, st.integers()),
    Kind(float, finite),
    Kind(str, st.text()),
    Kind(None, st.none()),
    Kind(decimal.Decimal, st.decimals(allow_nan=False, allow_infinity=False)),
    Kind(uuid.UUID, st.uuids()),
    Kind(dt.datetime, datetimes),
    Kind(dt.date, st.dates()),
    Kind(Colour, st.sampled_from(Colour)),
    Kind(Size, st.sampled_from(Size)),
    Kind(Literal["a", "b"], st.sampled_from(["a", "b"])),
    Kind(int | str, st.integers() | st.text()),
    Kind(bool | int, st.booleans() | st.integers()),
    Kind(Point, st.builds(Point, st.integers(), st.none() | st.text())),
    Kind(Line, st.builds(Line, st.text(), st.decimals(allow_nan=False, allow_infinity=False))),
    Kind(
        Summary, st.builds(Summary, total=st.integers(), tags=st.lists(st.text())), hashable=False
    ),
    Kind(
        Item,
        st.builds(
            Item,
            name=st.text(),
            at=pydantic_datetimes,
            tags=st.sets(st.text()),
            count=st.integers(),
        ),
        hashable=False,
    ),
]


def containers(inner: Kind) -> list[Kind]:
    """The container annotations over ``inner``: lists, tuples, dicts, Optional, sets."""
    t, values = inner.annotation, inner.values
    kinds = [
        Kind(list[t], st.lists(values, max_size=3), hashable=False),  # type: ignore[valid-type] # built at run time
        Kind(tuple[t, ...], st.lists(values, max_size=3).map(tuple), inner.hashable),  # type: ignore[valid-type] # built at run time
        Kind(tuple[t, int], st.tuples(values, st.integers()), inner.hashable),  # type: ignore[valid-type] # built at run time
        Kind(dict[str, t], st.dictionaries(st.text(), values, max_size=3), hashable=False),  # type: ignore[valid-type] # built at run time
        Kind(Optional[t], st.none() | values, inner.hashable),  # noqa: UP045 - t may be None
    ]
    if inner.hashable:
        kinds.append(Kind(set[t], st.sets(values, max_size=3), hashable=False))  # type: ignore[valid-type] # built at run time
        kinds.append(Kind(frozenset[t], st.frozensets(values, max_size=3)))  # type: ignore[valid-type] # built at run time
    return kinds


kinds: st.SearchStrategy[Kind] = st.recursive(
    st.sampled_from(LEAVES),
    lambda children: children.flatmap(lambda inner: st.sampled_from(containers(inner))),
    max_leaves=3,
)


def as_data(stored: object) -> object:  # noqa: PLR0911 - a case per kind
    """JSON as comparable data: kinds kept apart (true is not 1), numbers by exact value.

    Anything else (a tuple, a Decimal) is data equal to nothing but itself.
    """
    match stored:
        case bool():
            return ("bool", stored)
        case int() | float():
            return ("number", fractions.Fraction(stored))
        case str():
            return ("str", stored)
        case None:
            return ("null",)
        case list():
            return ("array", tuple(as_data(item) for item in stored))
        case dict():
            return ("object", frozenset((name, as_data(item)) for name, item in stored.items()))
        case _:
            return ("not JSON", id(stored))


@given(st.data())
def test_every_value_replays_as_itself(data: st.DataObject) -> None:
    """Every value of every annotation of the family replays equal and of the same type."""
    kind = data.draw(kinds, label="kind")
    value = data.draw(kind.values, label="value")
    got = decode(encode(value, kind.annotation), kind.annotation, key="k", tool="act")
    assert (value, type(value)) == (got, type(got))


@given(st.data())
def test_replay_under_another_type_is_exact_or_refused(data: st.DataObject) -> None:
    """Stored JSON replayed under another annotation re-encodes to itself, or raises StoreError."""
    kind = data.draw(kinds, label="stored as")
    stored = encode(data.draw(kind.values, label="value"), kind.annotation)
    other = data.draw(kinds, label="replayed as").annotation
    try:
        got = decode(stored, other, key="k", tool="act")
    except StoreError:
        event("refused")
        return
    event("replayed")
    assert as_data(stored) == as_data(encode(got, other))


# The comparison after rebuilding: the same JSON, kind for kind.

ALIKE = st.sampled_from([0, 1, 1.0, 2.5, True, False, "", "1", None])
"""JSON scalars that are easily taken for one another (1, 1.0, True and "1")."""
UNLIKE = st.sampled_from([decimal.Decimal(1), b"1", object()])
"""Values that are not JSON, on the side of the stored value (which an operator may give)."""


def json_like(leaves: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """Arrays (lists, and tuples, which are not JSON) and objects of ``leaves``."""
    return st.recursive(
        leaves,
        lambda items: (
            st.lists(items, max_size=2)
            | st.lists(items, max_size=2).map(tuple)
            | st.dictionaries(st.sampled_from(["a", "b"]), items, max_size=2)
        ),
        max_leaves=4,
    )


@pytest.mark.parametrize(
    ("rebuilt", "stored", "same"),
    [
        pytest.param(1, 1.0, True, id="9-is-9.0"),
        pytest.param({"a": [1.0], "b": None}, {"b": None, "a": [1]}, True, id="objects-by-key"),
        pytest.param(1, True, False, id="1-is-not-true"),
        pytest.param(False, 0, False, id="false-is-not-0"),
        pytest.param(1, "1", False, id="1-is-not-'1'"),
        pytest.param([1], (1,), False, id="a-tuple-is-not-json"),
        pytest.param(1, decimal.Decimal(1), False, id="a-Decimal-is-not-json"),
        pytest.param({"a": 1}, {"b": 1}, False, id="other-keys"),
        pytest.param({"a": 1}, {"a": 1, "b": 1}, False, id="more-keys"),
        pytest.param([1, 2], [2, 1], False, id="other-order"),
    ],
)
def test_rebuilt_json_is_the_stored_json_only_kind_for_kind(
    rebuilt: JSON, stored: Any, same: bool
) -> None:
    """Rebuilt JSON is taken for the stored JSON when equal and of the same JSON kinds."""
    assert _same_json(rebuilt, stored) == same


def near(value: object, data: st.DataObject) -> object:
    """``value`` with some parts swapped: a leaf for a look-alike, a list for a tuple, a key."""
    change = data.draw(st.integers(0, 2)) == 0  # one part in three
    if isinstance(value, list):
        items = [near(item, data) for item in value]
        return tuple(items) if change else items
    if isinstance(value, dict):
        pairs = {name: near(item, data) for name, item in value.items()}
        if change and pairs:
            name = next(iter(pairs))
            pairs[f"{name}+"] = pairs.pop(name)
        return pairs
    return data.draw(ALIKE | UNLIKE) if change else value


@given(json_like(ALIKE), st.data())
def test_rebuilt_json_is_the_stored_json_exactly_when_alike_kind_for_kind(
    value: object, data: st.DataObject
) -> None:
    """The JSON a result rebuilds to is the stored JSON when it is the same data, kind for kind."""
    rebuilt = json.loads(json.dumps(value))  # as decode has it: through json
    how = data.draw(st.sampled_from(["copy", "floats", "near", "near", "other"]))
    stored: Any  # JSON, or not quite (an operator's)
    if how == "near":
        stored = near(rebuilt, data)
    elif how == "other":
        stored = data.draw(json_like(ALIKE | UNLIKE))
    else:  # the same data, its ints as floats or not
        stored = json.loads(json.dumps(value), parse_int=float if how == "floats" else int)
    assert _same_json(rebuilt, stored) == (as_data(rebuilt) == as_data(stored))
