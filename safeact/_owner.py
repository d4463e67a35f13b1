"""Who owns an attempt, and whether that process provably no longer runs.

An owner is named by its host, the host's boot id, its process id and the process's start
time, so a process id reused after a crash or a reboot is not mistaken for the owner; and
by its machine id and PID namespace, so that a process id is only ever read in the
namespace it belongs to, on the machine it belongs to, whatever the host names say.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

import attrs

__all__ = ["Owner", "is_gone", "this_process"]

_PROC = Path("/proc")
_MACHINE_ID = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


@attrs.frozen
class Owner:
    """The process that claimed an attempt.

    ``started`` is the process's start time in clock ticks since boot (Linux), or 0 where
    the system does not say; ``boot_id``, ``machine_id`` (systemd's ``/etc/machine-id``) and
    ``pid_namespace`` (the inode of the process's PID namespace) are empty where the system
    does not say; the last two are also empty in records migrated from ledger schema 2.
    """

    host: str
    boot_id: str
    pid: int
    started: int
    machine_id: str = ""
    pid_namespace: str = ""


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
        machine_id=_machine_id(),
        pid_namespace=_pid_namespace(),
    )


def is_gone(owner: Owner, here: Owner) -> bool:
    """Return True only if ``owner`` provably no longer runs, as seen from ``here``.

    Only an owner of this machine can be checked: the same host name, and the same machine
    id where the owner recorded one. After a reboot (another boot id) it is gone, whatever
    its PID namespace. Otherwise only from its own PID namespace (where recorded): it is gone
    if its process id names no process, a zombie, or a process that started at another time
    (the id was reused). An owner that recorded neither id (an older ledger, or a system
    that does not say) is judged by its host name alone. Any other owner is never judged
    gone here: a process of its machine and namespace can prove it, or its lease decides.
    """
    if owner.host != here.host or not _same(owner.machine_id, here.machine_id):
        return False
    if owner.boot_id and here.boot_id and owner.boot_id != here.boot_id:
        # Another boot of the same machine. An empty boot id is unknown (not Linux, or
        # /proc would not say); so is an empty machine id, where the host name decides.
        return True
    if not _same(owner.pid_namespace, here.pid_namespace):
        return False  # its process id means another process, or nothing, in ours
    started = _start_time(owner.pid)
    if started is None:
        return _no_such_process(owner.pid)
    return started < 0 or owner.started not in (0, started)


def _same(recorded: str, here: str) -> bool:
    """Whether an owner's recorded machine id or namespace can be, and is, ``here``'s.

    Unrecorded (empty) cannot tell the owner apart: it keeps the older judgment by host
    name. Recorded, it must be known here too, and equal.
    """
    return not recorded or recorded == here


def _boot_id() -> str:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


def _machine_id() -> str:
    """The machine id (systemd's, or D-Bus's older file), empty where neither can be read.

    Unlike the host name, it is unique to the machine (or container image instance), and
    unlike the boot id, a reboot keeps it: another boot id under the same machine id is a
    reboot, under another machine id another machine that happens to bear the same name.
    """
    for path in _MACHINE_ID:
        try:
            machine_id = path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if machine_id:
            return machine_id
    return ""


def _pid_namespace() -> str:
    """The inode of this process's PID namespace, as text; empty where it cannot be read.

    Process ids are numbered per namespace: a container's process 7 is not the host's.
    """
    try:
        return str((_PROC / "self" / "ns" / "pid").stat().st_ino)
    except OSError:
        return ""


def _start_time(pid: int) -> int | None:
    """Return the start time of ``pid`` in ticks, -1 for a zombie.

    None where it cannot be told from /proc: no /proc (not Linux), /proc would not say (out
    of file descriptors), or no entry for ``pid``. No entry is not proof of no process:
    /proc mounted with ``hidepid`` (or systemd's ``ProtectProc=invisible``) hides other
    users' live processes; the caller then asks the kernel about the process id itself.
    """
    if not _PROC.is_dir():
        return None
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in {"Z", "X"}:
        return -1
    return int(fields[19])


def _no_such_process(pid: int) -> bool:
    """Whether the kernel says no process has this id (in this PID namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
