"""Who owns an attempt, and whether that process, and what it started, provably no longer runs.

An owner is named by its host, the kernel's boot id, its process id and the process's start
time, so that a process id reused after a crash is not mistaken for the owner; by its PID
namespace, so that a process id is only ever read in the namespace it belongs to; by its
process group, so that a child the action started (``sh -c``, curl, a vendor's CLI) keeps
it alive after its own end; and by safeact's identity of its machine, kept in a file, so
that another boot of the same machine can be told from another machine that bears the
same host name. DESIGN.md, "Releases need proof", lists what counts as proof and why.
"""

from __future__ import annotations

import contextlib
import functools
import os
from datetime import UTC, datetime
from pathlib import Path

import attrs

__all__ = ["Owner", "is_gone", "this_process"]

_PROC = Path("/proc")
_MACHINE_PLACE = Path("/var/lib/safeact")
"""Where safeact keeps its identity of the machine, if it may; else in the user's state."""
_IDENTITY_PREFIX = "safeact-"
"""Marks an identity safeact made (schema 3 recorded systemd's machine id in its place)."""


@attrs.frozen
class Owner:
    """The process that claimed an attempt.

    ``started`` is the process's start time in clock ticks since boot, as the kernel's own
    time namespace counts (Linux), or 0 where the system does not say. ``boot_id`` is the
    kernel's, ``machine_id`` safeact's identity of the machine (``safeact-`` and 32 hex
    digits, made once and kept; schema 3 recorded systemd's machine id there),
    ``pid_namespace`` the inode of the process's PID namespace, and ``group`` its process
    group id: each is empty (or 0) where the system does not say, or in a record of an
    older schema.
    """

    host: str
    boot_id: str
    pid: int
    started: int
    machine_id: str = ""
    pid_namespace: str = ""
    group: int = 0


def this_process(host: str | None = None) -> Owner:
    """Return the owner identity of the calling process (``host`` overrides the hostname)."""
    return _identity(os.getpid(), host, _group())


@functools.cache
def _identity(pid: int, host: str | None, group: int) -> Owner:
    import socket  # noqa: PLC0415 - once per process, at its first claim, not at import

    started = _start_time(pid)
    return Owner(
        host=host if host is not None else socket.gethostname(),
        boot_id=_boot_id(),
        pid=pid,
        started=started if started is not None and started > 0 else 0,
        machine_id=_machine_identity(),
        pid_namespace=_pid_namespace(),
        group=group,
    )


def is_gone(owner: Owner, here: Owner, *, alive_until: datetime) -> bool:
    """Return True only if ``owner`` provably no longer runs, as seen from ``here``: proof.

    ``alive_until`` is the end of the owner's lease as last renewed. Nothing else is proof:

    - The same kernel (the same boot id, both known), the same host name and PID namespace:
      the owner's process id names no process, a zombie whose threads have all ended, or a
      process that started at another time (the id was reused); and no process of its
      process group that started with or after it still runs (its action's children).
    - Another boot of this very machine: the same host name and safeact identity (one it
      made, so neither a host name nor a machine id copied into an image decides), another
      boot id, and a lease that ran out before this boot began. A lease that outlived the
      start of this boot was renewed by a machine running meanwhile: another machine with
      this identity (a clone), never a reboot.

    Anything else (another host, machine or namespace, an unknown boot id or identity, a
    record of an older schema) is never judged gone here: a process that can see the owner
    proves it, or the lease and the liveness session raise suspicion, and a probe or an
    operator decides.
    """
    if owner.host != here.host or not owner.boot_id or not here.boot_id:
        return False
    if owner.boot_id != here.boot_id:
        return (
            owner.machine_id.startswith(_IDENTITY_PREFIX)
            and owner.machine_id == here.machine_id
            and _booted_after(alive_until)
        )
    if not owner.pid_namespace or owner.pid_namespace != here.pid_namespace or not owner.group:
        return False  # its ids mean other processes, or nothing, here; or its group is unknown
    started = _start_time(owner.pid)
    if started is None:
        ended = _no_such_process(owner.pid)
    else:
        ended = started < 0 or (owner.started != 0 and not _same_tick(owner.started, started))
    return ended and not _group_runs(owner, here)


def _same_tick(recorded: int, read: int) -> bool:
    """Whether two start times name one start, give or take a time namespace's rounding."""
    return abs(recorded - read) <= 1


def _group_runs(owner: Owner, here: Owner) -> bool:
    """Whether a process of ``owner``'s group that started with or after it still runs.

    The children an action starts stay in its process group when their parent dies. Older
    members (the shell or supervisor that started the owner) are not its children; this
    process (a successor in the same group) is not either. Where the group has members and
    /proc cannot show them all (``hidepid``), they may be its children: it runs.
    """
    try:
        os.killpg(owner.group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # members exist, of another user
    if not _PROC.is_dir() or _proc_hides_processes():
        return True
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == here.pid:
            continue
        stat = _stat_fields(int(entry.name))
        if stat is None or int(stat[2]) != owner.group or stat[0] in {"Z", "X"}:
            continue
        if _normalized(int(stat[19])) >= owner.started - 1:
            return True
    return False


@functools.cache
def _proc_hides_processes() -> bool:
    """Whether /proc may hide other users' processes from this one (``hidepid``)."""
    if os.geteuid() == 0:
        return False
    try:
        mounts = (_PROC / "self" / "mountinfo").read_text()
    except OSError:
        return True
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == str(_PROC):
            options = line.rsplit(" - ", 1)[-1]
            return any(
                option.startswith("hidepid=") and option not in {"hidepid=0", "hidepid=off"}
                for option in options.replace(" ", ",").split(",")
            )
    return True


def _booted_after(alive_until: datetime) -> bool:
    """Whether this boot began after ``alive_until`` (a lease's end), as this clock reads."""
    booted = _boot_time()
    return booted is not None and alive_until.astimezone(UTC).timestamp() < booted


def _boot_time() -> float | None:
    """When this boot began, in seconds since the epoch (outside any time namespace)."""
    try:
        stat = (_PROC / "stat").read_text()
    except OSError:
        return None
    for line in stat.splitlines():
        if line.startswith("btime "):
            return int(line.split()[1]) + _boottime_offset()[0]
    return None


def _boot_id() -> str:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


def _group() -> int:
    """The process group id of the calling process."""
    return os.getpgrp()


@functools.cache
def _machine_identity() -> str:
    """The identity safeact keeps for this machine, made once; empty where it cannot be.

    Read from the first of ``_identity_files`` that holds one, or made in the first that
    can be written (created whole or not at all, never overwritten). A machine's identity
    is certain only where safeact made it: ``/etc/machine-id`` is missing from container
    images and copied into cloned ones, and a host name is anyone's.
    """
    places = _identity_files()
    for path in places:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            return _read_identity(path)
    for path in places:
        with contextlib.suppress(OSError):
            return _make_identity(path)
    return ""


def _identity_files() -> list[Path]:
    """Where the identity is kept: the machine's place, then the user's state directory."""
    places = [_MACHINE_PLACE / "machine-id"]
    state = os.environ.get("XDG_STATE_HOME")
    with contextlib.suppress(RuntimeError):  # no home directory: the machine's place only
        places.append(Path(state or Path.home() / ".local" / "state") / "safeact" / "machine-id")
    return places


def _read_identity(path: Path) -> str:
    """The identity kept at ``path``.

    Raises:
        OSError: there is none, or what is there is not one safeact wrote.

    """
    text = path.read_text().strip()
    digits = text.removeprefix(_IDENTITY_PREFIX)
    if not text.startswith(_IDENTITY_PREFIX) or len(digits) != 32 or not _is_hex(digits):
        raise OSError(f"{path}: not a safeact machine identity")
    return text


def _is_hex(text: str) -> bool:
    return all(char in "0123456789abcdef" for char in text)


def _make_identity(path: Path) -> str:
    """Make a new identity at ``path``, or read the one another process made first.

    Raises:
        OSError: ``path`` cannot be created.

    """
    import secrets  # noqa: PLC0415 - once per machine: not worth their import time per process
    import tempfile  # noqa: PLC0415

    path.parent.mkdir(parents=True, exist_ok=True)
    identity = f"{_IDENTITY_PREFIX}{secrets.token_hex(16)}"
    handle, draft = tempfile.mkstemp(dir=path.parent, prefix=".machine-id.")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(identity + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.chmod(draft, 0o644)  # noqa: PTH101 - the draft is a name from mkstemp
        try:
            os.link(draft, path)  # whole, and only if no process made one first
        except FileExistsError:
            return _read_identity(path)
    finally:
        Path(draft).unlink()
    with contextlib.suppress(OSError):  # the name survives a power loss only once this is
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return identity


def _pid_namespace() -> str:
    """The inode of this process's PID namespace, as text; empty where it cannot be read.

    Process ids are numbered per namespace: a container's process 7 is not the host's.
    """
    try:
        return str((_PROC / "self" / "ns" / "pid").stat().st_ino)
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); None if none."""
    return _fields_of(_PROC / str(pid) / "stat")


def _fields_of(stat_file: Path) -> list[str] | None:
    """The fields of a process's (or thread's) ``stat`` file after its command name, or None."""
    try:
        stat = stat_file.read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    return stat[stat.rindex(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    """Return the start time of ``pid`` in ticks, -1 for a process that has ended.

    Ended is a zombie or dead process; a zombie leader whose other threads still run (its
    main thread called ``pthread_exit``) has not ended. Ticks are counted as in the kernel's
    own time namespace, so an owner in another one (CRIU, a runtime's time offsets) reads
    the same start from both sides.

    None where it cannot be told from /proc: no /proc (not Linux), /proc would not say (out
    of file descriptors), or no entry for ``pid``. No entry is not proof of no process:
    /proc mounted with ``hidepid`` (or systemd's ``ProtectProc=invisible``) hides other
    users' live processes; the caller then asks the kernel about the process id itself.
    """
    if not _PROC.is_dir():
        return None
    fields = _stat_fields(pid)
    if fields is None:
        return None
    if fields[0] in {"Z", "X"} and not _threads_run(pid):
        return -1
    return _normalized(int(fields[19]))


def _threads_run(pid: int) -> bool:
    """Whether a thread of process ``pid`` other than its (ended) leader still runs."""
    try:
        tasks = [task for task in (_PROC / str(pid) / "task").iterdir() if task.name != str(pid)]
    except OSError:
        return False
    for task in tasks:
        fields = _fields_of(task / "stat")
        if fields is not None and fields[0] not in {"Z", "X"}:
            return True
    return False


def _normalized(ticks: int) -> int:
    """A start time read in this process's time namespace, as the kernel's own counts it."""
    return ticks - _boottime_offset()[1]


@functools.cache
def _boottime_offset() -> tuple[int, int]:
    """The boot-time offset of the calling process's time namespace: seconds, and ticks.

    /proc shows start times and the boot time shifted by the reader's offset; 0 outside a
    time namespace, or where the system does not say.
    """
    try:
        offsets = (_PROC / "self" / "timens_offsets").read_text()
    except OSError:
        return 0, 0
    for line in offsets.splitlines():
        name, *values = line.split()
        if name in {"boottime", "7"} and len(values) == 2:
            seconds, nanoseconds = int(values[0]), int(values[1])
            ticks_per_second = os.sysconf("SC_CLK_TCK")
            ticks = seconds * ticks_per_second + nanoseconds * ticks_per_second // 10**9
            return seconds, ticks
    return 0, 0


def _no_such_process(pid: int) -> bool:
    """Whether the kernel says no process has this id (in this PID namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
