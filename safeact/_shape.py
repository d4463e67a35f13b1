"""What a tool's results look like as stored JSON, described without its code, and checked.

A tool's process describes its return type once (``shape_of``) and keeps the description in
the ledger (the ``tools`` table); the command line checks an operator's result against it
(``check``) without importing the tool's module. The description is JSON, in this grammar
(every node an object with a ``"type"``):

======================================================  ====================================
node                                                    fits
======================================================  ====================================
``{"type": "any"}``                                     any JSON
``{"type": "null"}``, ``"bool"``, ``"str"``             null; true or false; a string
``{"type": "int"}``                                     an integer (``9.0`` too, outside a
                                                        union: the codec replays it as 9)
``{"type": "number"}``                                  an integer or a float, not a bool
``{"type": "str", "format": F}``                        a string the codec rebuilds as F and
                                                        writes back unchanged: ``datetime``,
                                                        ``date``, ``uuid``, ``decimal``,
                                                        ``bytes`` (base85), ``int`` (a key);
                                                        ``"dialect": "pydantic"`` for
                                                        pydantic's spelling of a datetime
``{"type": "array", "items": S}``                       an array of S (list, tuple[S, ...])
``{"type": "set", "items": S}``                         an array of S, sorted as the codec
                                                        sorts sets, without repeats
``{"type": "tuple", "items": [S, ...]}``                an array of exactly those
``{"type": "dict", "keys": K, "values": S}``            an object; each member's name fits K
``{"type": "object", "name": N, "fields":               an object with those members
{M: {"shape": S, "required": B}}, "extra": B,           (``extra``: others allowed); with
"tag": T}``                                             ``tag``, the member T naming a
                                                        subclass, whose members are its own
``{"type": "ref", "name": N}``                          the enclosing object N (recursion)
``{"type": "enum", "name": N, "values": [...]}``,       one of the values
``{"type": "literal", "values": [...]}``
``{"type": "union", "of": [S, ...]}``                   one of them
``{"type": "unchecked", "why": W}``                     anything; reported as not checked
======================================================  ====================================

Any node may also carry ``"unverified": W``: its shape is checked, but the tool's own code
(a validator, a converter) also judges the value, and that is reported as not checked. A
node of a type this module does not know (written by a newer safeact) is not checked either.

``shape_of`` runs in the tool's process, where the types are; it never raises (what it
cannot describe becomes ``unchecked``, with the reason). ``check`` and ``problems`` are pure.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import re
import types
import typing
import uuid
from typing import Any

import attrs

from safeact._codec import _registered, decode, encode
from safeact._json_rules import _SUBCLASS, is_pydantic_model, json_order
from safeact.exceptions import StoreError

if typing.TYPE_CHECKING:
    from safeact._protocol import JSON

__all__ = ["Fit", "check", "problems", "shape_of", "shape_text"]

Node = dict[str, Any]
"""A node of a shape: a JSON object with a ``"type"``."""

_LONGEST_SHOWN = 40
"""Characters of a value shown in a problem."""

_CATTRS_FORMATS: dict[str, object] = {
    "datetime": dt.datetime,
    "date": dt.date,
    "uuid": uuid.UUID,
    "decimal": decimal.Decimal,
    "bytes": bytes,
}
"""The string formats the codec itself reads and writes, by the type it rebuilds."""

_FORMAT_WORDS = {
    "datetime": 'a date and time as safeact stores it (ISO 8601, "2026-01-31T12:00:00+00:00")',
    "date": 'a date as safeact stores it ("2026-01-31")',
    "uuid": 'a UUID as safeact stores it (lower case, "123e4567-e89b-12d3-a456-426614174000")',
    "decimal": 'a decimal number as a string ("12.50")',
    "bytes": "bytes as safeact stores them (base85 text)",
    "int": 'an integer written as a string ("42")',
}

# The codec's own test of a pydantic model, so that this module describes what it stores.
_is_model = is_pydantic_model

_QUALIFIERS = frozenset({"Required", "NotRequired", "ReadOnly"})
"""TypedDict's qualifiers of a member (``typing``'s or ``typing_extensions``'), not its type."""

_PYDANTIC_DATETIME = (
    'a date and time as pydantic writes it (ISO 8601, "2026-01-31T12:00:00Z" for UTC)'
)


# Describing a type (in the tool's process).


def shape_text(annotation: object) -> str:
    """``shape_of(annotation)`` as compact JSON text, the same for the same description.

    Members stay in their class's order (not sorted), so that problems are named in it.
    """
    return json.dumps(shape_of(annotation), separators=(",", ":"))


def shape_of(annotation: object) -> JSON:
    """Describe the JSON the codec writes for results of type ``annotation``.

    Never raises: what cannot be described without running the tool's code (a type taught
    with ``register_type``, a pydantic serializer, a type this module does not know) is an
    ``unchecked`` node saying why.
    """
    return _Describer().shape(annotation, {}, pydantic=False)


def _unchecked(why: str) -> Node:
    return {"type": "unchecked", "why": why}


def _name(annotation: object) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return str(annotation).replace("typing.", "")


class _Describer:
    """One description: the classes met on the way down, so that a recursive type ends."""

    def __init__(self) -> None:
        self.open: dict[type[Any], str] = {}

    def shape(self, annotation: object, bound: dict[Any, Any], *, pydantic: bool) -> Node:
        """The node of ``annotation``, its type variables as ``bound`` says."""
        try:
            return self._shape(annotation, bound, pydantic=pydantic)
        except RecursionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user's type may break any introspection
            return _unchecked(f"safeact could not describe {_name(annotation)} ({exc!r})")

    def _shape(  # noqa: C901, PLR0911, PLR0912 - one arm per kind of type
        self, annotation: object, bound: dict[Any, Any], *, pydantic: bool
    ) -> Node:
        if isinstance(annotation, typing.TypeVar):
            if annotation in bound:
                return self.shape(bound[annotation], {}, pydantic=pydantic)
            return _unchecked(f"the type variable {annotation.__name__} is not bound")
        origin = typing.get_origin(annotation)
        arguments = typing.get_args(annotation)
        if origin is typing.Annotated:
            return self._annotated(arguments[0], arguments[1:], bound, pydantic=pydantic)
        if getattr(origin, "_name", None) in _QUALIFIERS:
            return self.shape(arguments[0], bound, pydantic=pydantic)
        supertype = getattr(annotation, "__supertype__", None)  # typing.NewType
        if supertype is not None:
            return self.shape(supertype, bound, pydantic=pydantic)
        value = getattr(annotation, "__value__", None)  # a type statement's alias
        if value is not None and type(annotation).__name__ == "TypeAliasType":
            return self.shape(value, bound, pydantic=pydantic)
        if annotation is Any or annotation is object:
            return {"type": "any"}
        if annotation is None or annotation is types.NoneType:
            return {"type": "null"}
        if origin is typing.Literal:
            return {"type": "literal", "values": [_json_of(item) for item in arguments]}
        if origin in (typing.Union, types.UnionType):
            return self._union(arguments, bound, pydantic=pydantic)
        if isinstance(annotation, type):
            found = self._class(annotation, bound, pydantic=pydantic)
            if found is not None:
                return found
        if isinstance(origin, type):
            found = self._generic(origin, arguments, bound, pydantic=pydantic)
            if found is not None:
                return found
        return _unchecked(f"safeact does not know how {_name(annotation)} is stored")

    def _union(self, members: tuple[object, ...], bound: dict[Any, Any], *, pydantic: bool) -> Node:
        nodes: list[Node] = []
        for member in members:
            node = self.shape(member, bound, pydantic=pydantic)
            if node not in nodes:
                nodes.append(node)
        return nodes[0] if len(nodes) == 1 else {"type": "union", "of": nodes}

    def _annotated(
        self, inner: object, metadata: tuple[object, ...], bound: dict[Any, Any], *, pydantic: bool
    ) -> Node:
        """``Annotated``: cattrs ignores the metadata; pydantic may validate or serialize by it."""
        node = self.shape(inner, bound, pydantic=pydantic)
        if not pydantic:
            return node
        serializers = [item for item in metadata if type(item).__name__.endswith("Serializer")]
        if serializers:
            return _unchecked(f"written by the serializer {_name(type(serializers[0]))}")
        judged = [_judged(item) for item in metadata if _judges(item)]
        if judged:
            return _unverified(node, f"not run: the {', '.join(judged)} in its annotation")
        return node

    def _class(  # noqa: PLR0911 - one arm per kind of class
        self, cls: type[Any], bound: dict[Any, Any], *, pydantic: bool
    ) -> Node | None:
        rule = next((kind for kind in _registered if issubclass(cls, kind)), None)
        if rule is not None and not pydantic:
            return _unchecked(
                f"{cls.__qualname__} is stored by the register_type functions of "
                f"{rule.__qualname__} (the tool's code)"
            )
        if issubclass(cls, enum.Enum):
            return {
                "type": "enum",
                "name": cls.__qualname__,
                "values": [_json_of(member.value) for member in cls],
            }
        scalar = _scalar(cls, pydantic=pydantic)
        if scalar is not None:
            return scalar
        if typing.is_typeddict(cls):
            return self._typed_dict(cls, bound, pydantic=pydantic)
        if _is_model(cls):
            return self._recorded(cls, bound, pydantic=pydantic, fields=self._model_fields)
        if attrs.has(cls) or dataclasses.is_dataclass(cls):
            return self._recorded(cls, bound, pydantic=pydantic, fields=self._class_fields)
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):  # a NamedTuple: an array
            hints = typing.get_type_hints(cls)
            items = [
                self.shape(hints.get(name, Any), bound, pydantic=pydantic) for name in cls._fields
            ]
            return {"type": "tuple", "items": items}
        return self._generic(cls, (), bound, pydantic=pydantic)

    def _generic(  # noqa: C901, PLR0911 - one arm per kind of container
        self,
        origin: type[Any],
        arguments: tuple[object, ...],
        bound: dict[Any, Any],
        *,
        pydantic: bool,
    ) -> Node | None:
        def item(index: int) -> Node:
            if index < len(arguments):
                return self.shape(arguments[index], bound, pydantic=pydantic)
            return {"type": "any"}

        if attrs.has(origin) or dataclasses.is_dataclass(origin) or _is_model(origin):
            parameters = getattr(origin, "__parameters__", ())
            mapped = {
                parameter: _bound(argument, bound)
                for parameter, argument in zip(parameters, arguments, strict=False)
            }
            return self._class(origin, mapped, pydantic=pydantic)
        if issubclass(origin, tuple):
            if len(arguments) == 2 and arguments[1] is Ellipsis:
                return {"type": "array", "items": item(0)}
            if arguments == ((),):
                return {"type": "tuple", "items": []}
            if arguments:
                return {"type": "tuple", "items": [item(i) for i in range(len(arguments))]}
            return {"type": "array", "items": {"type": "any"}}
        if issubclass(origin, collections.abc.Mapping):
            if issubclass(origin, collections.Counter):
                return {"type": "dict", "keys": _key(item(0)), "values": {"type": "int"}}
            return {"type": "dict", "keys": _key(item(0)), "values": item(1)}
        if issubclass(origin, collections.abc.Set):
            return {"type": "set", "items": item(0)}
        if issubclass(origin, collections.abc.Sequence | collections.abc.Collection) and not (
            issubclass(origin, str | bytes | bytearray)
        ):
            return {"type": "array", "items": item(0)}
        return None

    def _recorded(
        self,
        cls: type[Any],
        bound: dict[Any, Any],
        *,
        pydantic: bool,
        fields: typing.Callable[[type[Any], dict[Any, Any], bool], Node],
    ) -> Node:
        """An attrs class, dataclass or pydantic model: described once, then referred to."""
        if cls in self.open:
            return {"type": "ref", "name": self.open[cls]}
        name = cls.__qualname__
        taken = set(self.open.values())
        count = 1
        while name in taken:
            count += 1
            name = f"{cls.__qualname__}#{count}"
        self.open[cls] = name
        try:
            node = fields(cls, bound, pydantic)
        finally:
            del self.open[cls]
        if node.get("type") == "object":
            node["name"] = name
            if not pydantic:
                # The codec writes an instance of a subclass with its own members and this
                # member naming its class; inside a pydantic model, pydantic writes it.
                node["tag"] = _SUBCLASS
        return node

    def _class_fields(self, cls: type[Any], bound: dict[Any, Any], pydantic: bool) -> Node:  # noqa: FBT001 - as _recorded passes it
        """An attrs class's or dataclass's fields, as cattrs writes them (by name)."""
        hints = _hints(cls)
        members: dict[str, JSON] = {}
        if attrs.has(cls):
            for field in attrs.fields(cls):
                node = self.shape(
                    _bound(hints.get(field.name, field.type), bound), {}, pydantic=pydantic
                )
                if field.converter is not None or field.validator is not None:
                    node = _unverified(
                        node,
                        f"not run: the validator or converter of {cls.__qualname__}."
                        f"{field.name} (the tool's code)",
                    )
                # init=False and no default: written once set (the codec leaves out a
                # field never set); any other field is always written.
                given = field.init or field.default is not attrs.NOTHING
                members[field.name] = {"shape": node, "required": given or pydantic}
            hook = "__attrs_post_init__"
        else:
            for field in dataclasses.fields(cls):
                node = self.shape(
                    _bound(hints.get(field.name, field.type), bound), {}, pydantic=pydantic
                )
                given = (
                    field.init
                    or field.default is not dataclasses.MISSING
                    or field.default_factory is not dataclasses.MISSING
                )
                members[field.name] = {"shape": node, "required": given or pydantic}
            hook = "__post_init__"
        node = {"type": "object", "fields": members, "extra": False}
        if callable(getattr(cls, hook, None)):
            return _unverified(node, f"not run: {cls.__qualname__}.{hook} (the tool's code)")
        return node

    def _model_fields(self, model: type[Any], bound: dict[Any, Any], pydantic: bool) -> Node:  # noqa: ARG002, FBT001 - as _recorded passes them
        """A pydantic model's JSON: its fields by alias (as the codec dumps it), computed too."""
        decorators = model.__pydantic_decorators__
        if decorators.model_serializers:
            serializer = next(iter(decorators.model_serializers.values()))
            return _unchecked(
                f"{model.__qualname__} is written by its serializer {serializer.cls_var_name}"
            )
        fields = model.model_fields
        if "root" in fields and getattr(model, "__pydantic_root_model__", False):
            return self._model_field(model, "root", fields["root"], decorators)
        members: dict[str, JSON] = {}
        for name, info in fields.items():
            if info.exclude is True:
                continue
            key = info.serialization_alias or info.alias or name
            node = self._model_field(model, name, info, decorators)
            conditional = getattr(info, "exclude_if", None) is not None
            members[key] = {"shape": node, "required": not conditional}
        for name, computed in model.model_computed_fields.items():
            node = self.shape(computed.return_type, {}, pydantic=True)
            node = _unverified(
                node, f"not compared: {model.__qualname__}.{name}, computed by the tool's code"
            )
            members[computed.alias or name] = {"shape": node, "required": True}
        node = {
            "type": "object",
            "fields": members,
            "extra": model.model_config.get("extra") == "allow",
        }
        judges = [*decorators.model_validators.values(), *decorators.root_validators.values()]
        if judges:
            return _unverified(
                node,
                f"not run: the validator {judges[0].cls_var_name} of {model.__qualname__} "
                "(the tool's code)",
            )
        return node

    def _model_field(self, model: type[Any], name: str, info: Any, decorators: Any) -> Node:
        for serializer in decorators.field_serializers.values():
            if name in serializer.info.fields or "*" in serializer.info.fields:
                return _unchecked(
                    f"{model.__qualname__}.{name} is written by its serializer "
                    f"{serializer.cls_var_name}"
                )
        node = self.shape(info.annotation, {}, pydantic=True)
        if any(type(item).__name__.endswith("Serializer") for item in info.metadata):
            return _unchecked(f"{model.__qualname__}.{name} is written by a serializer of its own")
        judged = [_judged(item) for item in info.metadata if _judges(item)]
        validators = [
            validator.cls_var_name
            for validator in [
                *decorators.field_validators.values(),
                *decorators.validators.values(),
            ]
            if name in validator.info.fields or "*" in validator.info.fields
        ]
        judged += [f"validator {validator}" for validator in validators]
        if judged:
            return _unverified(
                node, f"not run: the {', '.join(judged)} of {model.__qualname__}.{name}"
            )
        return node

    def _typed_dict(self, cls: type[Any], bound: dict[Any, Any], *, pydantic: bool) -> Node:
        hints = _hints(cls)
        required = getattr(cls, "__required_keys__", frozenset(hints))
        members: dict[str, JSON] = {
            name: {
                "shape": self.shape(hint, bound, pydantic=pydantic),
                "required": name in required,
            }
            for name, hint in hints.items()
        }
        return {"type": "object", "name": cls.__qualname__, "fields": members, "extra": False}


def _scalar(cls: type[Any], *, pydantic: bool) -> Node | None:  # noqa: PLR0911 - one arm per kind
    """The node of a type stored as a JSON scalar, or None."""
    if issubclass(cls, bool):
        return {"type": "bool"}
    if issubclass(cls, int):
        return {"type": "int"}
    if issubclass(cls, float):
        return {"type": "number"}
    if issubclass(cls, str):
        return {"type": "str"}
    if issubclass(cls, bytes):
        # pydantic writes bytes as their UTF-8 text by default (ser_json_bytes).
        return {"type": "str"} if pydantic else {"type": "str", "format": "bytes"}
    if issubclass(cls, dt.datetime):
        if pydantic:
            return {"type": "str", "format": "datetime", "dialect": "pydantic"}
        return {"type": "str", "format": "datetime"}
    for form in ("date", "uuid", "decimal"):
        if issubclass(cls, _CATTRS_FORMATS[form]):  # type: ignore[arg-type] # classes, by construction
            return {"type": "str", "format": form}
    return None


def _key(node: Node) -> Node:
    """The node of a mapping's keys as JSON writes them: always strings."""
    kind = node.get("type")
    if kind in ("str", "any"):
        return node
    if kind == "int":
        return {"type": "str", "format": "int"}
    if kind in ("enum", "literal") and all(isinstance(v, str) for v in node["values"]):
        return node
    return _unchecked("keys of this type are not checked")


def _unverified(node: Node, what: str) -> Node:
    return {**node, "unverified": what}


def _judges(item: object) -> bool:
    """Whether pydantic metadata judges values: a validator, a constraint (Gt, MaxLen...)."""
    kind = type(item)
    return (
        kind.__module__.startswith("annotated_types")
        or kind.__name__.endswith("Validator")
        or kind.__name__ == "_PydanticGeneralMetadata"  # Field(pattern=...), and the like
    )


def _judged(item: object) -> str:
    """How a problem names a piece of pydantic metadata that judges values."""
    kind = type(item).__name__
    if kind.endswith("Validator"):
        function = getattr(getattr(item, "func", None), "__name__", "?")
        return f"{kind} {function}"
    if kind == "_PydanticGeneralMetadata":
        return f"constraint {', '.join(f'{k}={v!r}' for k, v in vars(item).items())}"
    return f"constraint {item!r}"


def _hints(cls: type[Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: the fields' own types then
        return {}


def _bound(annotation: object, bound: dict[Any, Any]) -> object:
    """``annotation`` with the type variables of ``bound`` replaced."""
    if not bound:
        return annotation
    if isinstance(annotation, typing.TypeVar):
        return bound.get(annotation, annotation)
    parameters = getattr(annotation, "__parameters__", ())
    if parameters and typing.get_origin(annotation) is not None:
        return annotation[tuple(bound.get(p, p) for p in parameters)]  # type: ignore[index] # a generic alias
    return annotation


def _json_of(value: object) -> JSON:
    """A literal's or enum member's value as JSON, as the codec writes it."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bytes):
        return encode(value, bytes)
    result: JSON = json.loads(json.dumps(value))
    return result


# Checking a value (on the command line: no user code).


@attrs.frozen
class Fit:
    """How a JSON value fits a shape: what does not fit, and what was not checked (and why)."""

    problems: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()


def problems(shape: JSON, value: JSON) -> list[str]:
    """The ways ``value`` does not fit ``shape``, each with its path (``$.items[2].amount``)."""
    return list(check(shape, value).problems)


def check(shape: JSON, value: JSON) -> Fit:
    """How ``value`` fits ``shape``: its problems, and the parts not checked, with why.

    A shape that cannot be read (not this grammar) checks nothing, and says so.
    """
    try:
        found = _Checker().check(_node(shape), value, "$", union=False)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return Fit(unchecked=(f"$: the recorded description cannot be read ({exc!r})",))
    # Items of an array are not checked for one reason, said once: "$.prices[*]: ...".
    unchecked = dict.fromkeys(_ANY_INDEX.sub("[*]", note) for note in found.unchecked)
    return Fit(tuple(found.problems), tuple(unchecked))


_ANY_INDEX = re.compile(r"\[\d+\](?=[^:]*:)")
"""An array's index in a path (before the first colon: the reason may hold brackets)."""


def _node(shape: object) -> Node:
    """``shape`` as a node.

    Raises:
        TypeError: it is not an object with a type.

    """
    if not isinstance(shape, dict) or not isinstance(shape.get("type"), str):
        raise TypeError(f"a node must be an object with a type, got {_shown(shape)}")
    return shape


@attrs.define
class _Found:
    problems: list[str] = attrs.field(factory=list)
    unchecked: list[str] = attrs.field(factory=list)

    def add(self, other: _Found) -> None:
        self.problems += other.problems
        self.unchecked += other.unchecked


class _Checker:
    """One check: the objects met on the way down, for the references inside them."""

    def __init__(self) -> None:
        self.objects: dict[str, Node] = {}

    def check(self, node: Node, value: JSON, path: str, *, union: bool) -> _Found:  # noqa: C901 - one arm per node
        """What of ``value`` (at ``path``) does not fit ``node``, and what was not checked."""
        kind = node["type"]
        found = _Found()
        if kind == "any":
            pass
        elif kind == "unchecked":
            found.unchecked.append(f"{path}: {node['why']}")
        elif kind == "union":
            found = self._union(node, value, path)
        elif kind == "ref":
            found = self.check(_node(self.objects[node["name"]]), value, path, union=union)
        elif kind in ("enum", "literal"):
            if not any(_same(value, allowed) for allowed in node["values"]):
                found.problems.append(f"{path}: expected {_expected(node)}, got {_shown(value)}")
        elif kind == "object":
            self._object(node, value, path, found)
        elif kind in ("array", "set", "tuple", "dict"):
            self._container(node, value, path, found)
        elif kind in _SCALARS:
            if not _SCALARS[kind](value, union) or not _formatted(node, value):
                found.problems.append(f"{path}: expected {_expected(node)}, got {_shown(value)}")
        else:
            found.unchecked.append(f"{path}: described by a newer safeact ({_shown(kind)})")
        if not found.problems and "unverified" in node:
            found.unchecked.append(f"{path}: {node['unverified']}")
        return found

    def _union(self, node: Node, value: JSON, path: str) -> _Found:
        members = [_node(member) for member in node["of"]]
        tried = [self.check(member, value, path, union=True) for member in members]
        for fits in tried:
            if not fits.problems and not fits.unchecked:
                return fits
        for fits in tried:
            if not fits.problems:
                return fits
        alike = [
            fits
            for member, fits in zip(members, tried, strict=True)
            if _kind_of(member) == _kind_of_value(value)
        ]
        if len(alike) == 1:  # an Optional[Receipt] given an object: say what is wrong inside
            return alike[0]
        return _Found([f"{path}: expected {_expected(node)}, got {_shown(value)}"])

    def _object(self, node: Node, value: JSON, path: str, found: _Found) -> None:
        if not isinstance(value, dict):
            found.problems.append(f"{path}: expected {_expected(node)}, got {_shown(value)}")
            return
        name = node.get("name", "the object")
        tag = node.get("tag")
        if tag is not None and tag in value:
            if isinstance(value[tag], str):
                found.unchecked.append(
                    f"{path}: the members of {value[tag]}, stored as a subclass of {name}"
                )
            else:
                found.problems.append(
                    f"{_member(path, tag)}: expected the name of a subclass of {name}, "
                    f"got {_shown(value[tag])}"
                )
            return
        outer = self.objects.get(name)
        self.objects[name] = node
        try:
            self._members(node, value, path, found)
        finally:
            if outer is None:
                del self.objects[name]
            else:
                self.objects[name] = outer

    def _members(self, node: Node, value: dict[str, JSON], path: str, found: _Found) -> None:
        name = node.get("name", "the object")
        fields: dict[str, Node] = node["fields"]
        for member, field in fields.items():
            if member in value:
                shape = _node(field["shape"])
                found.add(self.check(shape, value[member], _member(path, member), union=False))
            elif field["required"]:
                found.problems.append(f"{_member(path, member)}: missing ({name} always has it)")
        if not node.get("extra", False):
            known = ", ".join(fields) or "none"
            found.problems += [
                f"{_member(path, member)}: not a member of {name} (its members: {known})"
                for member in value
                if member not in fields
            ]

    def _container(self, node: Node, value: JSON, path: str, found: _Found) -> None:
        kind = node["type"]
        if kind == "dict" and isinstance(value, dict):
            keys, values = _node(node["keys"]), _node(node["values"])
            for name, item in value.items():
                found.add(self.check(keys, name, f"{_member(path, name)} (its name)", union=False))
                found.add(self.check(values, item, _member(path, name), union=False))
        elif kind == "tuple" and isinstance(value, list):
            items = [_node(item) for item in node["items"]]
            if len(value) != len(items):
                found.problems.append(f"{path}: expected {_expected(node)}, got {len(value)}")
                return
            for index, (shape, item) in enumerate(zip(items, value, strict=True)):
                found.add(self.check(shape, item, f"{path}[{index}]", union=False))
        elif kind in ("array", "set") and isinstance(value, list):
            shape = _node(node["items"])
            for index, item in enumerate(value):
                found.add(self.check(shape, item, f"{path}[{index}]", union=False))
            if kind == "set" and not found.problems:
                found.problems += _unsorted(value, path)
        else:
            found.problems.append(f"{path}: expected {_expected(node)}, got {_shown(value)}")


def _unsorted(items: list[JSON], path: str) -> list[str]:
    """Where ``items`` is not in the order the codec writes a set in, each item once."""
    seen: dict[object, int] = {}
    for index, item in enumerate(items):
        # Python's equality, as the rebuilt set's: true is 1 there, and 1 is 1.0.
        same = item if not isinstance(item, list | dict) else json.dumps(item, sort_keys=True)
        if same in seen:
            said = (
                f"{path}[{index}]: the same item as {path}[{seen[same]}] in a set (true is 1 "
                "there, and 1 is 1.0): a set holds each item once"
            )
            return [said]
        seen[same] = index
    order = [json_order(item) for item in items]
    for index in range(1, len(order)):
        if order[index - 1] >= order[index]:
            what = "the same as" if order[index - 1] == order[index] else "after"
            said = (
                f"{path}[{index - 1}]: {what} {path}[{index}]: a set is stored sorted (false, "
                "true, numbers, strings, then the rest by their JSON), each item once"
            )
            return [said]
    return []


def _is_int(value: JSON, union: bool) -> bool:  # noqa: FBT001 - a table of tests
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    # The codec rebuilds 9.0 as 9, which writes 9: the same number. A union of scalars is
    # stricter (cattrs passes a float through it only to a float).
    return not union and isinstance(value, float) and math.isfinite(value) and value.is_integer()


_SCALARS: dict[str, typing.Callable[[JSON, bool], bool]] = {
    "null": lambda value, _: value is None,
    "bool": lambda value, _: isinstance(value, bool),
    "int": _is_int,
    "number": lambda value, _: isinstance(value, int | float) and not isinstance(value, bool),
    "str": lambda value, _: isinstance(value, str),
}


def _formatted(node: Node, value: JSON) -> bool:
    """Whether a string ``value`` is as ``node``'s format writes it: it would come back the same."""
    form = node.get("format")
    if form is None or not isinstance(value, str):
        return True
    if form == "int":
        return value == str(_int_or_none(value))
    if node.get("dialect") == "pydantic":
        return _pydantic_datetime(value)
    if form not in _CATTRS_FORMATS:
        return True  # a format of a newer safeact: the string is all that can be checked
    try:
        decode(value, _CATTRS_FORMATS[form], key="-", tool="-")
    except StoreError:
        return False
    return True


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _pydantic_datetime(text: str) -> bool:
    """Whether pydantic writes the time ``text`` names as ``text`` (``Z`` for UTC)."""
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        return False
    written = parsed.isoformat()
    if written.endswith("+00:00"):
        written = f"{written[:-6]}Z"
    return written == text


_WORDS = {
    "null": "null",
    "bool": "true or false",
    "int": "an integer",
    "number": "a number",
    "str": "a string",
    "array": "an array",
    "set": "an array (a set)",
    "dict": "an object",
    "any": "anything",
}


def _expected(node: Node) -> str:  # noqa: PLR0911 - one arm per node
    """What fits ``node``, in words."""
    kind = node.get("type")
    if kind == "str" and "format" in node:
        if node.get("dialect") == "pydantic":
            return _PYDANTIC_DATETIME
        return _FORMAT_WORDS.get(node["format"], f"a string ({node['format']})")
    if kind in _WORDS:
        return _WORDS[str(kind)]
    if kind == "tuple":
        return f"an array of {len(node['items'])} items"
    if kind in ("object", "ref"):
        return f"an object ({node.get('name', 'a dict')})"
    if kind in ("enum", "literal"):
        named = f" ({node['name']})" if "name" in node else ""
        return "one of " + ", ".join(_shown(v) for v in node["values"][:8]) + named
    if kind == "union":
        return " or ".join(_expected(_node(member)) for member in node["of"])
    return f"a {kind}"


def _kind_of(node: Node) -> str:
    """The JSON kind of a node's values: object, array or scalar."""
    kind = node.get("type")
    if kind in ("object", "ref", "dict"):
        return "object"
    if kind in ("array", "set", "tuple"):
        return "array"
    return "scalar"


def _kind_of_value(value: JSON) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "scalar"


def _same(left: JSON, right: JSON) -> bool:
    """The same JSON data, kind for kind (``true`` is not ``1``), numbers by value."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_same, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    return type(left) is type(right) and left == right


def _member(path: str, name: str) -> str:
    return f"{path}.{name}" if name.isidentifier() else f"{path}[{json.dumps(name)}]"


def _shown(value: object) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _LONGEST_SHOWN:
        return f"{text[: _LONGEST_SHOWN - 1]}…"
    return text
