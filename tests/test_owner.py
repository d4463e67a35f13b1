"""Telling a gone owner from a live one: host, boot, machine, namespace, process, group, start.

The real-process cases across machines, namespaces and process trees are in
tests/test_proof.py; here each rule of ``is_gone`` on its own, mostly on a /proc of the
test's making.
"""

import errno
import os
import select
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest

from safeact import _owner
from safeact._owner import Owner, is_gone, this_process

LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)
"""A lease that ran out before any boot of this machine began."""
NOW = datetime.now(UTC) + timedelta(seconds=30)
"""A lease its owner renewed a moment ago."""
MACHINE = "safeact-0123456789abcdef0123456789abcdef"


@pytest.fixture
def no_group() -> int:
    """A process group id that names no group: a child's id, once it has exited."""
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    return finished.pid


@pytest.fixture
def here(no_group: int) -> Owner:
    """A judge on machine MACHINE, boot boot-b, namespace ns; owners are evolved from it."""
    return Owner(
        host="h",
        boot_id="boot-b",
        pid=os.getpid(),
        started=1,
        machine_id=MACHINE,
        pid_namespace="ns",
        group=no_group,
    )


def fake_proc(root: Path, pid: int, state: str, started: int, *, name: str = "agent") -> Path:
    """A /proc holding one process: its command ``name``, ``state`` and start time."""
    (root / str(pid)).mkdir(parents=True)
    fields = [state, "1", "1", *["0"] * 16, str(started), "0"]
    (root / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    return root


def test_this_process_is_not_gone() -> None:
    """The calling process, as recorded, is alive."""
    me = this_process()
    assert not is_gone(me, me, alive_until=LONG_AGO)


def test_this_process_records_what_judging_it_needs() -> None:
    """Its boot id, safeact's machine identity, PID namespace and process group are recorded."""
    me = this_process()
    assert str(uuid.UUID(me.boot_id)) == me.boot_id
    assert me.machine_id.startswith("safeact-")
    assert str(Path("/proc/self/ns/pid").readlink()) == f"pid:[{me.pid_namespace}]"
    assert me.group == os.getpgrp()


def test_owner_on_another_host_is_never_judged_gone(here: Owner) -> None:
    """Only the lease can tell about another host's processes."""
    assert not is_gone(attrs.evolve(here, host="other-host", pid=1), here, alive_until=LONG_AGO)


def test_an_unknown_boot_id_proves_nothing(here: Owner, no_group: int) -> None:
    """Without a boot id on either side, neither a reboot nor a process can be told."""
    dead = attrs.evolve(here, pid=no_group, started=777)
    assert is_gone(dead, here, alive_until=LONG_AGO)
    assert not is_gone(attrs.evolve(dead, boot_id=""), here, alive_until=LONG_AGO)
    assert not is_gone(dead, attrs.evolve(here, boot_id=""), alive_until=LONG_AGO)


def test_another_boot_of_this_machine_is_gone(here: Owner) -> None:
    """Its identity as safeact made it, another boot, a lease that ended before the boot: gone."""
    assert is_gone(attrs.evolve(here, boot_id="boot-a"), here, alive_until=LONG_AGO)


def test_an_owner_whose_lease_outlived_the_start_of_this_boot_is_not_rebooted(
    here: Owner,
) -> None:
    """A lease renewed after this boot began: another machine with this identity (a clone)."""
    assert not is_gone(attrs.evolve(here, boot_id="boot-a"), here, alive_until=NOW)


@pytest.mark.parametrize(
    ("recorded", "known_here"),
    [
        ("", MACHINE),  # not recorded
        (MACHINE, ""),  # not known here
        ("", ""),
        ("0123456789abcdef0123456789abcdef", MACHINE),  # systemd's machine id (schema 3)
        ("0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
        ("safeact-fedcba9876543210fedcba9876543210", MACHINE),  # another machine safeact named
    ],
)
def test_another_boot_id_without_this_machines_identity_is_not_gone(
    here: Owner, recorded: str, known_here: str
) -> None:
    """Another boot id under any other identity is another machine, not a reboot of this one."""
    owner = attrs.evolve(here, boot_id="boot-a", machine_id=recorded)
    assert not is_gone(owner, attrs.evolve(here, machine_id=known_here), alive_until=LONG_AGO)


def test_an_owner_in_another_pid_namespace_is_not_gone(here: Owner, no_group: int) -> None:
    """Its process id means another process in this namespace, or none: not judged here."""
    dead = attrs.evolve(here, pid=no_group, started=777)
    assert is_gone(dead, here, alive_until=LONG_AGO)
    assert not is_gone(attrs.evolve(dead, pid_namespace="other"), here, alive_until=LONG_AGO)
    assert not is_gone(attrs.evolve(dead, pid_namespace=""), here, alive_until=LONG_AGO)


def test_an_owner_without_a_process_group_is_not_gone(here: Owner, no_group: int) -> None:
    """An owner of an older schema recorded no group: its action's children cannot be told."""
    dead = attrs.evolve(here, pid=no_group, started=777, group=0)
    assert not is_gone(dead, here, alive_until=LONG_AGO)


def test_exited_and_zombie_processes_are_gone(here: Owner) -> None:
    """A process that exited (reaped, or a zombie not yet reaped) is gone."""
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1][0] != "Z":
            pass  # until it has exited and waits to be reaped
        dead = attrs.evolve(here, pid=zombie.pid, started=1)
        assert is_gone(dead, here, alive_until=LONG_AGO)
    finally:
        zombie.wait()
    assert is_gone(dead, here, alive_until=LONG_AGO)


def test_a_reused_process_id_is_gone_and_a_tick_apart_is_the_same_start(here: Owner) -> None:
    """Another start time is another process; one tick off is a time namespace's rounding."""
    me = this_process()
    owner = attrs.evolve(here, pid=me.pid, started=me.started)
    assert not is_gone(owner, here, alive_until=LONG_AGO)
    assert not is_gone(attrs.evolve(owner, started=me.started + 1), here, alive_until=LONG_AGO)
    assert is_gone(attrs.evolve(owner, started=me.started + 2), here, alive_until=LONG_AGO)


def test_owner_with_an_unknown_start_time_is_judged_by_its_process_id(here: Owner) -> None:
    """An owner recorded without a start time (0) whose process id is alive is not gone."""
    assert not is_gone(attrs.evolve(here, started=0), here, alive_until=LONG_AGO)


def test_start_time_is_read_past_a_command_name_that_holds_parentheses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, here: Owner
) -> None:
    """A live process named "x) Z 1 2" is read past its name: its own start time, not a zombie."""
    monkeypatch.setattr(_owner, "_PROC", fake_proc(tmp_path, 4242, "S", 777, name="x) Z 1 2"))
    assert not is_gone(attrs.evolve(here, pid=4242, started=777), here, alive_until=LONG_AGO)


@pytest.mark.parametrize("state", ["Z", "X"])
def test_zombie_and_dead_processes_are_gone_with_their_own_start_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state: str, here: Owner
) -> None:
    """A zombie (Z) or dead (X) process is gone even though its start time still matches."""
    monkeypatch.setattr(_owner, "_PROC", fake_proc(tmp_path, 4242, state, 777))
    assert is_gone(attrs.evolve(here, pid=4242, started=777), here, alive_until=LONG_AGO)


def test_a_zombie_leader_whose_threads_run_is_not_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, here: Owner
) -> None:
    """A leader that ended with pthread_exit shows as a zombie while its other threads run."""
    proc = fake_proc(tmp_path, 4242, "Z", 777)
    threads = proc / "4242" / "task"
    fake_proc(threads, 4242, "Z", 777)
    fake_proc(threads, 4243, "S", 777)
    monkeypatch.setattr(_owner, "_PROC", proc)
    owner = attrs.evolve(here, pid=4242, started=777)
    assert not is_gone(owner, here, alive_until=LONG_AGO)
    (threads / "4243" / "stat").write_text((threads / "4242" / "stat").read_text())
    assert is_gone(owner, here, alive_until=LONG_AGO)


def test_process_started_in_the_first_tick_after_boot_is_not_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, here: Owner
) -> None:
    """A live process whose start time is 0 ticks (recorded as 0, unknown) is not gone."""
    monkeypatch.setattr(_owner, "_PROC", fake_proc(tmp_path, 4242, "S", 0))
    assert not is_gone(attrs.evolve(here, pid=4242, started=0), here, alive_until=LONG_AGO)


def not_ours(pid: int, signal: int) -> None:
    """``os.kill`` of a process of another user."""
    raise PermissionError(errno.EPERM, "Operation not permitted")


def test_a_live_process_hidden_from_proc_is_not_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, here: Owner
) -> None:
    """With no /proc entry for it (hidepid, ProtectProc=invisible), a live process is not gone."""
    monkeypatch.setattr(_owner, "_PROC", tmp_path)  # a /proc that shows no process at all
    owner = attrs.evolve(here, pid=os.getpid(), started=777)
    assert not is_gone(owner, here, alive_until=LONG_AGO)
    monkeypatch.setattr(os, "kill", not_ours)  # and not ours to signal
    assert not is_gone(attrs.evolve(owner, pid=4242), here, alive_until=LONG_AGO)


def test_a_process_missing_from_proc_that_the_kernel_does_not_know_is_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, here: Owner, no_group: int
) -> None:
    """No /proc entry and no such process id for the kernel: gone."""
    monkeypatch.setattr(_owner, "_PROC", tmp_path)
    assert is_gone(attrs.evolve(here, pid=no_group, started=777), here, alive_until=LONG_AGO)


def test_a_live_process_hidden_from_proc_is_only_asked_about_never_signalled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, here: Owner
) -> None:
    """Checking a live owner /proc does not show sends it signal 0 only, and it keeps running."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    sent: list[tuple[int, int]] = []
    real_kill = os.kill

    def spy(pid: int, signal: int) -> None:
        sent.append((pid, signal))
        real_kill(pid, signal)

    monkeypatch.setattr(_owner, "_PROC", tmp_path)  # /proc shows no process at all
    monkeypatch.setattr(os, "kill", spy)
    try:
        gone = is_gone(attrs.evolve(here, pid=child.pid, started=777), here, alive_until=LONG_AGO)
        asked = list(sent)
        assert child.poll() is None
    finally:
        child.communicate(b"")
    assert (False, [(child.pid, 0)]) == (gone, asked)


def test_a_live_child_in_the_owners_process_group_keeps_it_alive(here: Owner) -> None:
    """A process of the owner's group that started after it may be its action's: not gone."""
    # The owner starts a child that waits on the owner's stdin, which the test holds, and ends.
    owner_process = subprocess.Popen(
        [sys.executable, "-c", START_A_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert owner_process.stdout is not None
    with owner_process.stdout:
        child = int(owner_process.stdout.readline())
    owner_process.wait()
    ended = os.pidfd_open(child)
    owner = attrs.evolve(here, pid=owner_process.pid, started=0, group=owner_process.pid)
    try:
        assert not is_gone(owner, here, alive_until=LONG_AGO)
    finally:
        assert owner_process.stdin is not None
        owner_process.stdin.close()  # the child reads the end of its input, and exits
        select.select([ended], [], [])
        os.close(ended)
    assert is_gone(owner, here, alive_until=LONG_AGO)


START_A_CHILD = (
    "import subprocess, sys; "
    "child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()']); "
    "print(child.pid, flush=True)"
)


def test_older_members_of_the_group_and_the_judge_itself_are_not_its_children(
    here: Owner, no_group: int
) -> None:
    """The shell or supervisor that started the owner, and this process, keep nothing alive."""
    me = this_process()
    owner = attrs.evolve(here, pid=no_group, started=me.started + 10**6, group=me.group)
    assert is_gone(owner, attrs.evolve(here, pid=me.pid), alive_until=LONG_AGO)
    judged_by_another = attrs.evolve(here, pid=1)
    later = attrs.evolve(owner, started=me.started)  # as if this process were its child
    assert not is_gone(later, judged_by_another, alive_until=LONG_AGO)


def test_a_group_proc_may_hide_is_taken_to_run(
    monkeypatch: pytest.MonkeyPatch, here: Owner, no_group: int
) -> None:
    """A group with members under a /proc that hides other users' processes: it may run."""
    me = this_process()
    owner = attrs.evolve(here, pid=no_group, started=me.started + 10**6, group=me.group)
    assert is_gone(owner, here, alive_until=LONG_AGO)
    monkeypatch.setattr(_owner, "_proc_hides_processes", lambda: True)
    assert not is_gone(owner, here, alive_until=LONG_AGO)


@pytest.mark.parametrize(
    ("options", "hides"),
    [
        ("rw,hidepid=invisible", True),
        ("rw,hidepid=2", True),
        ("rw,hidepid=0", False),
        ("rw", False),
    ],
)
def test_hidepid_is_read_from_the_mount_of_proc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, options: str, *, hides: bool
) -> None:
    """A process that is not root reads /proc's own mount options for hidepid."""
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mountinfo").write_text(
        f"22 1 0:5 / /sys rw - sysfs sysfs rw\n23 1 0:21 / {tmp_path} rw - proc proc {options}\n"
    )
    monkeypatch.setattr(_owner, "_PROC", tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    _owner._proc_hides_processes.cache_clear()
    try:
        assert _owner._proc_hides_processes() is hides
    finally:
        _owner._proc_hides_processes.cache_clear()


def test_the_boot_time_and_start_times_are_read_outside_any_time_namespace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In a time namespace /proc shifts both by its boot-time offset; they are shifted back."""
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "timens_offsets").write_text("monotonic 0 0\nboottime 1000 0\n")
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1796308886\nprocesses 7\n")
    fake_proc(tmp_path, 4242, "S", 100777)
    monkeypatch.setattr(_owner, "_PROC", tmp_path)
    _owner._boottime_offset.cache_clear()
    try:
        assert (_owner._boot_time(), _owner._start_time(4242)) == (
            1796309886,
            100777 - 1000 * os.sysconf("SC_CLK_TCK"),
        )
    finally:
        _owner._boottime_offset.cache_clear()


def test_this_process_can_name_its_host() -> None:
    """this_process(host) records the given host name instead of the machine's."""
    assert this_process("agent-7").host == "agent-7"


def test_the_pid_namespace_is_empty_where_proc_does_not_say(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without /proc, the PID namespace is unknown (empty)."""
    monkeypatch.setattr(_owner, "_PROC", tmp_path / "no-proc")
    assert (_owner._pid_namespace(), _owner._boot_id()) == ("", "")


@pytest.fixture
def places(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, Path]:
    """The machine's place and the user's state directory for the identity, under tmp_path."""
    machine, state = tmp_path / "var-lib-safeact", tmp_path / "state"
    monkeypatch.setattr(_owner, "_MACHINE_PLACE", machine)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return machine / "machine-id", state / "safeact" / "machine-id"


def test_the_machine_identity_is_made_once_and_kept(places: tuple[Path, Path]) -> None:
    """The first process makes it in the machine's place; every later one reads the same."""
    machine, _ = places
    made = _owner._machine_identity.__wrapped__()
    assert made.startswith("safeact-")
    assert len(made) == len("safeact-") + 32
    assert machine.read_text() == made + "\n"
    assert machine.stat().st_mode & 0o777 == 0o644
    assert _owner._machine_identity.__wrapped__() == made
    assert list(machine.parent.iterdir()) == [machine]  # no draft left behind


def test_the_machine_identity_falls_back_on_the_users_state(places: tuple[Path, Path]) -> None:
    """Where the machine's place cannot be written, the user's state directory keeps it."""
    machine, user = places
    machine.parent.write_text("a file where the directory would be")
    made = _owner._machine_identity.__wrapped__()
    assert user.read_text() == made + "\n"


def test_a_machine_identity_safeact_did_not_write_is_never_overwritten(
    places: tuple[Path, Path],
) -> None:
    """A file that holds something else is left as it is; the next place is used."""
    machine, user = places
    machine.parent.mkdir()
    machine.write_text("0123456789abcdef0123456789abcdef\n")
    made = _owner._machine_identity.__wrapped__()
    assert machine.read_text() == "0123456789abcdef0123456789abcdef\n"
    assert user.read_text() == made + "\n"


def test_no_place_for_the_identity_leaves_it_unknown(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no place can be written (a read-only file system), the identity is empty."""
    machine, user = places
    machine.parent.write_text("not a directory")
    user.parent.parent.write_text("not a directory either")
    assert _owner._machine_identity.__wrapped__() == ""
