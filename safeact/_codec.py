"""Results to JSON and back, through one cattrs converter; return types checked up front.

A result is stored only if it comes back exactly, and a stored result replays only if it
comes back exactly: after rebuilding, the value is turned into JSON again and compared with
what was stored (``_same_json``). cattrs on its own coerces (``int(9.99)``, ``bool("false")``,
``str(None)``, a set from a list with duplicates); the comparison turns each of those into an
error instead of a different value.
"""

from __future__ import annotations

import collections.abc
import datetime as dt
import decimal
import inspect
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import NoneType
from typing import Any, TypeAlias, TypeVar

import attrs
import cattrs

from safeact._exact import difference
from safeact._json_rules import JSON_DECODER, STRICT_JSON, converter, seen
from safeact._storable import refusal
from safeact.exceptions import StoreError

if typing.TYPE_CHECKING:
    from safeact._protocol import JSON

__all__ = [
    "JSONValue",
    "ResultNotStorableError",
    "check_return_type",
    "decode",
    "encode",
    "encode_untyped",
    "register_type",
    "shown",
]

T = TypeVar("T")

JSONValue: TypeAlias = (
    "bool | int | float | str | Sequence[JSONValue] | Mapping[str, JSONValue] | None"
)
"""What a ``register_type`` encoder may return: JSON, with tuples and any mapping allowed."""


_AWAITABLES = (
    collections.abc.Awaitable,
    collections.abc.Coroutine,
    collections.abc.AsyncIterator,
    collections.abc.AsyncGenerator,
    collections.abc.Iterator,
    collections.abc.Generator,
)

_SUPPORTED = (
    "attrs classes, dataclasses, pydantic models, TypedDicts, dicts, lists, tuples, sets, "
    "frozensets, str, int, float, bool, None, datetime, date, UUID, Decimal, enums, Literal, "
    "Optional and unions of these, and types taught with safeact.register_type"
)

_OWN_RULES = frozenset(
    {
        bool,
        int,
        float,
        str,
        bytes,
        NoneType,
        list,
        tuple,
        dict,
        set,
        frozenset,
        dt.datetime,
        dt.date,
        uuid.UUID,
        decimal.Decimal,
        object,
    }
)
"""Types every tool relies on storing one way: ``register_type`` refuses to change them."""

_registered: set[type[Any]] = set()


class ResultNotStorableError(Exception):
    """A value could not be turned into JSON that rebuilds as the return type."""


def register_type(
    cls: type[T], *, to_json: Callable[[T], JSONValue], from_json: Callable[[Any], T]
) -> None:
    """Teach safeact to store results of type ``cls``: ``to_json`` writes one, ``from_json`` reads.

    ``to_json(value)`` returns JSON (dicts with str keys, lists or tuples, str, int, float,
    bool, None); ``from_json(data)`` rebuilds a ``cls`` from that. The rule holds wherever
    ``cls`` appears: as a return type, in a field of an attrs class, dataclass or
    TypedDict, in a list or an Optional; and for subclasses of ``cls``, unless they are
    registered themselves. Every result is checked on the way in and on replay: the value
    ``from_json`` rebuilds must be a ``cls`` whose ``to_json`` gives back the same JSON,
    else the result is not stored (``Succeeded(recorded=False)``), or the replay raises
    ``StoreError``.

    Call it at import time, before any tool that returns ``cls`` (or a type containing
    it) is made: such a tool was checked, and may have stored results, under the old rule.

    Raises:
        TypeError: ``cls`` is not a class, or ``to_json``/``from_json`` is not callable.
        ValueError: ``cls`` is one of the types safeact stores itself (``int``,
            ``datetime``, ``list``...), is registered already, or was already used by a
            tool (or stored) under safeact's default rule for it.

    """
    if not isinstance(cls, type):
        raise TypeError(
            f"register_type takes a class, got {_show(cls)}: register the class itself, "
            "e.g. register_type(Money, to_json=..., from_json=...)"
        )
    functions: tuple[object, object] = (to_json, from_json)  # typed, but callers may be not
    if not all(map(callable, functions)):
        raise TypeError(
            f"register_type({cls.__qualname__}, ...): to_json and from_json must be "
            "functions, e.g. to_json=lambda money: money.cents, from_json=Money"
        )
    _check_registrable(cls)
    converter.register_unstructure_hook(cls, to_json)
    converter.register_structure_hook(cls, _checked(from_json))
    _hooks_by_type.clear()
    _registered.add(cls)


def _check_registrable(cls: type[Any]) -> None:
    """Refuse a registration that would change how results already made are stored.

    Raises:
        ValueError: a type with a built-in rule, a second registration, or a late one.

    """
    name = _show_type(cls)
    if cls in _OWN_RULES:
        raise ValueError(
            f"safeact stores {name} itself, the same way for every tool: register a type "
            f"of your own instead (a subclass of {name}, say)"
        )
    if cls in _registered:
        raise ValueError(
            f"{name} is registered already; register each type once, at import time, "
            "before making the tools that return it"
        )
    if cls in seen and _has_rule(cls):
        raise ValueError(
            f"register {name} before making any tool that returns it or a type containing "
            "it: a tool made already was checked, and may have stored results, under "
            f"safeact's default rule for {name}. Move the register_type call to import "
            "time, ahead of the tools"
        )


def _has_rule(cls: type[Any]) -> bool:
    """Whether cattrs can rebuild ``cls`` without a registration (attrs, enum, pydantic...).

    A type it cannot rebuild was refused by every tool that returns it: registering it late
    changes nothing stored.
    """
    try:
        converter.get_structure_hook(cls)
    except Exception:  # noqa: BLE001 - cattrs' way of saying there is no rule
        return False
    return True


def _checked(from_json: Callable[[Any], object]) -> Callable[[Any, type[Any]], object]:
    """Wrap a ``register_type`` decoder so that what it returns is the type asked for."""

    def structure(value: object, cls: type[Any]) -> object:
        try:
            rebuilt = from_json(value)
        except Exception as exc:
            # Said here, or the error reads as though the stored value were at fault.
            raise TypeError(
                f"the from_json registered for {_show_type(cls)} raised {_explain(exc)}"
            ) from exc
        if not isinstance(rebuilt, cls):
            raise TypeError(
                f"from_json of {_show_type(cls)} returned {_show(rebuilt)}, not a {_show_type(cls)}"
            )
        return rebuilt

    return structure


def check_return_type(fn: Callable[..., object], tool: str) -> object:
    """Return ``fn``'s annotated return type if results of that type can be stored and rebuilt.

    Checked when the tool is made, because after the action has run it is too late.

    Raises:
        TypeError: the annotation is missing, unresolvable, too loose (``Any``, ``object``,
            a bare TypeVar), an awaitable or iterator, or a type cattrs cannot rebuild; the
            function is a generator function; or a part of the type would not replay
            exactly (``_storable.refusal``: ``Any`` inside, keys JSON cannot read back,
            ``Sequence``, secrets, state a model's JSON leaves out).

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
    body = inspect.unwrap(fn)
    if inspect.isgeneratorfunction(body) or inspect.isasyncgenfunction(body):
        raise TypeError(
            f"{tool} is a generator function: calling it returns a generator, not the "
            f"{_show_type(return_type)} it is annotated with, and a generator cannot be "
            "stored; return the materialised value (return list(...), say)"
        )
    try:
        refused = refusal(return_type, own_rule=_registered.__contains__)
    except TypeError as exc:
        raise TypeError(f"{tool}: {exc}") from exc
    if refused is not None:
        raise TypeError(
            f"{tool} returns {_show_type(return_type)}, whose results would not replay "
            f"exactly: {refused}"
        )
    try:
        converter.get_structure_hook(return_type)
        converter.get_unstructure_hook(return_type)
    except Exception as exc:
        raise TypeError(
            f"{tool} returns {return_type!r}, which safeact cannot store and rebuild ({exc}). "
            f"Return one of: {_SUPPORTED}. For a type of your own, make it an attrs class, "
            "a dataclass or a pydantic model, or teach safeact to store it with "
            "safeact.register_type(cls, to_json=..., from_json=...) before making the tool"
        ) from exc
    return return_type


_AS_IS = frozenset({str, int, bool, NoneType})
"""Types whose value of exactly that type is its own JSON, and rebuilds as itself.

A value of one of them under that very return type takes no hooks and no comparison: the
round trip ``encode`` and ``decode`` check cannot change it (an ``int`` too long for
``json`` still fails in ``_through_json``). Anything else, a subclass or another type
included, takes the checked path.
"""


def encode(value: object, return_type: Any) -> JSON:
    """Turn ``value`` into JSON that ``decode`` rebuilds as ``return_type``, exactly.

    The round trip is checked now, so a result that would not replay, or would replay as
    something else (cattrs coerces ``9.99`` to ``9`` for an ``int``), is caught while the
    caller still holds the live value.

    Raises:
        ResultNotStorableError: the value does not fit ``return_type`` or JSON.

    """
    try:
        if type(value) is return_type and return_type in _AS_IS:
            return _through_json(value)
        hooks = _hooks(return_type)
        stored = _through_json(hooks.unstructure(value))
        rebuilt = hooks.structure(stored, return_type)
        same = _same_json(_through_json(hooks.unstructure(rebuilt)), stored)
        lost = difference(value, rebuilt, opaque=_stored_by_user_rule) if same else None
    except Exception as exc:
        # A value too long (int digits), too deep (RecursionError), half-built (missing
        # attributes) or raising from its own methods: the action ran all the same.
        raise ResultNotStorableError(_explain(exc)) from exc
    if not same:
        raise ResultNotStorableError(
            f"{_show(value)} does not fit {_show_type(return_type)}: "
            f"it would replay as {_show(rebuilt)}"
        )
    if lost is not None:
        raise ResultNotStorableError(f"it would not replay as itself: {lost}")
    return stored


def _stored_by_user_rule(value: object) -> bool:
    """Whether ``value`` is stored by a ``register_type`` rule, which checked its JSON."""
    return any(isinstance(value, cls) for cls in _registered)


def encode_untyped(value: object) -> JSON:
    """Turn ``value`` into JSON by its runtime type (for results given to ``resolve``).

    Raises:
        ValueError: the value cannot be turned into JSON.

    """
    try:
        result = _through_json(converter.unstructure(value))
    except Exception as exc:
        raise ValueError(
            f"cannot store {_show(value)} as a result ({_explain(exc)}); pass the value as the "
            f"tool would have returned it ({_SUPPORTED})"
        ) from exc
    return result


_RESTORE = (
    "The action already ran and is not run again. If the tool's return type changed since "
    "the result was stored, restore it; if not, the stored result is wrong (edited by hand, "
    "or misread by a register_type from_json): correct it with safeact amend"
)


def decode(stored: JSON, return_type: Any, *, key: str, tool: str, fix: str | None = None) -> Any:
    """Rebuild a stored result as ``return_type``: exactly what was stored, or an error.

    The rebuilt value is turned into JSON again as ``return_type`` and must equal
    ``stored`` (``_same_json``): a value cattrs would coerce (``"false"`` to ``True`` for a
    ``bool``) is refused rather than replayed.

    Args:
        stored: the result as the ledger holds it.
        return_type: the tool's return annotation now.
        key: the key, named in the error.
        tool: the tool's name, named in the error.
        fix: what the error advises; by default, to restore the return type the result was
            stored under or else to amend the result (right for a result the tool stored).

    Raises:
        StoreError: the stored JSON does not rebuild as ``return_type``, or would rebuild
            as a different value. The action is not run again.

    """

    def refused(why: str) -> StoreError:
        return StoreError(
            f"the stored result of {tool} for key {key!r} cannot be rebuilt as "
            f"{_show_type(return_type)} from {_show(stored)}: {why}. "
            f"{_RESTORE if fix is None else fix}"
        )

    if type(stored) is return_type and return_type in _AS_IS:
        return stored
    try:
        hooks = _hooks(return_type)
        rebuilt = hooks.structure(stored, return_type)
        same = _same_json(_through_json(hooks.unstructure(rebuilt)), stored)
    except Exception as exc:
        raise refused(_explain(exc)) from exc
    if not same:
        raise refused(f"it would replay as {_show(rebuilt)}")
    return rebuilt


@attrs.frozen
class _Hooks:
    """The cattrs hooks of one type: ``structure(data, type)`` and ``unstructure(value)``."""

    structure: Callable[[Any, Any], Any]
    unstructure: Callable[[Any], Any]


_hooks_by_type: dict[object, _Hooks] = {}
"""The hooks of every type a result was encoded or decoded as, each looked up once.

``register_type`` empties it, as cattrs empties its own cache: a registration changes the
hooks of the types that contain the registered one.
"""


def _hooks(as_type: object) -> _Hooks:
    """The cattrs hooks for ``as_type``: what ``structure`` and ``unstructure`` look up.

    Raises:
        Exception: whatever cattrs raises for a type it has no hook for.

    """
    hooks = _hooks_by_type.get(as_type)
    if hooks is None:
        # To cattrs, unstructure_as=None means by the value's own class: kept for a None
        # passed as the type (get_type_hints makes "-> None" NoneType, which has a hook).
        unstructure = (
            converter.unstructure if as_type is None else converter.get_unstructure_hook(as_type)
        )
        hooks = _Hooks(converter.get_structure_hook(as_type), unstructure)
        _hooks_by_type[as_type] = hooks
    return hooks


def _through_json(unstructured: object) -> JSON:
    """``json.loads(json.dumps(unstructured, allow_nan=False))``: tuples become lists.

    Raises:
        Exception: whatever ``json`` raises (NaN and infinities are refused).

    """
    # The text is json's own, with nothing around or after the value: raw_decode reads it all.
    result: JSON = JSON_DECODER.raw_decode(STRICT_JSON.encode(unstructured))[0]
    return result


def _same_json(left: JSON, right: JSON) -> bool:
    """Whether two JSON values are the same data, kind for kind.

    Stricter than ``==``: ``true`` is not ``1`` and ``"1"`` is not ``1``. Numbers compare by
    value, ``9`` and ``9.0`` alike (JSON has one number type). Arrays compare in order,
    objects key by key. ``left`` is as ``json`` decodes it (dict, list, str, int, float,
    bool or None, never a subclass), so its type says its kind; ``right`` may be anything.
    """
    # By exact type, which a decoded value has: cheaper than a match on classes (isinstance).
    if type(left) is dict:
        return (
            isinstance(right, dict)
            and left.keys() == right.keys()
            and all(_same_json(item, right[name]) for name, item in left.items())
        )
    if type(left) is list:
        return (
            isinstance(right, list)
            and len(left) == len(right)
            and all(map(_same_json, left, right))
        )
    if type(left) is str:
        return isinstance(right, str) and left == right
    if type(left) is bool:
        return isinstance(right, bool) and left == right
    if left is None:
        return right is None
    return isinstance(right, int | float) and not isinstance(right, bool) and left == right


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


def shown(value: object) -> str:
    """``value`` as text for a person or a model: its repr, or its type's name if that raises.

    For a result the ledger cannot store: the caller still gets it, as this text.
    """
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - the value is a user's, and so is its __repr__
        return f"a {type(value).__qualname__} (its repr raised)"


def _show(value: object) -> str:
    """Return a short repr of ``value``, or its type's name if its ``__repr__`` raises."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - the value is a user's, and so is its __repr__
        return f"a {type(value).__qualname__}"
    return _shorten(text)


def _show_type(annotation: object) -> str:
    """Return an annotation as written in code (``list[int]``, ``shop.Receipt``), cut short."""
    if annotation is NoneType:  # get_type_hints turns "-> None" into NoneType
        return "None"
    try:
        text = inspect.formatannotation(annotation)
    except Exception:  # noqa: BLE001 - a user's class with a broken metaclass repr
        return _show(annotation)
    return _shorten(text)


def _shorten(text: str) -> str:
    if len(text) > _LONGEST_SHOWN:
        return f"{text[: _LONGEST_SHOWN - 3]}..."
    return text
