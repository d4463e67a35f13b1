"""Which return types replay exactly, decided from the type alone when a tool is made.

``refusal(annotation)`` walks everything a return type can hold (generic arguments, the
fields of attrs classes, dataclasses, TypedDicts, NamedTuples and pydantic models) and names
the first part whose values could not come back as they went in: ``Any`` and unparameterised
containers (their items would replay as plain JSON: a ``datetime`` as a ``str``, a tuple as
a list), mapping keys JSON cannot tell apart, enums with values that are not JSON scalars,
secrets (only their mask could be stored), and pydantic state its JSON leaves out (excluded
fields, private attributes, undeclared extras). What the type allows but a value still
breaks (a subclass with a custom serializer, say) is caught for each value by ``encode``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime as dt
import decimal
import enum
import inspect
import sys
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from safeact._json_rules import bind, is_pydantic_model

__all__ = ["refusal"]

_BARE_CONTAINERS = frozenset(
    {
        dict,
        list,
        set,
        frozenset,
        tuple,
        collections.abc.Mapping,
        collections.abc.MutableMapping,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
        collections.abc.Set,
        collections.abc.MutableSet,
        collections.abc.Collection,
        collections.abc.Iterable,
    }
)

_MAPPINGS = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})

_KEY_TYPES = frozenset({str, int, uuid.UUID, decimal.Decimal, dt.date, dt.datetime})
"""Mapping keys that come back as themselves: each kind is written as its own text.

Not ``bool`` (``"false"`` reads back as True) nor ``float`` (``1`` is written ``"1"``).
"""

_READ_ONLY: dict[object, str] = {
    collections.abc.Sequence: "list[int] or tuple[int, ...]",
    collections.abc.Collection: "list[int] or tuple[int, ...]",
    collections.abc.Iterable: "list[int] or tuple[int, ...]",
    collections.abc.Set: "set[int] or frozenset[int]",
}
"""Parameterised protocols whose values come in more than one type, and what to write."""

_JSON_SCALARS = (str, int, float, bool, type(None))


def refusal(annotation: object, *, own_rule: Callable[[object], bool]) -> str | None:
    """Why results annotated ``annotation`` could not replay exactly; None if they can.

    The reason names the part (``the result``, ``Receipt.lines``, ``Receipt.lines's
    items``...) and what to write instead. ``own_rule(cls)`` says a class is stored by a
    rule of the user's (``register_type``): it is not looked into.

    Raises:
        TypeError: an attrs class's string annotations cannot be resolved.

    """
    return _walk(annotation, "the result", _Seen(own_rule))


@attrs.define
class _Seen:
    """What a walk has looked into already (a class that holds itself is walked once)."""

    own_rule: Callable[[object], bool]
    classes: set[object] = attrs.Factory(set)


def _walk(annotation: object, where: str, seen: _Seen) -> str | None:  # noqa: PLR0911 - one arm per kind of type
    if annotation is Any or annotation is object or isinstance(annotation, typing.TypeVar):
        return (
            f"{_name(annotation)} in {where}: a value under it would be stored as plain JSON "
            "and replay as JSON (a datetime as a str, a tuple as a list, an attrs class "
            "as a dict); annotate the concrete type it holds"
        )
    if isinstance(annotation, typing.NewType):
        return _walk(annotation.__supertype__, where, seen)
    origin = typing.get_origin(annotation)
    if annotation in _BARE_CONTAINERS or (
        origin in _BARE_CONTAINERS and not typing.get_args(annotation) and annotation != tuple[()]
    ):
        return (
            f"a bare {_name(annotation)} in {where}: its items would replay as plain JSON; "
            f"say what it holds, e.g. {_example(origin or annotation)}"
        )
    if origin is typing.Literal or annotation is type(None) or annotation == tuple[()]:
        return None
    if origin is not None:
        return _generic_refusal(annotation, origin, where, seen)
    if not isinstance(annotation, type) or annotation in seen.classes or seen.own_rule(annotation):
        return None
    seen.classes.add(annotation)
    return _class_refusal(annotation, where, seen, {})


def _generic_refusal(annotation: object, origin: object, where: str, seen: _Seen) -> str | None:  # noqa: PLR0911 - one arm per kind of generic
    """``_walk`` for a parameterised type: ``list[int]``, ``int | None``, ``Box[int]``..."""
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _walk(arguments[0], where, seen)
    if origin in _READ_ONLY:
        return (
            f"{_name(annotation)} in {where}: it names what its values can do, not their type, "
            "so a replay cannot tell which it was (a list comes back a tuple, a set a "
            f"frozenset); annotate the type itself, e.g. {_READ_ONLY[origin]}"
        )
    if origin in _MAPPINGS or _is_mapping(origin):
        key, *value = arguments  # Counter[str] names its keys alone
        found = _key_refusal(key, where)
        return found or (_walk(value[0], f"{where}'s values", seen) if value else None)
    if isinstance(origin, type) and _is_record_class(origin):
        if annotation in seen.classes:
            return None
        seen.classes.add(annotation)
        bound = dict(zip(getattr(origin, "__parameters__", ()), arguments, strict=False))
        return _class_refusal(origin, where, seen, bound)
    union = origin in (typing.Union, types.UnionType)
    fixed = origin is tuple and Ellipsis not in arguments
    for position, argument in enumerate(arguments):
        inside = where if union else f"{where}[{position}]" if fixed else f"{where}'s items"
        found = None if argument is Ellipsis else _walk(argument, inside, seen)
        if found is not None:
            return found
    return None


def _class_refusal(
    cls: type[Any], where: str, seen: _Seen, bound: dict[object, object]
) -> str | None:
    """Why ``cls``'s values would not replay exactly; ``bound``: its type variables' types."""
    if issubclass(cls, enum.Enum):
        return _enum_refusal(cls)
    secret = _secret(cls, where)
    if secret is not None:
        return secret
    if is_pydantic_model(cls):
        found = _model_refusal(cls)
        if found is not None:
            return found
        fields = {name: info.annotation for name, info in cls.model_fields.items()}
    elif attrs.has(cls):
        try:
            attrs.resolve_types(cls)
        except NameError as exc:
            raise TypeError(
                f"cannot resolve the field types of {_name(cls)} ({exc}); make the types its "
                "fields name importable where it is defined"
            ) from exc
        fields = {field.name: field.type for field in attrs.fields(cls)}
    elif dataclasses.is_dataclass(cls) or typing.is_typeddict(cls) or _is_named_tuple(cls):
        fields = _hints(cls)
    else:
        return None
    for name, annotation in fields.items():
        found = _walk(bind(annotation, bound), f"{_name(cls)}.{name}", seen)
        if found is not None:
            return found
    return None


def _key_refusal(key: object, where: str) -> str | None:
    """Why mapping keys of type ``key`` would not come back as themselves, if they would not.

    JSON object keys are text: each key is written as its text and read back by its type,
    which must therefore be one kind (``str | int`` would read ``1`` and ``"1"`` both as
    ``"1"``) whose text names one value.
    """
    origin = typing.get_origin(key)
    if origin is typing.Annotated:
        return _key_refusal(typing.get_args(key)[0], where)
    fits = (
        key in _KEY_TYPES
        or (origin is typing.Literal and all(type(v) is str for v in typing.get_args(key)))
        or (
            isinstance(key, type)
            and issubclass(key, enum.Enum)
            and all(isinstance(member.value, str) for member in key)
        )
        or _new_type_of_key(key)
    )
    if fits:
        return None
    return (
        f"{where} has keys typed {_name(key)}, which JSON cannot store as themselves "
        "(object keys are text, read back as one kind); key it by str, int, a str-valued "
        "enum, UUID, Decimal or a date, or return a list of pairs instead"
    )


def _new_type_of_key(key: object) -> bool:
    supertype = getattr(key, "__supertype__", None)
    return isinstance(key, typing.NewType) and supertype in _KEY_TYPES


def _enum_refusal(cls: type[enum.Enum]) -> str | None:
    for member in cls:
        if not isinstance(member.value, _JSON_SCALARS):
            return (
                f"the enum {_name(cls)} has a member {member.name} whose value "
                f"{member.value!r} is not a JSON scalar, so it would not read back; give its "
                "members str or int values"
            )
    return None


def _secret(cls: type[Any], where: str) -> str | None:
    pydantic = sys.modules.get("pydantic")
    secrets = () if pydantic is None else (pydantic.SecretStr, pydantic.SecretBytes)
    if secrets and issubclass(cls, secrets):
        return (
            f"a {cls.__name__} in {where} is a secret: only its mask '**********' could be "
            "stored, and a replay would return the mask. Do not store secrets in the ledger: "
            "return what "
            "the caller needs besides the secret (an id or a reference to it)"
        )
    return None


def _model_refusal(model: type[Any]) -> str | None:
    """Why a pydantic model's JSON would leave part of an instance out, if it would."""
    name = _name(model)
    for field_name, info in model.model_fields.items():
        if info.exclude:
            return (
                f"{name}.{field_name} is excluded from the model's JSON (exclude=True), so a "
                "replay would reset it; drop exclude=True or leave the field out of the model"
            )
    if model.__private_attributes__:
        private = ", ".join(sorted(model.__private_attributes__))
        return (
            f"{name} has private attributes ({private}) that its JSON leaves out, so a replay "
            "would reset them; make them fields, or return a model without them"
        )
    if model.model_config.get("extra") == "allow":
        return (
            f"{name} allows extra fields (extra='allow'), which have no declared type and "
            "would replay as plain JSON; declare them as fields, or use extra='forbid'"
        )
    return None


def _is_record_class(cls: type[Any]) -> bool:
    return attrs.has(cls) or dataclasses.is_dataclass(cls) or is_pydantic_model(cls)


def _is_mapping(origin: object) -> bool:
    return isinstance(origin, type) and issubclass(origin, collections.abc.Mapping)


def _is_named_tuple(cls: type[Any]) -> bool:
    return issubclass(cls, tuple) and hasattr(cls, "_fields")


def _hints(cls: type[Any]) -> dict[str, object]:
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError) as exc:
        raise TypeError(
            f"cannot resolve the field types of {_name(cls)} ({exc}); make the types its "
            "fields name importable where it is defined"
        ) from exc


def _example(container: object) -> str:
    if container in _MAPPINGS:
        return "dict[str, int]"
    if container is tuple:
        return "tuple[int, ...]"
    return f"{getattr(container, '__name__', 'list')}[int]"


def _name(annotation: object) -> str:
    if annotation is type(None):
        return "None"
    try:
        return inspect.formatannotation(annotation)
    except Exception:  # noqa: BLE001 - a user's class with a broken metaclass repr
        return type(annotation).__qualname__
