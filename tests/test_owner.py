"""Telling a gone owner from a live one: host, machine, boot, PID namespace, process, start."""

import errno
import json
import os
import shutil
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


def test_a_live_process_hidden_from_proc_is_not_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With no /proc entry for it (hidepid, ProtectProc=invisible), a live process is not gone."""
    monkeypatch.setattr(_owner, "_PROC", tmp_path)  # a /proc that shows no process at all
    here = Owner(host="h", boot_id="", pid=1, started=1)
    assert not is_gone(attrs.evolve(here, pid=os.getpid(), started=777), here)


def test_a_hidden_process_of_another_user_is_not_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Hidden from /proc and not ours to signal (another user's, under hidepid): not gone."""

    def not_ours(pid: int, signal: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(_owner, "_PROC", tmp_path)
    monkeypatch.setattr(os, "kill", not_ours)
    here = Owner(host="h", boot_id="", pid=1, started=1)
    assert not is_gone(attrs.evolve(here, pid=4242, started=777), here)


def test_a_process_missing_from_proc_that_the_kernel_does_not_know_is_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No /proc entry and no such process id for the kernel: gone."""
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    monkeypatch.setattr(_owner, "_PROC", tmp_path)
    here = Owner(host="h", boot_id="", pid=1, started=1)
    assert is_gone(attrs.evolve(here, pid=finished.pid, started=777), here)


def test_this_process_records_its_machine_id_and_pid_namespace() -> None:
    """The machine id is /etc/machine-id's; the PID namespace is the inode of its ns link."""
    me = this_process()
    assert str(Path("/proc/self/ns/pid").readlink()) == f"pid:[{me.pid_namespace}]"
    machine_id = Path("/etc/machine-id")
    if machine_id.is_file():
        assert me.machine_id == machine_id.read_text().strip() != ""


def test_the_machine_id_falls_back_on_dbus_then_on_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without /etc/machine-id, D-Bus's file is read; without either, the id is empty."""
    dbus = tmp_path / "dbus-machine-id"
    dbus.write_text("0123456789abcdef0123456789abcdef\n")
    monkeypatch.setattr(_owner, "_MACHINE_ID", (tmp_path / "missing", dbus))
    assert _owner._machine_id() == "0123456789abcdef0123456789abcdef"
    dbus.unlink()
    assert _owner._machine_id() == ""


def test_the_pid_namespace_is_empty_where_proc_does_not_say(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without /proc, the PID namespace is unknown (empty)."""
    monkeypatch.setattr(_owner, "_PROC", tmp_path / "no-proc")
    assert _owner._pid_namespace() == ""


TWIN = Owner(host="h", boot_id="boot-b", pid=os.getpid(), started=0, machine_id="machine-1")
"""A live process of machine-1, in its current boot boot-b, judging others named "h"."""


def test_an_owner_on_another_machine_with_the_same_host_name_is_not_gone() -> None:
    """Another machine id under the same host name is another machine: its boot id says nothing."""
    twin = attrs.evolve(TWIN, machine_id="machine-2", boot_id="boot-a", pid=1, started=1)
    assert not is_gone(twin, TWIN)


def test_another_boot_of_the_same_machine_is_gone() -> None:
    """Another boot id under the same machine id is a reboot of this machine: gone."""
    assert is_gone(attrs.evolve(TWIN, boot_id="boot-a"), TWIN)


def test_an_owner_without_a_machine_id_is_judged_by_its_host_name() -> None:
    """An owner that recorded no machine id (an older ledger) is judged as before: rebooted."""
    assert is_gone(attrs.evolve(TWIN, machine_id="", boot_id="boot-a"), TWIN)


def test_an_owner_with_a_machine_id_this_process_cannot_read_is_not_gone() -> None:
    """A recorded machine id that cannot be checked here (none readable) is not judged here."""
    assert not is_gone(attrs.evolve(TWIN, boot_id="boot-a"), attrs.evolve(TWIN, machine_id=""))


def test_an_owner_in_another_pid_namespace_is_not_gone() -> None:
    """Its process id means another process in this namespace: it is not judged here."""
    me = this_process()
    assert me.pid_namespace
    elsewhere = attrs.evolve(me, pid_namespace="4026539999", started=me.started + 1)
    assert not is_gone(elsewhere, me)
    assert not is_gone(elsewhere, attrs.evolve(me, pid_namespace=""))  # cannot be checked here
    assert is_gone(attrs.evolve(elsewhere, pid_namespace=""), me)  # unrecorded: as before


def test_a_reboot_is_seen_from_another_pid_namespace() -> None:
    """A reboot ends the processes of every namespace: another boot id is gone from anywhere."""
    me = this_process()
    rebooted = attrs.evolve(me, pid_namespace="4026539999", boot_id="an-earlier-boot")
    assert is_gone(rebooted, me)


UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]
SHOW_OWNER = (
    "import json, sys, attrs; from safeact._owner import this_process; "
    "print(json.dumps(attrs.asdict(this_process())), flush=True); sys.stdin.read()"
)


def test_a_live_process_in_another_pid_namespace_is_not_gone() -> None:
    """A real process in a new PID namespace (a container sharing the host name) is not gone."""
    if (
        shutil.which("unshare") is None
        or subprocess.run([*UNSHARE, "true"], check=False).returncode
    ):
        pytest.skip("no PID namespaces here (needs unshare, as root)")
    inside = subprocess.Popen(
        [*UNSHARE, sys.executable, "-c", SHOW_OWNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert inside.stdout is not None
        owner = Owner(**json.loads(inside.stdout.readline()))
        here = this_process()
        assert (owner.host, owner.boot_id, owner.machine_id) == (
            here.host,
            here.boot_id,
            here.machine_id,
        )
        assert owner.pid_namespace not in ("", here.pid_namespace)
        assert not is_gone(owner, here)
        # Read in this namespace, its process id names another process (or none).
        assert is_gone(attrs.evolve(owner, pid_namespace=here.pid_namespace), here)
    finally:
        inside.communicate("", timeout=30)
    assert inside.returncode == 0


def test_a_live_process_hidden_from_proc_is_only_asked_about_never_signalled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Checking a live owner /proc does not show sends it signal 0 only, and it keeps running."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    sent: list[tuple[int, int]] = []
    real_kill = os.kill

    def spy(pid: int, signal: int) -> None:
        sent.append((pid, signal))
        real_kill(pid, signal)

    monkeypatch.setattr(_owner, "_PROC", tmp_path)  # /proc shows no process at all
    monkeypatch.setattr(os, "kill", spy)
    here = Owner(host="h", boot_id="", pid=1, started=1)
    try:
        gone = is_gone(attrs.evolve(here, pid=child.pid, started=777), here)
        asked = list(sent)
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.3)
    finally:
        child.kill()
        child.wait()
    assert (False, [(child.pid, 0)]) == (gone, asked)
