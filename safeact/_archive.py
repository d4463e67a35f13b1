"""Archiving the history: an operator's export of old events to JSON lines, and their drop.

The history is append-only, and grows with every call. ``archive_history`` moves its events
from before a cut-off into a file of JSON lines, batch by batch: each batch is read, written,
flushed and fsynced, and only then deleted, in the transaction that read it, so that the
events it drops are exactly the ones the file holds. A crash anywhere leaves every event in
the ledger, in the file, or in both; a re-run finds those at the file's end and drops them
without writing them again, so each event is in the file once. ``export_history`` writes
the same lines to any stream and drops nothing.

Never archived, whatever their age: the history of an unsettled key (ATTEMPTING, whatever
its owner's fate, or IN_DOUBT), of a saga that is not finished, and of the steps and
compensations of such a saga, which a re-run of the saga reads; and, for a key whose
result an operator or a probe decided, the event that says so and those after it (``amend``
may correct only such a result, and a replay that cannot rebuild it says how).

One line per event, its fields in this order (``ARCHIVE_FIELDS``): ``kind`` ("key" or
"saga"), ``subject`` (the key or the saga id), ``seq`` (the event's number in the ledger:
unique, increasing in the order events were recorded, never reused), ``at`` (ISO 8601, UTC),
``from`` and ``to`` (states, ``null`` for none), ``why``, ``by`` ("process" or "operator"),
``host``, ``pid``, ``attempt_id``, ``note``, and ``corrupt``: ``null``, or for a row safeact
cannot read (changed outside safeact) the reason, with the other fields as stored (a BLOB as
its SQL literal, ``X'…'``), so that nothing is dropped that the file does not hold. Lines
are ASCII (JSON's escapes for the rest), so no character of a key or a note can end a line
for a reader that splits at U+2028 or NEL; a line a crash cut short is ended by the next
run, and stands alone, unparsable, with its events written again, whole, after it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs

from safeact._history import DECIDED
from safeact._ledger import Ledger
from safeact._protocol import SagaState, State, checkpoint, utc_now
from safeact._rows import Reading, read_event, text_of, time_text
from safeact._tables import UNSETTLED_SQL
from safeact.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from safeact._ledger import Executor

__all__ = ["ARCHIVE_FIELDS", "BATCH", "Archived", "Archiving"]

ARCHIVE_FIELDS = (
    "kind",
    "subject",
    "seq",
    "at",
    "from",
    "to",
    "why",
    "by",
    "host",
    "pid",
    "attempt_id",
    "note",
    "corrupt",
)
"""The fields of every line of an export or an archive, in their order."""

BATCH = 1000
"""Events per batch: each batch of an archive is one transaction, holding the history's lock."""

_MOST = 10_000
"""The largest batch: its events are named one by one in the statement that drops them."""

_FINISHED = (SagaState.COMPLETED.value, SagaState.COMPENSATED.value)

# The subjects whose history stays, whatever its age.
_KEPT = (
    "WITH open_sagas AS (SELECT saga_id FROM sagas WHERE state NOT IN (?, ?)), "  # noqa: S608 - constants
    "kept (kind, subject) AS ("
    f"SELECT 'key', key FROM calls WHERE state IN ({UNSETTLED_SQL}) "
    "UNION SELECT 'key', key FROM saga_steps WHERE saga_id IN (SELECT saga_id FROM open_sagas) "
    "UNION SELECT 'key', key || ':compensate' FROM saga_steps "
    "WHERE saga_id IN (SELECT saga_id FROM open_sagas) "
    "UNION SELECT 'saga', saga_id FROM open_sagas) "
)

# Whether h is, or comes after, the event by which an operator or a probe decided the
# result of its key as it stands: amend and replay read who decided it from that event.
_DECIDING = (
    "SELECT 1 FROM history d JOIN calls c ON c.key = d.subject "  # noqa: S608 - constants
    "WHERE h.kind = 'key' AND d.kind = 'key' AND d.subject = h.subject AND d.seq <= h.seq "
    f"AND c.state = '{State.SUCCEEDED.value}' AND d.attempt_id = c.attempt_id "
    f"AND d.to_state = '{State.SUCCEEDED.value}' "
    f"AND d.why IN ({', '.join(sorted(repr(why.value) for why in DECIDED))})"
)

# The next batch after seq ?: events before the cut-off, of subjects not kept, each before
# its subject's first event at or after the cut-off (so the ledger keeps the end of every
# history, whatever the clocks of the hosts that wrote it), never the newest event (SQLite
# numbers a new row one past the largest, so dropping the largest would give its seq again).
_TAKEN = _KEPT + (  # noqa: S608 - constants
    "SELECT h.seq, h.kind, h.subject, h.at, h.why, h.by_kind, h.by_host, h.by_pid, "  # noqa: S608
    "h.from_state, h.to_state, h.attempt_id, h.note FROM history h "
    "WHERE h.seq > ? AND h.at < ? AND h.seq < (SELECT max(seq) FROM history) "
    "AND (h.kind, h.subject) NOT IN (SELECT kind, subject FROM kept) "
    "AND NOT EXISTS (SELECT 1 FROM history e WHERE e.kind = h.kind "
    "AND e.subject = h.subject AND e.seq < h.seq AND e.at >= ?) "
    f"AND NOT EXISTS ({_DECIDING}) "
    "ORDER BY h.seq LIMIT ?"
)

# The kept subjects that have events before the cut-off.
_LEFT = _KEPT + (  # noqa: S608 - constants
    "SELECT kind, subject FROM kept WHERE EXISTS (SELECT 1 FROM history h "
    "WHERE h.kind = kept.kind AND h.subject = kept.subject AND h.at < ?)"
)


@attrs.frozen
class Archived:
    """What an export or an archive of the history took, and what it left.

    ``events`` lines were written (and, by ``archive_history``, dropped from the ledger);
    ``corrupt`` of them are rows safeact could not read, written as stored and marked.
    ``kept_keys`` and ``kept_sagas`` had events before the cut-off that stayed: the key is
    unsettled, or the saga (or the saga the key is a step of) is not finished.
    """

    events: int
    corrupt: int
    kept_keys: tuple[str, ...]
    kept_sagas: tuple[str, ...]


@attrs.define
class _Tally:
    """The counts of a run so far, over its batches."""

    events: int = 0
    corrupt: int = 0
    kept: set[tuple[str, str]] = attrs.Factory(set)

    def lines(
        self, ledger: str, rows: Iterable[tuple[object, ...]], written: frozenset[str] = frozenset()
    ) -> str:
        """The JSON lines of ``rows``, counted; those in ``written`` (in the file) left out."""
        text = []
        for row in rows:
            line = _line(ledger, row)
            self.events += 1
            self.corrupt += line["corrupt"] is not None
            text.append(json.dumps(line, allow_nan=False) + "\n")
        return "".join(line for line in text if line not in written)

    def result(self) -> Archived:
        return Archived(
            events=self.events,
            corrupt=self.corrupt,
            kept_keys=tuple(sorted(s for kind, s in self.kept if kind == "key")),
            kept_sagas=tuple(sorted(s for kind, s in self.kept if kind == "saga")),
        )


class Archiving(Ledger):
    """Exporting the history's old events, and archiving them: exported, synced, dropped."""

    def export_history(self, out: TextIO, *, before: datetime, batch: int = BATCH) -> Archived:
        """Write the events ``archive_history`` would take to ``out``, as JSON lines; drop none.

        Events recorded before ``before`` (an aware time, not in the future), oldest first,
        except those of unsettled keys and unfinished sagas (see the module). Read in
        batches of ``batch`` events, each as the ledger stood when it was read.

        Raises:
            TypeError: ``before`` is not a datetime.
            ValueError: ``before`` has no UTC offset or is in the future; ``batch`` is not
                between 1 and 10,000.
            StoreError: the ledger cannot be read.

        """
        cutoff = _cutoff(before, batch)
        tally = _Tally()
        after = 0
        while True:
            rows = self._read(_TAKEN, (*_FINISHED, after, cutoff, cutoff, batch))
            tally.kept.update(self._read(_LEFT, (*_FINISHED, cutoff)))
            out.write(tally.lines(self.location, rows))
            if len(rows) < batch:
                return tally.result()
            after = rows[-1][0]

    def archive_history(
        self, path: str | os.PathLike[str], *, before: datetime, batch: int = BATCH
    ) -> Archived:
        """Append the events ``export_history`` would write to the file at ``path``; drop them.

        Batch by batch, in one transaction each: the batch's events are read, appended,
        flushed and fsynced (the file is created if missing, readable by its owner only,
        its directory synced), then deleted by their ``seq``, and the transaction commits.
        While it runs, the batch holds the history's lock: other writers of the ledger wait
        for it (keep ``batch`` small on a busy ledger). A crash or an error loses nothing:
        the batch it stopped in stays in the ledger, and may be in the file too: a re-run
        finds its lines at the file's end, drops its events without writing them again, and
        goes on, so each event is in the file once.

        On PostgreSQL the role must own the ``history`` table (the one that ran ``safeact
        migrate``): the trigger that refuses deletes is disabled inside the transaction.

        Raises:
            TypeError: ``before`` is not a datetime.
            ValueError: ``before`` has no UTC offset or is in the future; ``batch`` is not
                between 1 and 10,000; ``path`` is not a regular file, or is the ledger.
            OSError: the file cannot be written or synced (the batches before were
                archived; the one that failed was not dropped).
            StoreError: the ledger cannot be read or written, or its guard of the history
                is missing (changed outside safeact).

        """
        cutoff = _cutoff(before, batch)
        self._check_not_ledger(path)
        tally = _Tally()
        after = 0
        with _appending(path) as file:
            # A run stopped between a batch's sync and its commit left that batch in the
            # file and in the ledger: its lines are the file's last, and are not written twice.
            written = _tail(file.fileno(), _MOST)
            while True:
                with self._errors(), self._transaction(sync=False) as db:
                    self._lock_history(db)
                    rows = db.execute(_TAKEN, (*_FINISHED, after, cutoff, cutoff, batch)).fetchall()
                    tally.kept.update(db.execute(_LEFT, (*_FINISHED, cutoff)).fetchall())
                    if rows:
                        with self._unguarded_history(db):
                            file.write(tally.lines(self.location, rows, written))
                            file.flush()
                            os.fsync(file.fileno())
                            marks = ", ".join("?" * len(rows))
                            db.execute(
                                f"DELETE FROM history WHERE seq IN ({marks})",  # noqa: S608 - placeholders
                                tuple(row[0] for row in rows),
                            )
                        checkpoint("archiving")
                if len(rows) < batch:
                    return tally.result()
                after = rows[-1][0]

    def _check_not_ledger(self, path: str | os.PathLike[str]) -> None:
        """Refuse to append to the ledger's own file or its WAL (a slip of the operator's)."""
        for own in (self.location, f"{self.location}-wal", f"{self.location}-shm"):
            with contextlib.suppress(OSError):
                if Path(path).samefile(own):
                    raise ValueError(
                        f"{os.fspath(path)} is the ledger's own file: archive elsewhere"
                    )

    # What a backend supplies.

    def _lock_history(self, db: Executor) -> None:
        """Keep other transactions from appending to the history until ``db``'s ends.

        SQLite's ``BEGIN IMMEDIATE`` already holds the whole file's write lock.
        """

    def _unguarded_history(self, db: Executor) -> contextlib.AbstractContextManager[None]:
        """Within ``db``'s transaction, let the block delete rows of ``history``.

        The guard is back when the block ends; if it raises, the transaction's rollback
        brings it back. No other transaction ever sees the history unguarded.
        """
        raise NotImplementedError


def _cutoff(before: datetime, batch: int) -> str:
    """``before`` as the ledger writes times, checked with ``batch``."""
    if not isinstance(before, datetime):
        raise TypeError(f"before must be a datetime, got {type(before).__name__}")
    if before.utcoffset() is None:
        raise ValueError(
            f"before={before.isoformat()} has no UTC offset: give an aware time, "
            "e.g. datetime.now(UTC) - timedelta(days=90)"
        )
    now = utc_now()
    if before > now:
        raise ValueError(
            f"before={before.isoformat()} is in the future (now is {now.isoformat()}): "
            "only recorded events can be archived"
        )
    if not 1 <= batch <= _MOST:
        raise ValueError(f"batch must be between 1 and {_MOST}, got {batch}")
    return str(time_text(before))


def _line(ledger: str, row: tuple[object, ...]) -> dict[str, object]:
    """The line of one row of ``history``: its event's fields, or the row as stored, marked."""
    seq, kind, subject, *rest = row
    try:
        with Reading(ledger, "history", subject):
            name = text_of("subject", subject)
        event = read_event(ledger, str(kind), name, tuple(rest))
    except CorruptRecordError as error:
        at, why, by, host, pid, from_state, to_state, attempt_id, note = map(_stored, rest)
        stored = (_stored(kind), _stored(subject), seq, at, from_state, to_state, why, by, host)
        return _fields(*stored, pid, attempt_id, note, corrupt=str(error))
    return _fields(
        kind,
        event.subject,
        seq,
        time_text(event.at),
        None if event.from_state is None else event.from_state.value,
        None if event.to_state is None else event.to_state.value,
        event.why.value,
        event.by,
        event.host,
        event.pid,
        event.attempt_id,
        event.note,
        corrupt=None,
    )


def _fields(*values: object, corrupt: str | None) -> dict[str, object]:
    """A line's fields, named in ``ARCHIVE_FIELDS``' order."""
    return dict(zip(ARCHIVE_FIELDS, (*values, corrupt), strict=True))


def _stored(value: object) -> object:
    """A stored value as JSON holds it: a BLOB as its SQL literal, anything odd as its repr."""
    if value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    return repr(value)


@contextlib.contextmanager
def _appending(path: str | os.PathLike[str]) -> Iterator[TextIO]:
    """The regular file at ``path`` open for appending, created (owner-only, synced) if missing.

    Raises:
        ValueError: ``path`` names something other than a regular file (a pipe, a device,
            a directory), whose writes cannot be made durable.

    """
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(Path(path).stat().st_mode):
            raise ValueError(
                f"{os.fspath(path)} is not a regular file: an archive must be one that can "
                "be synced before its events are dropped (export_history writes to streams)"
            )
    # Non-blocking: a FIFO put there after the check fails to open instead of waiting.
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fd = os.open(path, flags)
        _end_last_line(fd)
    else:
        _sync_directory(Path(path).absolute().parent)
    with os.fdopen(fd, "a", encoding="utf-8", newline="\n") as file:
        yield file


def _tail(fd: int, most: int) -> frozenset[str]:
    """The last ``most`` whole lines of the file open (readable) at ``fd``, newlines kept.

    Read backwards a block at a time, so memory holds those lines, whatever the file's size.
    """
    start = os.fstat(fd).st_size
    blocks: list[bytes] = []
    newlines = 0
    while start > 0 and newlines <= most:
        step = min(1 << 16, start)
        start -= step
        blocks.insert(0, os.pread(fd, step, start))
        newlines += blocks[0].count(b"\n")
    whole = b"".join(blocks).split(b"\n")[:-1]  # what follows the last newline is no line
    if start > 0:
        whole = whole[1:]  # the first may have begun before the blocks read
    return frozenset(line.decode("utf-8", "replace") + "\n" for line in whole[-most:])


def _end_last_line(fd: int) -> None:
    """End the file's last line if a crash cut it short, so the next line starts its own.

    The fragment stays, one line no JSON reader can parse: the batch it was part of was
    not dropped (the drop waits for the sync), so its events are in the ledger still and
    are written again, whole, after it.
    """
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")
        os.fsync(fd)


def _sync_directory(directory: Path) -> None:
    """Sync ``directory``, so that a file just created in it survives a crash of the OS."""
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
