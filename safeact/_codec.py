"""Results to JSON and back, through one cattrs converter; return types checked up front."""

from __future__ import annotations

import collections.abc
import decimal
import json
import typing
import uuid
from collections.abc import Callable
from types import NoneType
from typing import Any

import cattrs
from cattrs.preconf.json import make_converter

from safeact.exceptions import StoreError

if typing.TYPE_CHECKING:
    from safeact._protocol import JSON

__all__ = ["ResultNotStorableError", "check_return_type", "decode", "encode", "encode_untyped"]

_converter = make_converter(forbid_extra_keys=True)


def _structure_none(value: object, _: object) -> None:
    if value is not None:
        raise ValueError(f"expected null, got {value!r}")


def _structure_uuid(value: object, _: object) -> uuid.UUID:
    if not isinstance(value, str):
        raise TypeError(f"expected a UUID string, got {value!r}")
    return uuid.UUID(value)


def _structure_decimal(value: object, _: object) -> decimal.Decimal:
    if not isinstance(value, str):
        raise TypeError(f"expected a decimal string, got {value!r}")
    return decimal.Decimal(value)


# Registered before any other hook is built: cattrs caches the hooks it composes.
_converter.register_structure_hook(NoneType, _structure_none)
_converter.register_unstructure_hook(NoneType, lambda value: value)
_converter.register_structure_hook(uuid.UUID, _structure_uuid)
_converter.register_unstructure_hook(uuid.UUID, str)
_converter.register_structure_hook(decimal.Decimal, _structure_decimal)
_converter.register_unstructure_hook(decimal.Decimal, str)

_AWAITABLES = (
    collections.abc.Awaitable,
    collections.abc.Coroutine,
    collections.abc.AsyncIterator,
    collections.abc.AsyncGenerator,
    collections.abc.Iterator,
    collections.abc.Generator,
)

_SUPPORTED = (
    "attrs classes, dataclasses, TypedDicts, dicts, lists, tuples, str, int, float, bool, "
    "None, datetime, date, UUID, Decimal, enums, Optional and unions of these"
)


class ResultNotStorableError(Exception):
    """A value could not be turned into JSON that rebuilds as the return type."""


def check_return_type(fn: Callable[..., object], tool: str) -> object:
    """Return ``fn``'s annotated return type if results of that type can be stored and rebuilt.

    Checked when the tool is made, because after the action has run it is too late.

    Raises:
        TypeError: the annotation is missing, unresolvable, too loose (``Any``, ``object``,
            a bare TypeVar), an awaitable or iterator, or a type cattrs cannot rebuild.

    """
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise TypeError(
            f"{tool}: cannot resolve its annotations ({exc}); make the return type importable "
            "where the function is defined"
        ) from exc
    if "return" not in hints:
        raise TypeError(
            f"{tool} has no return annotation; safeact rebuilds replayed results as the "
            f"annotated type, so annotate it, e.g. '-> Receipt' or '-> None' ({_SUPPORTED})"
        )
    return_type: object = hints["return"]
    origin = typing.get_origin(return_type) or return_type
    if return_type is Any or return_type is object or isinstance(return_type, typing.TypeVar):
        raise TypeError(
            f"{tool} returns {return_type!r}, which is too loose to rebuild a stored result: "
            f"annotate the concrete type it returns ({_SUPPORTED})"
        )
    if isinstance(origin, type) and issubclass(origin, _AWAITABLES):
        raise TypeError(
            f"{tool} returns {return_type!r}; a stored result must be a value, not something "
            "to await or iterate: return the materialised value (a list, say)"
        )
    try:
        _converter.get_structure_hook(return_type)
        _converter.get_unstructure_hook(return_type)
    except Exception as exc:
        raise TypeError(
            f"{tool} returns {return_type!r}, which safeact cannot store and rebuild ({exc}). "
            f"Return one of: {_SUPPORTED}; or make the type an attrs class or dataclass"
        ) from exc
    return return_type


def encode(value: object, return_type: Any) -> JSON:
    """Turn ``value`` into JSON that ``decode`` rebuilds as ``return_type``.

    The round trip is checked now, so a result that would not replay, or would replay as
    something else (cattrs coerces ``9.99`` to ``9`` for an ``int``), is caught while the
    caller still holds the live value.

    Raises:
        ResultNotStorableError: the value does not fit ``return_type`` or JSON.

    """
    try:
        unstructured = _converter.unstructure(value, unstructure_as=return_type)
        stored: JSON = json.loads(json.dumps(unstructured, allow_nan=False))
        rebuilt = _converter.structure(stored, return_type)
        again = json.loads(json.dumps(_converter.unstructure(rebuilt, unstructure_as=return_type)))
        same = again == stored
    except Exception as exc:
        # A value too long (int digits), too deep (RecursionError), half-built (missing
        # attributes) or raising from its own methods: the action ran all the same.
        raise ResultNotStorableError(_explain(exc)) from exc
    if not same:
        # cattrs coerces simple types (int(9.99), str(None)); a replay must not differ.
        raise ResultNotStorableError(
            f"{_show(value)} does not fit {_show(return_type)}: it would replay as {_show(rebuilt)}"
        )
    return stored


def encode_untyped(value: object) -> JSON:
    """Turn ``value`` into JSON by its runtime type (for results given to ``resolve``).

    Raises:
        ValueError: the value cannot be turned into JSON.

    """
    try:
        result: JSON = json.loads(json.dumps(_converter.unstructure(value), allow_nan=False))
    except Exception as exc:
        raise ValueError(
            f"cannot store {_show(value)} as a result ({_explain(exc)}); pass the value as the "
            f"tool would have returned it ({_SUPPORTED})"
        ) from exc
    return result


def decode(stored: JSON, return_type: Any, *, key: str, tool: str) -> Any:
    """Rebuild a stored result as ``return_type``.

    Raises:
        StoreError: the stored JSON no longer fits the type (the type changed since it was
            stored). The action is not run again.

    """
    try:
        return _converter.structure(stored, return_type)
    except Exception as exc:
        raise StoreError(
            f"the stored result of {tool} for key {key!r} cannot be rebuilt as "
            f"{return_type!r}: {_explain(exc)}. The action already ran and is not run again; "
            "restore a compatible return type to replay it"
        ) from exc


_LONGEST_SHOWN = 200
"""Characters of a value's repr kept in a message; a result's repr can be huge."""


def _explain(exc: Exception) -> str:
    """Say what went wrong, by type name alone if the exception cannot put it in words."""
    try:
        if isinstance(exc, cattrs.BaseValidationError):
            return "; ".join(cattrs.transform_error(exc))
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide that the value is unstorable
        return type(exc).__name__


def _show(value: object) -> str:
    """Return a short repr of ``value``, or its type's name if its ``__repr__`` raises."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - the value is a user's, and so is its __repr__
        return f"a {type(value).__qualname__}"
    if len(text) > _LONGEST_SHOWN:
        return f"{text[: _LONGEST_SHOWN - 3]}..."
    return text
