"""The args hash: the same call hashes alike in every process, different calls differ.

Two calls are the same call when their bound arguments are equal by ``==`` and of the same
type, recursively, so ``1``, ``1.0`` and ``True`` are three calls, and so are ``[1]``,
``(1,)`` and a NamedTuple of 1 (issue 30; ``test_args_hash_types.py`` checks the types of
each kind). Where safeact is
stricter (the forms that ledgers hold cannot change), the error is a ``KeyConflictError``,
never a silent replay: the sign of a zero float counts, a Decimal's exponent counts
(``1.10`` is not ``1.1``), and one instant in two time zones is two calls. Every NaN is
the same NaN: a retry with NaN is the same call.
"""

import copy
import dataclasses
import datetime as dt
import decimal
import enum
import fractions
import inspect
import math
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Generic, NamedTuple, TypeVar

import attrs
import numpy as np
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from safeact import KeyConflictError, Saga, Store, Succeeded, get_store, safe
from safeact._keys import ArgsHash, args_hash, former_args_hash

T = TypeVar("T")

NAN = math.nan

MAX_DEPTH = 100
"""How deep an argument may nest, as the docs say."""


class Tier(enum.Enum):
    GOLD = "gold"


class Level(enum.IntEnum):
    ONE = 1


@attrs.frozen
class Customer:
    name: str
    tags: frozenset[str]


@dataclasses.dataclass(frozen=True)
class Order:
    id: uuid.UUID
    total: decimal.Decimal


class Plain:
    """An object with no stable content: its repr names its address."""


class Where:
    """A path-like object whose str() would name its address."""

    def __fspath__(self) -> str:
        return "/srv/where"


class Marker(enum.Enum):
    """An enum whose values are plain objects."""

    START = object()
    STOP = object()  # noqa: PIE796 - a second, distinct object, not the same value


@dataclasses.dataclass
class Request:
    body: str
    trace_id: str = dataclasses.field(compare=False)


class Cents(int):
    """An int subclass: hashed as an int."""


class Point(NamedTuple):
    x: int
    y: int


@attrs.frozen
class Pair:
    left: object
    right: object


@dataclasses.dataclass
class Box:
    item: object
    note: str = dataclasses.field(default="", compare=False)


@dataclasses.dataclass
class Holder:
    client: object


class Invoice(pydantic.BaseModel):
    amount: int
    currency: str = "EUR"


class Loose(pydantic.BaseModel):
    """A model that keeps extra fields, with a field of any type."""

    model_config = pydantic.ConfigDict(extra="allow", arbitrary_types_allowed=True)
    item: Any


class Session(pydantic.BaseModel):
    user: str
    _token: str = pydantic.PrivateAttr(default="")


class Wrapper(pydantic.BaseModel, Generic[T]):
    value: T


def act(key: str, value: object, extra: int = 0) -> None:
    raise AssertionError


SIGNATURE = inspect.signature(act)
PLAN = ArgsHash(SIGNATURE)


def digest(value: object, **kwargs: object) -> str:
    """The digest of ``act(key, value, **kwargs)``, as a tool computes it."""
    return PLAN((value,), kwargs)


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture
def sqlite_store(ledger: Path) -> Iterator[Store]:
    """A store on a fresh SQLite ledger: hashing is the same on every backend."""
    with get_store(ledger) as opened:
        yield opened


def second_call(store: Store, first: object, second: object) -> Succeeded[int]:
    """Call one tool with ``first``, then with the same key and ``second``; return the latter."""
    runs: list[object] = []

    @safe(store, name="act")
    def record(key: str, value: object) -> int:
        runs.append(value)
        return len(runs)

    record("k", first)
    outcome = record("k", second)
    assert isinstance(outcome, Succeeded)
    return outcome


SAMPLES: list[object] = [
    None,
    True,
    1,
    1.5,
    "text",
    b"\x00\xff",
    [1, "a"],
    (1, "a"),
    {"b": 1, "a": 2},
    {3: "x", "3": "y"},
    {"alpha", "beta", "gamma", "delta"},
    frozenset({1, 2, 3}),
    Tier.GOLD,
    dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC),
    dt.date(2026, 11, 30),
    uuid.UUID(int=5),
    decimal.Decimal("1.10"),
    PurePosixPath("/srv/x"),
    Where(),
    dt.timedelta(days=1, seconds=2),
    Marker.START,
    Customer("ada", frozenset({"vip", "eu", "beta"})),
    Order(uuid.UUID(int=9), decimal.Decimal("9.99")),
]

NEWER_SAMPLES: list[object] = [
    np.int64(50),
    np.float32(1.5),
    np.bool_(True),  # noqa: FBT003 - a numpy bool, not a flag
    np.datetime64("2026-11-30"),
    np.array([[1, 2]], dtype=np.int32),
    np.array([decimal.Decimal(1), "a"], dtype=object),
    1 + 2j,
    fractions.Fraction(1, 3),
    Invoice(amount=5),
    10**5000,
]
"""Kinds hashed by content since issue 12 (numpy, complex, Fraction, pydantic, huge ints)."""

HASH_IN_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.test_args_hash import NEWER_SAMPLES, SAMPLES, digest
print("\\n".join(digest(value) for value in SAMPLES + NEWER_SAMPLES))
"""


def test_hashes_are_the_same_in_processes_with_different_hash_seeds() -> None:
    """Sets, dicts and objects hash alike whatever PYTHONHASHSEED a process has."""
    root = str(Path(__file__).resolve().parent.parent)
    outputs = {
        subprocess.run(
            [sys.executable, "-c", HASH_IN_CHILD, root],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
    assert outputs == {"\n".join(digest(value) for value in [*SAMPLES, *NEWER_SAMPLES]) + "\n"}


PINNED = "5b6852083e1d188703b110fa3874536ba4e60c5acc0a0686ad5e052ed7249f71"
"""The hash of every sample kind, as the ledgers written so far hold it.

Computed by the code of commit 8812384, before issue 12 (a compatibility fixture). The
plain object once among the samples is refused now, so it is left out.
"""


def test_hashes_are_the_ones_existing_ledgers_hold() -> None:
    """Every kind of value hashes as it did when ledgers recorded it, so their keys still replay.

    Sets mixing kinds ({1, "a"}) and numbers that sort apart as text ({2, 10}) are in too.
    Some samples (a tuple, enums, classes, a pure path) have other forms since issue 30:
    ``former`` is what a call is matched with when the ledger holds such a digest.
    """
    assert PLAN.former(([*SAMPLES, {1, "a"}, {2, 10}],), {"extra": 1}) == PINNED


@pydantic.dataclasses.dataclass
class Line:
    sku: str
    quantity: int


LEGACY_VALUES: dict[str, object] = {
    "numpy float64": np.float64(1.5),
    "numpy float64 NaN": np.float64(NAN),
    "numpy str": np.str_("a"),
    "numpy bytes": np.bytes_(b"a"),
    "int of 4300 digits": 10**4300 - 1,
    "negative, 4300 digits": -(10**4300 - 1),
    "int subclass": Cents(5),
    "IntEnum": Level.ONE,
    "NamedTuple": Point(1, 2),
    "bytearray": bytearray(b"ab"),
    "NaN, -0.0, infinities": [NAN, -0.0, math.inf, -math.inf],
    "naive datetime, time": [dt.datetime(2026, 1, 1, 9), dt.time(9, 30)],  # noqa: DTZ001
    "nested objects": Box(Pair(Customer("ada", frozenset()), [Request("pay", "t")]), "x"),
    "pydantic dataclass": Line("sku-1", 2),
    "mapping of mixed keys": {1: "a", "1": b"a", None: [], (1, 2): {3}},
}
"""Values of the kinds hashed before issue 12, the corners of their forms included."""

LEGACY_DIGESTS: dict[str, str] = {
    "numpy float64": "1b8985668d8b8a4567f40ccaf67099d4a1f4fd65e69f610e0ffe7d1e3a6372c2",
    "numpy float64 NaN": "61d85d3345963bedd7ed833e625c02f718ab5d5caa3c3a9bcc122604cd67f013",
    "numpy str": "a445afad21971c482d53b0abbc86e0c108b3e5b17b7b5473fabeab3e4df91999",
    "numpy bytes": "e7a6c0214e276ec18ae30ad0fcbbd8b1abec6c087b6bc10ca153bd2d884f371c",
    "int of 4300 digits": "4d4cea9e46498801ec26bc251d5141706712be5a1bccb0add3885f1dd0e3d84b",
    "negative, 4300 digits": "39097e12c776b6cf26df63a2cde68559c966e9775c12588503bca879b91d494c",
    "int subclass": "257b1bd64b9deb64c4165dba722513e991950e6780e56b4579973fa795465ab2",
    "IntEnum": "a63d9a39b5bba6f42545b867054011042940d504583f69cdef08862bb4466c60",
    "NamedTuple": "9e114f13b9fa9b5bb0fbfc2321ef5a13adc2af05a4907180665ae06121d9dcbd",
    "bytearray": "f1dca61372250565e5d6eb4c5649b469e973a591db68515c06138120a6514fa2",
    "NaN, -0.0, infinities": "09b86f37067623aa2f8ade190df0883d3d7ba1caf7d4981aa21d56c84327f123",
    "naive datetime, time": "63f5ae5d10fc3b40d74d6e68c38a76d3728d45e17578be9ab0292492265bfbf4",
    "nested objects": "eb4524278a89abf1d6fc252acfe18b690e6585e649852daebbd2fd8d208379df",
    "pydantic dataclass": "5073cb66cb8a5fb40f8ed047743c5271c7b933e47479ba9d21f9f7893fac27db",
    "mapping of mixed keys": "3219eaec30704c1c42244c994d4073fc7d572b5437deef578143110ba3e8cb54",
}
"""The digests of ``LEGACY_VALUES`` that the code before issue 12 computed.

A compatibility fixture, hard-coded on purpose: these digests were computed by the code of
commit 8812384 and are in users' ledgers, so a retry after an upgrade must hash the same.
"""


def test_kinds_hashed_before_keep_their_digests() -> None:
    """Values of the kinds hashed before issue 12 keep the digests recorded ledgers hold.

    Those digests include the defaulted ``extra``, as safeact 0.1 hashed: ``former`` is
    what a call is matched with when the ledger holds such a digest.
    """
    assert {
        name: PLAN.former((value,), {}) for name, value in LEGACY_VALUES.items()
    } == LEGACY_DIGESTS


NEWER_VALUES: dict[str, object] = {
    "numpy int64": NEWER_SAMPLES[0],
    "numpy float32": NEWER_SAMPLES[1],
    "numpy bool": NEWER_SAMPLES[2],
    "numpy datetime64": NEWER_SAMPLES[3],
    "numpy int32 array": NEWER_SAMPLES[4],
    "numpy object array": NEWER_SAMPLES[5],
    "complex": NEWER_SAMPLES[6],
    "Fraction": NEWER_SAMPLES[7],
    "pydantic model": NEWER_SAMPLES[8],
    "int of 5000 digits": NEWER_SAMPLES[9],
    "SecretStr": pydantic.SecretStr("s3cret"),
    "SecretBytes": pydantic.SecretBytes(b"s3cret"),
    "HttpUrl": pydantic.HttpUrl("https://a.example/hook"),
}
"""Values of the kinds hashed by content since issue 12, one of each form."""

NEWER_DIGESTS: dict[str, str] = {
    "numpy int64": "4c7e6ec30fbfa8486837256a87886931bc0537fac5f95e8c2cd22f9d27791904",
    "numpy float32": "f72c7179bd48f4009f07808db56d088f6e4fd4457bcc3a019ef9a23c73a8eea7",
    "numpy bool": "afe2d7b4ee0721bbdc735507642a122187cb7d31ce7092453d7f6fcfce495394",
    "numpy datetime64": "afe1aba1a1c953a8d4c0c59897b8e8bbbf030b50fbbf3bc366f306b729fccb75",
    "numpy int32 array": "b6835dd251958d7adcbe0e7a4c20451c6884488e2d9490f5efd3875a15d0d309",
    "numpy object array": "8308c620789d4f9f2ca8526b67bbcbcacce95ee401e5e5e0b4816f7054658b84",
    "complex": "d3f1be91a70851767f49f231458d59039d5a744bd85c963d8f19fd3efa6e086a",
    "Fraction": "8154a02f45217fbdc62d106ec7c77d380f697ea9cd0da8d94ea8f11bedf999a0",
    "pydantic model": "bd57becf50fade1bc1935b844f36f87a5b64420291cbf0348e180bdc51cf0ffb",
    "int of 5000 digits": "4a999a3a6e74735f4df71044802ab75b6a858c1d711953a7e9bcacbb30738e34",
    "SecretStr": "05718d0d6b9f5a68de0a5244fa5c26fd45b28a17e35b987ddb2ae24021ce5b0c",
    "SecretBytes": "64ebef6e5f6989fe353c8694c8b78c12e30071984fe399333cc02518a81b4d7e",
    "HttpUrl": "5851d8a4eec26e2df7a1e84abf910a19c00fa5f59786e384e5294d6c57c0c9b1",
}
"""The digests of ``NEWER_VALUES`` as the code of commit eabe5b4 (issue 12) computed them.

A compatibility fixture, hard-coded on purpose, like ``LEGACY_DIGESTS``: ledgers written
since hold them (the tags "complex", "Fraction", "secret", "url" and the numpy forms among
them), so renaming a tag would make a retry conflict with its own key.
"""


def test_kinds_hashed_since_issue_12_keep_their_digests() -> None:
    """Values of the kinds added in issue 12 keep the digests ledgers hold (defaults in)."""
    assert {
        name: PLAN.former((value,), {}) for name, value in NEWER_VALUES.items()
    } == NEWER_DIGESTS


def test_distinct_samples_hash_differently() -> None:
    """Every sample value gives its own hash (1 and "1", a list, its reverse and its tuple)."""
    values = [*SAMPLES, *NEWER_SAMPLES, Point(1, 2), (1, 2), [1, 2]]
    values += [frozenset({"alpha", "beta", "gamma", "delta"}), bytearray(b"\x00\xff")]
    values += ["1", [2, 1], ["a", 1], {"a": 2}, Customer("bob", frozenset())]
    values += [dt.timedelta(days=2), Marker.STOP, "2026-11-30", {"$bytes": "00ff"}, "/srv/where"]
    values += [np.array([1, 2], dtype=np.int32), 1 - 2j, Invoice(amount=5, currency="USD")]
    assert len({digest(value) for value in values}) == len(values)


def test_equal_content_hashes_alike() -> None:
    """Equal dicts in another order, and equal sets, hash alike."""
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    assert digest({"x", "y", "z"}) == digest({"z", "y", "x"})
    assert digest({2: "b", 1: "a"}) == digest({1: "a", 2: "b"})


def test_fields_left_out_of_equality_are_left_out_of_the_hash() -> None:
    """Dataclass fields with compare=False do not make equal requests differ."""
    assert digest(Request("pay", "trace-1")) == digest(Request("pay", "trace-2"))
    assert digest(Request("pay", "trace-1")) != digest(Request("refund", "trace-1"))


def test_defaults_and_keywords_hash_alike() -> None:
    """f(k, v), f(k, v, 0) and f(k, value=v, extra=0) bind to the same arguments."""
    assert digest(1) == args_hash(SIGNATURE, (1, 0), {}) == args_hash(SIGNATURE, (), {"value": 1})
    assert digest(1) != digest(1, extra=1)


def before_the_deploy(key: str, value: object) -> None:
    raise AssertionError


@given(st.sampled_from(SAMPLES + NEWER_SAMPLES))
def test_a_parameter_added_with_a_default_keeps_the_digest_of_calls_without_it(
    value: object,
) -> None:
    """A deploy that adds ``extra: int = 0`` leaves the digest of calls that do not pass it."""
    before = ArgsHash(inspect.signature(before_the_deploy))((value,), {})
    assert digest(value) == before == args_hash(SIGNATURE, (value,), {})
    assert digest(value, extra=0) == before
    assert digest(value, extra=1) != before


def test_a_key_an_older_version_recorded_with_its_defaults_replays(sqlite_store: Store) -> None:
    """A row whose hash has a defaulted argument in (safeact 0.1) is the same call: no conflict."""
    runs = []

    @safe(sqlite_store)
    def refund(key: str, order: str, memo: str = "") -> str:
        runs.append(order)
        return f"refunded {order}"

    assert refund("k", "o-1") == Succeeded("k", "refunded o-1")
    former = former_args_hash(inspect.signature(refund.__wrapped__), ("o-1",), {})
    with sqlite_store._transaction(sync=False) as db:
        db.execute("UPDATE calls SET args_hash = ? WHERE key = 'k'", (former,))
    assert refund("k", "o-1") == Succeeded("k", "refunded o-1", replayed=True)
    assert refund("k", "o-1", memo="") == Succeeded("k", "refunded o-1", replayed=True)
    with pytest.raises(KeyConflictError):
        refund("k", "o-1", memo="again")
    assert runs == ["o-1"]


# The kinds hashed by content since issue 12, through the public API.


def test_numpy_scalars_of_other_values_conflict(sqlite_store: Store) -> None:
    """charge(k, np.int64(5000)) after charge(k, np.int64(50)) conflicts instead of replaying."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, np.int64(50), np.int64(5000))


def test_numpy_arrays_of_other_values_conflict(sqlite_store: Store) -> None:
    """A numpy array of other values under the same key conflicts."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, np.array([50, 1]), np.array([5000, 1]))


def test_complex_numbers_of_other_values_conflict(sqlite_store: Store) -> None:
    """A complex number of another value under the same key conflicts."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, 1 + 2j, 1 - 2j)


def test_fractions_of_other_values_conflict(sqlite_store: Store) -> None:
    """A Fraction of another value under the same key conflicts."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, fractions.Fraction(1, 3), fractions.Fraction(2, 3))


def test_pydantic_models_of_other_fields_conflict(sqlite_store: Store) -> None:
    """A pydantic model with another field value under the same key conflicts."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, Invoice(amount=50), Invoice(amount=5000))


class Webhook(pydantic.BaseModel):
    url: pydantic.HttpUrl
    secret: pydantic.SecretStr


def hook(url: str, secret: str) -> Webhook:
    return Webhook.model_validate({"url": url, "secret": secret})


def test_pydantic_urls_and_secrets_are_hashed_by_value(sqlite_store: Store) -> None:
    """A model holding a URL and a secret is compared by them: another value conflicts."""
    first = hook("https://a.example/hook", "s1")
    assert digest(first) == digest(hook("https://a.example/hook", "s1"))
    assert digest(first) != digest(hook("https://b.example/hook", "s1"))
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, first, hook("https://a.example/hook", "s2"))


def test_pydantic_extra_fields_are_hashed() -> None:
    """Models that differ only in an extra field hash apart; no extra is the same as none."""
    assert digest(Loose(item=1)) != digest(Loose.model_validate({"item": 1, "tag": "x"}))
    assert digest(Loose(item=1)) == digest(Loose.model_construct(item=1, _fields_set={"item"}))


def test_pydantic_private_attributes_are_hashed() -> None:
    """Models that differ only in a private attribute hash apart, as they compare unequal."""
    first, second = Session(user="ada"), Session(user="ada")
    second._token = "other"  # noqa: S105 - a made-up value, to tell the two apart
    assert digest(first) != digest(second)


def test_generic_pydantic_models_hash_as_their_origin() -> None:
    """Wrapper[int](value=1) hashes like Wrapper(value=1), which it equals."""
    assert digest(Wrapper[int](value=1)) == digest(Wrapper(value=1)) != digest(Wrapper(value=2))


def test_array_hash_depends_on_content_not_layout() -> None:
    """A transposed view, a big-endian copy and a fresh C array of the same values hash alike."""
    grid = np.arange(6, dtype=np.int64).reshape(2, 3)
    fresh = np.array([[0, 3], [1, 4], [2, 5]], dtype=np.int64)
    assert digest(grid.T) == digest(fresh) == digest(fresh.astype(">i8"))
    assert digest(fresh) != digest(fresh + 1)


def test_array_dtype_and_shape_are_part_of_the_call() -> None:
    """Arrays of equal values but another dtype or shape hash apart."""
    values = [np.array([1, 2], dtype=np.int64), np.array([1, 2], dtype=np.int32)]
    values += [np.array([[1, 2]], dtype=np.int64)]
    assert len({digest(value) for value in values}) == 3


def test_object_arrays_are_hashed_by_their_items() -> None:
    """Object arrays of equal items hash alike, and of other items apart."""
    first = np.array([decimal.Decimal("1.5"), "a"], dtype=object)
    same = np.array([decimal.Decimal("1.5"), "a"], dtype=object)
    other = np.array([decimal.Decimal("2.5"), "a"], dtype=object)
    assert digest(first) == digest(same) != digest(other)


def test_every_nan_hashes_alike() -> None:
    """Every NaN is the same NaN, in a float, a complex, a numpy scalar or an array."""
    negative_nan = np.frombuffer(bytes.fromhex("0000c0ff"), dtype=np.float32)[0]
    assert digest(np.float32(math.nan)) == digest(negative_nan) != digest(np.float32(1))
    assert digest(np.array([math.nan])) == digest(np.array([-math.nan])) != digest(np.array([1.0]))
    assert digest(complex(math.nan, 1)) == digest(complex(math.nan, 1)) != digest(complex(1, 1))


def test_a_complex_arrays_nan_parts_are_made_alike_and_its_other_parts_kept() -> None:
    """In a complex array, a NaN part is made the one NaN; the other part still counts."""
    nan_imag = np.array([complex(1, math.nan)])
    assert digest(nan_imag) == digest(np.array([complex(1, -math.nan)]))
    assert digest(nan_imag) != digest(np.array([complex(2, math.nan)]))
    assert digest(np.array([complex(math.nan, 1)])) != digest(np.array([complex(math.nan, 2)]))


def test_arrays_that_cannot_hold_nan_hash_by_their_bytes() -> None:
    """Strings and datetimes (NaT included) hash by content; only floats have NaNs to mend."""
    for text, dtype in ((["a", "bc"], "U2"), (["NaT", "2026-12-02"], "datetime64[s]")):
        assert digest(np.array(text, dtype=dtype)) == digest(np.array(text, dtype=dtype))
    assert digest(np.array(["a"])) != digest(np.array(["b"]))


@pytest.mark.parametrize(
    ("value", "what", "fix"),
    [
        (
            np.ma.masked_array([1, 2]),
            (
                "a value of type numpy.ma.MaskedArray, an ndarray subclass whose equality "
                "safeact does not know"
            ),
            "Pass numpy.asarray(value) if its data alone makes the call",
        ),
        (
            np.array([1.5], dtype=np.longdouble),
            f"a numpy value of dtype {np.dtype(np.longdouble)}, whose bytes safeact cannot compare",
            "Convert it to a plain dtype (numbers, bool, datetime64, fixed-width strings)",
        ),
    ],
    ids=["subclass", "long double"],
)
def test_a_numpy_value_safeact_cannot_compare_is_refused_with_the_fix(
    value: object, what: str, fix: str
) -> None:
    """The refusal names the type or dtype and the fix, as the argument or inside it."""
    for argument, where in ((value, "it is"), ([value], "it holds")):
        with pytest.raises(TypeError) as refused:
            digest(argument)
        assert str(refused.value).startswith(
            f"cannot hash parameter 'value': {where} {what}. {fix}"
        )


def test_an_int_of_more_digits_than_json_writes_is_hashed_from_the_first_such_int() -> None:
    """10**4300, the first int json.dumps cannot write by default, is hashed in hex, not refused."""
    first_too_long = 10**4300
    assert digest(first_too_long) != digest(first_too_long + 1)


def test_equal_values_of_other_types_are_other_calls() -> None:
    """1, 1.0, True, np.int64(1), np.float64(1) and arrays of 1 by another dtype all differ."""
    values: list[object] = [1, 1.0, True, 1 + 0j, fractions.Fraction(1), decimal.Decimal(1)]
    values += [np.int64(1), np.int32(1), np.float64(1), np.array([1]), np.array([1.0])]
    assert len({digest(value) for value in values}) == len(values)


def test_the_documented_stricter_cases_hash_apart() -> None:
    """A Decimal's exponent and a zero's sign count, in floats, complex parts and numpy floats."""
    pairs: list[tuple[object, object]] = [
        (decimal.Decimal("1.10"), decimal.Decimal("1.1")),
        (0.0, -0.0),
        (complex(0.0, 1), complex(-0.0, 1)),
        (np.float32(0.0), np.float32(-0.0)),
        (np.array([0.0]), np.array([-0.0])),
    ]
    assert [digest(first) != digest(second) for first, second in pairs] == [True] * len(pairs)


def test_numpy_float64_hash_ignores_print_options() -> None:
    """A numpy float64 hashes alike whatever numpy.set_printoptions says, as its repr does not."""
    default = digest(np.float64(1.5))
    with np.printoptions(legacy="1.25"):
        assert digest(np.float64(1.5)) == default


def test_huge_ints_are_hashed_by_content(sqlite_store: Store) -> None:
    """An int too long for JSON (10**5000) is hashed, and another one conflicts."""
    with pytest.raises(KeyConflictError):
        second_call(sqlite_store, 10**5000, 10**5000 + 1)


def test_an_int_longer_than_the_process_allows_is_refused() -> None:
    """An int over a lowered sys.set_int_max_str_digits limit is refused, naming the limit."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        digest(10**640 - 1)  # 640 digits: within the limit
        for argument, where in ((10**640, "it is"), ([10**640], "it holds")):
            with pytest.raises(TypeError) as refused:
                digest(argument)
            assert str(refused.value).startswith(f"cannot hash parameter 'value': {where} ")
            assert "an int of more than 640 digits" in str(refused.value)
            assert "Raise the limit to 4300 (Python's default) or more" in str(refused.value)
    finally:
        sys.set_int_max_str_digits(limit)


# Values that cannot be hashed are refused before anything runs.


def test_deep_nesting_is_refused_before_anything_runs(sqlite_store: Store) -> None:
    """A list 100,000 levels deep is refused by a TypeError naming tool and parameter."""
    runs: list[object] = []

    @safe(sqlite_store, name="deep")
    def deep(key: str, value: object) -> int:
        runs.append(value)
        return 1

    with pytest.raises(TypeError, match=rf"^deep: cannot hash parameter 'value'.*{MAX_DEPTH}"):
        deep("k", nested(100_000))
    assert (runs, sqlite_store.get("k")) == ([], None)


def test_a_list_that_holds_itself_is_refused() -> None:
    """A list that holds itself is refused as nested too deep."""
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(TypeError, match="holds itself"):
        digest(loop)


def test_a_stack_too_short_for_the_argument_is_a_clear_refusal() -> None:
    """An argument within the depth limit, hashed with little stack left, is refused clearly."""
    value = nested(MAX_DEPTH - 1)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 40)
    try:
        with pytest.raises(TypeError, match="parameter 'value': it nests too deeply"):
            digest(value)
    finally:
        sys.setrecursionlimit(limit)


@attrs.define
class Slotted:
    amount: int


@attrs.frozen
class Shell:
    inner: object


@dataclasses.dataclass(frozen=True)
class Husk:
    inner: object


def in_private(inner: object) -> Session:
    session = Session(user="ada")
    session._token = inner  # type: ignore[assignment] # private attributes are not validated
    return session


def in_object_array(inner: object) -> object:
    array = np.empty(1, dtype=object)
    array[0] = inner
    return array


# What wraps a value one step deeper, what sits innermost, and how many wrappings hash: a
# list or an object array is one level, an object two (itself and its fields), a path one
# more for its text.
DEPTHS = {
    "list": (lambda inner: [inner], 1, MAX_DEPTH),
    "set": (lambda inner: frozenset([inner]), 1, MAX_DEPTH),
    "dict": (lambda inner: {"k": inner}, 1, MAX_DEPTH),
    "object array": (in_object_array, 1, MAX_DEPTH),
    "attrs": (Shell, 1, MAX_DEPTH // 2),
    "dataclass": (Husk, 1, MAX_DEPTH // 2),
    "pydantic field": (lambda inner: Loose(item=inner), 1, MAX_DEPTH // 2),
    "pydantic extra": (lambda inner: Loose(item=None, more=inner), 1, MAX_DEPTH // 2),  # type: ignore[call-arg] # an extra field
    "pydantic private": (in_private, 1, MAX_DEPTH // 2),
    "path in lists": (lambda inner: [inner], PurePosixPath("a"), MAX_DEPTH - 1),
}


@pytest.mark.parametrize(("wrap", "innermost", "deepest"), DEPTHS.values(), ids=DEPTHS.keys())
def test_every_kind_of_container_counts_toward_the_depth_limit(
    wrap: Any, innermost: object, deepest: int
) -> None:
    """A value nested MAX_DEPTH levels deep hashes; one wrapping more is refused as too deep."""

    def wrapped(times: int) -> object:
        value = innermost
        for _ in range(times):
            value = wrap(value)
        return value

    digest(wrapped(deepest))
    with pytest.raises(TypeError, match=rf"it holds a value nested more than {MAX_DEPTH} levels"):
        digest(wrapped(deepest + 1))
    with pytest.raises(TypeError, match=r"\(or one that holds itself\)\. Pass a flatter value;"):
        digest(wrapped(deepest + 1))


def test_a_float_hashes_alike_in_a_process_that_never_imported_numpy() -> None:
    """Hashing a float looks for numpy's float64 only where numpy is imported already."""
    child = textwrap.dedent(
        """
        import inspect, sys
        from safeact._keys import ArgsHash

        def act(key: str, value: object, extra: int = 0) -> None: ...

        print(ArgsHash(inspect.signature(act))((1.5,), {}), "numpy" in sys.modules)
        """
    )
    ran = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == [digest(1.5), "False"]


def test_a_dicts_keys_count_toward_the_depth_limit_as_its_values_do() -> None:
    """A key nested in tuples is refused where a value as deep would be."""

    def keyed(levels: int) -> dict[object, None]:
        key: object = 1
        for _ in range(levels):
            key = (key,)
        return {key: None}

    digest(keyed(MAX_DEPTH - 1))
    with pytest.raises(TypeError, match=rf"it holds a value nested more than {MAX_DEPTH} levels"):
        digest(keyed(MAX_DEPTH))


@pytest.mark.parametrize(
    ("half_built", "type_name", "field"),
    [
        (Request.__new__(Request), "tests.test_args_hash.Request", "body"),
        (Slotted.__new__(Slotted), "tests.test_args_hash.Slotted", "amount"),
        (Invoice.model_construct(), "tests.test_args_hash.Invoice", "amount"),
    ],
    ids=["dataclass", "attrs", "pydantic"],
)
def test_a_half_built_object_is_named_as_the_argument_or_inside_it(
    half_built: object, type_name: str, field: str
) -> None:
    """The refusal says whether the argument is the object or holds it, its type and the fix."""
    what = f"a value of type {type_name} whose field {field!r} was never set"
    fix = "(made without its __init__?). Build it by calling its class; or leave"
    for argument, where in ((half_built, "it is"), ([half_built], "it holds")):
        with pytest.raises(TypeError) as refused:
            digest(argument)
        assert str(refused.value).startswith(f"cannot hash parameter 'value': {where} {what} {fix}")


@pytest.mark.parametrize(
    "half_built",
    [Request.__new__(Request), Slotted.__new__(Slotted), Invoice.model_construct()],
    ids=["dataclass", "attrs", "pydantic"],
)
def test_half_built_objects_are_refused(half_built: object) -> None:
    """An object made without its __init__ is refused, naming the field that is not set."""
    with pytest.raises(TypeError, match=r"parameter 'value'.* whose field '\w+' was never set"):
        digest([half_built])


def test_a_plain_object_inside_an_argument_gets_the_hint_for_a_field_that_holds_it() -> None:
    """Only an object inside the argument, perhaps a field's, is told how to leave a field out."""
    hint = "leave that field out of equality (attrs.field(eq=False)"
    with pytest.raises(TypeError) as alone:
        digest(Plain())
    assert str(alone.value).startswith("cannot hash parameter 'value': it is a value of type ")
    assert hint not in str(alone.value)
    for holder in ([Plain()], Shell(Plain())):
        with pytest.raises(TypeError) as inside:
            digest(holder)
        said = str(inside.value)
        assert said.startswith("cannot hash parameter 'value': it holds a value of type ")
        assert hint in said


def test_plain_object_is_refused_before_anything_runs(sqlite_store: Store) -> None:
    """An object of a plain class is refused, naming tool, parameter, type and both fixes."""
    runs: list[str] = []

    @safe(sqlite_store, name="notify")
    def notify(key: str, client: Plain, message: str) -> str:
        runs.append(key)
        return message

    with pytest.raises(TypeError) as refused:
        notify("k", Plain(), "hi")
    message = str(refused.value)
    assert message.startswith("notify: cannot hash parameter 'client': it is a value of type ")
    assert "tests.test_args_hash.Plain" in message
    assert "@safe(ledger, ignore=('client',))" in message
    assert "an attrs class, a dataclass or a pydantic model" in message
    assert (runs, sqlite_store.get("k")) == ([], None)


@pytest.mark.parametrize(
    "make",
    [lambda: Path(os.devnull).open(), lambda: lambda: 1, threading.Lock, object],  # noqa: SIM115 - closed in the test
    ids=["file", "lambda", "lock", "object"],
)
def test_values_with_no_comparable_content_are_refused(make: Any) -> None:
    """An open file, a function, a lock and a bare object are refused by a TypeError."""
    value = make()
    try:
        with pytest.raises(TypeError, match="cannot compare by content"):
            digest(value)
    finally:
        if hasattr(value, "close"):
            value.close()


def test_incomparable_value_inside_a_field_says_how_to_leave_the_field_out() -> None:
    """A plain object held by a dataclass field is refused, pointing at compare=False."""
    with pytest.raises(TypeError, match=r"it holds a value of type .*compare=False"):
        digest(Holder(Plain()))


@pytest.mark.parametrize(
    "value",
    [
        np.ma.masked_array([1, 2], mask=[False, True]),
        np.zeros(2, dtype=[("a", "i4")]),
        np.longdouble(1),
    ],
    ids=["masked", "structured", "longdouble"],
)
def test_numpy_values_it_cannot_compare_are_refused(value: object) -> None:
    """A masked array, a structured array and a long double are refused by a TypeError."""
    with pytest.raises(TypeError, match="parameter 'value'"):
        digest(value)


# ignore=: parameters left out of the hash.


def test_ignored_parameter_is_passed_to_the_function(sqlite_store: Store) -> None:
    """An ignored client object reaches the function as given."""
    client = Plain()
    seen: list[Plain] = []

    @safe(sqlite_store, ignore=("client",))
    def notify(key: str, client: Plain, message: str) -> str:
        seen.append(client)
        return message

    assert notify("k", client, "hi") == Succeeded("k", "hi")
    assert seen == [client]


def test_changed_ignored_value_replays(sqlite_store: Store) -> None:
    """Another value of an ignored parameter replays instead of conflicting."""

    @safe(sqlite_store, ignore=["client"])
    def notify(key: str, client: object, message: str) -> str:
        return message

    notify("k", Plain(), "hi")
    assert notify("k", None, "hi") == Succeeded("k", "hi", replayed=True)


def test_ignoring_a_parameter_keeps_the_others_checked(sqlite_store: Store) -> None:
    """Another value of a parameter not ignored still conflicts."""

    @safe(sqlite_store, ignore=("client",))
    def notify(key: str, client: Plain, message: str) -> str:
        return message

    notify("k", Plain(), "hi")
    with pytest.raises(KeyConflictError):
        notify("k", Plain(), "bye")


def test_tool_exposes_its_ignored_names(sqlite_store: Store) -> None:
    """tool.ignore is the frozenset of the parameter names left out of the hash."""

    @safe(sqlite_store, ignore=iter(["logger", "client", "logger"]))
    def notify(key: str, client: Plain, logger: object, message: str) -> str:
        return message

    assert notify.ignore == frozenset({"client", "logger"})


def test_unknown_ignored_name_is_refused_at_decoration(sqlite_store: Store) -> None:
    """An ignore= naming no parameter of the function is a ValueError listing its parameters."""
    guard = safe(sqlite_store, name="notify", ignore=("clinet",))

    def notify(key: str, client: Plain, message: str) -> str:
        return message

    with pytest.raises(ValueError, match=r"^notify: .*'clinet'.*\(it has client, message\)"):
        guard(notify)


def test_ignoring_the_key_is_refused_at_decoration(sqlite_store: Store) -> None:
    """An ignore= naming the key's parameter is a ValueError: the key is never hashed."""
    guard = safe(sqlite_store, ignore=("key",))

    def notify(key: str, message: str) -> str:
        return message

    with pytest.raises(ValueError, match="'key', the parameter that receives the key"):
        guard(notify)


def test_ignore_given_as_one_string_is_refused(sqlite_store: Store) -> None:
    """ignore="client" is a TypeError saying to write a tuple of names."""
    with pytest.raises(TypeError, match=r"ignore=\('client',\)"):
        safe(sqlite_store, ignore="client")


def test_async_tool_leaves_ignored_parameter_out(sqlite_store: Store) -> None:
    """An async tool replays a call whose ignored client changed."""
    import asyncio

    @safe(sqlite_store, ignore=("client",))
    async def notify(key: str, client: Plain, message: str) -> str:
        return message

    async def twice() -> bool:
        await notify("k", Plain(), "hi")
        return (await notify("k", Plain(), "hi")) == Succeeded("k", "hi", replayed=True)

    assert asyncio.run(twice())


def test_saga_step_with_an_ignored_client_runs(sqlite_store: Store) -> None:
    """A saga step made with ignore= takes a client object and runs."""

    @safe(sqlite_store, ignore=("client",))
    def reserve(key: str, client: Plain, seats: int) -> int:
        return seats

    with Saga("trip", sqlite_store) as saga:
        assert saga.step(reserve, Plain(), 2) == 2


CHILD_WITHOUT_IMPORTS = """
import inspect, sys
from safeact._keys import args_hash
def act(key, value): ...
signature = inspect.signature(act)
args_hash(signature, ([1, 2.5, "x", {"a": None}],), {})
assert "numpy" not in sys.modules and "pydantic" not in sys.modules
import numpy
differ = args_hash(signature, (numpy.int64(1),), {}) != args_hash(signature, (numpy.int64(2),), {})
print(differ, "pydantic" in sys.modules)
"""


def test_numpy_values_are_hashed_without_safeact_importing_numpy_or_pydantic() -> None:
    """Numpy values are hashed by content, yet safeact never imports numpy or pydantic itself."""
    root = str(Path(__file__).resolve().parent.parent)
    child = subprocess.run(
        [sys.executable, "-c", CHILD_WITHOUT_IMPORTS],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    assert child.stdout == "True False\n"


# The property: same hash exactly when the same call.


# Excluded on purpose, because safeact is stricter than == there (a spurious conflict, never
# a silent replay): -0.0 (floats, complex parts, numpy floats and arrays hash the sign of a
# zero), Decimals other than in their shortest form (the exponent is hashed) and Decimal NaNs,
# and aware datetimes in zones other than UTC (one instant in two zones hashes apart).
FLOATS = st.sampled_from([0.0, 1.5, NAN, math.inf])
NAIVE = dt.datetime(2026, 1, 1)  # noqa: DTZ001 - naive on purpose: it never equals an aware one
DTYPES = [np.int64, np.int32, np.bool_, np.float64, np.float32]
NUMPY_SCALARS = st.builds(
    lambda make, number: make(number), st.sampled_from(DTYPES), st.integers(0, 1)
) | st.sampled_from([np.float32(NAN), np.float64(NAN), np.datetime64("2026-11-30")])
FAMILIES: list[tuple[type, st.SearchStrategy[Any]]] = [
    (np.generic, NUMPY_SCALARS),  # before float: a numpy float64 is a float
    (bool, st.booleans()),  # before int: a bool is an int
    (int, st.integers(-1, 2)),
    (float, FLOATS),
    (str, st.sampled_from(["", "a"])),
    (bytes, st.sampled_from([b"", b"a"])),
    (decimal.Decimal, st.integers(-2, 2).map(lambda n: decimal.Decimal(n) / 4)),
    (complex, st.builds(complex, FLOATS, FLOATS)),
    (fractions.Fraction, st.builds(fractions.Fraction, st.integers(-1, 2), st.integers(1, 2))),
    (dt.datetime, st.sampled_from([NAIVE, NAIVE.replace(tzinfo=dt.UTC)])),
    (dt.date, st.sampled_from([dt.date(2026, 1, 1), dt.date(2026, 1, 2)])),
    (uuid.UUID, st.sampled_from([uuid.UUID(int=1), uuid.UUID(int=2)])),
    (enum.Enum, st.sampled_from([Tier.GOLD, Level.ONE])),
    (type(None), st.none()),
]
"""One strategy per kind of scalar, each over a few values, so that draws often coincide."""
SCALARS = st.one_of([family for _, family in FAMILIES])
KEYS = st.one_of([family for kind, family in FAMILIES if kind is not decimal.Decimal])
"""Dict keys and set members: no Decimals, as Decimal(0) == np.int64(0) raises a TypeError."""
ARRAYS = hnp.arrays(
    st.sampled_from(DTYPES),
    hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=2),
    elements=st.sampled_from([0, 1]),
) | hnp.arrays(
    st.sampled_from([np.float64, np.float32]),
    hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=2),
    elements=st.sampled_from([0.0, 1.0, NAN]),
)


def _compound(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(KEYS, children, max_size=3),
        st.sets(KEYS, max_size=3),
        st.frozensets(KEYS, max_size=3),
        st.builds(Pair, children, children),
        st.builds(Box, children, st.sampled_from(["", "note"])),
        st.builds(Loose, item=children),
        st.builds(lambda item: Loose.model_validate({"item": item, "tag": 1}), children),
    )


VALUES = st.recursive(SCALARS | ARRAYS, _compound, max_leaves=6)


def _changes(data: st.DataObject) -> bool:
    """Whether to change this part: one time in three, so that a pair often differs in one."""
    return data.draw(st.integers(0, 2)) == 0


def near(  # noqa: PLR0911 - a case per kind
    value: object, data: st.DataObject, leaves: st.SearchStrategy[object] = SCALARS
) -> object:
    """A value shaped like ``value`` whose parts are mostly kept, a few swapped for close ones.

    Independent draws rarely differ in one part only; these pairs do, often in the kind of a
    part alone (a list for a tuple, ``np.int32(1)`` for ``np.int64(1)``, ``1`` for ``True``).
    A scalar that changes is redrawn from its kind's family or from ``leaves``.
    """
    if isinstance(value, np.ndarray):
        return data.draw(_close(value)) if _changes(data) else value.copy()
    if isinstance(value, list | tuple):
        items = [near(item, data) for item in value]
        return (tuple if isinstance(value, list) == _changes(data) else list)(items)
    if isinstance(value, set | frozenset):
        # In an order of their own: a NaN hashes by its address, so a set's order varies.
        members = {near(item, data, KEYS) for item in sorted(value, key=repr)}
        return (frozenset if isinstance(value, set) == _changes(data) else set)(members)
    if isinstance(value, dict):
        return {near(key, data, KEYS): near(item, data) for key, item in value.items()}
    if isinstance(value, Pair):
        return Pair(near(value.left, data), near(value.right, data))
    if isinstance(value, Box):
        return Box(near(value.item, data), data.draw(st.sampled_from(["", "note"])))
    if isinstance(value, Loose):
        extra = value.__pydantic_extra__ or {}
        if _changes(data):
            extra = data.draw(st.sampled_from([{}, {"tag": 1}, {"tag": 2}]))
        return Loose.model_validate({"item": near(value.item, data), **extra})
    if not _changes(data):
        return value
    return data.draw(_close(value) if data.draw(st.booleans()) else leaves)


def _close(value: object) -> st.SearchStrategy[object]:
    """Values of ``value``'s kind, or that share a part with it (a complex's real part)."""
    if isinstance(value, np.ndarray):
        numbers = np.nan_to_num(value)  # a NaN cast to an int warns
        retyped: st.SearchStrategy[object] = st.sampled_from(DTYPES).map(numbers.astype)
        reshaped: st.SearchStrategy[object] = st.sampled_from([(-1,), (1, -1)]).map(value.reshape)
        return retyped | reshaped | ARRAYS
    if isinstance(value, np.integer | np.floating | np.bool_):
        number = 0 if np.isnan(value) else value  # a NaN cast to an int warns
        retyped = st.sampled_from(DTYPES).map(lambda make: make(number))
        return retyped | st.sampled_from([0, 1, NAN][: 2 + (value.dtype.kind == "f")]).map(
            type(value)
        )
    if isinstance(value, complex):
        real, imag = st.just(value.real), st.just(value.imag)
        return st.builds(complex, real, FLOATS) | st.builds(complex, FLOATS, imag)
    if isinstance(value, fractions.Fraction):
        numerator, denominator = st.just(value.numerator), st.just(value.denominator)
        tops, bottoms = st.integers(-1, 2), st.integers(1, 2)
        return st.builds(fractions.Fraction, numerator, bottoms) | st.builds(
            fractions.Fraction, tops, denominator
        )
    return next(family for kind, family in FAMILIES if isinstance(value, kind))


def _matched(first: list[object], second: list[object]) -> bool:
    """Whether the items pair off as the same values, in any order."""
    left = list(second)
    for item in first:
        index = next((i for i, other in enumerate(left) if same_call(item, other)), None)
        if index is None:
            return False
        del left[index]
    return not left


def same_call(first: Any, second: Any) -> bool:  # noqa: C901, PLR0911 - a case per kind
    """Equal by == and of the same type, recursively, with every NaN equal to every NaN."""
    if type(first) is not type(second):  # a tuple is not a list, a frozenset not a set
        return False
    if isinstance(first, list | tuple):
        return len(first) == len(second) and all(map(same_call, first, second))
    if isinstance(first, set | frozenset):
        return _matched(list(first), list(second))
    if isinstance(first, dict):
        return _matched([list(p) for p in first.items()], [list(p) for p in second.items()])
    if isinstance(first, np.ndarray):
        nan = first.dtype.kind == "f"
        same_shape = (first.dtype, first.shape) == (second.dtype, second.shape)
        return same_shape and bool(np.array_equal(first, second, equal_nan=nan))
    if isinstance(first, complex):
        return same_call(first.real, second.real) and same_call(first.imag, second.imag)
    if isinstance(first, float | np.floating):
        return bool(first == second) or bool(np.isnan(first) and np.isnan(second))
    if isinstance(first, Pair):
        return same_call([first.left, first.right], [second.left, second.right])
    if isinstance(first, Box):
        return same_call(first.item, second.item)  # its note is left out of equality
    if isinstance(first, Loose):
        return same_call(first.item, second.item) and same_call(
            first.__pydantic_extra__ or {}, second.__pydantic_extra__ or {}
        )
    return bool(first == second)


@pytest.mark.parametrize(
    "family",
    [family for _, family in FAMILIES] + [ARRAYS],
    ids=[kind.__name__ for kind, _ in FAMILIES] + ["ndarray"],
)
@given(data=st.data())
def test_values_of_each_kind_hash_alike_exactly_when_the_same(
    family: st.SearchStrategy[object], data: st.DataObject
) -> None:
    """Two calls collide exactly when their arguments are the same, for each kind of scalar."""
    first = data.draw(family)
    # Chosen apart, not by one_of, which flattens its branches: SCALARS would outnumber the rest.
    how = data.draw(st.sampled_from(["close", "close", "other", "copy"]))
    if how == "close":
        second = data.draw(_close(first))
    else:
        second = copy.deepcopy(first) if how == "copy" else data.draw(SCALARS | ARRAYS)
    assert (digest(first) == digest(second)) == same_call(first, second)


@given(VALUES, st.data())
def test_calls_hash_alike_exactly_when_their_arguments_are_the_same(
    first: object, data: st.DataObject
) -> None:
    """Two calls collide exactly when their arguments, containers and objects, are the same."""
    how = data.draw(st.sampled_from(["near", "near", "near", "copy", "other"]))
    if how == "near":
        second = near(first, data)
    else:
        second = copy.deepcopy(first) if how == "copy" else data.draw(VALUES)
    assert (digest(first) == digest(second)) == same_call(first, second)


# A tool's plan (ArgsHash) hashes every call as args_hash does, with less work per call.

KINDS = [
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.VAR_POSITIONAL,
    inspect.Parameter.KEYWORD_ONLY,
    inspect.Parameter.VAR_KEYWORD,
]
"""The kinds of parameter, in the order a signature lists them."""
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
EMPTY = inspect.Parameter.empty
NAMES = ["b", "a", "é", "key2", "a_b"]
"""Parameter names: not in sorted order, one that JSON escapes, one like the key's."""
ARGUMENTS = st.integers(0, 2) | st.sampled_from(["", "x", 1.0, Plain()]) | st.lists(st.booleans())
"""Argument values, one refused: the error names the first parameter (by name) that holds it."""


@st.composite
def signatures(draw: st.DrawFn) -> inspect.Signature:
    """Signatures that take the key first and positionally, then parameters of every kind."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=len(NAMES)))
    kinds = sorted(draw(st.lists(st.sampled_from(KINDS), min_size=len(names), max_size=len(names))))
    # The key is positional-only if any parameter is: none can follow a positional-or-keyword.
    key_kinds = POSITIONAL[:1] if inspect.Parameter.POSITIONAL_ONLY in kinds else POSITIONAL
    parameters = [inspect.Parameter("key", draw(st.sampled_from(key_kinds)))]
    for name, kind in zip(names, kinds, strict=True):
        if kind in VARIADIC and kind is parameters[-1].kind:
            continue  # one *args and one **kwargs at most
        # A positional parameter after one with a default must have a default too.
        after_default = kind in POSITIONAL and parameters[-1].default is not EMPTY
        if kind in VARIADIC or not (after_default or draw(st.booleans())):
            parameters.append(inspect.Parameter(name, kind))
        else:
            parameters.append(inspect.Parameter(name, kind, default=draw(ARGUMENTS)))
    return inspect.Signature(parameters)


@st.composite
def calls(
    draw: st.DrawFn, signature: inspect.Signature
) -> tuple[tuple[object, ...], dict[str, object]]:
    """Calls of ``signature``, the key left out: most fit, a few do not.

    A fault adds a positional argument (for ``*args``, or one too many), an unknown keyword
    (for ``**kwargs``, or unexpected), the key's name as a keyword, a positional parameter's
    name as a keyword (given twice, or positional-only), or leaves out an argument given by
    name.
    """
    _, *parameters = signature.parameters.values()
    positional = [p for p in parameters if p.kind in POSITIONAL]
    required = [i + 1 for i, p in enumerate(positional) if p.default is EMPTY]
    by_position = draw(st.integers(max(required, default=0), len(positional)))
    args = [draw(ARGUMENTS) for _ in range(by_position)]
    kwargs = {}
    for parameter in parameters[by_position:]:
        if parameter.kind in NAMED and (parameter.default is EMPTY or draw(st.booleans())):
            kwargs[parameter.name] = draw(ARGUMENTS)
    fault = draw(st.sampled_from([None, None, "more", "other", "key", "twice", "twice", "drop"]))
    if fault == "more":
        args.append(draw(ARGUMENTS))
    if fault in ("other", "key"):
        kwargs[fault] = draw(ARGUMENTS)
    if fault == "twice" and positional:
        again = draw(st.sampled_from(positional[: len(args)] or positional))
        kwargs[again.name] = draw(ARGUMENTS)
    if fault == "drop" and kwargs:
        del kwargs[draw(st.sampled_from(sorted(kwargs)))]
    return tuple(args), kwargs


def hashed(hash_call: Any) -> str:
    """The digest ``hash_call()`` returns, or the TypeError it raises, as text."""
    try:
        return str(hash_call())
    except TypeError as error:
        return f"TypeError: {error}"


@given(signatures(), st.data())
def test_the_plan_hashes_every_call_as_args_hash_does(
    signature: inspect.Signature, data: st.DataObject
) -> None:
    """The plan gives the digest args_hash gives, or raises its TypeError, for any call."""
    _, *parameters = signature.parameters
    ignore = data.draw(
        st.frozensets(st.sampled_from(parameters)) if parameters else st.just(frozenset())
    )
    args, kwargs = data.draw(calls(signature))
    plan = ArgsHash(signature, ignore)
    assert hashed(lambda: plan(args, kwargs)) == hashed(
        lambda: args_hash(signature, args, kwargs, ignore)
    )


def send(key: str, to: str, /, amount: int, *, note: str = "") -> None:
    raise AssertionError


SEND = inspect.signature(send)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        pytest.param(("ada", 5, "hi"), {}, id="too-many"),
        pytest.param((), {"to": "ada", "amount": 5}, id="positional-only-by-name"),
        pytest.param(("ada", 5), {"amount": 6}, id="twice"),
        pytest.param(("ada",), {"note": "hi"}, id="missing"),
        pytest.param(("ada", 5), {"notes": "hi"}, id="unexpected"),
        pytest.param(("ada", 5), {"key": "k"}, id="the-key-by-name"),
    ],
)
def test_a_call_that_does_not_fit_is_refused_as_inspect_refuses_it(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    """A call that does not fit the signature raises the TypeError Signature.bind raises."""
    refused = hashed(lambda: args_hash(SEND, args, kwargs))
    assert refused.startswith("TypeError: ")
    assert hashed(lambda: ArgsHash(SEND)(args, kwargs)) == refused


def test_a_plain_call_is_bound_without_inspect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Positional arguments and keywords naming parameters are bound by the plan itself."""
    calls = [((1,), {}), ((1, 2), {}), ((), {"value": 1}), ((1,), {"extra": 2})]
    digests = [PLAN(args, kwargs) for args, kwargs in calls]

    def bind(*_: object, **__: object) -> inspect.BoundArguments:
        raise AssertionError

    monkeypatch.setattr(inspect.Signature, "bind", bind)
    assert [PLAN(args, kwargs) for args, kwargs in calls] == digests


@given(signatures(), st.data())
def test_an_argument_equal_to_its_default_hashes_as_one_not_given(
    signature: inspect.Signature, data: st.DataObject
) -> None:
    """Passing a parameter its default value hashes as leaving it out, in any signature."""
    _, *parameters = signature.parameters.values()
    args, kwargs = data.draw(calls(signature))
    given = {p.name for p in parameters[: len(args)]} | set(kwargs)
    for parameter in parameters:
        if (
            parameter.kind in NAMED
            and parameter.default is not EMPTY
            and parameter.name not in given
        ):
            with_default = {**kwargs, parameter.name: parameter.default}
            assert hashed(lambda: ArgsHash(signature)(args, kwargs)) == hashed(
                lambda w=with_default: ArgsHash(signature)(args, w)
            )
