"""Key validation and the stable hash of a call's arguments."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import fractions
import functools
import hashlib
import inspect
import json
import os
import pathlib
import sys
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, final

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from _typeshed import DataclassInstance

    from safeact._json import JSON

__all__ = [
    "ArgsHash",
    "Key",
    "args_hash",
    "check_ignore",
    "check_key",
    "class_name",
    "former_args_hash",
    "ignored_names",
    "main_module",
    "marks_key",
]

MAX_DEPTH = 100
"""How deep an argument may nest (containers, and objects' fields) and still be hashed."""

_JSON_DIGITS = sys.int_info.default_max_str_digits
"""4300: ``json.dumps`` refused longer ints before they had a form of their own."""

_LONG = 10**_JSON_DIGITS
"""The smallest int with more than ``_JSON_DIGITS`` digits."""

_FEW_BITS = 2000
"""Ints of fewer bits have fewer than 640 digits: below any limit a process can set."""

_NUMPY_KINDS = "biufcmMSU"
"""numpy dtype kinds whose bytes are their content (object arrays are hashed by item)."""

_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=True)
"""What ``json.dumps(form, sort_keys=True, separators=(",", ":"))`` writes, built once."""

_ORDER_JSON = json.JSONEncoder(sort_keys=True, allow_nan=True)
"""What ``json.dumps(form, sort_keys=True)`` writes: the order of set members and dict items."""

_UNGIVEN: dict[object, object] = {
    inspect.Parameter.VAR_POSITIONAL: [],
    inspect.Parameter.VAR_KEYWORD: {},
}
"""What a variadic parameter that receives nothing is hashed as (as ``_bound`` hashes what
``BoundArguments.apply_defaults`` gives it). Only ever read: a call's bound arguments and
their defaults are hashed, never passed on."""

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)

_INCOMPARABLE = (
    "which safeact cannot compare by content (an object of a plain class, a file, a "
    "client, a function or a lock has none to compare)"
)

_FIELD_OUT = (
    "; if a field holds it, leave that field out of equality (attrs.field(eq=False), "
    "dataclasses.field(compare=False))"
)


@final
class _KeyMark:
    """The mark ``Key`` puts on a parameter: it receives the key, whatever its name."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "safeact.Key"


Key: TypeAlias = Annotated[str, _KeyMark()]
"""A tool's first parameter, when it is not named ``key``: ``def send(idem: Key, to: str)``.

Type checkers see a ``str``; ``safe`` reads the mark when the tool is made.
"""


def marks_key(annotation: object) -> bool:
    """Whether ``annotation`` (resolved, extras kept) is ``Key``, or holds it in ``Annotated``."""
    return any(isinstance(meta, _KeyMark) for meta in getattr(annotation, "__metadata__", ()))


class _Refused(Exception):  # noqa: N818 - internal: args_hash turns it into a TypeError
    """A value inside an argument that cannot be hashed; ``args_hash`` names the parameter.

    ``what`` describes the value ("a value of type socket.socket, which ..."), ``fix`` says
    what to do about it; ``nested`` says whether it sits inside the argument or is it.
    """

    def __init__(self, what: str, fix: str, *, nested: bool) -> None:
        super().__init__(what)
        self.what = what
        self.fix = fix
        self.nested = nested


@final
class _Rule:
    """Which forms values are written in: this version's, or the former ones.

    This version writes every value by its exact type and its content (issue 30). The
    former forms, which ledgers written before hold, are those of before issue 30: a
    subclass (and a tuple, a frozenset, a bytearray, any mapping, any path) as its kind's
    usual type, by the subclass's own ``repr``/``str``/``isoformat``; classes and enums by
    ``__qualname__`` alone; datetimes and times by ISO text alone.

    ``outdated`` is set when a former form was written that no value has now (an enum
    member's, an attrs or dataclass instance's, a pydantic model's): a digest of such a
    text can only have been written by an older version.
    """

    __slots__ = ("former", "outdated")

    def __init__(self, *, former: bool) -> None:
        """A rule for one text: the former forms, or this version's."""
        self.former = former
        self.outdated = False


_NOW = _Rule(former=False)
"""This version's forms; never outdated (only a former rule is marked)."""


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


def ignored_names(ignore: Iterable[str]) -> tuple[str, ...]:
    """Return the parameter names in ``ignore``, in order, each once.

    Raises:
        TypeError: ``ignore`` is a single ``str`` (which would be read letter by letter), or
            holds something other than a ``str``.

    """
    if isinstance(ignore, str):
        raise TypeError(f"ignore takes parameter names, not one str: write ignore=({ignore!r},)")
    if not isinstance(ignore, Iterable):
        raise TypeError(
            f"ignore takes parameter names, not {ignore!r}: write ignore=('client',), or "
            "leave it out for none"
        )
    names = tuple(dict.fromkeys(ignore))
    for name in names:
        if not isinstance(name, str):
            raise TypeError(
                f"ignore takes parameter names, got {type(name).__name__} {name!r}: "
                "write ignore=('client',)"
            )
    return names


def check_ignore(signature: inspect.Signature, ignore: Iterable[str], tool: str) -> frozenset[str]:
    """Return the names of ``tool``'s parameters to leave out of its args hash.

    Raises:
        TypeError: as ``ignored_names``.
        ValueError: a name is the key's parameter (the key is never hashed), or no
            parameter of ``tool``; the message lists the parameters it has.

    """
    names = ignored_names(ignore)
    key, *others = signature.parameters
    has = ", ".join(others) if others else "none but the key"
    for name in names:
        if name == key:
            raise ValueError(
                f"{tool}: ignore names {name!r}, the parameter that receives the key, which "
                f"is never hashed; name other parameters (it has {has})"
            )
        if name not in others:
            raise ValueError(
                f"{tool}: ignore names {name!r}, which is not one of its parameters (it has {has})"
            )
    return frozenset(names)


def args_hash(
    signature: inspect.Signature,
    args: tuple[object, ...],
    kwargs: Mapping[str, object],
    ignore: frozenset[str] = frozenset(),
) -> str:
    """Hash the arguments of a call (the key excluded) as bound to ``signature``.

    An argument equal to its parameter's default is left out, as though it were not
    passed: ``f(k, 1, b=2)`` and ``f(k, 1)`` hash alike when ``b`` defaults to 2, and a
    parameter added later with a default leaves the hash of calls that do not pass it as
    it was. Parameters named in ``ignore`` are left out too. Values are hashed by type and
    content, so two calls hash alike exactly when their arguments are equal and of the
    same types, recursively (see ``_canonical`` for what that means, and where it is
    stricter than ``==``). A tool hashes through its ``ArgsHash``, which gives the same
    digest with less work per call.

    Raises:
        TypeError: the arguments do not fit ``signature``; or an argument cannot be
            compared by content (an object of a plain class, a file, a client, a function),
            nests more than ``MAX_DEPTH`` levels deep (or holds itself), is an object with
            a field that was never set, or an int too long for this process's
            ``sys.set_int_max_str_digits``. The message names the parameter and what to do.

    """
    _, *parameters = signature.parameters.values()
    return _hashed(_bound(signature, args, kwargs), ignore, _default_texts(parameters))


def former_args_hash(
    signature: inspect.Signature,
    args: tuple[object, ...],
    kwargs: Mapping[str, object],
    ignore: frozenset[str] = frozenset(),
) -> str:
    """The digest an older safeact recorded for this call, where no call has it now.

    That is ``args_hash`` as safeact 0.1 wrote it: defaults included, every value in its
    form of before issue 30 (``_Rule``). A key an older version recorded replays a call
    whose digest under it is the recorded one (``next_step(..., former_hash=)``), if that
    digest cannot be this version's digest of another call: if an argument is written as
    this version writes its parameter's default (a default left at it, mostly: 0.1 wrote
    it in, this version never does), or if the arguments hold an enum member, an attrs or
    dataclass instance or a pydantic model (whose former forms no value has now).
    Otherwise the former digest may be the one this version records for another call that
    issue 30 told apart from this one (``[1, 2]`` for ``(1, 2)``, ``5`` for ``Cents(5)``),
    and matching it would replay that call's result: this call's ``args_hash`` is returned
    instead, so a key an older version recorded for it is a conflict, which a person
    resolves. Under the former digest, values that issue 30 told apart hash alike, as they
    did when the key was recorded.

    Raises:
        TypeError: as ``args_hash``.

    """
    arguments = _bound(signature, args, kwargs)
    _, *parameters = signature.parameters.values()
    defaults = _default_texts(parameters)
    rule = _Rule(former=True)
    members: list[str] = []
    proven = False
    for name in sorted(arguments):
        if name in ignore:
            continue
        former = _text(name, arguments[name], rule)
        members.append(f"{json.dumps(name)}:{former}")
        # 0.1 wrote every default in; this version leaves out what it writes as the
        # default, so no digest of now holds a member that is the default's text of now.
        # (Not so for a default whose form changed: 0.1 wrote () as this version writes [].)
        proven = proven or former == defaults.get(name)
    if proven or rule.outdated:
        return _digest(members)
    return args_hash(signature, args, kwargs, ignore)


def _hashed(
    arguments: Mapping[str, object], ignore: frozenset[str], defaults: Mapping[str, str | None]
) -> str:
    """The digest of ``arguments``, less ``ignore`` and those whose text is in ``defaults``."""
    return _digest(
        [
            f"{json.dumps(name)}:{text}"
            for name in sorted(arguments)
            if name not in ignore and (text := _text(name, arguments[name])) != defaults.get(name)
        ]
    )


def _bound(
    signature: inspect.Signature, args: tuple[object, ...], kwargs: Mapping[str, object]
) -> dict[str, object]:
    """Every argument after the key by parameter name, defaults applied, as ``inspect`` binds.

    A ``*args`` parameter's tuple is made a list: it is a tuple whatever the caller passes,
    so the type is no part of the call, and its hash stays the one of before issue 30.
    """
    bound = signature.bind(None, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(list(bound.arguments.items())[1:])
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            arguments[parameter.name] = list(arguments[parameter.name])
    return arguments


def _default_texts(parameters: list[inspect.Parameter]) -> dict[str, str | None]:
    """The JSON text of each parameter's default (``None``: it has none that can be hashed).

    A variadic parameter's default is what it receives when given nothing.
    """
    texts: dict[str, str | None] = {}
    for parameter in parameters:
        default = _UNGIVEN.get(parameter.kind, parameter.default)
        texts[parameter.name] = None
        # A default that cannot be hashed is never left out: passing it fails as it did.
        if default is not inspect.Parameter.empty:
            with contextlib.suppress(TypeError):
                texts[parameter.name] = _text(parameter.name, default)
    return texts


@final
class ArgsHash:
    """``args_hash`` of one signature and ignore set, planned once for all calls of a tool.

    ``ArgsHash(signature, ignore)(args, kwargs)`` is ``args_hash(signature, args, kwargs,
    ignore)``, digest and errors alike, for a signature that takes the key first and
    positionally (as every tool's does). What ``args_hash`` works out on every call is
    worked out here once: which parameters are hashed, in which order, under which JSON
    name, the text of their defaults, and how arguments bind to them.
    """

    __slots__ = ("_bind", "_ignore", "_members", "_signature")

    def __init__(self, signature: inspect.Signature, ignore: frozenset[str] = frozenset()) -> None:
        """Plan the hash of calls to ``signature``, leaving out the parameters in ``ignore``."""
        self._signature = signature
        self._ignore = ignore
        _, *parameters = signature.parameters.values()
        self._bind = _Binding(parameters)
        defaults = _default_texts(parameters)
        hashed = sorted(p.name for p in parameters if p.name not in ignore)
        self._members = tuple((name, f"{json.dumps(name)}:", defaults[name]) for name in hashed)

    def __call__(self, args: tuple[object, ...], kwargs: Mapping[str, object]) -> str:
        """Hash the arguments of a call, as ``args_hash`` does.

        Raises:
            TypeError: as ``args_hash``.

        """
        arguments = self._bind(args, kwargs)
        if arguments is None:  # something to complain about, or a call _Binding leaves to inspect
            return args_hash(self._signature, args, kwargs, self._ignore)
        return _digest(
            [
                f"{json_name}{text}"
                for name, json_name, default in self._members
                if (text := _text(name, arguments[name])) != default
            ]
        )

    def former(self, args: tuple[object, ...], kwargs: Mapping[str, object]) -> str:
        """``former_args_hash`` of a call: the hash an older ledger holds for it, if trusted.

        Raises:
            TypeError: as ``args_hash``.

        """
        return former_args_hash(self._signature, args, kwargs, self._ignore)


@final
class _Binding:
    """Binds a call as ``Signature.bind`` then ``apply_defaults`` would, for the usual calls.

    Calls that give a variadic parameter something, or do not fit the signature, are left
    to ``Signature.bind``: it binds them, and its errors are the ones users see.
    """

    __slots__ = ("_defaults", "_named", "_positional")

    def __init__(self, parameters: list[inspect.Parameter]) -> None:
        """Take the parameters after the key."""
        self._positional = tuple(p.name for p in parameters if p.kind in _POSITIONAL)
        self._named = frozenset(p.name for p in parameters if p.kind in _NAMED)
        self._defaults = tuple((p.name, _UNGIVEN.get(p.kind, p.default)) for p in parameters)

    def __call__(
        self, args: tuple[object, ...], kwargs: Mapping[str, object]
    ) -> dict[str, object] | None:
        """Every parameter's argument, defaults applied; None for a call left to ``inspect``."""
        if len(args) > len(self._positional):
            return None
        arguments = dict(zip(self._positional, args, strict=False))
        for name, value in kwargs.items():
            if name in arguments or name not in self._named:  # twice, unknown, positional-only
                return None
            arguments[name] = value
        if len(arguments) < len(self._defaults):
            for name, default in self._defaults:
                if arguments.setdefault(name, default) is inspect.Parameter.empty:
                    return None  # a required argument is missing
        return arguments


def _digest(members: list[str]) -> str:
    """The digest of the JSON object whose members (``"name":text``) are ``members``, in order.

    Called with members sorted by name, its text is what ``json.dumps(forms, sort_keys=True,
    separators=(",", ":"))`` gives, byte for byte; it is written member by member so that a
    failure names its parameter.
    """
    text = "{" + ",".join(members) + "}"
    return hashlib.sha256(text.encode()).hexdigest()


def _text(name: str, value: object, rule: _Rule = _NOW) -> str:
    """The JSON text of the canonical form of ``value``, the argument of parameter ``name``.

    Raises:
        TypeError: as ``args_hash``, naming ``name``.

    """
    try:
        return _CANONICAL_JSON.encode(_canonical(value, 0, rule))
    except _Refused as refused:
        where = "it holds" if refused.nested else "it is"
        raise TypeError(
            f"cannot hash parameter {name!r}: {where} {refused.what}. {refused.fix}; or leave "
            f"the parameter out of the hash with @safe(ledger, ignore=({name!r},)) (it is "
            "still passed to the function)"
        ) from None
    except RecursionError:
        raise TypeError(
            f"cannot hash parameter {name!r}: it nests too deeply for the stack left here; "
            f"pass a flatter value, or leave the parameter out of the hash with "
            f"@safe(ledger, ignore=({name!r},))"
        ) from None


def _canonical(value: object, depth: int = 0, rule: _Rule = _NOW) -> JSON:
    """Return a JSON value that depends only on ``value``'s type and content, in any process.

    Every value is tagged with its kind, so values of different kinds never coincide
    (``b"a"`` and ``"61"``, ``"2026-01-01"`` and ``date(2026, 1, 1)``, ``1``, ``1.0`` and
    ``True``). A value of a type other than its kind's usual one also names its type,
    ``["typed", module, qualname, form]``: a tuple, a frozenset, a bytearray, a mapping
    other than a dict, a NamedTuple, a subclass of int, str, float, bytes, Decimal, a date
    ..., a path other than a ``PosixPath``. Its form is read through its kind's own methods,
    so a subclass's ``__repr__`` or ``__str__`` does not count. Classes (attrs, dataclass,
    pydantic) and enums are named by module and ``__qualname__`` (``class_name``); an
    enum member by name, a flag that is no declared member (undeclared bits, several
    flags) by value. The forms of the usual types are frozen: ledgers hold their hashes.

    Stricter than ``==``: floats (and complex parts, and numpy floats) by ``repr``, so
    ``0.0`` and ``-0.0`` differ but every NaN is alike; ``Decimal`` by its text (``1.10``
    is not ``1.1``); dates and times by ISO text (one instant in two time zones differs),
    and a datetime or time by its time zone and fold too; paths by their text (Windows
    paths that differ in case only differ); numpy arrays by dtype and shape too.

    A former ``rule`` writes the forms of before issue 30 instead (``former_args_hash``).

    Raises:
        _Refused: a value with no comparable content, nested more than ``MAX_DEPTH``
            levels, a half-built object, an unsupported numpy value, an int too long
            for this process, or a time in a ``ZoneInfo`` with no key.

    """
    if depth > MAX_DEPTH:
        raise _Refused(
            f"a value nested more than {MAX_DEPTH} levels deep (or one that holds itself)",
            "Pass a flatter value",
            nested=True,
        )
    form = _FORMS.get(type(value))
    if form is None:
        form = _form_of(value)
    return form(value, depth, rule)


_Form: TypeAlias = "Callable[[Any, int, _Rule], JSON]"
"""Writes the canonical form of a value (of one kind) found at a depth, under a rule."""


def _form_of(value: object) -> _Form:  # noqa: C901, PLR0911, PLR0912 - a case per kind
    """How ``value``'s kind is written, for a type not in ``_FORMS``.

    Those are an enum's, a class's, and the other types of a kind than its usual one
    (``_FORMS`` holds the usual ones): subclasses, and pure or Windows paths.
    """
    if isinstance(value, enum.Enum):
        return _enum
    if isinstance(value, str):
        return _TYPED_STR
    if isinstance(value, int):
        return _TYPED_INT
    if isinstance(value, float):
        numpy = sys.modules.get("numpy")
        return _float if numpy is not None and type(value) is numpy.float64 else _TYPED_FLOAT
    if isinstance(value, bytes | bytearray):
        return _TYPED_BYTES
    if isinstance(value, dt.datetime):  # before date: a datetime is a date
        return _TYPED_DATETIME
    if isinstance(value, dt.date):
        return _TYPED_DATE
    if isinstance(value, dt.time):
        return _TYPED_TIME
    if isinstance(value, dt.timedelta):
        return _TYPED_TIMEDELTA
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return _TYPED_BY_STR
    if isinstance(value, os.PathLike):
        return _TYPED_PATH
    if isinstance(value, list | tuple):
        return _TYPED_LIST
    if isinstance(value, set | frozenset):
        return _TYPED_SET
    if isinstance(value, collections.OrderedDict):
        return _TYPED_ORDERED
    if isinstance(value, Mapping):
        return _TYPED_DICT
    if attrs.has(type(value)):
        return _attrs
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass
    return _newer_kind


def _typed(form: _Form, exact: Callable[[Any], object] | None = None) -> _Form:
    """``form`` for a type other than its kind's usual one: that type is named too.

    ``exact`` makes a value of the usual type from the other one (``float.__float__``), so
    what is hashed is the content the kind's ``==`` compares, not what the subclass's
    ``__repr__`` says.
    """

    def typed(value: Any, depth: int, rule: _Rule) -> JSON:
        if rule.former:
            return form(value, depth, rule)  # before issue 30: as its kind's usual type
        content = value if exact is None else exact(value)
        return ["typed", *class_name(type(value)), form(content, depth, rule)]

    return typed


def _named(value: object, usual: type, form: JSON, rule: _Rule) -> JSON:
    """``form``, naming ``value``'s type too if it is not ``usual`` (as ``_typed``)."""
    if rule.former or type(value) is usual:
        return form
    return ["typed", *class_name(type(value)), form]


def _enum(value: enum.Enum, depth: int, rule: _Rule) -> JSON:
    cls = type(value)
    if rule.former:
        rule.outdated = True  # this version writes module and qualname apart
        return ["enum", f"{cls.__qualname__}.{value.name}"]
    name = value.name
    # A flag's pseudo-member (undeclared bits, or several flags) is no declared member:
    # Perm(8) and Perm(16) are both named None, and "R|W" names no member. Its value is it.
    if cls.__members__.get(name) is not value:
        return ["enum", *class_name(cls), ["value", _canonical(value.value, depth + 1, rule)]]
    return ["enum", *class_name(cls), name]


def _as_is(value: bool | str | None, _: int, __: _Rule) -> JSON:  # noqa: FBT001 - as the others
    return value  # JSON keeps these apart: 1, true, "1", null; every other kind is tagged


def _float(value: float, _: int, __: _Rule) -> JSON:
    return ["float", _float_text(value)]


def _bytes(value: bytes | bytearray, _: int, __: _Rule) -> JSON:
    return ["bytes", value.hex()]


def _exact_bytes(value: bytes | bytearray) -> bytes:
    return bytes(memoryview(value))  # its content, whatever the subclass's __bytes__ says


def _date(value: dt.date, _: int, rule: _Rule) -> JSON:
    if rule.former:
        return [type(value).__name__, value.isoformat()]
    return ["date", dt.date.isoformat(value)]


def _datetime(value: dt.datetime, depth: int, rule: _Rule) -> JSON:
    if rule.former:
        return [type(value).__name__, value.isoformat()]
    return _clock("datetime", dt.datetime.isoformat(value), value.tzinfo, value.fold, depth)


def _time(value: dt.time, depth: int, rule: _Rule) -> JSON:
    if rule.former:
        return [type(value).__name__, value.isoformat()]
    return _clock("time", dt.time.isoformat(value), value.tzinfo, value.fold, depth)


def _clock(kind: str, text: str, zone: dt.tzinfo | None, fold: int, depth: int) -> JSON:
    """A datetime or time by its ISO text, and by its time zone and fold when they count.

    The text holds the offset, and no more: one offset is many zones (``ZoneInfo("Europe/
    Paris")`` and ``timezone(timedelta(hours=1))`` in winter), and a naive time, or a
    time with a ``ZoneInfo`` (which has no offset without a date), has none. A fold
    changes no text outside a repeated hour. Without a zone other than a fixed offset
    and with no fold, the text is the whole of it, and the form is the one of before.

    Raises:
        _Refused: as ``_zone``.

    """
    if fold == 0 and (zone is None or type(zone) is dt.timezone):
        return [kind, text]
    return [kind, text, fold, _zone(zone, depth)]


def _zone(zone: dt.tzinfo | None, depth: int) -> JSON:
    """A time zone: an offset, a ``ZoneInfo`` by class and key, any other by its class.

    Raises:
        _Refused: a ``ZoneInfo`` read from a file without a key, which nothing names.

    """
    if zone is None:
        return None
    if type(zone) is dt.timezone:
        offset = zone.utcoffset(None)
        return ["timezone", [offset.days, offset.seconds, offset.microseconds]]
    zoneinfo = sys.modules.get("zoneinfo")  # never imported here: a ZoneInfo means it is loaded
    if zoneinfo is not None and isinstance(zone, zoneinfo.ZoneInfo):
        if zone.key is None:
            raise _Refused(
                "a date or time in a zoneinfo.ZoneInfo read from a file with no key, which "
                "safeact cannot name",
                "Make the zone with zoneinfo.ZoneInfo(key), or ZoneInfo.from_file(file, key=...)",
                nested=depth > 0,
            )
        return ["zone", *class_name(type(zone)), zone.key]
    # Another library's zone (pytz, dateutil) by its class: the offset is in the text.
    return ["tzinfo", *class_name(type(zone))]


def _timedelta(value: dt.timedelta, _: int, __: _Rule) -> JSON:
    return ["timedelta", [value.days, value.seconds, value.microseconds]]


def _by_str(value: uuid.UUID | decimal.Decimal, _: int, rule: _Rule) -> JSON:
    if rule.former:
        return [type(value).__name__, str(value)]
    if isinstance(value, uuid.UUID):
        return ["UUID", uuid.UUID.__str__(value)]
    return ["Decimal", decimal.Decimal.__str__(value)]


def _path(value: os.PathLike[str], depth: int, rule: _Rule) -> JSON:
    return ["path", _canonical(os.fspath(value), depth + 1, rule)]


def _list(value: list[object] | tuple[object, ...], depth: int, rule: _Rule) -> JSON:
    return ["list", [_canonical(item, depth + 1, rule) for item in value]]


def _set(value: set[object] | frozenset[object], depth: int, rule: _Rule) -> JSON:
    return ["set", sorted((_canonical(item, depth + 1, rule) for item in value), key=_sort_key)]


def _dict(value: Mapping[object, object], depth: int, rule: _Rule) -> JSON:
    return ["dict", sorted(_pairs(value, depth, rule), key=_sort_key)]


def _ordered(value: Mapping[object, object], depth: int, rule: _Rule) -> JSON:
    if rule.former:
        return _dict(value, depth, rule)
    # Two OrderedDicts of the same items in another order are not equal: the order counts.
    return ["ordered", _pairs(value, depth, rule)]


def _pairs(value: Mapping[object, object], depth: int, rule: _Rule) -> list[JSON]:
    return [
        [_canonical(k, depth + 1, rule), _canonical(v, depth + 1, rule)] for k, v in value.items()
    ]


def _attrs(value: attrs.AttrsInstance, depth: int, rule: _Rule) -> JSON:
    cls = type(value)
    names = [f.name for f in attrs.fields(cls) if f.eq]
    fields = _canonical(_fields(value, names, depth), depth + 1, rule)
    return ["object", *_class_names(cls, rule), fields]


def _dataclass(value: DataclassInstance, depth: int, rule: _Rule) -> JSON:
    names = [f.name for f in dataclasses.fields(value) if f.compare]
    fields = _canonical(_fields(value, names, depth), depth + 1, rule)
    return ["object", *_class_names(type(value), rule), fields]


def _class_names(cls: type, rule: _Rule) -> list[JSON]:
    """How a class is named in its values' forms: by ``__qualname__`` alone before issue 30.

    The forms that name a class (an object's, a model's) have one item more now, so a
    text with a former one is an older version's (``_Rule.outdated``).
    """
    if rule.former:
        rule.outdated = True
        return [cls.__qualname__]
    return class_name(cls)


_PUBLIC_NAMES: dict[type, list[JSON]] = {
    **{
        cls: ["pathlib", cls.__qualname__]
        for cls in (
            pathlib.PurePath,
            pathlib.PurePosixPath,
            pathlib.PureWindowsPath,
            pathlib.Path,
            pathlib.PosixPath,
            pathlib.WindowsPath,
        )
    },
}
"""Classes named by the module they are imported from, not the one that defines them:
Python 3.13 moved pathlib's to ``pathlib._local``, which would move their digests."""


def class_name(cls: type) -> list[JSON]:
    """``[module, qualname]`` of ``cls``, the module as an import names it.

    A script's classes live in ``__main__``; they are named as its file is imported, by
    the rule that names a script's tools (``_tool._default_name``), so that one class
    hashes alike when its file runs as ``python agent.py``, as ``python -m agent`` or is
    imported. Two classes of one module and one qualname (a class made by a function,
    made twice) are one name: nothing that outlives the process tells them apart.
    """
    public = _PUBLIC_NAMES.get(cls)
    if public is not None:
        return public
    module = cls.__module__
    if module == "__main__":
        module = main_module()
    return [module, cls.__qualname__]


def main_module() -> str:
    """The name ``__main__`` is imported under: ``python -m``'s, or its file's, or itself."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return str(spec.name)
    path = getattr(main, "__file__", None)
    if isinstance(path, str):
        return _module_of(path)
    return "__main__"  # no file (python -c, a notebook): stable while run the same way


@functools.cache  # a file's packages do not change while it runs; the walk stats folders
def _module_of(path: str) -> str:
    """The dotted name the file at ``path`` is imported under: its stem, below its packages."""
    file = pathlib.Path(path)
    parts = [file.stem]
    folder = file.resolve().parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def _newer_kind(value: object, depth: int, rule: _Rule) -> JSON:  # noqa: PLR0911 - a case per kind
    """The forms of kinds hashed by content since numpy, complex, Fraction and pydantic.

    Raises:
        _Refused: as ``_canonical``; in particular for a value of no kind it knows.

    """
    numpy = sys.modules.get("numpy")  # never imported here: a numpy value means it is loaded
    if numpy is not None and isinstance(value, numpy.ndarray | numpy.generic):
        form = _numpy(value, numpy, depth, rule)
        if isinstance(value, numpy.generic):
            # One dtype, several scalar types: np.longlong(1) is "<i8" as np.int64(1) is.
            return _named(value, numpy.dtype(value.dtype.str).type, form, rule)
        return form
    if isinstance(value, complex):
        return _named(value, complex, ["complex", repr(value.real), repr(value.imag)], rule)
    if isinstance(value, fractions.Fraction):
        parts = [_int(value.numerator, depth, rule), _int(value.denominator, depth, rule)]
        return _named(value, fractions.Fraction, ["Fraction", *parts], rule)
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return _pydantic(value, depth, rule)
    if pydantic is not None and isinstance(value, pydantic.SecretStr | pydantic.SecretBytes):
        secret = _canonical(value.get_secret_value(), depth, rule)
        if not rule.former and not _pydantic_owns(type(value)):
            return ["secret", *class_name(type(value)), secret]
        return ["secret", type(value).__qualname__, secret]
    core = sys.modules.get("pydantic_core")
    if core is not None and isinstance(getattr(value, "_url", value), core.Url | core.MultiHostUrl):
        # pydantic's URL types (HttpUrl, PostgresDsn, ...) are equal when of one class and
        # one URL; they wrap pydantic_core's, which are equal by URL.
        if not rule.former and not _pydantic_owns(type(value)):
            return ["url", *class_name(type(value)), str(value)]
        return ["url", type(value).__qualname__, str(value)]
    raise _Refused(
        f"a value of type {_type_name(type(value))}, {_INCOMPARABLE}",
        "Make it a value safeact can compare: an attrs class, a dataclass or a pydantic model "
        "(the fields that take part in equality are hashed)" + (_FIELD_OUT if depth else ""),
        nested=depth > 0,
    )


def _pydantic_owns(cls: type) -> bool:
    """Whether ``cls`` is pydantic's own, named by ``__qualname__`` alone as before issue 30.

    Its digests stay; a class of another module (a subclass of ``SecretStr`` or
    ``HttpUrl``, say, which may share its name) is named by module too.
    """
    return cls.__module__.partition(".")[0] in ("pydantic", "pydantic_core")


def _int(value: int, depth: int, _: _Rule = _NOW) -> JSON:
    """An int as JSON writes it; one too long for ``json.dumps`` in hex.

    Raises:
        _Refused: the int is short enough for JSON, but not for this process's
            ``sys.set_int_max_str_digits`` limit, lowered below the default.

    """
    if value.bit_length() < _FEW_BITS:
        return value
    if abs(value) >= _LONG:
        return ["int", hex(value)]
    limit = sys.get_int_max_str_digits()
    if limit and abs(value) >= 10**limit:
        raise _Refused(
            f"an int of more than {limit} digits, this process's sys.set_int_max_str_digits limit",
            f"Raise the limit to {_JSON_DIGITS} (Python's default) or more",
            nested=depth > 0,
        )
    return value


def _float_text(value: float) -> str:
    """``repr(value)``; for a numpy float64, its repr under numpy 2's default printing.

    numpy's repr follows ``numpy.set_printoptions`` (``legacy="1.25"`` drops the
    ``np.float64(...)``), which would make the hash depend on the process.
    """
    numpy = sys.modules.get("numpy")
    if numpy is not None and type(value) is numpy.float64:
        return f"np.float64({float(value)!r})"
    return repr(value)


def _numpy(value: object, numpy: ModuleType, depth: int, rule: _Rule) -> JSON:
    """A numpy array by dtype, shape and the digest of its data; a numpy scalar by its bytes.

    Object arrays are hashed item by item. Data is hashed in C order and little-endian, with
    every NaN made the same NaN, so equal arrays hash alike whatever their memory layout.

    Raises:
        _Refused: an ndarray subclass (a masked array, a matrix), or a dtype whose bytes
            are not its content (structured, variable-width strings, long double).

    """
    if isinstance(value, numpy.ndarray) and type(value) is not numpy.ndarray:
        raise _Refused(
            f"a value of type {_type_name(type(value))}, an ndarray subclass whose "
            "equality safeact does not know",
            "Pass numpy.asarray(value) if its data alone makes the call",
            nested=depth > 0,
        )
    array = numpy.asarray(value)
    shape: list[JSON] = [int(side) for side in array.shape]
    if array.dtype.kind == "O":
        items = [_canonical(item, depth + 1, rule) for item in array.flat]
        return ["ndarray", "|O", shape, items]
    dtype, data = _numpy_data(array, numpy, depth)
    if isinstance(value, numpy.generic):
        return ["numpy", dtype, data.hex()]
    return ["ndarray", dtype, shape, hashlib.sha256(data).hexdigest()]


def _numpy_data(array: Any, numpy: ModuleType, depth: int) -> tuple[str, bytes]:
    """The little-endian dtype string and C-order bytes of ``array``, NaNs made alike.

    ``array`` is an ndarray, typed ``Any``: safeact does not import numpy, so has no types.

    Raises:
        _Refused: a dtype whose bytes are not its content.

    """
    kind, char = array.dtype.kind, array.dtype.char
    if kind not in _NUMPY_KINDS or char in "gG":  # long doubles carry padding bytes
        raise _Refused(
            f"a numpy value of dtype {array.dtype}, whose bytes safeact cannot compare",
            "Convert it to a plain dtype (numbers, bool, datetime64, fixed-width strings)",
            nested=depth > 0,
        )
    little = array.dtype.newbyteorder("<")
    data = array.astype(little, copy=False)
    if kind in "fc" and numpy.isnan(data).any():
        data = data.copy()
        for part in (data.real, data.imag) if kind == "c" else (data,):
            part[numpy.isnan(part)] = numpy.nan
    return str(little.str), bytes(data.tobytes())


def _pydantic(value: object, depth: int, rule: _Rule) -> JSON:
    """A pydantic model by what its ``==`` compares: class, fields, extra and private values.

    A generic model is named by its origin class (``Box[int](x=1) == Box(x=1)``), and no
    extra is the same as an empty one.

    Raises:
        _Refused: a field was never set (a model made by ``model_construct`` without it).

    """
    cls = type(value)
    origin: type = getattr(value, "__pydantic_generic_metadata__", {}).get("origin") or cls
    state: dict[str, object] = vars(value)
    fields: dict[str, object] = {}
    for name in getattr(cls, "__pydantic_fields__", {}):
        if name not in state:
            raise _half_built(cls, name, depth)
        fields[name] = state[name]
    extra: object = getattr(value, "__pydantic_extra__", None) or {}
    private: object = getattr(value, "__pydantic_private__", None) or {}
    return [
        "pydantic",
        *_class_names(origin, rule),
        _canonical(fields, depth + 1, rule),
        _canonical(extra, depth + 1, rule),
        _canonical(private, depth + 1, rule),
    ]


def _fields(value: object, names: list[str], depth: int) -> dict[str, object]:
    """The attributes ``names`` of an attrs or dataclass instance.

    Raises:
        _Refused: one was never set (the instance was made without its ``__init__``).

    """
    fields = {}
    for name in names:
        try:
            fields[name] = getattr(value, name)
        except AttributeError:
            raise _half_built(type(value), name, depth) from None
    return fields


def _half_built(cls: type, name: str, depth: int) -> _Refused:
    return _Refused(
        f"a value of type {_type_name(cls)} whose field {name!r} was never set "
        "(made without its __init__?)",
        "Build it by calling its class",
        nested=depth > 0,
    )


def _type_name(cls: type) -> str:
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _sort_key(value: JSON) -> str:
    return _ORDER_JSON.encode(value)


_TYPED_STR = _typed(_as_is, str.__str__)
_TYPED_INT = _typed(_int, int.__int__)
_TYPED_FLOAT = _typed(_float, float.__float__)
_TYPED_BYTES = _typed(_bytes, _exact_bytes)
_TYPED_DATE = _typed(_date)
_TYPED_DATETIME = _typed(_datetime)
_TYPED_TIME = _typed(_time)
_TYPED_TIMEDELTA = _typed(_timedelta)
_TYPED_BY_STR = _typed(_by_str)
_TYPED_PATH = _typed(_path)
_TYPED_LIST = _typed(_list)
_TYPED_SET = _typed(_set)
_TYPED_DICT = _typed(_dict)
_TYPED_ORDERED = _typed(_ordered)

_FORMS: dict[type, _Form] = {
    type(None): _as_is,
    bool: _as_is,
    str: _as_is,
    int: _int,
    float: _float,
    bytes: _bytes,
    bytearray: _TYPED_BYTES,
    list: _list,
    tuple: _TYPED_LIST,
    set: _set,
    frozenset: _TYPED_SET,
    dict: _dict,
    dt.date: _date,
    dt.datetime: _datetime,
    dt.time: _time,
    dt.timedelta: _timedelta,
    uuid.UUID: _by_str,
    decimal.Decimal: _by_str,
    pathlib.PosixPath: _path,
}
"""The forms of the builtin types, by exact type: ``_form_of``'s checks cost more than most
forms do. The usual type of each kind is written as before issue 30; the others here
(a bytearray, a tuple, a frozenset) are ``_typed``, as any other type of a kind is."""
