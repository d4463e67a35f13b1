"""Who owns an attempt, and whether that process provably no longer runs.

An owner is named by its host, the host's boot id, its process id and the process's start
time, so a process id reused after a crash or a reboot is not mistaken for the owner.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

import attrs

__all__ = ["Owner", "is_gone", "this_process"]

_PROC = Path("/proc")


@attrs.frozen
class Owner:
    """The process that claimed an attempt.

    ``started`` is the process's start time in clock ticks since boot (Linux), or 0 where
    the system does not say; ``boot_id`` is empty where the system does not say.
    """

    host: str
    boot_id: str
    pid: int
    started: int


def this_process(host: str | None = None) -> Owner:
    """Return the owner identity of the calling process (``host`` overrides the hostname)."""
    return _identity(os.getpid(), host)


@functools.cache
def _identity(pid: int, host: str | None) -> Owner:
    started = _start_time(pid)
    return Owner(
        host=host if host is not None else socket.gethostname(),
        boot_id=_boot_id(),
        pid=pid,
        started=started if started is not None and started > 0 else 0,
    )


def is_gone(owner: Owner, here: Owner) -> bool:
    """Return True only if ``owner`` provably no longer runs, as seen from ``here``.

    Only an owner on this host can be checked: after a reboot (another boot id) it is gone;
    otherwise it is gone if its process id names no process, a zombie, or a process that
    started at another time (the id was reused). An owner on another host is never judged
    gone here; its lease decides.
    """
    if owner.host != here.host:
        return False
    if owner.boot_id and here.boot_id and owner.boot_id != here.boot_id:
        return True  # an empty boot id is unknown (not Linux, or /proc would not say)
    started = _start_time(owner.pid)
    if started is None:
        return _no_such_process(owner.pid)
    return started < 0 or owner.started not in (0, started)


def _boot_id() -> str:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> int | None:
    """Return the start time of ``pid`` in ticks, -1 for no such process or a zombie.

    None where it cannot be told: no /proc (not Linux), or /proc would not say (out of file
    descriptors, hidden processes); the caller then falls back on the process id alone.
    """
    if not _PROC.is_dir():
        return None
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return -1
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in {"Z", "X"}:
        return -1
    return int(fields[19])


def _no_such_process(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
