"""Whether a rebuilt result is the value that was returned: same types, same content, all state.

``==`` is too lenient to tell: ``3 == 3.0``, a subclass instance can equal its base's, two
aware datetimes in different zones are equal when they name one instant, ``fold`` is
ignored, and an attrs field with ``eq=False`` is not compared. ``difference`` walks both
values together and names the first place they part.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import decimal
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from safeact._json_rules import is_pydantic_model

__all__ = ["difference"]

_MISSING = object()


def difference(
    returned: object, rebuilt: object, *, opaque: Callable[[object], bool], where: str = "result"
) -> str | None:
    """Where ``rebuilt`` differs from ``returned``, in words; None when they are the same value.

    ``opaque(value)`` says a value is stored by a rule of the user's own (``register_type``):
    such values are compared by type alone, their rule having checked their JSON.
    """
    if type(returned) is not type(rebuilt):
        return _type_change(returned, rebuilt, where)
    if opaque(returned):
        return None
    parts = _parts(returned, rebuilt)
    if parts is None:
        same = _same_scalar(returned, rebuilt)
        return None if same else f"{where}: {_short(returned)} would replay as {_short(rebuilt)}"
    for name, left, right in parts:
        if left is _MISSING or right is _MISSING:
            if left is right:
                continue  # a field never set stays unset after a replay
            return f"{where}{name}: would be missing after a replay"
        found = difference(left, right, opaque=opaque, where=f"{where}{name}")
        if found is not None:
            return found
    return None


def _type_change(returned: object, rebuilt: object, where: str) -> str:
    lost = f"{where}: a {_kind(returned)} would replay as a {_kind(rebuilt)}"
    if isinstance(returned, type(rebuilt)):  # a defaultdict under -> dict[str, int]
        kind = _kind(rebuilt)
        return f"{lost}; return a plain {kind} ({kind}(value)) or annotate the subclass"
    return lost


def _parts(left: Any, right: Any) -> Iterable[tuple[str, object, object]] | None:  # noqa: PLR0911 - one arm per kind of container
    """The pairs of parts to compare inside two values of one type; None for a scalar."""
    if isinstance(left, dt.datetime | dt.time):
        return None
    if isinstance(left, list | tuple):
        if len(left) != len(right):
            return [(" (its length)", len(left), len(right))]
        return [(f"[{i}]", a, b) for i, (a, b) in enumerate(zip(left, right, strict=True))]
    if isinstance(left, collections.ChainMap):
        return [(".maps", left.maps, right.maps)]
    if isinstance(left, Mapping):
        pairs = _matched(left, right, lambda key: f"[{key!r}]", values=True)
        if isinstance(left, collections.defaultdict):
            pairs.append((".default_factory", left.default_factory, right.default_factory))
        return pairs
    if isinstance(left, set | frozenset):
        return _matched(left, right, lambda item: f" item {item!r}", values=False)
    return _fields(left, right)


def _fields(left: Any, right: Any) -> list[tuple[str, object, object]] | None:
    """The pairs of fields of two instances of one attrs class, dataclass or model."""
    if attrs.has(type(left)):
        names = [field.name for field in attrs.fields(type(left))]
        return [(f".{name}", _get(left, name), _get(right, name)) for name in names]
    if dataclasses.is_dataclass(left):
        names = [field.name for field in dataclasses.fields(left)]
        return [(f".{name}", _get(left, name), _get(right, name)) for name in names]
    if is_pydantic_model(type(left)):
        names = list(type(left).model_fields)
        pairs = [(f".{name}", _get(left, name), _get(right, name)) for name in names]
        extra = ("(extra fields)", left.__pydantic_extra__, right.__pydantic_extra__)
        private = ("(private attributes)", left.__pydantic_private__, right.__pydantic_private__)
        return [*pairs, extra, private]
    return None


def _matched(
    left: Any, right: Any, name: Callable[[object], str], *, values: bool
) -> list[tuple[str, object, object]]:
    """Pair each key (or set item) of ``left`` with the equal one of ``right``, and values."""
    if len(left) != len(right):
        return [(" (its size)", len(left), len(right))]
    equal_in_right = {item: item for item in right}
    pairs: list[tuple[str, object, object]] = []
    for item in left:
        twin = equal_in_right.get(item, _MISSING)
        pairs.append((name(item), item, twin))
        if values and twin is not _MISSING:
            pairs.append((name(item), left[item], right[twin]))
    return pairs


def _same_scalar(left: Any, right: Any) -> bool:
    """Whether two values of one exact type with no parts to walk are the same."""
    if isinstance(left, dt.datetime | dt.time):
        return (
            left.replace(tzinfo=None) == right.replace(tzinfo=None)
            and left.fold == right.fold
            and _same_zone(left, right)
        )
    if isinstance(left, float):
        return left == right and math.copysign(1.0, left) == math.copysign(1.0, right)
    if isinstance(left, decimal.Decimal):  # NaN is not == itself; -0 and 0.0 are == 0
        return str(left) == str(right)
    try:
        return bool(left == right)
    except Exception:  # noqa: BLE001 - a user's __eq__; a value it cannot compare is not the same
        return False


def _same_zone(left: dt.datetime | dt.time, right: dt.datetime | dt.time) -> bool:
    """Whether two times' zones are one zone: the same named zone, or the same fixed offset."""
    if left.tzinfo is None or right.tzinfo is None:
        return left.tzinfo is right.tzinfo
    if isinstance(left.tzinfo, dt.timezone) and isinstance(right.tzinfo, dt.timezone):
        return left.tzinfo == right.tzinfo and left.tzname() == right.tzname()  # "CET" too
    zone = getattr(left.tzinfo, "key", None)
    if zone is not None or getattr(right.tzinfo, "key", None) is not None:
        return bool(zone == getattr(right.tzinfo, "key", None))
    return bool(left.utcoffset() == right.utcoffset())


def _get(value: object, name: str) -> object:
    return getattr(value, name, _MISSING)


def _kind(value: object) -> str:
    cls = type(value)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _short(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - the value is a user's, and so is its __repr__
        return f"a {type(value).__qualname__}"
    return text if len(text) <= 80 else f"{text[:77]}..."
