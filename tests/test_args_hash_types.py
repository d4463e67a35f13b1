"""Issue 30: arguments that differ hash differently, whatever their types.

One key with one digest is one action: a second call whose arguments differ from the first
but hash alike replays the first's result and never runs (a missed action), and a default
key, which holds the digest, is the first call's key. Before issue 30 some values of other
types (a tuple and a list, ``Cents(5)`` and ``5``, pure paths of two flavours, classes of
one name in two modules), or of other content (``Perm(8)`` and ``Perm(16)``, a float
subclass whose ``repr`` rounds), hashed alike. Each family has a test here, and a property
checks them together: two values hash alike exactly when they are equal in type and
content, recursively. Where safeact is stricter than ``==`` on purpose (the sign of a zero,
a Decimal's exponent, the case of a Windows path, one instant in two time zones, a fold),
"equal in content" is the stricter sense.
"""

import collections
import copy
import dataclasses
import datetime as dt
import decimal
import enum
import fractions
import importlib.util
import inspect
import io
import math
import pathlib
import pickle
import subprocess
import sys
import types
import uuid
import zoneinfo
from collections.abc import Iterator
from pathlib import Path, PosixPath, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safeact import DoubtReason, KeyConflictError, Store, Succeeded, get_store, safe
from safeact._keys import ArgsHash
from tests import same_names as one
from tests.test_args_hash import (
    LEGACY_DIGESTS,
    LEGACY_VALUES,
    NEWER_DIGESTS,
    NEWER_VALUES,
    PINNED,
    SAMPLES,
)


def load_again(module: types.ModuleType, name: str) -> types.ModuleType:
    """``module``'s file run again as the module ``name``: the same classes, another module."""
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    assert spec is not None
    assert spec.loader is not None
    again = importlib.util.module_from_spec(spec)
    sys.modules[name] = again  # as an import would: pickle and pydantic look modules up there
    spec.loader.exec_module(again)
    return again


two = load_again(one, "tests.same_names_again")
"""``tests/same_names.py`` again: ``two.Tier`` is ``one.Tier`` but for its module."""


def act(key: str, value: object, extra: int = 0) -> None:
    raise AssertionError


PLAN = ArgsHash(inspect.signature(act))


def digest(value: object, **kwargs: object) -> str:
    """The digest of ``act(key, value, **kwargs)``, as a tool computes it."""
    return PLAN((value,), kwargs)


def collisions(values: list[object]) -> list[tuple[object, object]]:
    """The pairs of ``values`` that hash alike, each with the first value of its digest."""
    first: dict[str, object] = {}
    found = []
    for value in values:
        earlier = first.setdefault(digest(value), value)
        if earlier is not value:
            found.append((earlier, value))
    return found


@pytest.fixture
def sqlite_store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


def second_call(store: Store, first: object, second: object) -> Succeeded[int]:
    """Call one tool with ``first``, then with the same key and ``second``; return the latter.

    The tool has no parameter with a default, so its digests are also those safeact 0.1
    wrote: the case where a digest of before issue 30 could be taken for one of now.
    """
    runs: list[object] = []

    @safe(store, name="act")
    def record(key: str, value: object) -> int:
        runs.append(value)
        return len(runs)

    record("k", first)
    outcome = record("k", second)
    assert isinstance(outcome, Succeeded)
    return outcome


class Year(dt.date):
    """A date that shows its year only: its isoformat says less than its value."""

    def isoformat(self) -> str:
        return str(self.year)


def named_as(base: type) -> Any:
    """A subclass of ``base`` of its very name.

    Before issue 30 a float was hashed by its ``repr``, and a date, a datetime, a time, a
    UUID or a Decimal was tagged with its class's ``__name__``: a subclass of another name
    (``Year``) hashed apart by chance, one of its base's name did not.
    """
    return type(base.__name__, (base,), {"__module__": __name__})


Float = named_as(float)
Decimal = named_as(decimal.Decimal)
Date = named_as(dt.date)
Datetime = named_as(dt.datetime)
Time = named_as(dt.time)
Uuid = named_as(uuid.UUID)


class Span(dt.timedelta):
    pass


class Items(list[object]):
    pass


class Members(set[object]):
    pass


class Table(dict[object, object]):
    pass


class Phase(complex):
    pass


class Ratio(fractions.Fraction):
    pass


class Where:
    """A path-like object of a plain class."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __fspath__(self) -> str:
        return self.text


class SecretStr(pydantic.SecretStr):
    """A subclass of pydantic's SecretStr, of its name."""


class HttpUrl(pydantic.HttpUrl):
    """A subclass of pydantic's HttpUrl, of its name."""


NEW_YORK = zoneinfo.ZoneInfo("America/New_York")
WINTER = dt.datetime(2026, 1, 15, 12)  # noqa: DTZ001 - naive: given zones below
AMBIGUOUS = dt.datetime(2026, 11, 1, 1, 30)  # noqa: DTZ001 - New York's 1:30 happens twice


# Flags with bits no member declares.


def test_flags_of_other_undeclared_bits_hash_apart() -> None:
    """Perm(8) and Perm(16), of bits no member declares, hash apart, as all flag values do."""
    values: list[object] = [one.Perm(8), one.Perm(16), one.Perm(24), one.Perm(9), one.Perm(0)]
    values += [one.Perm.R, one.Perm.R | one.Perm.W, one.Bits(4), one.Bits(8), one.Bits(3)]
    assert collisions(values) == []


def test_a_flag_of_other_undeclared_bits_is_another_call(sqlite_store: Store) -> None:
    """A second call with other undeclared bits conflicts; it used to replay the first."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, one.Perm(8), one.Perm(16))


# Classes and enums of one name in two modules, and names with dots.


def test_enums_of_one_name_in_two_modules_hash_apart() -> None:
    """Tier.GOLD of one module is not Tier.GOLD of another, for every kind of enum."""
    pairs = [(one.Tier.GOLD, two.Tier.GOLD), (one.Level.ONE, two.Level.ONE)]
    pairs += [(one.Perm.R, two.Perm.R), (one.Perm(8), two.Perm(8)), (one.Bits(4), two.Bits(4))]
    assert [first for first, second in pairs if digest(first) == digest(second)] == []


def test_classes_of_one_name_in_two_modules_hash_apart() -> None:
    """Dataclasses, attrs classes, pydantic models and NamedTuples of one name, two modules."""
    pairs = [(one.Order(1), two.Order(1)), (one.Customer("ada"), two.Customer("ada"))]
    pairs += [(one.Invoice(amount=1), two.Invoice(amount=1)), (one.Point(1, 2), two.Point(1, 2))]
    assert [first for first, second in pairs if digest(first) == digest(second)] == []


def test_a_class_of_another_module_is_another_call(sqlite_store: Store) -> None:
    """A second call with the same-named dataclass of another module conflicts."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, one.Order(1), two.Order(1))


class Outer:
    @dataclasses.dataclass(frozen=True)
    class Order:
        id: int


def local_order() -> type:
    @dataclasses.dataclass(frozen=True)
    class Order:
        id: int

    return Order


def another_local_order() -> type:
    @dataclasses.dataclass(frozen=True)
    class Order:
        id: int

    return Order


def test_nested_and_local_classes_of_one_name_hash_apart() -> None:
    """Order, Outer.Order and the Orders of two functions are four classes: four calls.

    (One function's class made twice is one name: nothing that outlives a process tells
    the two apart, and a retry in another process makes it again.)
    """
    values = [one.Order(1), Outer.Order(1), local_order()(1), another_local_order()(1)]
    assert collisions(values) == []


def member(name: str, qualname: str, module: str) -> object:
    """Member ``name`` of an enum of ``module`` and ``qualname``, made by the functional API."""
    make: Any = enum.Enum  # mypy reads a call of Enum as one of its members
    return make(qualname.rpartition(".")[2], [(name, 1)], module=module, qualname=qualname)[name]


def test_names_with_dots_do_not_run_together() -> None:
    """Class A.B's member C, class A's member B.C and class B (of module m.A)'s C hash apart."""
    members = [member("C", "A.B", "m"), member("B.C", "A", "m"), member("C", "B", "m.A")]
    assert collisions(members) == []


# What a subclass shows is not what it holds.


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(one.Rounded(1.2), one.Rounded(1.4), id="float-repr"),
        pytest.param(one.Money("1.1"), one.Money("1.104"), id="decimal-str"),
        pytest.param(Year(2026, 1, 1), Year(2026, 2, 1), id="date-isoformat"),
    ],
)
def test_a_subclass_is_hashed_by_its_value_not_by_how_it_shows_it(
    first: object, second: object
) -> None:
    """Two values that show alike (``repr``, ``str``, ``isoformat``) but differ hash apart."""
    assert (str(first), digest(first) == digest(second)) == (str(second), False)


# Values equal by == but of other types.


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(one.Cents(5), 5, id="int"),
        pytest.param(one.Cents(5), two.Cents(5), id="int-two-modules"),
        pytest.param(one.Text("a"), "a", id="str"),
        pytest.param(one.Blob(b"a"), b"a", id="bytes"),
        pytest.param(bytearray(b"a"), b"a", id="bytearray"),
        pytest.param(Float(1.5), 1.5, id="float"),
        pytest.param(Decimal("1.5"), decimal.Decimal("1.5"), id="Decimal"),
        pytest.param(Date(2026, 1, 1), dt.date(2026, 1, 1), id="date"),
        pytest.param(Datetime(2026, 1, 1), dt.datetime(2026, 1, 1), id="datetime"),  # noqa: DTZ001
        pytest.param(Time(9), dt.time(9), id="time"),
        pytest.param(Span(days=1), dt.timedelta(days=1), id="timedelta"),
        pytest.param(Uuid(int=1), uuid.UUID(int=1), id="UUID"),
        pytest.param(Phase(1, 2), complex(1, 2), id="complex"),
        pytest.param(Ratio(1, 3), fractions.Fraction(1, 3), id="Fraction"),
        pytest.param(one.Point(1, 2), (1, 2), id="NamedTuple"),
        pytest.param(Items([1]), [1], id="list"),
        pytest.param(frozenset({1}), {1}, id="frozenset"),
        pytest.param(Members({1}), {1}, id="set"),
        pytest.param(Table(a=1), {"a": 1}, id="dict"),
        pytest.param(collections.OrderedDict(a=1), {"a": 1}, id="OrderedDict"),
        pytest.param(collections.defaultdict(int, a=1), {"a": 1}, id="defaultdict"),
        pytest.param(collections.Counter(a=1), {"a": 1}, id="Counter"),
        pytest.param(types.MappingProxyType({"a": 1}), {"a": 1}, id="mappingproxy"),
        pytest.param(np.str_("a"), "a", id="numpy-str"),
        pytest.param(np.bytes_(b"a"), b"a", id="numpy-bytes"),
        pytest.param(np.longlong(1), np.int64(1), id="numpy-one-dtype-two-types"),
        pytest.param(PurePosixPath("a"), PosixPath("a"), id="pure-path"),
    ],
)
def test_equal_values_of_other_types_hash_apart(first: object, second: object) -> None:
    """A value and one equal to it by == but of another type hash apart."""
    assert (first == second, digest(first) == digest(second)) == (True, False)


def test_a_tuple_and_the_list_of_its_items_hash_apart() -> None:
    """(1, 2) is not [1, 2] (nor equal to it): they used to hash alike."""
    assert digest((1, 2)) != digest([1, 2])


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param([1, 2], (1, 2), id="list-tuple"),
        pytest.param(5, one.Cents(5), id="int-subclass"),
        pytest.param(b"a", bytearray(b"a"), id="bytes-bytearray"),
        pytest.param({"a": 1}, collections.OrderedDict(a=1), id="dict-OrderedDict"),
        pytest.param(Path("a"), PurePosixPath("a"), id="path-pure-path"),
        pytest.param(
            WINTER.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            WINTER.replace(tzinfo=NEW_YORK),
            id="offset-zone",
        ),
    ],
)
def test_a_value_of_another_type_conflicts_with_a_key_this_version_recorded(
    sqlite_store: Store, first: object, second: object
) -> None:
    """The second value's former digest is the first's of now: still a conflict, no replay."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, first, second)


def test_ordered_dicts_in_another_order_hash_apart() -> None:
    """Two OrderedDicts of the same items in another order are not equal: they hash apart."""
    first = collections.OrderedDict([("a", 1), ("b", 2)])
    assert digest(first) != digest(collections.OrderedDict([("b", 2), ("a", 1)]))


# Paths, times and time zones.


def test_paths_of_other_flavours_hash_apart() -> None:
    """One text as a pure POSIX, pure Windows, concrete or other path-like, or a str: five calls."""
    values: list[object] = []
    for text in ("a", "a/b"):
        values += [PurePosixPath(text), PureWindowsPath(text), PosixPath(text), Where(text), text]
    assert collisions(values) == []


def test_one_datetime_text_in_other_zones_or_folds_hashes_apart() -> None:
    """One ISO text in a ZoneInfo or at a fixed offset, or with another fold, is another call."""
    values: list[object] = [
        WINTER.replace(tzinfo=NEW_YORK),
        WINTER.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5))),
        WINTER.replace(tzinfo=zoneinfo.ZoneInfo("UTC")),
        WINTER.replace(tzinfo=dt.UTC),
        WINTER.replace(tzinfo=dt.UTC, fold=1),
        WINTER,
        WINTER.replace(fold=1),
        dt.time(9, tzinfo=NEW_YORK),
        dt.time(9),
        dt.time(9, fold=1),
    ]
    assert collisions(values) == []


def utc_data() -> bytes:
    """UTC's TZif data, from the system's time zone database."""
    for folder in zoneinfo.TZPATH:
        path = pathlib.Path(folder, "UTC")
        if path.is_file():
            return path.read_bytes()
    raise AssertionError(zoneinfo.TZPATH)


def test_a_time_in_a_zone_read_from_a_file_without_a_key_is_refused() -> None:
    """A ZoneInfo read from a file with no key names no zone: refused, saying how to name it."""
    zone = zoneinfo.ZoneInfo.from_file(io.BytesIO(utc_data()))
    with pytest.raises(TypeError, match=r"ZoneInfo read from a file with no key.*ZoneInfo\(key\)"):
        digest(WINTER.replace(tzinfo=zone))


# pydantic's own classes and others of their names.


def test_classes_named_as_pydantics_own_hash_apart_from_them() -> None:
    """A subclass of SecretStr or HttpUrl of the same name is not pydantic's own class."""
    values: list[object] = [SecretStr("s"), pydantic.SecretStr("s")]
    values += [HttpUrl("https://a.example/"), pydantic.HttpUrl("https://a.example/")]
    assert collisions(values) == []


# A script's classes, however it runs.

SCRIPT = """\
import dataclasses
import enum
import inspect

from safeact._keys import ArgsHash


class Tier(enum.Enum):
    GOLD = "gold"


@dataclasses.dataclass
class Order:
    id: int


def act(key, value):
    raise AssertionError


def digest():
    return ArgsHash(inspect.signature(act))(([Tier.GOLD, Order(1)],), {})


if __name__ == "__main__":
    import agent  # this file again, imported: its classes are agent.Tier and agent.Order

    print(digest(), agent.digest())
"""


def test_a_scripts_classes_hash_alike_however_the_script_runs(tmp_path: Path) -> None:
    """A script's class hashes alike run as python agent.py, as python -m agent, and imported."""
    (tmp_path / "agent.py").write_text(SCRIPT)
    printed = [
        subprocess.run(
            [sys.executable, *how], cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout.split()
        for how in (["agent.py"], ["-m", "agent"])
    ]
    assert printed == [[printed[0][0]] * 2] * 2


# The digests ledgers hold.


def gather(key: str, *items: object) -> None:
    raise AssertionError


GATHERED = "0091a7d91297dc0428791d4458e90559d301d4ec0796e0f4dc0122a89a9afe98"
"""The digest of ``gather(key, 1, "a", [2])``, computed by the code before issue 30."""


def test_the_tuple_a_star_args_parameter_receives_keeps_its_digest() -> None:
    """``*args`` receives a tuple whatever the caller passes: its digest is the one of before."""
    assert ArgsHash(inspect.signature(gather))((1, "a", [2]), {}) == GATHERED


def fixed(key: str, value: object, extra: int) -> None:
    raise AssertionError


FIXED = ArgsHash(inspect.signature(fixed))
"""``act`` with no default: its digests hold every argument, as safeact 0.1's did."""

TOLD_APART = {
    "numpy str": "np.str_ is a str subclass",
    "numpy bytes": "np.bytes_ is a bytes subclass",
    "int subclass": "an int subclass",
    "IntEnum": "an enum is named by its module too",
    "NamedTuple": "a NamedTuple is a tuple subclass",
    "bytearray": "a bytearray is not bytes",
    "nested objects": "a class is named by its module too",
    "pydantic dataclass": "a class is named by its module too",
    "mapping of mixed keys": "one of its keys is a tuple",
    "pydantic model": "a class is named by its module too",
}
"""The pinned values whose digests issue 30 changed, and why: they hashed as others did."""


def test_only_the_digests_of_values_issue_30_told_apart_change() -> None:
    """Of the digests ledgers hold, those of values issue 30 told apart change, and no other."""
    pinned = {**LEGACY_DIGESTS, **NEWER_DIGESTS}
    values = {**LEGACY_VALUES, **NEWER_VALUES}
    changed = {name for name, value in values.items() if FIXED((value, 0), {}) != pinned[name]}
    assert changed == set(TOLD_APART)


@pytest.mark.parametrize("name", sorted(TOLD_APART))
def test_a_key_recorded_before_issue_30_replays_the_call_it_recorded(
    sqlite_store: Store, name: str
) -> None:
    """A row with the digest 0.1 wrote for a call whose digest changed replays that call.

    Each of these calls leaves ``extra`` at its default, which 0.1 wrote in and this
    version never does: no call of now has that digest, so it is trusted.
    """
    runs: list[object] = []

    @safe(sqlite_store, name="act")
    def tool(key: str, value: object, extra: int = 0) -> int:
        runs.append(value)
        return len(runs)

    tool("k", LEGACY_VALUES.get(name, NEWER_VALUES.get(name)))
    with sqlite_store._transaction(sync=False) as db:
        recorded = LEGACY_DIGESTS.get(name, NEWER_DIGESTS.get(name))
        db.execute("UPDATE calls SET args_hash = ? WHERE key = 'k'", (recorded,))
    outcome = tool("k", copy.deepcopy(LEGACY_VALUES.get(name, NEWER_VALUES.get(name))))
    assert (outcome, len(runs)) == (Succeeded("k", 1, replayed=True), 1)


TUPLE_BEFORE = "11db443b19c415b1e2741ad91017261b12f05b316f3410014a367eb41e02cba6"
"""The digest of ``act(key, (1, 2), extra=1)`` computed by the code before issue 30."""


def test_a_former_digest_that_a_call_of_now_has_is_not_trusted(sqlite_store: Store) -> None:
    """0.1's digest of a tuple call is this version's of the list call: the tuple conflicts.

    The row may be the list call's, recorded by this version: replaying its result for
    the tuple would be the missed action issue 30 is about.
    """
    runs: list[object] = []

    @safe(sqlite_store, name="act")
    def tool(key: str, value: object, extra: int = 0) -> int:
        runs.append(value)
        return len(runs)

    tool("k", [1, 2], extra=1)
    assert digest([1, 2], extra=1) == TUPLE_BEFORE
    with pytest.raises(KeyConflictError):
        tool("k", (1, 2), extra=1)


def test_a_key_recorded_before_issue_30_replays_a_call_with_an_enum_and_no_default(
    sqlite_store: Store,
) -> None:
    """A 0.1 row for a call that gives every argument replays it if it holds an enum.

    No default proves the digest an older version's here; the former forms of enums and
    classes do: no value has them now.
    """
    runs: list[object] = []

    @safe(sqlite_store, name="act")
    def tool(key: str, value: object, extra: int = 0) -> int:
        runs.append(value)
        return len(runs)

    samples = [*SAMPLES, {1, "a"}, {2, 10}]
    tool("k", samples, extra=1)
    with sqlite_store._transaction(sync=False) as db:
        db.execute("UPDATE calls SET args_hash = ? WHERE key = 'k'", (PINNED,))
    assert (tool("k", samples, extra=1), runs) == (Succeeded("k", 1, replayed=True), [samples])


def test_a_default_whose_form_changed_proves_nothing(sqlite_store: Store) -> None:
    """A call leaving out ``tags=()`` conflicts with a key recorded for ``tags=[]``.

    0.1 wrote the default ``()`` as this version writes ``[]``: a digest with it in may be
    this version's for the list, so it is no proof of an older version's.
    """
    runs: list[object] = []

    @safe(sqlite_store, name="tagged")
    def tool(key: str, value: object, tags: object = ()) -> int:
        runs.append(tags)
        return len(runs)

    tool("k", 1, tags=[])
    with pytest.raises(KeyConflictError):
        tool("k", 1)


NOW_VALUES: dict[str, object] = {
    "tuple": (1, "a"),
    "frozenset": frozenset({1, 2}),
    "bytearray": bytearray(b"ab"),
    "int subclass": one.Cents(5),
    "str subclass": one.Text("a"),
    "float subclass": one.Rounded(1.5),
    "enum": one.Tier.GOLD,
    "flag of undeclared bits": one.Perm(8),
    "dataclass": one.Order(1),
    "attrs": one.Customer("ada"),
    "pydantic model": one.Invoice(amount=1),
    "NamedTuple": one.Point(1, 2),
    "pure path": PurePosixPath("a/b"),
    "Windows path": PureWindowsPath("a/b"),
    "datetime in a ZoneInfo": WINTER.replace(tzinfo=NEW_YORK),
    "datetime of fold 1": WINTER.replace(fold=1),
    "OrderedDict": collections.OrderedDict([("b", 2), ("a", 1)]),
    "numpy str": np.str_("a"),
    "numpy longlong": np.longlong(1),
}
"""Values of each form issue 30 added."""

NOW_DIGESTS: dict[str, str] = {
    "tuple": "17069bc06b733b1a980bdc98c28f08e22e6a0f79c9bfffb17f2b019b5a55dd85",
    "frozenset": "cf9479f5dc2febb92a4e85a1f84877aacde9d1a0ba50e3595fab1899f572c288",
    "bytearray": "c3aef30b370133c7dc2af68d035ea8374325f5dd6c36e664d724e1834fe99bf1",
    "int subclass": "e895d467aa7751d8f69aeee8d527427aa0b8dded89b50130b8422ed497f61571",
    "str subclass": "29b252d0e9ac292243b7756049b83aa3b6ec5f2e5580bdc11e2a378033a06958",
    "float subclass": "4265f65a7f05b020aadc6d5aedf7bc5b3a8206996572f60976524593c780d7d4",
    "enum": "53773f7ba862ecfda3bc793dc6c459c923acc3032cbd1e8e06dfdac435635fc6",
    "flag of undeclared bits": "708e12d1b8c662e49ef4e2d5f3f94f7d080bb86a21486f12a32fc18995feedab",
    "dataclass": "46adda6495e99e095b2e54f3dc889cea3ac85d7f0d6e893fa427e823803c883b",
    "attrs": "1f4a026107dcb6e054f689ef5c127ecb3f2bae4f03d75860ba40cd4a55cf812d",
    "pydantic model": "a9ba25c1cb428e705b2f43d9c170620197929b5a62d70b827ae085f39375cb50",
    "NamedTuple": "58193581d1994f3ad2ff7daf3987d0b2682cb597091459008cda78a64fa7887e",
    "pure path": "67e67a921b3161e64e7234e79243f2ec3aafed78ca949bea1d50c525d0e90a53",
    "Windows path": "c5c53f316f38362334573fa8a6c644b0a94be02929b6a8229585884bb0640850",
    "datetime in a ZoneInfo": "72e7a2e8727cca994f14a29521011b94b3f4fb4cc251bba0cf5e1d7cde6806a7",
    "datetime of fold 1": "d576f24cc2f0ba9891610380b581ad00de32479436942bd5f96a54897e2919bd",
    "OrderedDict": "aa736150b8ef18f1cba1b7a0181ad09b7fbb367307da0cbbddad38ed9db6c11f",
    "numpy str": "d2423f427e634614fe323b9a020c29e9b08b80f730a1d0f41ec279c6d2287600",
    "numpy longlong": "dbdf0e4cfc3308eac4d4012df2b9c055082c88c84362e91a4a2b48806b962a66",
}
"""The digests of ``NOW_VALUES`` as issue 30's code computed them (the same on Python 3.11,
3.12 and 3.13). A compatibility fixture, hard-coded on purpose: ledgers written from now
on hold them, and default keys embed them."""


def test_the_forms_issue_30_added_keep_their_digests() -> None:
    """Values of each form added by issue 30 hash as ledgers written since hold them."""
    assert {name: digest(value) for name, value in NOW_VALUES.items()} == NOW_DIGESTS


def test_a_paths_digest_is_not_the_module_python_defines_its_class_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python 3.13 defines PurePosixPath in pathlib._local: its digest stays the same."""
    monkeypatch.setattr(PurePosixPath, "__module__", "pathlib._local")
    assert digest(PurePosixPath("a/b")) == NOW_DIGESTS["pure path"]


def test_a_doubt_reasons_digest_is_not_the_module_safeact_defines_it_in() -> None:
    """DoubtReason moved from safeact._protocol to safeact._doubt: its digest stays the same."""
    # As safeact computed it while DoubtReason was defined in safeact._protocol.
    before = "97c537f4ff9bb2bccac02d5af94ae48381af49935641bdbd50a4e6bccf2b9366"
    assert digest(DoubtReason.CRASHED) == before


def test_a_doubt_reason_pickles_under_the_module_it_was_first_defined_in() -> None:
    """A pickled reason (in an InDoubtError a durable engine stored) names safeact._protocol."""
    pickled = pickle.dumps(DoubtReason.CRASHED)
    assert b"safeact._protocol" in pickled
    assert b"safeact._doubt" not in pickled
    assert pickle.loads(pickled) is DoubtReason.CRASHED  # noqa: S301 - our own bytes


# The property: equal in type and content exactly when one digest.

MODULES = st.sampled_from([one, two])
PATHS = [PurePosixPath, PureWindowsPath, PosixPath]
ZONES = [
    None,
    dt.UTC,
    dt.timezone(dt.timedelta(hours=-5)),
    dt.timezone(dt.timedelta(hours=-4)),
    NEW_YORK,
    zoneinfo.ZoneInfo("UTC"),
]
"""Zones that share offsets: New York's is -5 or -4, and UTC is a ZoneInfo or a timezone."""

KEYS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from([0.0, -0.0, 1.5, math.nan, math.inf]),
    st.sampled_from(["", "a", "A"]),
    st.sampled_from([b"", b"a"]),
    st.sampled_from(["0", "-0", "1", "1.0", "1.5"]).map(decimal.Decimal),
    st.builds(lambda m, n: m.Cents(n), MODULES, st.integers(0, 2)),
    st.builds(lambda m, s: m.Text(s), MODULES, st.sampled_from(["", "a"])),
    st.builds(lambda m, b: m.Blob(b), MODULES, st.sampled_from([b"", b"a"])),
    st.builds(lambda m, x: m.Rounded(x), MODULES, st.sampled_from([1.2, 1.4, -0.0])),
    st.builds(lambda m, d: m.Money(d), MODULES, st.sampled_from(["1.1", "1.10", "1.104"])),
    st.builds(lambda m, name: m.Tier[name], MODULES, st.sampled_from(["GOLD", "SILVER", "OR"])),
    st.builds(lambda m: m.Level.ONE, MODULES),
    st.builds(lambda m, bits: m.Perm(bits), MODULES, st.sampled_from([0, 1, 3, 8, 9, 16])),
    st.builds(lambda m, bits: m.Bits(bits), MODULES, st.sampled_from([1, 3, 4, 8])),
    st.builds(lambda m, n: m.Order(n), MODULES, st.integers(0, 1)),
    st.builds(lambda m, s: m.Customer(s), MODULES, st.sampled_from(["", "a"])),
    st.builds(
        lambda path, text: path(text), st.sampled_from(PATHS), st.sampled_from(["a", "A", "a/b"])
    ),
    st.builds(
        lambda base, zone, fold: base.replace(tzinfo=zone, fold=fold),
        st.sampled_from([WINTER, AMBIGUOUS]),
        st.sampled_from(ZONES),
        st.integers(0, 1),
    ),
    st.builds(
        lambda zone, fold: dt.time(1, 30, tzinfo=zone, fold=fold),
        st.sampled_from(ZONES),
        st.integers(0, 1),
    ),
    st.sampled_from([dt.date(2026, 1, 1), Year(2026, 1, 1)]),
)
"""Values of every kind that can be a dict key or a set member, over a few values each."""

LEAVES = KEYS | st.builds(lambda m, n: m.Invoice(amount=n), MODULES, st.integers(0, 1))
LEAVES |= st.sampled_from([b"", b"a"]).map(bytearray)


def _compound(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.builds(lambda m, x, y: m.Point(x, y), MODULES, children, children),
        st.sets(KEYS, max_size=3),
        st.frozensets(KEYS, max_size=3),
        st.dictionaries(KEYS, children, max_size=3),
        st.dictionaries(KEYS, children, max_size=3).map(collections.OrderedDict),
    )


VALUES = st.recursive(LEAVES, _compound, max_leaves=6)


def _other(cls: type) -> Any:
    """The class of ``cls``'s name in the other loading of ``same_names``, if it is one's."""
    for mine, theirs in ((one, two), (two, one)):
        if cls.__module__ == mine.__name__:
            return getattr(theirs, cls.__name__)
    return None


def twins(value: Any) -> list[object]:  # noqa: C901, PLR0911, PLR0912 - a case per kind
    """Values close to ``value``: the pairs of issue 30.

    Equal to it by ``==``, or shown alike, but of another type, module, zone or fold, or of
    another exponent, case or bit.
    """
    other = _other(type(value))
    if isinstance(value, enum.Flag):
        return [other(value.value), int(value.value), type(value)(value.value * 2 or 8)]
    if isinstance(value, enum.Enum):
        return [other(value.value), value.value]
    if isinstance(value, one.Order | two.Order):
        return [other(value.id), type(value)(1 - value.id)]
    if isinstance(value, one.Customer | two.Customer):
        return [other(value.name), type(value)(value.name.upper())]
    if isinstance(value, one.Invoice | two.Invoice):
        return [other(amount=value.amount)]
    if isinstance(value, bool | int):
        return [int(value), float(value), decimal.Decimal(int(value)), one.Cents(value)]
    if isinstance(value, float):
        return [-value, float(value), one.Rounded(value), type(value)(value + 0.2)]
    if isinstance(value, str):
        return [str(value), one.Text(value), two.Text(value), value.upper()]
    if isinstance(value, bytes | bytearray):
        return [bytes(value), bytearray(value), one.Blob(value), two.Blob(value)]
    if isinstance(value, decimal.Decimal):
        return [value + decimal.Decimal("0.00"), one.Money(value), two.Money(value)]
    if isinstance(value, pathlib.PurePath):
        paths: list[object] = [path(value.as_posix()) for path in PATHS]
        return [*paths, PureWindowsPath(str(value).upper())]
    if isinstance(value, dt.datetime | dt.time):
        return [value.replace(fold=1 - value.fold), *(value.replace(tzinfo=z) for z in ZONES)]
    if isinstance(value, dt.date):
        return [Year(value.year, 1, 1), dt.date(value.year, 1, 1), dt.date(value.year, 2, 1)]
    return []


def _changes(data: st.DataObject) -> bool:
    """Whether to change this part: one time in three, so that a pair often differs in one."""
    return data.draw(st.integers(0, 2)) == 0


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def near(value: Any, data: st.DataObject, *, key: bool = False) -> object:
    """A value shaped like ``value`` whose parts are mostly kept, a few swapped for twins.

    A container may become another of its kind (a list a tuple or a NamedTuple, a set a
    frozenset, a dict an OrderedDict, an OrderedDict reversed); a part that changes is a
    twin of it, or a new leaf. A ``key`` stays hashable.
    """
    if isinstance(value, list | tuple):
        items = [near(item, data) for item in value]
        shapes: list[Any] = [list, tuple] + ([one.Point, two.Point] if len(items) == 2 else [])
        shape = data.draw(st.sampled_from(shapes)) if _changes(data) else type(value)
        return shape._make(items) if hasattr(shape, "_make") else shape(items)
    if isinstance(value, set | frozenset):
        # In an order of their own: a NaN hashes by its address, so a set's order varies.
        members = {near(item, data, key=True) for item in sorted(value, key=repr)}
        return (data.draw(st.sampled_from([set, frozenset])) if _changes(data) else type(value))(
            members
        )
    if isinstance(value, dict):
        pairs = [(near(k, data, key=True), near(v, data)) for k, v in value.items()]
        if _changes(data):
            pairs.reverse()
        shapes = [dict, collections.OrderedDict]
        return (data.draw(st.sampled_from(shapes)) if _changes(data) else type(value))(pairs)
    if not _changes(data):
        return value
    close = [twin for twin in twins(value) if not key or _hashable(twin)]
    twin: bool = data.draw(st.booleans())
    if close and twin:
        return data.draw(st.sampled_from(close))
    return data.draw(KEYS if key else LEAVES)


def _matched(first: list[object], second: list[object]) -> bool:
    """Whether the items pair off as values equal in type and content, in any order."""
    left = list(second)
    for item in first:
        index = next((i for i, other in enumerate(left) if same(item, other)), None)
        if index is None:
            return False
        del left[index]
    return not left


def same(first: Any, second: Any) -> bool:  # noqa: C901, PLR0911 - a case per kind
    """Equal in type and content: of one exact type and ``==``, recursively.

    As strict as safeact is on purpose: a float's zero by its sign (every NaN is alike), a
    Decimal by its exponent too, a path by its text (a Windows path's case), a datetime or
    time by its zone (of one type and ``==``) and fold too.
    """
    if type(first) is not type(second):
        return False
    if isinstance(first, float):
        if math.isnan(first) or math.isnan(second):
            return math.isnan(first) and math.isnan(second)
        return bool(first == second) and math.copysign(1, first) == math.copysign(1, second)
    if isinstance(first, decimal.Decimal):
        return bool(first.as_tuple() == second.as_tuple())
    if isinstance(first, list | tuple):  # a NamedTuple too
        return len(first) == len(second) and all(map(same, first, second))
    if isinstance(first, set | frozenset):
        return _matched(list(first), list(second))
    if isinstance(first, collections.OrderedDict):
        return same(list(first.items()), list(second.items()))
    if isinstance(first, dict):
        return _matched([list(p) for p in first.items()], [list(p) for p in second.items()])
    if isinstance(first, dt.datetime | dt.time):
        zones = (first.tzinfo, second.tzinfo)
        same_zone = type(zones[0]) is type(zones[1]) and zones[0] == zones[1]
        return bool(first == second) and first.fold == second.fold and same_zone
    if isinstance(first, pathlib.PurePath):
        return str(first) == str(second)
    return bool(first == second)


@settings(max_examples=400)
@given(VALUES, st.data())
def test_values_hash_alike_exactly_when_equal_in_type_and_content(
    first: object, data: st.DataObject
) -> None:
    """Two values hash alike exactly when they are equal in type and content, recursively."""
    how = data.draw(st.sampled_from(["near", "near", "near", "copy", "other"]))
    if how == "near":
        second = near(first, data)
    else:
        second = copy.deepcopy(first) if how == "copy" else data.draw(VALUES)
    assert (digest(first) == digest(second)) == same(first, second)
