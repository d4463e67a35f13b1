"""Telling a gone owner from a live one: host, boot, process id, start time."""

import errno
import os
import subprocess
import sys
import uuid
from pathlib import Path

import attrs
import pytest

from safeact import _owner
from safeact._owner import Owner, is_gone, this_process


def test_this_process_is_not_gone() -> None:
    """The calling process, as recorded, is alive."""
    me = this_process()
    assert not is_gone(me, me)


def test_owner_on_another_host_is_never_judged_gone() -> None:
    """Only the lease can tell about another host's processes."""
    me = this_process()
    elsewhere = attrs.evolve(me, host="other-host", pid=1, started=1)
    assert not is_gone(elsewhere, me)


def test_owner_from_before_a_reboot_is_gone() -> None:
    """Another boot id on this host means the owner's machine restarted."""
    me = this_process()
    assert is_gone(attrs.evolve(me, boot_id="an-earlier-boot"), me)


def test_reused_process_id_is_gone() -> None:
    """The right process id with another start time is a different process."""
    me = this_process()
    assert is_gone(attrs.evolve(me, started=me.started + 1), me)


def test_exited_and_zombie_processes_are_gone() -> None:
    """A process that exited (reaped, or a zombie not yet reaped) is gone."""
    me = this_process()
    reaped = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert reaped.returncode == 0
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1][0] != "Z":
            pass  # until it has exited and waits to be reaped
        dead = attrs.evolve(me, pid=zombie.pid, started=1)
        assert is_gone(dead, me)
    finally:
        zombie.wait()
    assert is_gone(dead, me)


def test_without_proc_a_process_id_that_names_no_process_is_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where /proc is missing, only the existence of the process id can be checked."""
    monkeypatch.setattr(_owner, "_PROC", tmp_path / "no-proc")
    me = Owner(host="h", boot_id="", pid=this_process().pid, started=0)
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    assert not is_gone(me, me)
    assert is_gone(attrs.evolve(me, pid=finished.pid), me)
    assert _owner._boot_id() == ""
    assert not is_gone(attrs.evolve(me, pid=1), me)  # exists, though not ours to signal


def test_this_process_can_name_its_host() -> None:
    """this_process(host) records the given host name instead of the machine's."""
    assert this_process("agent-7").host == "agent-7"


def test_boot_id_is_the_kernels() -> None:
    """On Linux the boot id is the kernel's, a UUID, so a reboot can be told."""
    boot_id = _owner._boot_id()
    assert str(uuid.UUID(boot_id)) == boot_id


def test_owner_with_an_unknown_start_time_is_judged_by_its_process_id() -> None:
    """An owner recorded without a start time (0) whose process id is alive is not gone."""
    me = this_process()
    assert not is_gone(attrs.evolve(me, started=0), me)


def fake_proc(root: Path, pid: int, name: str, state: str, started: int) -> Path:
    """A /proc holding one process: ``name`` (its command), ``state`` and start time."""
    (root / str(pid)).mkdir(parents=True)
    fields = [state, "1", *["0"] * 17, str(started), "0"]
    (root / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    return root


def test_start_time_is_read_past_a_command_name_that_holds_parentheses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A live process named "x) Z 1 2" is read past its name: its own start time, not a zombie."""
    monkeypatch.setattr(_owner, "_PROC", fake_proc(tmp_path, 4242, "x) Z 1 2", "S", 777))
    here = Owner(host="h", boot_id="", pid=1, started=1)
    assert not is_gone(attrs.evolve(here, pid=4242, started=777), here)


@pytest.mark.parametrize("state", ["Z", "X"])
def test_zombie_and_dead_processes_are_gone_with_their_own_start_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state: str
) -> None:
    """A zombie (Z) or dead (X) process is gone even though its start time still matches."""
    monkeypatch.setattr(_owner, "_PROC", fake_proc(tmp_path, 4242, "agent", state, 777))
    here = Owner(host="h", boot_id="", pid=1, started=1)
    assert is_gone(attrs.evolve(here, pid=4242, started=777), here)


def test_process_started_in_the_first_tick_after_boot_is_not_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A live process whose start time is 0 ticks (recorded as 0, unknown) is not gone."""
    monkeypatch.setattr(_owner, "_PROC", fake_proc(tmp_path, 4242, "init", "S", 0))
    here = Owner(host="h", boot_id="", pid=1, started=1)
    assert not is_gone(attrs.evolve(here, pid=4242, started=0), here)


def test_without_proc_a_process_we_may_not_signal_is_alive(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where /proc is missing, a process id we may not signal (another user's) is not gone."""

    def not_ours(pid: int, signal: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(_owner, "_PROC", tmp_path / "no-proc")
    monkeypatch.setattr(os, "kill", not_ours)
    owner = Owner(host="h", boot_id="", pid=4242, started=0)
    assert not is_gone(owner, owner)
