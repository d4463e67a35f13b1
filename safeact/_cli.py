"""The ``safeact`` command: look into a ledger, decide what is in doubt, keep it tidy.

Only the console script (and ``python -m safeact``) imports this module. Every command but
``migrate`` refuses a missing ledger instead of creating one. User mistakes end with one line
on stderr and exit code 2; ``doubt`` and ``reconcile`` exit with 1 while anything is in doubt,
and ``resolve --keys-from`` (``_cli_batch``) when a key changed after the check and was left.
A person's decision on an approval request (``approve``, ``deny``) that the ledger refuses
(not pending, another args hash, no request) is its one-line message and exit 2, nothing
changed; ``approvals`` lists the requests, a listing like ``ls`` (exit 0).

A row changed outside safeact (``CorruptRecordError``) never ends a listing: ``ls``, ``show``,
``stats``, ``sagas`` and ``doubt`` show it in its place as corrupt, and a line on stderr
counts such rows. Listings still exit 0; ``show`` of a corrupt key exits 1, and ``doubt``
counts a corrupt key as needing attention (exit 1). ``--json`` prints a corrupt key as
``{"key": KEY, "corrupt": WHAT_IS_WRONG, "column": COLUMN}``.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import importlib
import importlib.metadata
import importlib.util
import itertools
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn, TypeVar, cast

import safeact._cli_serve as serving
from safeact._cli_batch import (
    Decision,
    InputError,
    Verdict,
    apply_items,
    check_items,
    is_utf8,
    read_items,
    refusal_summary,
    summary,
    verdict_json,
    verdict_line,
)
from safeact._cli_json import (
    SCHEMAS,
    approval_json,
    archived_json,
    corrupt_json,
    doubt_json,
    event_json,
    record_json,
    saga_json,
    show_json,
    write_lists,
)
from safeact._cli_text import (
    SHORT_HASH,
    age,
    aligned,
    approval_fields,
    approval_lines,
    approvals_table,
    corrupt_count,
    corrupt_lines,
    corrupt_section,
    count_row,
    decision_line,
    doubt_table,
    escaped,
    event_line,
    history_lines,
    late_section,
    ls_row,
    printable,
    saga_row,
    show_lines,
    size,
    table,
    when,
)
from safeact._codec import encode_untyped
from safeact._integrity import TABLES
from safeact._open import get_store, names_postgres
from safeact._protocol import (
    NO_RESULT,
    Approval,
    ApprovalState,
    Record,
    SagaState,
    State,
    utc_now,
)
from safeact._reconcile import Probe
from safeact._result_fit import ECHOED, echoed, parse_result, result_fit
from safeact._retention import MOST
from safeact._schema import migrate
from safeact._sqlite import SqliteStore
from safeact._store import Store
from safeact.exceptions import CorruptRecordError, SafeError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite


__all__ = ["main"]

_AGE = re.compile(r"(\d+)([smhdw])")
_WHEN = "an age (30m, 2h, 7d; units s, m, h, d, w) or an ISO date or time (UTC unless given)"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


_CORRUPT_JSON = '{"key": KEY, "corrupt": WHAT_IS_WRONG, "column": COLUMN}'
_EXIT_STATUS = f"""exit status:
  0  done
  1  something needs a decision: a key in doubt (doubt, reconcile) or a corrupt row
     (doubt; show of a corrupt key); a key of resolve --keys-from that changed after the
     check and was not resolved
  2  a usage error, a decision the ledger refused (nothing changed), or a ledger that
     cannot be used

A row changed outside safeact is listed as corrupt, with what is wrong, instead of
ending the listing; a line on stderr counts such rows, and a listing still exits 0.
With --json, a corrupt key is {_CORRUPT_JSON}."""


class _UsageError(Exception):
    """A mistake on the command line or a ledger that cannot be used: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``safeact: error: ...``.

    Its help is written as the commands' output is: a failure to write it raises
    ``OSError`` (argparse's own printing would drop it and exit 0).
    """

    words: Sequence[str] = ()
    """The words this parser was last given, for the hints of its errors."""

    key_or: str | None = None
    """The option that may stand in for the command's KEY (resolve's ``keys_from``).

    Set, KEY is optional and exactly one of the two is required; options and KEY then come
    in any order through argparse's intermixed parsing, since its plain parsing (Python
    3.11) takes an optional KEY as absent at the first option before it.
    """

    _inner = False
    """Whether intermixed parsing is under way (it calls ``parse_known_args`` per pass)."""

    def parse_known_args(  # type: ignore[override]  # the one overload safeact calls
        self, args: Iterable[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._inner:
            return super().parse_known_args(args, namespace)
        self.words = list(sys.argv[1:] if args is None else args)
        if self.key_or is None:
            return super().parse_known_args(self.words, namespace)
        self._inner = True
        try:
            parsed, extras = self.parse_known_intermixed_args(self.words, namespace)
        finally:
            self._inner = False
        given = (parsed.key is not None, getattr(parsed, self.key_or) is not None)
        if given == (False, False):
            # As for a required KEY, so that the hint about a KEY starting with '-' follows.
            self.error(f"{_REQUIRED}KEY, or --{self.key_or.replace('_', '-')} FILE")
        if given == (True, True):
            option = f"--{self.key_or.replace('_', '-')}"
            self.error(f"argument {option}: not allowed with argument KEY: give one or the other")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        hint = dash_hint(message, self.words, self._option_string_actions, self.prog)
        said = _cut_long_words(_unechoed(message))
        self.exit(2, printable(f"safeact: error: {said}{hint} (see `{self.prog} --help`)") + "\n")

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        (sys.stdout if file is None else file).write(self.format_help())


class _Version(argparse.Action):
    """``--version``: print which safeact, as the commands print (a failure raises)."""

    def __call__(  # an Action's signature, of which only the parser is needed
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,  # noqa: ARG002
        values: str | Sequence[object] | None,  # noqa: ARG002
        option_string: str | None = None,  # noqa: ARG002
    ) -> None:
        sys.stdout.write(f"safeact {importlib.metadata.version('safeact')}\n")
        parser.exit()


def dash_hint(message: str, words: Sequence[str], options: Iterable[str], prog: str) -> str:
    """What to add to argparse's ``message`` when a word starting with '-' is its likely cause.

    A KEY that starts with '-' is taken for an option, so KEY is reported missing; a value
    that does, for an option of its own, so the option is reported without its value.
    """
    if message.startswith(_REQUIRED) and "KEY" in message.removeprefix(_REQUIRED).split(", "):
        before_dashes = words[: words.index("--")] if "--" in words else words
        known = set(options)
        taken = [
            word
            for word in before_dashes
            if word.startswith("-")
            and word.split("=", 1)[0] not in known
            and not _NEGATIVE_NUMBER.fullmatch(word)
        ]
        if not taken:
            return ""
        return (
            "; a KEY that starts with '-' goes last, after `--` (which ends the options): "
            f"{prog} LEDGER [OPTIONS] -- {escaped(taken[0])}"
        )
    if (match := _NO_VALUE.fullmatch(message)) and match[1] in words:
        option = match[1]
        after = words.index(option) + 1
        if after < len(words) and words[after].startswith("-"):
            value = escaped(words[after])
            return f"; a value that starts with '-' goes after '=': {option}={value}"
    return ""


_REQUIRED = "the following arguments are required: "
_NO_VALUE = re.compile(r"argument (--[a-z-]+): expected one argument")
_NEGATIVE_NUMBER = re.compile(r"-\d+$|-\d*\.\d+$")
"""What argparse takes for a negative number, not an option (as its own parser does)."""


_LONG_WORD = re.compile(r"\S{201,}")
"""A word of an argparse error too long to be anything but a value typed (or pasted) whole."""


def _cut_long_words(message: str) -> str:
    """Argparse's ``message`` with every word over 200 characters cut, saying how long it was.

    Argparse quotes a value it refuses whole (``invalid choice: '...'``); the values
    safeact's own parsers refuse are already cut shorter (``echoed``).
    """
    return _LONG_WORD.sub(
        lambda word: f"{word[0][:ECHOED]}... ({len(word[0]):,} characters)", message
    )


_UNRECOGNIZED = "unrecognized arguments: "


def _unechoed(message: str) -> str:
    """An argparse error ``message`` without the words it did not expect, options aside.

    A connection string left unquoted arrives as many words (``host=db password=s3cret``),
    the first taken for the ledger and the others unexpected: argparse would print them,
    the password among them.
    """
    if not message.startswith(_UNRECOGNIZED):
        return message
    words = message.removeprefix(_UNRECOGNIZED).split(" ")
    options = [word for word in words if word.startswith("-")]
    others = len(words) - len(options)
    if others:
        options.append(
            f"{others} other word{'s' * (others != 1)} (not shown: a connection string with "
            "spaces goes in quotes, as one argument)"
        )
    return _UNRECOGNIZED + ", ".join(options)


# Parsing values.


def moment(text: str) -> datetime:
    """A point in time: an age before now (``30d``, units s, m, h, d, w) or an ISO date/time.

    A time without a zone is UTC.

    Raises:
        argparse.ArgumentTypeError: neither, or a time outside the years 1 to 9999 in UTC
            (the ledger keeps times in UTC).

    """
    text = text.strip()
    if match := _AGE.fullmatch(text):
        try:
            return utc_now() - timedelta(seconds=int(match[1]) * _UNITS[match[2]])
        except OverflowError:
            raise argparse.ArgumentTypeError(
                f"{echoed(text)} reaches back before the year 1: give a shorter age or a date"
            ) from None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{echoed(text)} is neither an age like 2h or 30d (units s, m, h, d, w) "
            "nor an ISO date or time like 2026-01-31 or 2026-01-31T12:00"
        ) from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        parsed.astimezone(UTC)
    except OverflowError:
        raise argparse.ArgumentTypeError(
            f"{echoed(text)} is out of range: in UTC it falls before the year 1 or after "
            "9999; give a date between them"
        ) from None
    return parsed


def states(text: str) -> list[State]:
    """A comma-separated list of key states."""
    try:
        return [State(part.strip().lower()) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{echoed(text)}: states are {', '.join(s.value for s in State)}"
        ) from None


def json_value(text: str) -> object:
    """A JSON document, as ``parse_result`` reads it.

    Raises:
        argparse.ArgumentTypeError: the text is not valid UTF-8, or ``parse_result`` refuses it.

    """
    _check_utf8(text, "so it is not JSON text")
    try:
        return parse_result(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _batch_size(text: str) -> int:
    """``check --batch``, ``purge --batch``: a whole number of rows, 1 to a purge's ``MOST``."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MOST:
        raise argparse.ArgumentTypeError(
            f"{echoed(text)} is not a batch: give a number of rows from 1 to {MOST:,}"
        )
    return int(text)


def utf8_text(refusal: str) -> Callable[[str], str]:
    """A parser of a text argument that reaches the ledger, which keeps text as UTF-8.

    Its parser raises ``argparse.ArgumentTypeError`` for text that is not valid UTF-8
    (the command line keeps such bytes as surrogates), saying ``refusal``: what follows.
    """

    def text(value: str) -> str:
        _check_utf8(value, refusal)
        return value

    return text


def _check_utf8(value: str, refusal: str) -> None:
    """Refuse ``value`` unless it is valid UTF-8, saying ``refusal`` (what follows from it)."""
    if not is_utf8(value):
        raise argparse.ArgumentTypeError(
            f"{echoed(_as_typed(value))} is not valid UTF-8, {refusal}"
        )


def _as_typed(value: str) -> bytes:
    """The bytes ``value`` was decoded from (argv's undecodable bytes are kept as surrogates)."""
    try:
        return value.encode(errors="surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte: from a caller of main
        return value.encode(errors="backslashreplace")


_KEY = utf8_text("so no key can match it (keys are stored as UTF-8 text)")
_T = TypeVar("_T")

_TOOL = utf8_text("so no tool's name can match it (names are stored as UTF-8 text)")
_ATTEMPT = utf8_text("so no attempt id can match it (ids are stored as UTF-8 text)")
_NOTE = utf8_text("so it cannot be stored (the ledger keeps notes as UTF-8 text)")
_BY = utf8_text("so it cannot be stored (the ledger keeps names as UTF-8 text)")
_UTF8_HASH = utf8_text("so no args hash can match it (hashes are stored as UTF-8 text)")


def args_hash(text: str) -> str:
    """An args hash as an operator reviewed it: whole, or its first ``SHORT_HASH`` characters.

    Raises:
        argparse.ArgumentTypeError: not valid UTF-8, or shorter than what ``approvals``
            shows (a few characters would bind a decision to almost nothing).

    """
    text = _UTF8_HASH(text)
    if len(text) < SHORT_HASH:
        raise argparse.ArgumentTypeError(
            f"{echoed(text)} is too short: give the {SHORT_HASH} characters safeact approvals "
            "shows, or the whole hash (approvals --json)"
        )
    return text


def load_probes(spec: str) -> Mapping[str, Probe[object]]:
    """Import the mapping of tool names to probes named ``MODULE:NAME`` or ``FILE.py:NAME``."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise _UsageError(f"--probes {spec!r}: expected MODULE:NAME or path/to/file.py:NAME")
    try:
        module = _import(where)
    except _UsageError as exc:
        raise _UsageError(f"--probes {spec!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - anything the user's module raises is their error
        raise _UsageError(
            f"--probes {spec!r}: cannot import {where}: {type(exc).__name__}: {exc}"
        ) from None
    if not hasattr(module, name):
        raise _UsageError(f"--probes {spec!r}: {where} has no {name}")
    probes = getattr(module, name)
    if not isinstance(probes, Mapping) or not all(
        isinstance(tool, str) and callable(probe) for tool, probe in probes.items()
    ):
        raise _UsageError(
            f"--probes {spec!r}: {name} must be a mapping of tool names to probes, "
            f"got {type(probes).__name__}"
        )
    return cast("Mapping[str, Probe[object]]", probes)


def _import(where: str) -> ModuleType:
    """Import a module by name (the working directory first, as ``python -m`` does) or file."""
    if not where.endswith(".py") and "/" not in where:
        sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(where)
    found = importlib.util.spec_from_file_location("safeact_probes", where)
    if found is None or found.loader is None or not Path(where).is_file():
        raise _UsageError(f"no Python file at {where}")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


# Commands: each takes the parsed options and prints; it returns the exit code.


def open_store(location: str) -> Store:
    """Open an existing ledger (a file, or a PostgreSQL URL); never create one."""
    if _names_postgres(location):
        return get_store(location)
    ledger = Path(location)
    if not ledger.exists():
        raise _UsageError(
            f"{ledger}: no such file (safeact creates a ledger only when a tool uses it)"
        )
    if not ledger.is_file() or ledger.stat().st_size == 0:
        raise _UsageError(f"{ledger}: not a safeact ledger")
    return get_store(ledger)


def _names_postgres(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL database; a location refused is a usage error.

    A file's path may hold any bytes; a connection string must be text, and is never
    quoted back (it may hold a password).
    """
    try:
        postgres = names_postgres(location)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    if postgres and not is_utf8(location):
        raise _UsageError(
            "the PostgreSQL connection string is not valid UTF-8 (not shown: it may hold a "
            "password); give it as UTF-8 text"
        )
    return postgres


def cmd_ls(options: argparse.Namespace, store: Store) -> int:
    state = None if options.state is None else State(options.state)
    _print_listing(
        store,
        store._record_batches(state=state, tool=options.tool, since=options.since),  # noqa: SLF001 - the operator's seat
        as_json=record_json if options.json else None,
        header=["KEY", "TOOL", "STATE", "ATTEMPTED", "FINISHED", "NOTE"],
        cells=ls_row,
    )
    return 0


def _print_listing(
    store: Store,
    batches: Generator[Sequence[_T | CorruptRecordError], None, None],
    *,
    as_json: Callable[[_T], dict[str, object]] | None,
    header: list[str],
    cells: Callable[[_T | CorruptRecordError], list[str]],
) -> None:
    """Print a listing a batch at a time, as read: memory holds one batch.

    JSON lines with ``as_json``, else a table of ``cells`` under ``header``; corrupt rows
    in their place, and counted on stderr.
    """
    widths: list[int] | None = None
    corrupt = 0
    # Closed here, whatever stops the printing: its statement ends before the store does.
    with contextlib.closing(batches):
        for found in batches:
            corrupt += sum(isinstance(item, CorruptRecordError) for item in found)
            if as_json is not None:
                _print_json(
                    corrupt_json(item) if isinstance(item, CorruptRecordError) else as_json(item)
                    for item in found
                )
            elif found:
                lines, widths = aligned(header, map(cells, found), widths)
                _print(lines)
    if as_json is None and widths is None:
        _print(table(header, []))
    warn_corrupt(store, corrupt)


def cmd_show(options: argparse.Namespace, store: Store) -> int:
    events = store.scan_history(options.key)
    approval = _approval_of(store, options.key)
    try:
        record = store.get(options.key)
    except CorruptRecordError as error:
        if options.json:
            _print_json([show_json(options.key, error, None, [], events, approval=approval)])
        else:
            _print(corrupt_lines(error, events))
        report_corrupt(store, [error, *events, approval])
        return 1
    if record is None and not events and approval is None:
        raise _UsageError(f"{store.location}: no key {options.key!r}")
    late = [] if record is None else store.scan_late_completions(options.key)
    recorded = store._stored(options.key)  # noqa: SLF001 - the operator's seat shows the row too
    if options.json:
        _print_json([show_json(options.key, record, recorded, late, events, approval=approval)])
    elif (record is None or recorded is None) and approval is not None:
        _print(approval_lines(approval, events))  # requested, not attempted (or purged) yet
    elif record is None or recorded is None:
        _print([f"key {options.key!r} is not in the ledger any more", "", "history:"])
        _print(history_lines(events))
    else:
        decided = [] if approval is None else approval_fields(approval)
        _print(show_lines(record, recorded.state, late, events, decided))
    report_corrupt(store, [*late, *events, approval])
    return 0


def _approval_of(store: Store, key: str) -> Approval | CorruptRecordError | None:
    """``key``'s approval request, if its tool asked for one; a corrupt row as its error."""
    try:
        return store.approval(key)
    except CorruptRecordError as error:
        return error


def cmd_doubt(options: argparse.Namespace, store: Store) -> int:
    # Only the unsettled keys are read (through their index): what doubt shows. A corrupt
    # row among them is listed, as needing attention; a settled one is found by the reads
    # that meet it, and by ``safeact check``, which reads every row on purpose.
    found = store.scan_records(unsettled=True)
    corrupt = [r for r in found if isinstance(r, CorruptRecordError)]
    doubts = [r for r in found if isinstance(r, Record) and r.state is State.IN_DOUBT]
    now = utc_now()
    if options.json:
        _print_json(doubt_json(r, now) for r in doubts)
        _print_json(corrupt_json(error) for error in corrupt)
    elif doubts:
        _print(doubt_table(doubts, now))
        _print(
            [
                "",
                f"{len(doubts)} in doubt; after checking each one, close it with",
                (
                    f"  safeact resolve {store.location} KEY "
                    "--happened --result JSON | --not-happened"
                ),
            ]
        )
    else:
        _print(["nothing in doubt"])
    # A late completion of a corrupt key comes back as that key's error: listed already.
    late = [
        done
        for done in store.scan_late_completions()
        if not (isinstance(done, CorruptRecordError) and done.table == "calls")
    ]
    if not options.json:
        _print(corrupt_section(store.location, corrupt))
        _print(late_section(store.location, late))
    return 1 if report_corrupt(store, [*corrupt, *late]) or doubts else 0


def cmd_approvals(options: argparse.Namespace, store: Store) -> int:
    # Printed a batch at a time, as read: memory holds one batch, whatever the ledger's size.
    batches = store._approval_batches(  # noqa: SLF001 - the operator's seat
        state=None if options.every else ApprovalState.PENDING, tool=options.tool
    )
    widths: list[int] | None = None
    listed = waiting = corrupt = 0
    with contextlib.closing(batches):  # as in _print_listing
        for found in batches:
            listed += len(found)
            waiting += sum(
                isinstance(a, Approval) and a.state is ApprovalState.PENDING for a in found
            )
            corrupt += sum(isinstance(a, CorruptRecordError) for a in found)
            if options.json:
                _print_json(
                    approval_json(a) if isinstance(a, Approval) else corrupt_json(a) for a in found
                )
            elif found:
                lines, widths = approvals_table(found, every=options.every, widths=widths)
                _print(lines)
    if not options.json and not listed:
        _print(["no approval requests" if options.every else "nothing waits for approval"])
    elif not options.json and waiting:
        _print(
            [
                "",
                f"{waiting} waiting for approval; after checking each one, decide with",
                f"  safeact approve {store.location} KEY --args-hash HASH [--note TEXT]",
                f"  safeact deny {store.location} KEY --note WHY",
            ]
        )
    warn_corrupt(store, corrupt)
    return 0


def cmd_approve(options: argparse.Namespace, store: Store) -> int:
    return _decide_approval(options, store, approve=True)


def cmd_deny(options: argparse.Namespace, store: Store) -> int:
    return _decide_approval(options, store, approve=False)


def _decide_approval(options: argparse.Namespace, store: Store, *, approve: bool) -> int:
    """Record a person's ``approve`` (or deny) of a request: the ledger checks it, and refuses.

    The ledger's refusal (no request, not pending, another args hash) is a ``SafeError``
    with nothing changed: ``main`` prints it (exit 2).
    """
    by = _user() if options.by is None else options.by
    before = store.approval(options.key)
    reviewed = options.args_hash
    if reviewed is not None and before is not None and before.args_hash.startswith(reviewed):
        # The short form approvals shows stands for the request's whole hash, which the
        # decision's own transaction compares again: a request replaced meanwhile is refused.
        reviewed = before.args_hash
    decide = store.approve if approve else store.deny
    try:
        after = decide(options.key, by=by, note=options.note, args_hash=reviewed)
    except (ValueError, TypeError) as exc:
        raise _UsageError(str(exc)) from None
    if options.json:
        _print_json(
            [
                {
                    "key": after.key,
                    "from_state": None if before is None else before.state.value,
                    "to_state": after.state.value,
                    "approval": approval_json(after),
                }
            ]
        )
    else:
        _print([decision_line(before, after)])
    return 0


def _user() -> str:
    """The name of the user running the command, for ``--by``'s default.

    Raises:
        _UsageError: the system has no name for this user, or not one in UTF-8.

    """
    try:
        name = getpass.getuser()
    except (OSError, KeyError):  # OSError from Python 3.13; KeyError (pwd) before
        raise _UsageError(
            "cannot tell who you are: no user name for this process (LOGNAME, USER or the "
            "password database); give --by NAME"
        ) from None
    if not is_utf8(name):
        raise _UsageError(
            "your user name is not valid UTF-8, so it cannot be stored; give --by NAME"
        )
    return name


def cmd_resolve(options: argparse.Namespace, store: Store) -> int:
    if options.result is not NO_RESULT and not options.happened:
        raise _UsageError("--result goes with --happened: a key that did not happen has no result")
    if options.result is NO_RESULT and options.happened:
        raise _UsageError(
            "--happened needs --result JSON: what the tool would have returned "
            "(--result null for a tool that returns None)"
        )
    if options.force and options.happened:
        raise _UsageError("--force goes with --not-happened: --happened needs no proof")
    if options.keys_from is not None:
        return resolve_reviewed(options, store)
    if options.dry_run:
        raise _UsageError(
            "--dry-run goes with --keys-from: a single KEY is checked as it is resolved, and a "
            "refused decision changes nothing"
        )
    before = store.get(options.key)
    tool, unchecked = (
        _result_check(store, before, options.result) if options.happened else (None, None)
    )
    try:
        after = store._decide(  # noqa: SLF001 - the command line is the operator's seat
            options.key,
            happened=options.happened,
            result=options.result,
            encode=encode_untyped,
            tool=tool,
            attempt_id=options.attempt,
            note=options.note,
            force=options.force,
        )
    except (ValueError, TypeError) as exc:
        raise _UsageError(str(exc)) from None
    if unchecked is not None:
        _warn(unchecked)
    if options.json:
        _print_json([transition_json(before, after)])
    else:
        was = "?" if before is None else before.state.value
        _print([f"{escaped(after.key)}: {was} → {after.state.value}"])
    return 0


def resolve_reviewed(options: argparse.Namespace, store: Store) -> int:
    """``resolve --keys-from``: check every item, then resolve each key in its own transaction.

    Exit 0: every key resolved (or, with ``--dry-run``, every key would be). An item
    refused by the check refuses the whole set: nothing is written, every item is reported
    and the error says how many (exit 2). A key that changed between the check and its own
    transaction is refused and reported, the others are resolved all the same (exit 1).
    """
    if options.attempt is not None:
        raise _UsageError(
            "--attempt goes with a KEY: with --keys-from, each item's attempt_id (as doubt "
            "--json prints it) is the attempt its key must still be at"
        )
    try:
        items = read_items(_reviewed(options.keys_from))
    except InputError as exc:
        raise _UsageError(f"--keys-from {_source(options.keys_from)}: {exc}") from None
    decision = Decision(
        happened=options.happened, result=options.result, force=options.force, note=options.note
    )

    def fits(record: Record) -> tuple[str | None, str | None]:
        try:
            _, unchecked = _result_check(store, record, options.result)
        except _UsageError as exc:  # said of the whole set: nothing changes for any key
            return str(exc).removesuffix("; nothing was changed"), None
        return None, unchecked

    checked = check_items(store, items, decision, fits)
    refused = refusal_summary(checked, dry_run=options.dry_run)
    if refused is not None or options.dry_run:
        _say_verdicts(options, checked, decision)
        if refused is not None:
            raise _UsageError(refused)
        _print([] if options.json else [summary(checked, decision, dry_run=True)])
        return 0
    applied: list[Verdict] = []
    for verdict in apply_items(store, checked, decision):
        applied.append(verdict)
        _say_verdicts(options, [verdict], decision)
        if verdict.status == "resolved" and verdict.warning is not None:
            _warn(verdict.warning)
        sys.stdout.flush()  # what is done is said at once, whatever stops the rest
    if not options.json:
        _print([summary(applied, decision, dry_run=False)])
    return 0 if all(v.status == "resolved" for v in applied) else 1


def _say_verdicts(
    options: argparse.Namespace, verdicts: Sequence[Verdict], decision: Decision
) -> None:
    if options.json:
        _print_json(verdict_json(v, decision) for v in verdicts)
    else:
        _print(verdict_line(v, decision, dry_run=options.dry_run) for v in verdicts)


def _source(source: str) -> str:
    """``--keys-from``'s value as an error names it: standard input, or the file."""
    if source == "-":
        return "- (standard input)"
    return echoed(source if is_utf8(source) else _as_typed(source))


def _reviewed(source: str) -> str:
    """The text of the reviewed set: the file ``source``, or standard input for ``-``.

    Raises:
        InputError: it cannot be read, or it is not UTF-8.

    """
    if source == "-":
        if sys.stdin is None:
            raise InputError("standard input is closed")
        if sys.stdin.isatty():
            _warn(
                "safeact: reading the keys from the terminal, one JSON object per line as "
                "safeact doubt --json prints them; end with Ctrl-D"
            )
        data: bytes | str = (
            sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        )
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read it ({exc.strerror or exc})") from None
    if isinstance(data, str):
        return data
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"line {line}: not valid UTF-8 (byte {exc.start:,}), so it is not JSON text"
        ) from None


def cmd_amend(options: argparse.Namespace, store: Store) -> int:
    tool, unchecked = _result_check(store, store.get(options.key), options.result)
    try:
        after = store._amend(  # noqa: SLF001 - the command line is the operator's seat
            options.key,
            result=options.result,
            encode=encode_untyped,
            tool=tool,
            note=options.note,
        )
    except (ValueError, TypeError) as exc:
        raise _UsageError(str(exc)) from None
    if unchecked is not None:
        _warn(unchecked)
    if options.json:
        _print_json([{"key": after.key, "result": after.result, "record": record_json(after)}])
    else:
        _print([f"{escaped(after.key)}: result amended to {json.dumps(after.result)}"])
    return 0


def transition_json(before: Record | None, after: Record) -> dict[str, object]:
    """``resolve --json``: the key's state before (as read) and after, and its record."""
    return {
        "key": after.key,
        "from_state": None if before is None else before.state.value,
        "to_state": after.state.value,
        "record": record_json(after),
    }


def _result_check(
    store: Store, record: Record | None, result: object
) -> tuple[str | None, str | None]:
    """``result_fit``, its refusal a usage error."""
    try:
        return result_fit(store, record, result)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


def cmd_sagas(options: argparse.Namespace, store: Store) -> int:
    state = None if options.state is None else SagaState(options.state)
    _print_listing(
        store,
        store._saga_batches(state),  # noqa: SLF001 - the operator's seat
        as_json=saga_json if options.json else None,
        header=["SAGA", "STATE", "STEPS", "STARTED", "UPDATED", "ABORTED STEP", "REASON"],
        cells=saga_row,
    )
    return 0


def cmd_purge(options: argparse.Namespace, store: Store) -> int:
    # Printed a batch at a time, as each commits: memory holds one batch, and the lines
    # printed are what was removed, whatever stops the rest.
    batches = store._purging(  # noqa: SLF001 - the operator's seat
        options.older_than, states=options.state, dry_run=options.dry_run, batch=options.batch
    )
    try:
        first = next(batches, None)  # the refusals come before any batch
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    done = itertools.chain([] if first is None else [first], batches)
    if options.json:
        head = {
            "dry_run": options.dry_run,
            "older_than": options.older_than.isoformat(),
            "states": [s.value for s in options.state],
        }
        # Sagas go first, then keys: one object, written as its lists' items come.
        pairs = (
            (kind, name)
            for purged in done
            for kind, names in (("sagas", purged.sagas), ("keys", purged.keys))
            for name in names
        )
        write_lists(sys.stdout, head, ("sagas", "keys"), pairs)
        return 0
    removed = Counter[str]()
    for purged in done:
        removed.update(saga=len(purged.sagas), key=len(purged.keys))
        _print(
            [f"  saga  {escaped(saga)}" for saga in purged.sagas]
            + [f"  key   {escaped(key)}" for key in purged.keys]
        )
        sys.stdout.flush()
    verb = "would remove" if options.dry_run else "removed"
    keys, sagas = removed["key"], removed["saga"]
    _print(
        [
            f"{verb} {keys} key{'s' * (keys != 1)} and {sagas} saga{'s' * (sagas != 1)} "
            f"finished before {when(options.older_than)}"
            + (" (dry run: nothing was removed)" if options.dry_run else "")
        ]
    )
    return 0


def cmd_stats(options: argparse.Namespace, store: Store) -> int:
    # Counted in SQL (settled keys by their tool and state; sagas by state), so the cost is
    # an index's, not every row's parsing; only the unsettled keys are read whole.
    census = store._census()  # noqa: SLF001 - the operator's seat
    per_tool: dict[str, Counter[State]] = {}
    for (tool, state), n in census.counts.items():
        per_tool.setdefault(tool, Counter())[state] = n
    everything = sum(per_tool.values(), Counter[State]())
    saga_counts, corrupt_sagas = store._saga_counts()  # noqa: SLF001 - as above
    sagas = {state.value: n for state, n in saga_counts.items()}
    doubts = [r for r in census.unsettled if r.state is State.IN_DOUBT]
    corrupt = {"keys": census.uncounted, "sagas": corrupt_sagas}
    on_disk = size(store.path) if isinstance(store, SqliteStore) else None
    now = utc_now()
    if options.json:
        oldest = None if not doubts else doubt_json(doubts[0], now)
        _print_json(
            [
                {
                    "tools": {tool: counts_json(n) for tool, n in sorted(per_tool.items())},
                    "all": counts_json(everything),
                    "sagas": dict(sorted(sagas.items())),
                    "oldest_in_doubt": None
                    if oldest is None
                    else {k: oldest[k] for k in ("key", "attempted_at", "age_seconds")},
                    "corrupt": corrupt,
                    "size_bytes": None if on_disk is None else on_disk[0],
                }
            ]
        )
    else:
        rows = [count_row(tool, n) for tool, n in sorted(per_tool.items())]
        rows.append(count_row("(all tools)", everything))
        _print(table(["TOOL", *(s.value.upper() for s in State), "TOTAL"], rows))
        _print(
            [
                "",
                "sagas: "
                + (", ".join(f"{n} {state}" for state, n in sorted(sagas.items())) or "none"),
                "oldest in doubt: "
                + (
                    f"{escaped(doubts[0].key)}, attempted {age(now - doubts[0].attempted_at)} ago"
                    if doubts
                    else "none"
                ),
                *corrupt_count(corrupt["keys"], corrupt["sagas"]),
                f"size: on the server ({store.location})"
                if on_disk is None
                else "size on disk: {:,} bytes ({})".format(*on_disk),
            ]
        )
    warn_corrupt(store, census.uncounted + corrupt_sagas)
    return 0


def counts_json(counts: Mapping[State, int]) -> dict[str, int]:
    """How many keys are in each state (every state, zeros too), and in all."""
    return {**{s.value: counts.get(s, 0) for s in State}, "total": sum(counts.values())}


def cmd_reconcile(options: argparse.Namespace, store: Store) -> int:
    probes = {} if options.probes is None else load_probes(options.probes)
    events = store.reconcile(probes)
    left = store.list_in_doubt()
    now = utc_now()
    if options.json:
        _print_json(
            [
                {
                    "events": [event_json(e) for e in events],
                    "in_doubt": [doubt_json(r, now) for r in left],
                }
            ]
        )
        return 1 if left else 0
    rows = [[escaped(e.subject), *event_line(e)[1:3], escaped(e.note or "")] for e in events]
    if rows:
        _print(table(["KEY", "CHANGE", "WHY", "NOTE"], rows))
    elif probes:
        _print(["no probe answered: no in-doubt key has a probe for its tool"])
    else:
        _print(["no probes given: abandoned keys marked, proof of this host's dead owners kept"])
    if not left:
        _print(["", "nothing left in doubt"])
        return 0
    unprobed = sum(1 for r in left if r.tool not in probes)
    _print(["", f"still in doubt: {len(left)} ({unprobed} with no probe for their tool)"])
    _print(doubt_table(left, now))
    return 1


def cmd_archive(options: argparse.Namespace, store: Store) -> int:
    try:
        archived = store.archive_history(options.to, before=options.before, batch=options.batch)
    except (ValueError, TypeError) as exc:
        raise _UsageError(str(exc)) from None
    except OSError as exc:
        raise _UsageError(f"{options.to}: {exc.strerror or exc}") from None
    if options.json:
        _print_json(
            [
                {
                    "before": options.before.isoformat(),
                    "file": str(options.to),
                    **archived_json(archived),
                }
            ]
        )
        return 0
    corrupt = f" ({archived.corrupt} corrupt)" if archived.corrupt else ""
    events = f"{archived.events:,} event{'s' * (archived.events != 1)}{corrupt}"
    _print([f"archived {events} recorded before {when(options.before)} to {options.to}"])
    kept = [f"  key   {escaped(key)}" for key in archived.kept_keys]
    kept += [f"  saga  {escaped(saga)}" for saga in archived.kept_sagas]
    if kept:
        _print(["kept the history of unsettled keys and unfinished sagas:", *kept])
    return 0


def cmd_export(options: argparse.Namespace, store: Store) -> int:
    try:
        archived = store.export_history(sys.stdout, before=options.before)
    except (ValueError, TypeError) as exc:
        raise _UsageError(str(exc)) from None
    _warn(
        f"safeact: exported {archived.events:,} event{'s' * (archived.events != 1)} recorded "
        f"before {when(options.before)}; nothing was dropped\n"
    )
    return 0


def cmd_check(options: argparse.Namespace, store: Store) -> int:
    """Read every row; print each that cannot be read; exit 1 if any, 0 if none."""
    on_terminal = not options.json and sys.stderr is not None and sys.stderr.isatty()
    checked = Counter(dict.fromkeys(TABLES, 0))
    corrupt = 0
    for batch in store._check_rows(options.batch):  # noqa: SLF001 - the operator's seat
        checked[batch.table] += batch.rows
        corrupt += len(batch.corrupt)
        if options.json:
            _print_json({"table": batch.table, **corrupt_json(e)} for e in batch.corrupt)
        else:
            _print(f"{batch.table}  {escaped(e.subject)}  {e.problem}" for e in batch.corrupt)
        sys.stdout.flush()  # each row as it is found, whatever stops the rest
        if on_terminal:
            sys.stderr.write(f"\rchecked {checked.total():,} rows ({batch.table})")
            sys.stderr.flush()
    if on_terminal:
        sys.stderr.write("\n")
    if options.json:
        _print_json([{"checked": dict(checked), "corrupt": corrupt}])
    else:
        rows = ", ".join(f"{table} {n:,}" for table, n in checked.items())
        _print([f"checked {checked.total():,} rows ({rows}): {corrupt or 'none'} corrupt"])
    return 1 if corrupt else 0


def cmd_migrate(options: argparse.Namespace) -> int:
    backup: Path | None = None
    if _names_postgres(options.ledger):
        from safeact._postgres import (  # noqa: PLC0415 - an optional extra
            _without_password,
            migrate_postgres,
        )

        old, new = migrate_postgres(options.ledger)
        shown = _without_password(options.ledger)
    else:
        ledger = Path(options.ledger)
        backups = f"{ledger.name}.v*.bak*"
        before = set(ledger.parent.glob(backups))
        old, new = migrate(ledger)
        kept = sorted(set(ledger.parent.glob(backups)) - before)
        backup = kept[0] if len(kept) == 1 else None
        shown = str(ledger)
    if options.json:
        _print_json(
            [
                {
                    "ledger": shown,
                    "from_schema": old,
                    "to_schema": new,
                    "backup": None if backup is None else str(backup),
                }
            ]
        )
    elif old == new:
        _print([f"{shown} is already at schema {new}"])
    elif old == 0:
        _print([f"created schema {new} in {shown}"])
    else:
        copy = "" if backup is None else f" (old file kept as {backup})"
        _print([f"migrated {shown} from schema {old} to {new}{copy}"])
    return 0


# The parser and the entry point.


def _print(lines: Iterable[str]) -> None:
    # Every line is made printable here as well as in tables: a key, a note or an error
    # message can reach a line outside a table, and must not reach the terminal raw.
    sys.stdout.write("".join(f"{printable(line)}\n" for line in lines))


def _warn(text: str) -> None:
    # stderr reaches the same terminal: a tool's name, a host or a key in a message is
    # escaped like everything printed (the newline that ends the message is ours).
    if sys.stderr is not None:  # closed: nowhere to say it, the exit code says it
        sys.stderr.write(printable(text.removesuffix("\n")) + "\n")


def _print_json(objects: Iterable[dict[str, object]]) -> None:
    # ensure_ascii (the default) escapes every control character: a JSON line is one line.
    sys.stdout.write("".join(f"{json.dumps(found)}\n" for found in objects))


def report_corrupt(store: Store, found: Iterable[object]) -> int:
    """Say on stderr how many of ``found`` are corrupt rows (if any); return how many."""
    return warn_corrupt(store, sum(isinstance(item, CorruptRecordError) for item in found))


def warn_corrupt(store: Store, corrupt: int) -> int:
    """Say on stderr that ``corrupt`` rows are corrupt (if any); return how many."""
    if corrupt:
        _warn(
            f"safeact: warning: {corrupt} corrupt row{'s' * (corrupt != 1)} in "
            f"{store.location}, shown as corrupt: changed outside safeact; restore from a "
            f"backup or mend by hand (safeact show {store.location} KEY says how)\n"
        )
    return corrupt


def parser() -> _Parser:  # noqa: PLR0915 - a statement per command and option
    """The command line: one subcommand per operation, each with an example in its help."""
    top = _Parser(
        prog="safeact",
        description="Inspect and operate a safeact ledger.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "example:\n  safeact doubt agent.db   # what needs a decision? (exit 1 if anything)"
            f"\n\n{_EXIT_STATUS}"
        ),
    )
    top.add_argument("--version", action=_Version, nargs=0, help="say which safeact")
    commands = top.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="see safeact COMMAND --help"
    )

    def command(name: str, summary: str, *examples: str) -> _Parser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=summary,
            epilog="example:\n"
            + "\n".join(f"  {example}" for example in examples)
            + f"\n\n--json prints {SCHEMAS[name]}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("ledger", metavar="LEDGER", help="the ledger file, or a postgresql:// URL")
        sub.add_argument(
            "--json", action="store_true", help="print JSON for scripts (its shape is below)"
        )
        return sub

    ls = command(
        "ls",
        "List the keys, oldest attempt first; a corrupt row is listed as corrupt.",
        "safeact ls agent.db --state failed --since 2h",
        "safeact ls agent.db --json | jq -r 'select(.tool == \"demo.send_refund\") | .key'",
    )
    ls.add_argument(
        "--state",
        choices=[s.value for s in State],
        help="only keys in this state; in_doubt includes attempts whose owner is gone, "
        "out of lease or out of session, marked or not",
    )
    ls.add_argument("--tool", type=_TOOL, help="only this tool's keys")
    ls.add_argument("--since", type=moment, metavar="WHEN", help=f"attempted since: {_WHEN}")

    show = command(
        "show",
        "Show one key: its record, receipt, result or error, and history; exit 1 if its row "
        "is corrupt (what is wrong and what to do are shown).",
        "safeact show agent.db refund-1002",
    )
    show.add_argument(
        "key", type=_KEY, metavar="KEY", help="the key, exactly as the tool was called with it"
    )

    command(
        "doubt",
        "List the keys that need a decision (in doubt, or corrupt), oldest first; exit 1 if "
        "there are any.",
        "safeact doubt agent.db || notify-ops 'safeact: keys in doubt'",
    )

    resolve = command(
        "resolve",
        "Close an in-doubt key after checking what really happened; or, with --keys-from, "
        "a reviewed set of keys with one decision.",
        'safeact resolve agent.db refund-1002 --happened --result \'{"to": "bob", '
        "\"amount\": 20}' --note 'bank ref 8841'",
        "safeact resolve agent.db refund-1003 --not-happened --note 'no payment at the bank'",
        "safeact doubt agent.db --json | jq -c 'select(.tool == \"pay.refund\")' > reviewed.jsonl",
        "safeact resolve agent.db --keys-from reviewed.jsonl --not-happened --note 'provider: "
        "none arrived' --dry-run",
        "safeact resolve agent.db --keys-from reviewed.jsonl --not-happened --note 'provider: "
        "none arrived'",
    )
    _resolve_options(resolve)

    approvals = command(
        "approvals",
        "List the approval requests that wait for a person, oldest first, with the arguments "
        "a tool keeps; with --all, every request, with who decided and why.",
        "safeact approvals agent.db",
        "safeact approvals agent.db --all --tool pay.refund",
        "safeact approvals agent.db --json | jq -c '{key, args_hash, arguments}'",
    )
    approvals.epilog = (
        f"{approvals.epilog}\n\nARGS HASH is the start of the hash of the call's arguments "
        "(--json: whole); --args-hash of approve and deny takes either. ARGUMENTS are shown "
        "only for a tool that keeps them (safe(..., keep_arguments=True)), with the fields it "
        'redacts as "[redacted]"; otherwise -. A pending request is the normal course: the '
        "command exits 0."
    )
    approvals.add_argument("--tool", type=_TOOL, help="only this tool's requests")
    approvals.add_argument(
        "--all",
        dest="every",
        action="store_true",
        help="every request, pending or decided (approved, denied, consumed), with who "
        "decided, when, and their note",
    )

    approve = command(
        "approve",
        "Approve a pending request: the next call of its key, with those arguments, runs the "
        "action once.",
        "safeact approve agent.db refund-1002 --args-hash 5075fd1a6fdc --note 'invoice 7'",
    )
    approve.epilog = (
        f"{approve.epilog}\n\nOnly a pending request can be approved. A refusal (no "
        "request for the key, not pending, another args hash) is one line and exit 2; nothing "
        "is changed."
    )
    _decision_options(approve, "approve")

    deny = command(
        "deny",
        "Deny a request: its action never runs under this key; every call of it returns "
        "Failed (safeact.Denied) with your name and note.",
        "safeact deny agent.db refund-1003 --note 'not our customer'",
    )
    deny.epilog = (
        f"{deny.epilog}\n\nA pending request, or an approved one no call has used yet, can be "
        "denied. A refusal (no request for the key, denied already or consumed, another args "
        "hash) is one line and exit 2; nothing is changed."
    )
    _decision_options(deny, "deny")

    amend = command(
        "amend",
        "Correct the result an operator (or a probe) recorded for a key closed as happened.",
        'safeact amend agent.db refund-1002 --result \'{"to": "bob", "amount": 20}\' '
        "--note 'amount was wrong'",
    )
    amend.epilog = (
        f"{amend.epilog}\n\nThe history keeps the value replaced. A result the action itself "
        "returned is never amended. The result is checked against the return type the tool "
        "recorded in the ledger (its code is never imported)."
    )
    amend.add_argument(
        "key", type=_KEY, metavar="KEY", help="the key whose recorded result is wrong"
    )
    amend.add_argument(
        "--result", type=json_value, required=True, metavar="JSON", help="the correct result"
    )
    amend.add_argument("--note", type=_NOTE, help="why: kept in the key's history")

    sagas = command(
        "sagas",
        "List the sagas, stuck rollbacks (compensating) first; a corrupt one as corrupt.",
        "safeact sagas agent.db --state rollback_incomplete",
    )
    sagas.add_argument(
        "--state", choices=[s.value for s in SagaState], help="only sagas in this state"
    )

    purge = command(
        "purge",
        "Remove settled keys and finished sagas older than a cut-off; histories stay.",
        "safeact purge agent.db --older-than 30d --state succeeded,failed,released --dry-run",
    )
    purge.add_argument(
        "--older-than", type=moment, required=True, metavar="WHEN", help=f"finished before: {_WHEN}"
    )
    purge.add_argument(
        "--state",
        type=states,
        default=[State.SUCCEEDED, State.FAILED],
        metavar="STATES",
        help="comma-separated (default: succeeded,failed; released is allowed)",
    )
    purge.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    purge.add_argument(
        "--batch",
        type=_batch_size,
        default=1000,
        metavar="N",
        help=(
            "keys per transaction (default 1000, at most 10000): claims go on between "
            "batches; an interrupted purge removed whole batches, run it again for the rest"
        ),
    )

    command(
        "stats",
        "Count the keys by tool and state (corrupt rows apart); the oldest doubt; the size "
        "on disk.",
        "safeact stats agent.db",
    )

    reconcile = command(
        "reconcile",
        "Mark abandoned keys in doubt, record which owners on this host are provably gone "
        "(so other hosts may release their keys), and ask probes what happened; exit 1 if "
        "any key stays in doubt. Run it on every host, e.g. from cron.",
        "safeact reconcile agent.db --probes ops/probes.py:PROBES",
        "safeact reconcile postgresql://agents@db/agents   # from cron, on each host",
    )
    reconcile.add_argument(
        "--probes",
        metavar="MODULE:NAME",
        help="a dict of tool names to probes, in an importable module or a .py file",
    )

    archive = command(
        "archive",
        "Move the history recorded before a cut-off to a file of JSON lines, then drop it "
        "from the ledger; the history of unsettled keys and unfinished sagas stays.",
        "safeact archive agent.db --before 90d --to history-2026-q3.jsonl",
    )
    archive.epilog = (
        f"{archive.epilog}\n\nEach batch is synced to the file before it leaves the ledger; "
        "after a crash, run it again (a batch may then be in the file twice: the same lines, "
        "the same seq). On PostgreSQL, run it as the role that owns the schema."
    )
    archive.add_argument(
        "--before", type=moment, required=True, metavar="WHEN", help=f"recorded before: {_WHEN}"
    )
    archive.add_argument(
        "--to", type=Path, required=True, metavar="FILE", help="the file to append to"
    )
    archive.add_argument(
        "--batch",
        type=int,
        default=1000,
        metavar="N",
        help="events per transaction (default 1000, at most 10000)",
    )

    export = command(
        "export",
        "Print the history recorded before a cut-off as JSON lines (what archive would "
        "move); drop nothing.",
        "safeact export agent.db --before 90d > preview.jsonl",
    )
    export.add_argument(
        "--before", type=moment, required=True, metavar="WHEN", help=f"recorded before: {_WHEN}"
    )

    check = command(
        "check",
        "Read every row of the ledger, a batch at a time, and list each one that cannot be "
        "read (changed outside safeact); exit 1 if any.",
        "safeact check agent.db || notify-ops 'safeact: corrupt rows'",
    )
    check.add_argument(
        "--batch",
        type=_batch_size,
        default=1000,
        metavar="N",
        help="rows per read (default 1000, at most 10000): memory holds one batch",
    )

    command(
        "migrate",
        "Upgrade a ledger to this safeact's schema, keeping a copy of the old file.",
        "safeact migrate agent.db",
    )
    serving.add_commands(commands)
    return top


def _decision_options(sub: _Parser, verb: str) -> None:
    """``approve``'s or ``deny``'s arguments: the key, who decides, why, what was reviewed."""
    sub.add_argument(
        "key", type=_KEY, metavar="KEY", help=f"the key whose approval request you {verb}"
    )
    sub.add_argument(
        "--by",
        type=_BY,
        metavar="NAME",
        help="who decides, kept with the decision and in the key's history (default: your "
        "user name on this machine, as Python's getpass.getuser() finds it)",
    )
    sub.add_argument(
        "--note",
        type=_NOTE,
        help="why: kept with the decision and in the key's history"
        + ("; a denied call's error says it" if verb == "deny" else ""),
    )
    sub.add_argument(
        "--args-hash",
        type=args_hash,
        metavar="HASH",
        help=f"the args hash of the request you reviewed (its first {SHORT_HASH} characters, "
        f"as approvals shows them, or whole): refused if the request is for other arguments",
    )


_RESOLVE_USAGE = (
    "safeact resolve LEDGER KEY (--happened --result JSON | --not-happened [--force])\n"
    "                       [--attempt ID] [--note NOTE] [--json]\n"
    "       safeact resolve LEDGER --keys-from FILE\n"
    "                       (--happened --result JSON | --not-happened [--force])\n"
    "                       [--dry-run] [--note NOTE] [--json]"
)

_KEYS_FROM = """--keys-from FILE (- for standard input) reads the keys as safeact doubt --json
prints them, filtered or not: one JSON object per key, with its key and the
attempt_id reviewed. The decision, the result and the note are the options', the
same for every key; an item never decides. Every item is checked first, as a single
resolve is: an unknown key, a key not in doubt or not at the attempt_id reviewed, a
result that does not fit, a release without proof, a key listed twice refuse the
whole set (exit 2, every item reported, nothing changed). Then each key is resolved
in its own transaction, at the attempt checked: a key that changed meanwhile is
refused and reported, never overwritten, and the others are resolved (exit 1).
Exit 0 when every key was resolved."""


def _resolve_options(resolve: _Parser) -> None:
    """``resolve``'s usage, arguments and options: a KEY, or a reviewed set of keys."""
    resolve.usage = _RESOLVE_USAGE
    resolve.epilog = (
        f"{resolve.epilog}\n\n--not-happened needs proof that the key's owner is finished "
        "(it was interrupted, or its process is gone on its host); otherwise add --force, "
        f"after checking that process yourself.\n\n{_KEYS_FROM}"
    )
    resolve.key_or = "keys_from"
    resolve.add_argument(
        "key", type=_KEY, nargs="?", metavar="KEY", help="the key in doubt (or --keys-from)"
    )
    resolve.add_argument(
        "--keys-from",
        metavar="FILE",
        help="resolve the keys listed in FILE (- for standard input), as safeact doubt --json "
        "prints them, each with the decision these options give",
    )
    resolve.add_argument(
        "--dry-run",
        action="store_true",
        help="with --keys-from: check every key and say what would be done; change nothing",
    )
    decision = resolve.add_mutually_exclusive_group(required=True)
    decision.add_argument("--happened", action="store_true", help="it ran: record it SUCCEEDED")
    decision.add_argument(
        "--not-happened", dest="happened", action="store_false", help="it did not: release it"
    )
    resolve.add_argument(
        "--result",
        type=json_value,
        default=NO_RESULT,
        metavar="JSON",
        help=(
            "with --happened (required): what the tool would have returned, as JSON; "
            "checked against the return type the tool recorded in the ledger (its code is "
            "never imported)"
        ),
    )
    resolve.add_argument("--note", type=_NOTE, help="why: kept in the key's history")
    resolve.add_argument(
        "--attempt", type=_ATTEMPT, metavar="ID", help="only if the key is still at attempt ID"
    )
    resolve.add_argument(
        "--force",
        action="store_true",
        help=(
            "with --not-happened: release even though the owner is not proven finished "
            "(its lease ran out or its session was lost); the history keeps it as your word"
        ),
    )


_RUN: dict[str, Callable[[argparse.Namespace, Store], int]] = {
    "ls": cmd_ls,
    "show": cmd_show,
    "doubt": cmd_doubt,
    "resolve": cmd_resolve,
    "amend": cmd_amend,
    "approvals": cmd_approvals,
    "approve": cmd_approve,
    "deny": cmd_deny,
    "sagas": cmd_sagas,
    "purge": cmd_purge,
    "stats": cmd_stats,
    "reconcile": cmd_reconcile,
    "archive": cmd_archive,
    "export": cmd_export,
    "check": cmd_check,
    "serve": serving.cmd_serve,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Whatever the terminal's encoding, what cannot be encoded is written escaped. Output
    that cannot be written (a full disk, a file size limit, standard output closed) is one
    line on stderr and exit 2; a reader that leaves early (``| head``) is exit 0.
    """
    if sys.stdout is None:  # closed before the start: refuse before the ledger is touched
        _warn("safeact: error: standard output is closed; run the command with it open")
        return 2
    with contextlib.suppress(AttributeError, ValueError):  # a stream swapped in by a caller
        sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    options: argparse.Namespace | None = None
    try:
        try:
            options = parser().parse_args(argv)
        except SystemExit:  # --help or --version printed, or a usage error: flushed here
            sys.stdout.flush()
            raise
        if options.command == "migrate":
            code = cmd_migrate(options)
        elif options.command == "hash-password":
            code = serving.cmd_hash_password(options)
        else:
            with open_store(options.ledger) as store:
                code = _RUN[options.command](options, store)
        sys.stdout.flush()  # a failure to write shows here, not at the interpreter's exit
    except (_UsageError, SafeError, serving.ServeError) as exc:
        _warn(f"safeact: error: {exc}\n")
        return 2
    except BrokenPipeError:  # `safeact ls big.db | head`: the reader left, which is fine
        _drop_output()
        return 0
    except OSError as exc:
        _drop_output()
        ran = (
            ""
            if options is None  # only --help or --version was to be written
            else "; the command itself ran: check `safeact show` before running a change again"
        )
        _warn(f"safeact: error: cannot write the output ({exc.strerror or exc}){ran}")
        return 2
    return code


def _drop_output() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
