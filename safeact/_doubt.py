"""Why a key is in doubt: a word the errors, the rules and the records all use.

It sits below them all, so that ``exceptions`` (whose ``InDoubtError`` carries a reason) and
``_protocol`` (which decides on reasons, and re-exports this) need not import each other.
Which reasons are proof, suspicion or the owner's own word is ``_protocol``'s to say.
"""

from __future__ import annotations

import enum

__all__ = ["DoubtReason"]


class DoubtReason(enum.Enum):
    """Why a key is in doubt."""

    CRASHED = "crashed"
    """The owner's process is gone (or its host rebooted) without recording an outcome."""
    LEASE_EXPIRED = "lease_expired"
    """The owner stopped renewing its lease: frozen, cut off, or on a host that died."""
    INTERRUPTED = "interrupted"
    """The action was interrupted (KeyboardInterrupt, SystemExit, task cancellation).

    Its frame unwound, but work it started (a thread, a handed-off task) may still run
    while its process lives: not proof that the attempt is over.
    """
    IN_FLIGHT = "in_flight"
    """The owner is alive and still running; the caller's wait ran out. Ask again later."""
    RESULT_NOT_STORED = "result_not_stored"
    """The action returned, but its result could not be stored: it ran."""
    SESSION_LOST = "session_lost"
    """The owner's liveness session on the database ended: it crashed, or was cut off."""
    FAILURE_NOT_STORED = "failure_not_stored"
    """The action raised, but its failure could not be stored."""


# Named where it was first defined, and is still imported from: a name is part of what
# outlives the process (a pickled InDoubtError in a durable engine's store, an argument's
# digest, a tool's result description), and a move inside the package must not change it.
DoubtReason.__module__ = "safeact._protocol"
