"""Telling a gone owner from a live one: host, boot, process id, start time."""

import subprocess
import sys
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
