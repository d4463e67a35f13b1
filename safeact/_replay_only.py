"""Replay-only runs: while in force, guarded calls replay what the ledger holds and act on nothing.

In force inside ``with replay_only():``, in any thread of the process, and for the whole life
of a process started with ``SAFEACT_REPLAY_ONLY`` set (to anything but ``0``, ``false``,
``no``, ``off`` or nothing). A guarded call then replays a settled key, reads a key in doubt
as it is, and refuses (``ReplayOnlyError``) a key it would claim; a ledger opened meanwhile is
opened read-only for its life.

The scope is the process's, not a context variable's: frameworks run tools in worker threads
that do not always copy the caller's context, and a call that escaped the scope would act.
A replay-only process is the one that cannot act, so that is where every doubt about the
scope falls.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ENVIRONMENT", "in_force", "replay_only"]

ENVIRONMENT = "SAFEACT_REPLAY_ONLY"
"""The environment variable that makes a whole process replay-only, read once, at first use."""

_OFF = frozenset({"", "0", "false", "no", "off"})
"""The values of ``ENVIRONMENT`` that leave a process as it is; any other turns it on."""


class _Scopes:
    """How many ``replay_only()`` blocks are open in the process, and what the environment says."""

    __slots__ = ("depth", "environment", "lock")

    def __init__(self) -> None:
        self.depth = 0
        self.environment: bool | None = None  # read at the first question, then kept
        self.lock = threading.Lock()


_scopes = _Scopes()


def _forked() -> None:
    # A thread of the parent may have held the lock at the fork; none of the child's does.
    _scopes.lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def in_force() -> bool:
    """Whether replay-only is in force now: a ``replay_only()`` block is open, or the environment.

    Two reads on every guarded call, and the environment's once per process. An unknown value
    of ``SAFEACT_REPLAY_ONLY`` (a typo for ``1``, say) turns it on: a replay that could act is
    the one mistake to avoid.
    """
    if _scopes.depth:
        return True
    environment = _scopes.environment
    if environment is None:
        given = os.environ.get(ENVIRONMENT, "")
        environment = _scopes.environment = given.strip().lower() not in _OFF
    return environment


@contextlib.contextmanager
def replay_only() -> Iterator[None]:
    """Replay the ledger and act on nothing, in the whole process, while the block runs.

    Inside it every guarded call, in any thread, returns the outcome its key recorded
    (``Succeeded`` or ``Failed``, replayed); one whose key has no outcome to replay (never
    recorded, or released) raises ``ReplayOnlyError`` without running or writing anything; a
    key in doubt, or left unsettled by an owner that is gone, gives ``InDoubt`` as read,
    neither marked nor probed (both write); a key still running under a live owner is waited
    for as usual. A saga replays the steps it recorded and refuses what it would record,
    run or compensate. A ledger opened inside the block (``get_store``, or a tool's first
    use) is opened read-only for its life; one opened before stays writable, and the calls
    write nothing to it. Blocks nest, from any threads. ``SAFEACT_REPLAY_ONLY=1`` in the
    environment does the same for the whole life of a process.
    """
    with _scopes.lock:
        _scopes.depth += 1
    try:
        yield
    finally:
        with _scopes.lock:
            _scopes.depth -= 1
