"""The args hash: the same call hashes alike in every process, different calls differ."""

import dataclasses
import datetime as dt
import decimal
import enum
import inspect
import os
import subprocess
import sys
import uuid
from pathlib import Path, PurePosixPath

import attrs
import pytest

from safeact import KeyConflictError, Store, Succeeded, safe
from safeact._keys import args_hash


class Tier(enum.Enum):
    GOLD = "gold"


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


def act(key: str, value: object, extra: int = 0) -> None:
    raise AssertionError


SIGNATURE = inspect.signature(act)


def digest(value: object, **kwargs: object) -> str:
    return args_hash(SIGNATURE, (value,), kwargs)


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
    Plain(),
]

HASH_IN_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.test_args_hash import SAMPLES, Plain, digest
print("\\n".join(digest(value) for value in SAMPLES + [Plain()]))
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
    assert outputs == {"\n".join(digest(value) for value in [*SAMPLES, Plain()]) + "\n"}


PINNED = "f3d802e1f11697a757768f60179415f06fb55a578918f4eff8ffaa888eccf0a4"
"""The hash of every sample kind, as the ledgers written so far hold it."""


def test_hashes_are_the_ones_existing_ledgers_hold() -> None:
    """Every kind of value hashes as it did when ledgers recorded it, so their keys still replay.

    Sets mixing kinds ({1, "a"}) and numbers that sort apart as text ({2, 10}) are in too.
    """
    assert digest([*SAMPLES, {1, "a"}, {2, 10}], extra=1) == PINNED


def test_distinct_samples_hash_differently() -> None:
    """Every sample value gives its own hash (1 and "1", a list and its reverse differ).

    A tuple hashes like the list of its items (a NamedTuple is a tuple), so it is left out.
    """
    values = [s for s in SAMPLES if not isinstance(s, tuple)]
    values += ["1", [2, 1], ["a", 1], {"a": 2}, Customer("bob", frozenset())]
    values += [dt.timedelta(days=2), Marker.STOP, "2026-11-30", {"$bytes": "00ff"}, "/srv/where"]
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


def test_plain_objects_never_cause_a_conflict(store: Store) -> None:
    """Two different plain objects as the same argument replay instead of conflicting."""
    runs: list[str] = []

    @safe(store)
    def notify(key: str, client: Plain, message: str) -> str:
        runs.append(key)
        return message

    assert notify("k", Plain(), "hi") == Succeeded("k", "hi")
    assert notify("k", Plain(), "hi") == Succeeded("k", "hi", replayed=True)
    with pytest.raises(KeyConflictError):
        notify("k", Plain(), "bye")
    assert runs == ["k"]
