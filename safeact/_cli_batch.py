"""``safeact resolve --keys-from``: one operator's decision for a reviewed set of keys.

The set is what ``safeact doubt --json`` prints, filtered or not (``jq``): JSON objects, one
per key, each naming its ``key`` and, as ``doubt`` prints it, the ``attempt_id`` that was
reviewed. The decision is the command's options (``--happened --result JSON`` or
``--not-happened [--force]``, and ``--note``), the same for every key: an item names a key,
it never decides. Everything is checked before anything is written, as a single ``resolve``
is checked; one item refused refuses the whole set. Then each key is resolved in its own
transaction, pinned to the attempt that was checked, so a key that changed in between is
refused and reported, never overwritten.

``read_items`` and the lines and objects that say what became of each item are pure;
``check_items`` reads the ledger and ``apply_items`` writes it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

import attrs

from safeact._cli_json import record_json
from safeact._cli_text import escaped, when
from safeact._codec import encode_untyped
from safeact._protocol import (
    NO_RESULT,
    DoubtReason,
    Record,
    State,
    check_resolvable,
    release_refusal,
)
from safeact.exceptions import CorruptRecordError, NotProvenError, SafeError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from safeact._store import Store

__all__ = [
    "Decision",
    "InputError",
    "Item",
    "Verdict",
    "apply_items",
    "check_items",
    "is_utf8",
    "read_items",
    "refusal_summary",
    "summary",
    "verdict_json",
    "verdict_line",
]

_READ = frozenset({field.name for field in attrs.fields(Record)} | {"age_seconds"})
"""The members an item may have: those of a line of ``doubt --json`` (a record and its age)."""

_BLANK = " \t\n\r"
"""What JSON allows between two values."""


class InputError(ValueError):
    """The input is not a set of JSON values at all: nothing in it can be taken as an item."""


@attrs.frozen
class Item:
    """One JSON value of the input: the key it names, or why it names none usable."""

    number: int
    """Its place in the input, from 1."""
    line: int
    """The line of the input where it starts."""
    key: str | None
    attempt_id: str | None
    """The attempt that was reviewed, if the item says (``doubt --json`` does)."""
    problem: str | None = None
    """Why the item cannot be taken as it is, whatever the ledger holds."""

    @property
    def shown(self) -> str:
        """The item for people: its key, escaped, or its place when it names no key."""
        return f"item {self.number}" if self.key is None else escaped(self.key)


@attrs.frozen
class Decision:
    """What the operator decided for every key of the set."""

    happened: bool
    result: object = NO_RESULT
    """With ``happened``: the result, as JSON, the same for every key."""
    force: bool = False
    note: str | None = None

    @property
    def said(self) -> str:
        """The decision in words: ``happened``, ``not happened`` or ``not happened (forced)``."""
        if self.happened:
            return "happened"
        return "not happened (forced)" if self.force else "not happened"


Status = Literal["checked", "resolved", "refused"]
"""Checked and not applied (a dry run, or a set refused for another item), done, or refused."""


@attrs.frozen
class Verdict:
    """What became of one item: checked, resolved or refused, and why."""

    item: Item
    status: Status
    before: Record | None = None
    """The key's record as the check read it (None: no key, no such key, or corrupt)."""
    after: Record | None = None
    """The key's record once resolved."""
    reason: str | None = None
    """Why it was refused."""
    refused_at: Literal["check", "apply"] | None = None
    warning: str | None = None
    """What of the result could not be checked (stderr once it is resolved)."""


def read_items(text: str) -> list[Item]:
    """The items of ``text``: JSON values, one after another, as ``jq`` reads and writes them.

    One object per line, as ``doubt --json`` and ``jq -c`` print them, and objects over
    several lines, as ``jq`` prints them by default, are read alike. An item that cannot
    be taken (not an object, no key, a member that is no record's, a key listed twice...)
    comes back with its ``problem``, so that every such item is reported at once.

    Raises:
        InputError: ``text`` holds something that is not JSON (its line said), or nothing.

    """
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    items: list[Item] = []
    at = _after_blanks(text, 0)
    line, counted = 1, 0
    while at < len(text):
        line += text.count("\n", counted, at)
        counted = at
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise InputError(f"line {exc.lineno}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise InputError(
                f"line {line}: nested too deep to be an item of doubt --json"
            ) from None
        except ValueError as exc:  # NaN or Infinity, or an integer over Python's digit limit
            raise InputError(f"line {line}: not JSON ({exc})") from None
        items.append(_item(len(items) + 1, line, value))
        at = _after_blanks(text, end)
    if not items:
        raise InputError(
            "it holds no items: give the keys as `safeact doubt LEDGER --json` prints them "
            "(one JSON object per key); an empty set is most likely a filter that matched nothing"
        )
    return _once_each(items)


def _after_blanks(text: str, at: int) -> int:
    """Where the first character at or after ``at`` that JSON does not skip is (or the end)."""
    while at < len(text) and text[at] in _BLANK:
        at += 1
    return at


def _no_constant(text: str) -> object:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's json reads them; JSON has none."""
    raise ValueError(f"{text} is not a JSON value")


def _item(number: int, line: int, value: object) -> Item:  # noqa: PLR0911 - one return per refusal
    """The item ``value`` (the ``number``-th, starting at ``line``) names, or its problem."""
    if not isinstance(value, dict):
        return Item(
            number,
            line,
            None,
            None,
            f"a JSON {_kind(value)}, not an object naming a key: give one object per key, as "
            "safeact doubt --json prints them (jq -c '.[]' turns an array into such lines)",
        )
    key = value.get("key")
    attempt = value.get("attempt_id")
    named = key if isinstance(key, str) and key and is_utf8(key) else None
    reviewed = attempt if isinstance(attempt, str) and is_utf8(attempt) else None
    item = Item(number, line, named, reviewed)
    if "corrupt" in value:
        problem = (
            f"a corrupt row ({value['corrupt']}), not a key in doubt: mend it first "
            "(safeact show LEDGER KEY says how), or leave it out"
        )
        return attrs.evolve(item, problem=problem)
    if named is None:
        return attrs.evolve(item, problem=_key_problem(key))
    if unknown := sorted(set(value) - _READ):
        return attrs.evolve(
            item,
            problem=f"it has {_members(unknown)}, which no line of safeact doubt --json has: an "
            "item names a key (and the attempt_id reviewed); the decision, the result and "
            "the note are the command's options, the same for every key",
        )
    if value.get("result") is not None:
        return attrs.evolve(
            item,
            problem="it holds a result: the result is --result JSON, the same for every key "
            "(a key in doubt has none yet); leave the member out or null",
        )
    if attempt is not None and reviewed is None:
        said = "not valid Unicode text" if isinstance(attempt, str) else f"a JSON {_kind(attempt)}"
        return attrs.evolve(item, problem=f'its "attempt_id" is {said}, not an attempt id')
    return item


def _key_problem(key: object) -> str:
    """Why ``key``, an item's ``"key"`` member, names no key."""
    if key is None:
        return 'it has no "key" (or it is null)'
    if not isinstance(key, str):
        return f'its "key" is a JSON {_kind(key)}, not a string'
    if not key:
        return 'its "key" is empty'
    return (
        f'its "key" {key!r} is not valid Unicode text (it holds a lone surrogate), so no key '
        "can match it"
    )


def _kind(value: object) -> str:
    """The JSON kind of a decoded ``value``: object, array, string, number, boolean or null."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def _members(names: Sequence[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"member{'s' * (len(names) != 1)} {shown}{more}"


def is_utf8(text: str) -> bool:
    """Whether ``text`` is UTF-8 text: not argv's undecodable bytes, nor a lone surrogate."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _once_each(items: list[Item]) -> list[Item]:
    """``items``, each that repeats an earlier item's key refused, naming that item."""
    first: dict[str, Item] = {}
    checked: list[Item] = []
    for item in items:
        if item.key is not None and item.problem is None and item.key in first:
            was = first[item.key]
            item = attrs.evolve(  # noqa: PLW2901 - the item, refused
                item,
                problem=f"key {item.key!r} is listed twice: also item {was.number} (line "
                f"{was.line}); list each key once",
            )
        elif item.key is not None and item.problem is None:
            first[item.key] = item
        checked.append(item)
    return checked


def check_items(
    store: Store,
    items: Iterable[Item],
    decision: Decision,
    fits: Callable[[Record], tuple[str | None, str | None]],
) -> list[Verdict]:
    """Check each item as a single ``resolve`` of its key would be checked; change nothing.

    ``fits`` checks the result for a key of a tool: it returns why the result does not fit,
    or else what of it could not be checked. Each verdict is ``checked`` or ``refused``.
    """
    verdicts: list[Verdict] = []
    for item in items:
        if item.problem is not None or item.key is None:
            verdicts.append(_refused(item, item.problem or "no key", None))
            continue
        try:
            record = store.get(item.key)
        except CorruptRecordError as exc:
            verdicts.append(_refused(item, str(exc), None))
            continue
        refusal = _refusal(item.key, item.attempt_id, record, decision)
        if refusal is not None or record is None:
            verdicts.append(_refused(item, refusal or "no key", record))
            continue
        misfit, warning = fits(record) if decision.happened else (None, None)
        if misfit is not None:
            verdicts.append(_refused(item, misfit, record))
            continue
        verdicts.append(Verdict(item, "checked", before=record, warning=warning))
    return verdicts


def _refused(item: Item, reason: str, record: Record | None) -> Verdict:
    return Verdict(item, "refused", before=record, reason=reason, refused_at="check")


def _refusal(  # noqa: PLR0911 - one return per rule, in the rules' order
    key: str, attempt_id: str | None, record: Record | None, decision: Decision
) -> str | None:
    """Why a single ``resolve`` of ``key`` (``record`` as read now) would be refused, if so.

    The same rules, in the same order, as ``Store.resolve``: the key must be in doubt (as
    read: an attempt under a live owner is running, not in doubt), at the attempt reviewed,
    and a release needs proof that its owner is finished, or ``force`` where proof may be
    forced.
    """
    try:
        check_resolvable(key, record)
    except SafeError as exc:
        return str(exc)
    assert record is not None  # check_resolvable refuses None
    if record.state is State.ATTEMPTING:
        owner = record.owner
        return (
            f"cannot resolve key {key!r}: its action is running right now (process "
            f"{owner.pid} on {owner.host}, lease until {when(record.lease_until)}); wait for "
            "its outcome"
        )
    if attempt_id is not None and attempt_id != record.attempt_id:
        return (
            f"cannot resolve key {key!r}: attempt {attempt_id} is over, the key is now at "
            f"attempt {record.attempt_id}; check that attempt, then resolve it"
        )
    if decision.happened:
        return None
    refusal = release_refusal(record, record.doubt_reason or DoubtReason.LEASE_EXPIRED)
    if refusal is None or (refusal.forceable and decision.force):
        return None
    if refusal.forceable:
        return str(NotProvenError(key, refusal.reason))
    return f"cannot resolve key {key!r}: {refusal.reason}"


def apply_items(store: Store, verdicts: Iterable[Verdict], decision: Decision) -> Iterator[Verdict]:
    """Resolve each checked key in its own transaction, as the check saw it; yield each.

    Each decision is the one a single ``resolve`` makes (``Store._decide``: the same history
    event, by the operator, with the note), pinned to the attempt and tool the check read:
    a key resolved, released or claimed again since is refused (``refused_at="apply"``)
    and left as it is, and the next key is still resolved. A verdict the check refused is
    passed on as it is, never applied.

    Raises:
        StoreError: the ledger failed; the keys before were resolved, none after is tried.

    """
    for verdict in verdicts:
        record = verdict.before
        if verdict.status != "checked" or record is None:
            yield verdict
            continue
        try:
            after = store._decide(  # noqa: SLF001 - the command line is the operator's seat
                record.key,
                happened=decision.happened,
                result=decision.result,
                encode=encode_untyped,
                tool=record.tool,
                attempt_id=record.attempt_id,
                note=decision.note,
                force=decision.force,
            )
        except StoreError:
            raise  # the ledger, not the key: the operator's one-line error, exit 2
        except (SafeError, ValueError, TypeError) as exc:
            yield attrs.evolve(verdict, status="refused", reason=str(exc), refused_at="apply")
        else:
            yield attrs.evolve(verdict, status="resolved", after=after)


def _would(decision: Decision) -> State:
    return State.SUCCEEDED if decision.happened else State.RELEASED


def verdict_line(verdict: Verdict, decision: Decision, *, dry_run: bool) -> str:
    """One item for people: ``KEY: in_doubt → released`` as a single ``resolve`` says it."""
    item = verdict.item
    was = "?" if verdict.before is None else verdict.before.state.value
    match verdict.status:
        case "resolved":
            after = verdict.after
            return f"{item.shown}: {was} → {'?' if after is None else after.state.value}"
        case "checked":
            done = "dry run" if dry_run else "checked, not applied"
            return f"{item.shown}: {was} → {_would(decision).value} ({done})"
        case "refused":
            what = "refused" if verdict.refused_at == "check" else "not resolved"
            return f"{item.shown} (line {item.line}): {what}: {verdict.reason}"


def verdict_json(verdict: Verdict, decision: Decision) -> dict[str, object]:
    """One item for scripts: which, its state before and after, and what became of it."""
    before, after, item = verdict.before, verdict.after, verdict.item
    to_state = {
        "resolved": None if after is None else after.state.value,
        "checked": _would(decision).value,
        "refused": None,
    }[verdict.status]
    shown = after or before
    return {
        "item": item.number,
        "line": item.line,
        "key": item.key,
        "attempt_id": item.attempt_id if before is None else before.attempt_id,
        "tool": None if before is None else before.tool,
        "status": verdict.status,
        "refused_at": verdict.refused_at,
        "reason": verdict.reason,
        "from_state": None if before is None else before.state.value,
        "to_state": to_state,
        "warning": verdict.warning,
        "record": None if shown is None else record_json(shown),
    }


def refusal_summary(verdicts: Sequence[Verdict], *, dry_run: bool) -> str | None:
    """The one line of an error that says the check refused the set, or None if it did not."""
    refused = [v for v in verdicts if v.status == "refused"]
    if not refused:
        return None
    first = refused[0]
    more = f"; and {len(refused) - 1} more" if len(refused) > 1 else ""
    so = "the set would be refused (dry run)" if dry_run else "nothing was changed"
    return (
        f"{len(refused)} of {len(verdicts)} item{'s' * (len(verdicts) != 1)} refused, so "
        f"{so}: {first.item.shown} (line {first.item.line}): {first.reason}{more}; "
        "correct or remove them and run it again"
    )


def summary(verdicts: Sequence[Verdict], decision: Decision, *, dry_run: bool) -> str:
    """The last line for people: how many keys were (or would be) resolved, and as what."""
    total = len(verdicts)
    keys = f"key{'s' * (total != 1)}"
    if dry_run:
        return f"dry run: {total} {keys} would be resolved as {decision.said}; nothing was changed"
    done = sum(v.status == "resolved" for v in verdicts)
    if done == total:
        return f"resolved {total} {keys} as {decision.said}"
    left = total - done
    return (
        f"resolved {done} of {total} {keys} as {decision.said}; {left} "
        f"{'was' if left == 1 else 'were'} not (changed since the check, see above): look at "
        f"{'it' if left == 1 else 'them'} again with safeact show"
    )
