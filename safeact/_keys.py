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


def check_key(key: object, what: str = "the key") -> str:
    """Return ``key`` if it can name an action (or, as ``what`` says, a saga).

    Raises:
        TypeError: ``key`` is not a ``str``.
        ValueError: ``key`` is empty.

    """
    if not isinstance(key, str):
        raise TypeError(
            f"{what} must be a str, got {type(key).__name__}: pass a string that names it, "
            "such as 'refund-8842'"
        )
    if not key:
        raise ValueError(f"{what} must be a non-empty string that names it")
    check_text(key, what)
    return key


def check_text(text: str, what: str) -> None:
    """Refuse text that cannot be stored as UTF-8 (it holds lone surrogates).

    Raises:
        ValueError: naming ``what``.

    """
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} {text!r} is not valid Unicode text ({exc.reason}); "
            "decode it properly before using it"
        ) from exc


def args_hash(
    signature: inspect.Signature, args: tuple[object, ...], kwargs: Mapping[str, object]
) -> str:
    """Hash the arguments of a call (the key excluded) as bound to ``signature``.

    Defaults are applied, so ``f(k, 1, b=2)`` and ``f(k, 1, 2)`` hash alike. Values are hashed
    by kind and content: attrs and dataclass instances by the fields that take part in
    equality, sets and dicts whatever their order. A value with no stable content (an object
    of a plain class, whose repr would name its address) contributes only its type's name,
    so it can never cause a spurious conflict in another process; such an argument is not
    checked for conflicts.

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


def _canonical(value: object) -> JSON:  # noqa: C901, PLR0911, PLR0912 - a case per kind
    """Return a JSON value that depends only on ``value``'s content, in any process.

    Every value is tagged with its kind, so values of different kinds never coincide
    (``b"a"`` and ``"61"``, ``"2026-01-01"`` and ``date(2026, 1, 1)``).
    """
    if isinstance(value, enum.Enum):
        return ["enum", f"{type(value).__qualname__}.{value.name}"]
    if value is None or isinstance(value, bool | int | str):
        return value  # JSON keeps these apart: 1, true, "1", null; every other kind is tagged
    if isinstance(value, float):
        return ["float", repr(value)]
    if isinstance(value, bytes | bytearray):
        return ["bytes", value.hex()]
    if isinstance(value, dt.date | dt.time):
        return [type(value).__name__, value.isoformat()]
    if isinstance(value, dt.timedelta):
        return ["timedelta", [value.days, value.seconds, value.microseconds]]
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return [type(value).__name__, str(value)]
    if isinstance(value, os.PathLike):
        return ["path", _canonical(os.fspath(value))]
    if isinstance(value, list | tuple):
        return ["list", [_canonical(item) for item in value]]
    if isinstance(value, set | frozenset):
        return ["set", sorted((_canonical(item) for item in value), key=_sort_key)]
    if isinstance(value, Mapping):
        pairs = [[_canonical(k), _canonical(v)] for k, v in value.items()]
        return ["dict", sorted(pairs, key=_sort_key)]
    cls = type(value)
    if attrs.has(cls):
        fields = {f.name: getattr(value, f.name) for f in attrs.fields(cls) if f.eq}
        return ["object", cls.__qualname__, _canonical(fields)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.compare}
        return ["object", cls.__qualname__, _canonical(fields)]
    return ["opaque", f"{cls.__module__}.{cls.__qualname__}"]


def _sort_key(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True)
