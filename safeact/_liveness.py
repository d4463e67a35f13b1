"""Keeping this process's claims alive: the heartbeat that renews the leases of its attempts.

While an action runs, its attempt is held (``_hold``) and a daemon thread renews its lease
every ``heartbeat`` seconds, and checks the backend's liveness session (PostgreSQL's). A lease
that runs out is only suspicion that the owner stopped; proof that it is gone is ``_owner``'s
job, read through ``Ledger._owner_gone``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import weakref
from datetime import timedelta
from typing import TYPE_CHECKING

from safeact._ledger import Ledger
from safeact._protocol import State, utc_now
from safeact._rows import time_text
from safeact.exceptions import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from safeact._protocol import Record

__all__ = ["Liveness", "stop_heartbeats"]

logger = logging.getLogger("safeact")


class Liveness(Ledger):
    """The heartbeat of the attempts this process holds."""

    @contextlib.contextmanager
    def _hold(self, record: Record) -> Iterator[None]:
        """Keep renewing the lease of this process's attempt ``record`` while the block runs."""
        self._after_fork()
        with self._lock:
            self._held[record.key, record.attempt_id] = None
            if self._beat is None:
                self._stop = threading.Event()
                self._beat = threading.Thread(
                    target=self._renew_leases,
                    args=(self._stop,),
                    name="safeact-heartbeat",
                    daemon=True,
                )
                self._beat.start()
                _BEATING.add(self)
        try:
            yield
        finally:
            # A child forked inside the action unwinds through here: it leaves the parent's
            # attempts (and the copy of a lock a parent thread may have held) alone.
            if self._pid == os.getpid():
                with self._lock:
                    self._held.pop((record.key, record.attempt_id), None)

    def _stop_heartbeat(self, wait: float = 0.0) -> None:
        """Stop the heartbeat thread; wait up to ``wait`` seconds for it to end."""
        with self._lock:
            beat, self._beat = self._beat, None
            self._stop.set()
        if beat is not None and beat is not threading.current_thread():
            beat.join(wait)

    def _renew_leases(self, stop: threading.Event) -> None:
        """Heartbeat thread: renew the leases of the attempts held, until told to stop."""
        try:
            self._beat_until(stop)
        finally:
            self._reset_connection()  # the thread ends: close its connection now

    def _beat_until(self, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat):
            with self._lock:
                held = list(self._held)
                if not held:
                    self._beat = None
                    return
            try:
                self._check_liveness()
            except Exception:
                logger.exception("could not check this process's liveness session")
            until = time_text(utc_now() + timedelta(seconds=self.lease))
            for key, attempt_id in held:
                try:
                    self._renew(key, attempt_id, until)
                except StoreError:
                    logger.exception("could not renew the lease of key %r", key)

    def _renew(self, key: str, attempt_id: str, lease_until: str | None) -> None:
        """Move the lease of an ATTEMPTING attempt to ``lease_until``."""
        with self._errors(), self._transaction(sync=False) as db:
            db.execute(
                "UPDATE calls SET lease_until = ? WHERE key = ? AND attempt_id = ? AND state = ?",
                (lease_until, key, attempt_id, State.ATTEMPTING.value),
            )


_BEATING: weakref.WeakSet[Liveness] = weakref.WeakSet()
"""Stores that have started a heartbeat, so that exit can stop them first."""


@atexit.register
def stop_heartbeats() -> None:
    """Stop every heartbeat before the interpreter tears itself down.

    Runs after the non-daemon threads have ended; a daemon thread's action still running then
    loses its heartbeat, as it would lose its process a moment later.
    """
    for store in list(_BEATING):
        store._stop_heartbeat(wait=1.0)  # noqa: SLF001 - the module's own class
