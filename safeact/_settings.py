"""Checking what a caller passes as a setting: each misuse one clear error naming it.

Checked where the setting is taken, before anything is opened, created or changed: a raw
``TypeError`` from deep inside (``'<' not supported between 'str' and 'int'``) names
neither the parameter nor the fix, and a value taken by its truthiness or a NaN that no
comparison refuses would change what the setting means.
"""

from __future__ import annotations

import math

from safeact._keys import check_text

__all__ = ["flag", "optional_callable", "optional_text", "seconds", "whole"]


def flag(name: str, value: object) -> bool:
    """``value``, a real ``bool``: taken by its truthiness, ``"false"`` would mean True.

    Raises:
        TypeError: ``value`` is not a ``bool``.

    """
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be True or False, not {value!r} ({type(value).__name__}): pass "
            f"{name}=True or {name}=False; nothing was changed"
        )
    return value


def seconds(name: str, value: object, *, zero: bool = False) -> float:
    """``value`` as a number of seconds: more than 0 (or, with ``zero``, 0 or more).

    Infinity is a number of seconds (wait for as long as it takes); NaN is not.

    Raises:
        TypeError: ``value`` is not an ``int`` or ``float`` (a ``bool`` or a ``str`` neither).
        ValueError: ``value`` is NaN, or out of range.

    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} takes a number of seconds, not {value!r} ({type(value).__name__}): "
            f"write {name}=5.0, say"
        )
    if math.isnan(value) or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "more than 0"
        raise ValueError(f"{name} must be {least} seconds, got {value!r}")
    return float(value)


def whole(name: str, value: object, *, least: int) -> int:
    """``value`` as a whole number, ``least`` or more.

    Raises:
        TypeError: ``value`` is not an ``int`` (a ``bool`` neither).
        ValueError: ``value`` is less than ``least``.

    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} takes a whole number, not {value!r} ({type(value).__name__})")
    if value < least:
        raise ValueError(f"{name} must be {least} or more, got {value}")
    return value


def optional_text(name: str, value: object) -> str | None:
    """``value`` as text that can be stored (UTF-8), or None.

    Raises:
        TypeError: ``value`` is neither a ``str`` nor None (``bytes`` neither: decode them).
        ValueError: ``value`` holds lone surrogates.

    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(
            f"{name} takes text (a str) or None, not {type(value).__name__} {value!r}"
            + (": decode the bytes first" if isinstance(value, bytes) else "")
        )
    check_text(value, name)
    return value


def optional_callable(name: str, value: object) -> object:
    """``value`` if it can be called, or None.

    Raises:
        TypeError: ``value`` is neither None nor callable.

    """
    if value is not None and not callable(value):
        raise TypeError(f"{name} takes a function (or None), not {type(value).__name__} {value!r}")
    return value
