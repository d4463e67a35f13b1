"""The four outcomes of a guarded call, and their bridges to exceptions and to ``returns``."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Generic, NoReturn, TypeAlias, TypeVar, final

import attrs

from safeact._protocol import DENIED, Approval, DoubtReason, Record, denial_message
from safeact.exceptions import AwaitingApprovalError, FailedCallError, InDoubtError

if TYPE_CHECKING:
    from returns.result import Result

    from safeact._json import JSON

__all__ = ["AwaitingApproval", "Failed", "InDoubt", "Outcome", "Succeeded"]

T_co = TypeVar("T_co", covariant=True)


@final
@attrs.frozen
class Succeeded(Generic[T_co]):
    """The action ran and returned ``value``.

    ``replayed`` is False on the call that ran it, True when the value was read back from the
    ledger and nothing ran. ``recorded`` is False when the action ran now but the ledger
    could not record its result (the connection to the ledger was lost, the disk is full,
    the value cannot be stored): the key is then left in doubt, later calls get
    ``InDoubt``, and an operator resolves it with this value.
    """

    key: str
    value: T_co
    replayed: bool = False
    recorded: bool = True

    def to_result(self) -> Result[T_co, InDoubt | Failed | AwaitingApproval]:
        """Return ``Success(value)``."""
        from returns.result import Success  # noqa: PLC0415 - keeps `import safeact` light

        return Success(self.value)

    def unwrap(self) -> T_co:
        """Return the value."""
        return self.value


@final
@attrs.frozen
class InDoubt:
    """The action may or may not have run: a caller stopped between the action and its record.

    The first four fields are the receipt to go and check with: the key, the tool, when it
    was attempted (timezone-aware UTC) and the hash of its arguments. ``reason`` says why
    it is in doubt; with ``DoubtReason.IN_FLIGHT`` the owner is still running and the key
    is not marked: ask again later. Otherwise nothing runs under this key until it is
    resolved. ``note`` is set when a reconciliation probe answered but its answer could not
    close the key (it said "did not happen" while the owner is not proven finished).
    ``attempt_id`` names the attempt in doubt: pass it to ``resolve`` so the decision
    applies to that attempt only.
    """

    key: str
    tool: str
    attempted_at: datetime
    args_hash: str
    reason: DoubtReason = DoubtReason.CRASHED
    note: str | None = None
    attempt_id: str | None = None

    def to_result(self) -> Result[NoReturn, InDoubt | Failed | AwaitingApproval]:
        """Return ``Failure(self)``."""
        from returns.result import Failure  # noqa: PLC0415 - keeps `import safeact` light

        return Failure(self)

    def unwrap(self) -> NoReturn:
        """Raise ``InDoubtError`` carrying the receipt."""
        raise InDoubtError(
            self.key,
            self.tool,
            self.attempted_at,
            self.args_hash,
            self.reason,
            attempt_id=self.attempt_id,
            note=self.note,
        )


@final
@attrs.frozen
class Failed:
    """The action raised an ``Exception``; it is never run again under this key.

    ``exception`` is the live exception on the call that ran the action and ``None`` on a
    replay (``replayed=True``), where ``error_type`` and ``message`` were kept.
    ``recorded`` is False when the ledger could not record the failure: the key is then left
    in doubt, and later calls get ``InDoubt``.
    """

    key: str
    tool: str
    error_type: str
    message: str
    replayed: bool = False
    recorded: bool = True
    exception: Exception | None = attrs.field(default=None, eq=False, repr=False)

    def to_result(self) -> Result[NoReturn, InDoubt | Failed | AwaitingApproval]:
        """Return ``Failure(self)``."""
        from returns.result import Failure  # noqa: PLC0415 - keeps `import safeact` light

        return Failure(self)

    def unwrap(self) -> NoReturn:
        """Raise ``FailedCallError``, chained from the live exception where there is one."""
        raise FailedCallError(self.key, self.tool, self.error_type, self.message) from (
            self.exception
        )


@final
@attrs.frozen
class AwaitingApproval:
    """The action waits for a person's approval; nothing ran, and nothing waits in this call.

    The request is in the ledger, bound to ``key``, ``tool`` and ``args_hash`` (the digest of
    the arguments): a person approves or denies it (``safeact approve``, ``Store.approve``),
    and the next call with the same arguments runs the action once, or gets the denial as a
    ``Failed``. ``requested_at`` is when it was first asked (timezone-aware UTC);
    ``arguments`` are what the person is shown, when the tool keeps them (redacted as it
    declares), else ``None``. Never a doubt: the action has not begun.
    """

    key: str
    tool: str
    requested_at: datetime
    args_hash: str
    arguments: JSON = None

    def to_result(self) -> Result[NoReturn, InDoubt | Failed | AwaitingApproval]:
        """Return ``Failure(self)``."""
        from returns.result import Failure  # noqa: PLC0415 - keeps `import safeact` light

        return Failure(self)

    def unwrap(self) -> NoReturn:
        """Raise ``AwaitingApprovalError`` carrying the request."""
        raise awaiting_error(self)


def awaiting_error(awaiting: AwaitingApproval) -> AwaitingApprovalError:
    """The ``AwaitingApprovalError`` carrying ``awaiting``'s request, for callers that raise."""
    return AwaitingApprovalError(
        awaiting.key, awaiting.tool, awaiting.requested_at, awaiting.args_hash, awaiting.arguments
    )


def awaiting_from(approval: Approval) -> AwaitingApproval:
    """The ``AwaitingApproval`` of a pending request."""
    return AwaitingApproval(
        approval.key, approval.tool, approval.requested_at, approval.args_hash, approval.arguments
    )


def denied_from(approval: Approval) -> Failed:
    """The ``Failed`` a denied request replays: ``safeact.Denied``, who denied it and why."""
    return Failed(approval.key, approval.tool, DENIED, denial_message(approval), replayed=True)


def failed_from(record: Record) -> Failed:
    """The stored ``Failed`` of a FAILED record, as replayed (no live exception)."""
    return Failed(
        record.key,
        record.tool,
        record.error_type or "",
        record.error_message or "",
        replayed=True,
    )


def in_doubt_from(record: Record, reason: DoubtReason, note: str | None = None) -> InDoubt:
    """The receipt of an unsettled record."""
    return InDoubt(
        record.key,
        record.tool,
        record.attempted_at,
        record.args_hash,
        reason,
        note,
        record.attempt_id,
    )


Outcome: TypeAlias = Succeeded[T_co] | InDoubt | Failed | AwaitingApproval
"""What a guarded call returns (``AwaitingApproval`` only from a tool that needs approval).
Write ``Outcome[Receipt]``; a bare ``Outcome`` is an error
under ``mypy --strict``."""
