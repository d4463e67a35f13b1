"""Exceptions safeact raises.

What happened to an action is never raised: it is an ``Outcome``. These are raised for misuse
(``KeyConflictError``), for a ledger that cannot be used (``StoreError``), for a call that
would act under replay-only (``ReplayOnlyError``), and by the exception-style adapters
(``InDoubtError``, ``FailedCallError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from safeact._doubt import DoubtReason
    from safeact._json import JSON

__all__ = [
    "AwaitingApprovalError",
    "CorruptRecordError",
    "FailedCallError",
    "InDoubtError",
    "KeyConflictError",
    "NotProvenError",
    "ReplayOnlyError",
    "SafeError",
    "StoreError",
]


class SafeError(Exception):
    """Base class of every error safeact raises.

    Each pickles with its fields (multiprocessing, DBOS and other engines store exceptions
    so), though the subclasses' ``__init__`` do not take the message pickle would pass.
    """

    def __reduce__(self) -> tuple[Callable[..., SafeError], tuple[object, ...]]:
        """Rebuild from ``args`` and the fields, without calling ``__init__``."""
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


def _rebuilt(
    cls: type[SafeError], args: tuple[object, ...], fields: dict[str, object]
) -> SafeError:
    error = cls.__new__(cls, *args)
    error.__dict__.update(fields)
    return error


class StoreError(SafeError):
    """The ledger cannot be opened, read or written; the message names the file."""


class CorruptRecordError(StoreError):
    """A row of the ledger holds what safeact never writes there, so it cannot be read.

    It was changed outside safeact: by hand, by another program, or by a damaged disk.
    safeact never runs the action of a key whose row is corrupt. ``table`` is the ledger's
    table (``calls``, ``late_completions``, ``history``, ``sagas`` or ``saga_steps``),
    ``subject`` the key (or saga id) the row belongs to, ``column`` the column at fault,
    ``problem`` what is wrong with it (starting with the column's name) and ``fix`` what
    to do about it.
    """

    def __init__(  # noqa: PLR0913 - one parameter per thing an operator needs to know
        self, where: str, *, table: str, subject: str, column: str, problem: str, fix: str
    ) -> None:
        """Say which row (``where``: the ledger and the row, for people), what is wrong, the fix."""
        self.table = table
        self.subject = subject
        self.column = column
        self.problem = problem
        self.fix = fix
        super().__init__(f"{where} is corrupt: {problem}; it was changed outside safeact. {fix}")


class KeyConflictError(SafeError):
    """A key was reused for another action; nothing ran.

    A key names one action: one tool with one set of arguments, or one step of one saga.
    Reusing it for something else would replay the wrong result, so safeact refuses: pick
    a key that identifies this action. ``key`` is the key in question; for a guarded call,
    ``tool`` and ``args_hash`` are this call's, ``recorded_tool`` and
    ``recorded_args_hash`` those the key was recorded with (``None`` for a saga's steps).
    """

    def __init__(  # noqa: PLR0913 - the key, why, and both sides of the conflict
        self,
        key: str,
        reason: str,
        *,
        tool: str | None = None,
        args_hash: str | None = None,
        recorded_tool: str | None = None,
        recorded_args_hash: str | None = None,
    ) -> None:
        """Say which key conflicts and with what."""
        self.key = key
        self.tool = tool
        self.args_hash = args_hash
        self.recorded_tool = recorded_tool
        self.recorded_args_hash = recorded_args_hash
        super().__init__(
            f"key {key!r} {reason}; nothing ran. Use a key that identifies this exact action."
        )


class ReplayOnlyError(SafeError):
    """A call would have acted while replay-only is in force; nothing ran, nothing was written.

    Under ``safeact.replay_only()`` or ``SAFEACT_REPLAY_ONLY=1`` calls only replay what the
    ledger holds. One whose key has no outcome to replay (never recorded, or released) would
    claim it and run its action, and a saga would record a new step, compensate one, or
    move its own state: each is refused with this error instead, before anything is
    written. ``key`` is the call's key (a saga's id, for the saga's own progress); ``tool``
    is the tool that would have run, or None when the refusal is a saga's.
    """

    def __init__(self, key: str, tool: str | None, would: str | None = None) -> None:
        """Say which key, what would have happened (``would``), and that nothing did."""
        self.key = key
        self.tool = tool
        if would is None:
            would = (
                f"{tool} would have run under key {key!r}: the ledger holds no outcome of it "
                "to replay"
            )
        super().__init__(
            f"{would}. Replay-only is in force (safeact.replay_only(), or "
            "SAFEACT_REPLAY_ONLY in the environment): nothing ran and nothing was written "
            "to the ledger"
        )


class NotProvenError(SafeError):
    """A release was refused: the key's owner is not proven finished; nothing changed.

    Releasing lets the action run again, and a lease that ran out or a lost database session
    is what a frozen, swapped-out or cut-off owner that may still act also shows. ``key`` is
    the key, ``reason`` why its owner is not proven finished.
    """

    def __init__(self, key: str, reason: str) -> None:
        """Say which key, why, how to check and how to force."""
        self.key = key
        self.reason = reason
        super().__init__(
            f"cannot release key {key!r}: {reason}. Check that the process is gone on its "
            "host (ps -p PID there, or whether the host rebooted), or run `safeact "
            "reconcile` on that host to record it; if you know it can no longer act, "
            "release with force=True (safeact resolve ... --not-happened --force), which "
            "the key's history keeps as your assertion"
        )


class InDoubtError(SafeError):
    """The action may or may not have run; go and check, then resolve the key.

    Carries the receipt of ``InDoubt``: ``key``, ``tool``, ``attempted_at``, ``args_hash``,
    the ``reason``, the ``attempt_id`` and the ``note`` (a probe's verdict that could not
    close the key).
    """

    def __init__(  # noqa: PLR0913 - one parameter per field of the receipt
        self,
        key: str,
        tool: str,
        attempted_at: datetime,
        args_hash: str,
        reason: DoubtReason,
        *,
        attempt_id: str | None = None,
        note: str | None = None,
    ) -> None:
        """Carry the receipt of the in-doubt call."""
        self.key = key
        self.tool = tool
        self.attempted_at = attempted_at
        self.args_hash = args_hash
        self.reason = reason
        self.attempt_id = attempt_id
        self.note = note
        super().__init__(
            f"{tool} with key {key!r} (attempted at {attempted_at.isoformat()}) may or may not "
            f"have run ({reason.value}); check the downstream system, then resolve the key"
        )


class FailedCallError(SafeError):
    """The action raised; it is not run again under this key.

    ``__cause__`` is the live exception on the call that ran the action, and ``None`` on a
    replay, where only ``error_type`` and ``message`` were kept.
    """

    def __init__(self, key: str, tool: str, error_type: str, message: str) -> None:
        """Carry what was recorded of the failure."""
        self.key = key
        self.tool = tool
        self.error_type = error_type
        self.message = message
        super().__init__(f"{tool} with key {key!r} failed: {error_type}: {message}")


class AwaitingApprovalError(SafeError):
    """The action waits for a person's approval; nothing ran. Call again once it is decided.

    Carries what ``AwaitingApproval`` does: ``key``, ``tool``, ``requested_at``,
    ``args_hash``, the digest of the arguments the approval is for, and ``arguments``, what
    a person is shown when the tool keeps them (redacted as it declares), else ``None``.
    """

    def __init__(
        self,
        key: str,
        tool: str,
        requested_at: datetime,
        args_hash: str,
        arguments: JSON = None,
    ) -> None:
        """Carry the pending request."""
        self.key = key
        self.tool = tool
        self.requested_at = requested_at
        self.args_hash = args_hash
        self.arguments = arguments
        super().__init__(
            f"{tool} with key {key!r} waits for approval (requested at "
            f"{requested_at.isoformat()}); nothing ran. Approve or deny it (safeact approve / "
            "safeact deny, or Store.approve / Store.deny), then call again"
        )
