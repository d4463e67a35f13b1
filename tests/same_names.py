"""Classes of every kind, loaded twice by ``test_args_hash_types.py`` under two module names.

Two modules that each define a ``Status`` or an ``Order`` (``billing.Status`` and
``shipping.Status``) are the collision issue 30 is about; one file loaded twice is the
closest such pair: everything but the module is the same.
"""

import dataclasses
import decimal
import enum
from typing import NamedTuple

import attrs
import pydantic


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"
    OR = "gold"  # noqa: PIE796 - an alias of GOLD on purpose: one member, two names


class Perm(enum.IntFlag):
    """Three declared flags: any other bit is kept, unnamed (``Perm(8)``, ``Perm(16)``)."""

    R = 1
    W = 2
    X = 4


class Bits(enum.Flag, boundary=enum.KEEP):
    """A flag that is not an int, which keeps undeclared bits too."""

    A = 1
    B = 2


class Level(enum.IntEnum):
    ONE = 1


@dataclasses.dataclass(frozen=True)
class Order:
    id: int


@attrs.frozen
class Customer:
    name: str


class Invoice(pydantic.BaseModel):
    amount: int


class Point(NamedTuple):
    x: object
    y: object


class Cents(int):
    """An int subclass."""


class Text(str):
    """A str subclass."""

    __slots__ = ()


class Blob(bytes):
    """A bytes subclass."""

    __slots__ = ()


class Rounded(float):
    """A float that shows itself rounded: its repr says less than its value."""

    def __repr__(self) -> str:
        return f"{float(self):.0f}"


class Money(decimal.Decimal):
    """A Decimal that shows two places: its str says less than its value."""

    def __str__(self) -> str:
        return f"{decimal.Decimal(self):.2f}"
