"""How each kind of value is written as JSON and read back: the one cattrs converter.

Registered at import, before any tool is made (cattrs caches the hooks it composes). The
rules that are safeact's own: ``None``, UUIDs and Decimals as themselves; a number under
``float`` as it was (``3`` stays an int); a datetime with its zone's name and its fold; sets
as sorted arrays; attrs classes, dataclasses and pydantic models by their fields
(``init=False`` ones too; models by alias), a subclass's instance with its class named.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import importlib
import inspect
import json
import sys
import typing
import uuid
from collections.abc import Callable
from types import NoneType
from typing import Any, cast

import attrs
from cattrs.cols import is_abstract_set, is_any_set, iterable_unstructure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn
from cattrs.preconf.json import make_converter

from safeact._keys import class_name, main_module

if typing.TYPE_CHECKING:
    from safeact._protocol import JSON

__all__ = [
    "JSON_DECODER",
    "STRICT_JSON",
    "bind",
    "converter",
    "is_pydantic_model",
    "json_order",
    "seen",
]

converter = make_converter(forbid_extra_keys=True)

STRICT_JSON = json.JSONEncoder(allow_nan=False)
"""What ``json.dumps(value, allow_nan=False)`` writes, built once: JSON with no NaN."""

_SORTED_JSON = json.JSONEncoder(sort_keys=True)
"""What ``json.dumps(value, sort_keys=True)`` writes: a canonical text to order values by."""

JSON_DECODER = json.JSONDecoder()
"""What ``json.loads`` decodes with."""


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


def _structure_float(value: object, _: object) -> float:
    """A number as it was: ``3`` stays an int under ``float`` (which accepts ints, PEP 484)."""
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, got {value!r}")
    return cast("float", value)


_FOLD = "[fold=1]"


def _unstructure_datetime(value: dt.datetime) -> str:
    """ISO 8601, then the zone's name in brackets (RFC 9557) for a ``ZoneInfo``, then the fold.

    The offset alone would replay an ``Europe/Paris`` time as a fixed ``+01:00``, and
    ``fold`` (which of a repeated hour's two times) is in no ISO form.
    """
    text = value.isoformat()
    # A ZoneInfo can exist only once zoneinfo is imported: not importing it here keeps
    # its import time out of ``import safeact``.
    zones = sys.modules.get("zoneinfo")
    zone = value.tzinfo
    if zones is not None and isinstance(zone, zones.ZoneInfo) and zone.key is not None:
        text = f"{text}[{zone.key}]"
    return f"{text}{_FOLD}" if value.fold else text


def _structure_datetime(value: object, _: object) -> dt.datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO 8601 date and time, got {value!r}")
    text, fold = (value[: -len(_FOLD)], 1) if value.endswith(_FOLD) else (value, 0)
    zone = None
    if text.endswith("]") and "[" in text:
        text, _, name = text[:-1].rpartition("[")
        import zoneinfo  # noqa: PLC0415 - see _unstructure_datetime

        zone = zoneinfo.ZoneInfo(name)
    parsed = dt.datetime.fromisoformat(text)
    if zone is None:
        return parsed.replace(fold=fold)
    rebuilt = parsed.replace(tzinfo=zone, fold=fold)
    if rebuilt.utcoffset() != parsed.utcoffset():
        raise ValueError(
            f"{text} is not a time in {zone.key} (its rules here give offset {rebuilt.utcoffset()})"
        )
    return rebuilt


def _has_late_fields(cls: object) -> bool:
    """Whether ``cls`` is an attrs class or dataclass with fields ``__init__`` does not take."""
    if isinstance(cls, type) and attrs.has(cls):
        return not all(field.init for field in attrs.fields(cls))
    return dataclasses.is_dataclass(cls) and not all(
        field.init for field in dataclasses.fields(cls)
    )


def _late_fields(cls: type[Any]) -> dict[str, Any]:
    """The ``init=False`` fields of ``cls`` (maybe ``Box[int]``) and their types."""
    base = typing.get_origin(cls) or cls
    bound = dict(zip(getattr(base, "__parameters__", ()), typing.get_args(cls), strict=False))
    if attrs.has(base):
        attrs.resolve_types(base)
        late = {field.name: field.type for field in attrs.fields(base) if not field.init}
    else:
        hints = typing.get_type_hints(base)
        late = {f.name: hints[f.name] for f in dataclasses.fields(base) if not f.init}
    return {name: bind(kind, bound) for name, kind in late.items()}


def bind(annotation: object, bound: dict[object, object]) -> Any:
    """``annotation`` with a generic class's type variables replaced by their types."""
    if isinstance(annotation, typing.TypeVar):
        return bound.get(annotation, annotation)
    variables = getattr(annotation, "__parameters__", ())
    if not variables or not bound:
        return annotation
    try:
        return annotation[tuple(bound.get(v, v) for v in variables)]  # type: ignore[index] # a generic alias
    except TypeError:
        return annotation


def _late_unstructure_hook(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    """Write ``init=False`` fields too: a replay would otherwise have only their defaults."""
    init = make_dict_unstructure_fn(cls, converter)
    late = {name: converter.get_unstructure_hook(kind) for name, kind in _late_fields(cls).items()}

    def unstructure(value: Any) -> dict[str, Any]:
        data = init(value)
        for name, hook in late.items():
            if hasattr(value, name):  # a field never set stays unset after a replay
                data[name] = hook(getattr(value, name))
        return data

    return unstructure


def _late_structure_hook(cls: type[Any]) -> Callable[[Any, Any], Any]:
    """Build through ``__init__``, then set the ``init=False`` fields as they were stored."""
    init = make_dict_structure_fn(cls, converter)
    late = {
        name: (converter.get_structure_hook(kind), kind) for name, kind in _late_fields(cls).items()
    }

    def structure(data: Any, _: object) -> Any:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {data!r}")
        value = init({name: item for name, item in data.items() if name not in late}, cls)
        for name, (hook, kind) in late.items():
            if name in data:
                # object.__setattr__: the field may be frozen; it was set so before it was stored.
                object.__setattr__(value, name, hook(data[name], kind))
        return value

    return structure


_SUBCLASS = "safeact:class"
"""The member naming an instance's class when it is a subclass of the annotated one."""


def _is_record_class(cls: object) -> bool:
    """Whether ``cls`` is an attrs class, a dataclass or a pydantic model (``Box[int]`` too)."""
    base = typing.get_origin(cls) or cls
    return isinstance(base, type) and (
        attrs.has(base) or dataclasses.is_dataclass(base) or is_pydantic_model(base)
    )


def _class_unstructure_hook(cls: type[Any]) -> Callable[[Any], Any]:
    """Write an instance by its fields; a subclass's instance by its own, with its class named.

    Written as the annotated class, a subclass instance would replay as the base, its own
    fields lost. ``cls`` may be a generic class's alias (``Box[int]``).
    """
    base = typing.get_origin(cls) or cls
    if is_pydantic_model(cls):
        own = _model_unstructure_hook(cls)
    elif _has_late_fields(base):
        own = _late_unstructure_hook(cls)
    else:
        own = make_dict_unstructure_fn(cls, converter)

    def unstructure(value: Any) -> Any:
        kind = type(value)
        if kind is base or not issubclass(kind, base):
            return own(value)
        return {**converter.get_unstructure_hook(kind)(value), _SUBCLASS: _class_name(kind)}

    return unstructure


def _class_structure_hook(cls: type[Any]) -> Callable[[Any, Any], Any]:
    """Read an instance written by ``_class_unstructure_hook``, a subclass's as that subclass."""
    base = typing.get_origin(cls) or cls
    if is_pydantic_model(cls):
        own = _model_structure_hook(cls)
    elif _has_late_fields(base):
        own = _late_structure_hook(cls)
    else:
        own = make_dict_structure_fn(cls, converter)

    def structure(data: Any, _: object) -> Any:
        if not isinstance(data, dict) or _SUBCLASS not in data:
            return own(data, cls)
        kind = _subclass(base, data[_SUBCLASS])
        fields = {name: item for name, item in data.items() if name != _SUBCLASS}
        return converter.get_structure_hook(kind)(fields, kind)

    return structure


def _class_name(cls: type[Any]) -> str:
    """``module:qualname``, a script's module named as an import names it (as in args hashes)."""
    module, qualname = class_name(cls)
    return f"{module}:{qualname}"


def _subclass(base: type[Any], name: object) -> type[Any]:
    """The subclass of ``base`` called ``name`` (``module:qualname``), found as pickle would.

    Raises:
        TypeError: no such subclass (the class was renamed, moved, or defined in a function
            that has not run in this process).

    """
    if isinstance(name, str):
        found = _by_name(name)
        if isinstance(found, type) and issubclass(found, base):
            return found
        # A class made inside a function is no attribute of its module: look among the live
        # subclasses, the last made first. attrs and slotted dataclasses replace the class
        # they decorate, and the replaced one, of the same name but fewer fields, stays
        # listed until the garbage collector runs.
        named = [kind for kind in _subclasses(base) if _class_name(kind) == name]
        if named:
            return named[-1]
    raise TypeError(
        f"the result was stored as {name!r}, which is not a subclass of "
        f"{_class_name(base)} that this process knows (renamed, moved, or defined inside a "
        "function that has not run)"
    )


def _by_name(name: str) -> object:
    """What ``module:qualname`` names: the module imported (the application's own), or None."""
    module_name, _, qualname = name.partition(":")
    found: object = sys.modules.get(module_name)
    if found is None and module_name == main_module():
        found = sys.modules.get("__main__")  # a script, named as its file is imported
    if found is None:
        try:
            found = importlib.import_module(module_name)
        except ImportError:
            return None
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def _subclasses(base: type[Any]) -> list[type[Any]]:
    """Every subclass of ``base``, at any depth, each level in the order they were made."""
    found: list[type[Any]] = []
    pending = [base]
    while pending:
        for kind in pending.pop(0).__subclasses__():
            found.append(kind)
            pending.append(kind)
    return found


def json_order(item: JSON) -> tuple[int, float | str]:
    """A total order on JSON values, the same in every process (unlike a set's own order)."""
    match item:
        case bool():
            return (0, int(item))
        case int() | float():
            return (1, item)
        case str():
            return (2, item)
        case _:  # null, arrays and objects: by their canonical text
            return (3, _SORTED_JSON.encode(item))


def _sorted_json(items: list[JSON]) -> list[JSON]:
    return sorted(items, key=json_order)


def _set_unstructure_hook(set_type: object) -> Callable[[Any], list[JSON]]:
    """Unstructure a set as a sorted array.

    A set's iteration order depends on its history and, for strings, on the process's hash
    seed: stored in one order, it would re-encode in another on replay and look changed.
    """
    elements = iterable_unstructure_factory(set_type, converter, unstructure_to=list)
    return lambda value: _sorted_json(elements(value))


def is_pydantic_model(cls: object) -> bool:
    """Whether ``cls`` is a pydantic v2 model class, without importing pydantic.

    A class can only be a ``BaseModel`` subclass if pydantic is imported already.
    """
    pydantic = sys.modules.get("pydantic")
    return (
        pydantic is not None
        and inspect.isclass(cls)
        and issubclass(cls, pydantic.BaseModel)
        and cls is not pydantic.BaseModel
    )


def _model_unstructure_hook(model: type[Any]) -> Callable[[Any], JSON]:
    """Dump an instance as ``model`` (a subclass's extra fields are left out), sets sorted."""
    from pydantic import TypeAdapter  # noqa: PLC0415 - pydantic is imported: model is its class

    adapter: TypeAdapter[Any] = TypeAdapter(model)

    def unstructure(value: Any) -> JSON:
        # By alias: the model validates its JSON by alias, so a field with one reads back.
        dumped: JSON = adapter.dump_python(value, mode="json", by_alias=True)
        return _sort_sets(adapter.dump_python(value, mode="python", by_alias=True), dumped)

    return unstructure


def _model_structure_hook(model: type[Any]) -> Callable[[Any, Any], Any]:
    """Validate as the model does its own JSON: ``"2026-01-01T00:00:00Z"`` is a datetime there.

    The model's own config decides strictness (lax by default); a lax coercion such as
    ``"9"`` to ``9`` is caught all the same by the comparison after rebuilding.
    """
    from pydantic import TypeAdapter  # noqa: PLC0415 - pydantic is imported: model is its class

    adapter: TypeAdapter[Any] = TypeAdapter(model)
    return lambda value, _: adapter.validate_json(json.dumps(value))


def _sort_sets(python: object, json_form: JSON) -> JSON:
    """Sort the arrays of ``json_form`` that are sets in ``python``, its Python-mode twin.

    pydantic writes a set in iteration order; walking its Python-mode dump alongside tells
    which arrays are sets (both dumps iterate the same objects, so they line up). Where the
    two do not match (a custom serializer), the JSON is left as it is.
    """
    if isinstance(python, list | tuple | set | frozenset) and isinstance(json_form, list):
        if len(python) != len(json_form):
            return json_form
        items = [_sort_sets(p, j) for p, j in zip(python, json_form, strict=True)]
        return _sorted_json(items) if isinstance(python, set | frozenset) else items
    if isinstance(python, dict) and isinstance(json_form, dict) and len(python) == len(json_form):
        return {
            key: _sort_sets(value, item)
            for value, (key, item) in zip(python.values(), json_form.items(), strict=True)
        }
    return json_form


seen: set[object] = set()
"""Every type cattrs looked up a hook for that no class registration answered (a watch)."""


def _note_seen(cls: object) -> bool:
    """Remember that cattrs looked ``cls`` up; never claim it (so the lookup goes on)."""
    with contextlib.suppress(TypeError):  # an unhashable annotation (Annotated metadata)
        seen.add(cls)
    return False


def _never(*_: object) -> typing.NoReturn:  # pragma: no cover - _note_seen never matches
    raise AssertionError


# Registered at import, before any tool is made. cattrs asks the predicate hooks registered
# last first: the set and pydantic rules come before cattrs' own, and _note_seen, registered
# last of all, sees every lookup that no class registration (singledispatch) answers.
converter.register_structure_hook(NoneType, _structure_none)
converter.register_unstructure_hook(NoneType, lambda value: value)
converter.register_structure_hook(uuid.UUID, _structure_uuid)
converter.register_unstructure_hook(uuid.UUID, str)
converter.register_structure_hook(decimal.Decimal, _structure_decimal)
converter.register_unstructure_hook(decimal.Decimal, str)
converter.register_structure_hook(float, _structure_float)
converter.register_structure_hook(dt.datetime, _structure_datetime)
converter.register_unstructure_hook(dt.datetime, _unstructure_datetime)
converter.register_unstructure_hook_factory(
    lambda cls: is_any_set(cls) or is_abstract_set(cls), _set_unstructure_hook
)
converter.register_structure_hook_factory(_is_record_class, _class_structure_hook)
converter.register_unstructure_hook_factory(_is_record_class, _class_unstructure_hook)
converter.register_structure_hook_func(_note_seen, _never)
converter.register_unstructure_hook_func(_note_seen, _never)
