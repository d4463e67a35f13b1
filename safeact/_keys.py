"""Key validation and the stable hash of a call's arguments."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import inspect
import json
import os
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from safeact._protocol import JSON

__all__ = ["args_hash", "check_key"]


def check_key(key: object) -> str:
    """Return ``key`` if it can name an action.

    Raises:
        TypeError: ``key`` is not a ``str``.
        ValueError: ``key`` is empty.

    """
    if not isinstance(key, str):
        raise TypeError(
            f"the key must be a str, got {type(key).__name__}: pass a string that names this "
            "action, such as 'refund-8842'"
        )
    if not key:
        raise ValueError("the key must be a non-empty string that names this action")
    return key


def args_hash(
    signature: inspect.Signature, args: tuple[object, ...], kwargs: Mapping[str, object]
) -> str:
    """Hash the arguments of a call (the key excluded) as bound to ``signature``.

    Defaults are applied, so ``f(k, 1, b=2)`` and ``f(k, 1, 2)`` hash alike. Values are hashed
    by content; a value with no stable content (an object of a plain class, whose repr
    would name its address) contributes only its type's name, so it can never cause a
    spurious conflict in another process.

    Raises:
        TypeError: the arguments do not fit ``signature``.

    """
    bound = signature.bind(None, *args, **kwargs)
    bound.apply_defaults()
    arguments = list(bound.arguments.items())[1:]
    text = json.dumps(
        {name: _canonical(value) for name, value in arguments},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(value: object) -> JSON:  # noqa: C901, PLR0911 - one case per kind of value
    """Return a JSON value that depends only on ``value``'s content, in any process."""
    if isinstance(value, enum.Enum):
        return _canonical(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray):
        return {"$bytes": value.hex()}
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal | os.PathLike):
        return str(value)
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((_canonical(item) for item in value), key=_sort_key)
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return {k: _canonical(v) for k, v in value.items()}
        pairs = [[_canonical(k), _canonical(v)] for k, v in value.items()]
        return {"$pairs": sorted(pairs, key=_sort_key)}
    cls = type(value)
    if attrs.has(cls):
        return {f.name: _canonical(getattr(value, f.name)) for f in attrs.fields(cls)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return {"$opaque": f"{type(value).__module__}.{type(value).__qualname__}"}


def _sort_key(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True)
