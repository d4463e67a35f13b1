"""Proof across machines, process trees and namespaces: real processes, a real effect count.

Each case is a live owner that an earlier safeact judged gone: on a second machine that bears
this one's host name (a process in its own UTS, PID and mount namespaces, with its own boot
id: a container with a fixed host name, or a VM cloned from this one's image), with its
effect made by a child process after the owner was SIGKILLed, with its main thread ended by
``pthread_exit``, and in its own time namespace. Neither a probe's "not happened" nor an
operator's resolve without force may release its key; it pays once.
"""

import os
import select
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from safeact import NotProvenError, SafeError, State, Store, Why, get_store
from safeact._owner import _MACHINE_PLACE, this_process
from tests.actions import count_effects
from tests.test_release import KEY, RECEIPT, Children, until

PAID = {"kind": "Succeeded", "replayed": False, "recorded": True, "value": RECEIPT}
IN_FLIGHT = ("InDoubt", "in_flight")


def namespaces_or_skip() -> None:
    """Skip (fail, under CI) where namespaces cannot be made: they need root and unshare."""
    made = (
        shutil.which("unshare") is not None
        and os.geteuid() == 0
        and subprocess.run(
            ["unshare", "--uts", "--pid", "--mount", "--time", "--fork", "true"], check=False
        ).returncode
        == 0
    )
    if not made:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root with unshare: these tests must run there")
        pytest.skip("needs root and unshare for UTS, PID, mount and time namespaces")


def second_machine(tmp_path: Path, *, cloned: bool) -> list[str]:
    """A command prefix that runs a process as on another machine named as this one.

    Its own boot id, PID namespace and /proc; its own /var/lib/safeact, empty (a container
    made from an image without one) or holding this machine's identity (a cloned VM).
    """
    namespaces_or_skip()
    boot = tmp_path / "other-boot-id"
    boot.write_text(f"{uuid.uuid4()}\n")
    keeps = tmp_path / "identity"
    keeps.write_text(this_process().machine_id + "\n" if cloned else "")
    _MACHINE_PLACE.mkdir(parents=True, exist_ok=True)  # a place to mount over
    setup = (
        'mount --bind "$1" /proc/sys/kernel/random/boot_id && '
        f'mount -t tmpfs safeact "{_MACHINE_PLACE}" && '
        f'if [ -s "$2" ]; then cp "$2" "{_MACHINE_PLACE}/machine-id"; fi && '
        'shift 2 && exec env XDG_STATE_HOME="$0" "$@"'
    )
    state = tmp_path / "no-user-state"
    return [
        *("unshare", "--uts", "--pid", "--mount", "--fork", "--mount-proc"),
        *("sh", "-c", setup, str(state), str(boot), str(keeps)),
    ]


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    """Starts owners and callers; ends every one of them, pass or fail."""
    with Children(tmp_path) as started:
        yield started


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.db")


def withheld(store: Store) -> bool:
    """Whether nothing released the key: no reconcile, no resolve in its history."""
    whys = {event.why for event in store.history(KEY)}
    return not whys & {Why.RECONCILED, Why.RESOLVED, Why.FORCED_RELEASE}


@pytest.mark.parametrize("cloned", [False, True], ids=["container", "cloned VM"])
@pytest.mark.parametrize("decision", ["probe", "resolve"])
def test_an_owner_on_another_machine_with_this_host_name_is_never_released(
    ledger: str,
    tmp_path: Path,
    children: Children,
    decision: str,
    *,
    cloned: bool,
) -> None:
    """Another boot id under this host name, its identity unknown or cloned: no release."""
    effects = tmp_path / "effects"
    owner = children.start(
        ledger, effects, "--pause", prefix=second_machine(tmp_path, cloned=cloned)
    )
    owner.expect("paused")
    with get_store(ledger) as store:
        before = store.get(KEY)
        assert before is not None
        here = store.owner
        assert (before.owner.host, before.state) == (here.host, State.ATTEMPTING)
        assert before.owner.boot_id != here.boot_id
        assert (before.owner.machine_id == here.machine_id) is cloned
        if decision == "probe":
            outcome = children.run(ledger, effects, "--probe")
            assert (outcome["kind"], outcome["reason"]) == IN_FLIGHT
        else:
            with pytest.raises(SafeError, match="running"):
                store.resolve(KEY, happened=False)
        after = store.get(KEY)
        assert after is not None
        assert (after.state, after.attempt_id) == (State.ATTEMPTING, before.attempt_id)
        assert withheld(store)
    assert count_effects(effects, KEY) == 0
    owner.go()
    assert owner.outcome() == PAID
    assert count_effects(effects, KEY) == 1


def test_an_owner_killed_while_its_child_still_pays_is_not_released(
    ledger: str,
    tmp_path: Path,
    children: Children,
) -> None:
    """SIGKILLed while the shell it started has yet to pay: no release until the shell ends."""
    effects, fifo = tmp_path / "effects", tmp_path / "pay-now"
    os.mkfifo(fifo)
    owner = children.start(ledger, effects, "--through-child", str(fifo), "--lease", "1")
    line = owner.next_line()
    assert line.startswith("spawned "), line
    shell = os.pidfd_open(int(line.removeprefix("spawned ")))
    os.kill(owner.pid, signal.SIGKILL)
    owner.process.wait()
    try:
        with get_store(ledger) as store:

            def in_doubt() -> bool:
                record = store.get(KEY)
                return record is not None and record.state is State.IN_DOUBT

            until(in_doubt, "the killed owner's lease to run out")
            record = store.get(KEY)
            assert record is not None
            assert not store._owner_gone(record)
            with pytest.raises(NotProvenError):
                store.resolve(KEY, happened=False)
            outcome = children.run(ledger, effects, "--probe")
            assert (outcome["kind"], outcome["reason"]) == ("InDoubt", "lease_expired")
            assert withheld(store)
            assert count_effects(effects, KEY) == 0
    finally:
        Path(fifo).write_text("")  # the shell pays now, and ends
        select.select([shell], [], [])
        os.close(shell)
    assert count_effects(effects, KEY) == 1
    # Now the owner and everything it started are gone: proof, and the probe says it paid.
    assert children.run(ledger, effects, "--probe") == {**PAID, "replayed": True}
    with get_store(ledger) as store:
        assert Why.RECONCILED in {event.why for event in store.history(KEY)}
    assert count_effects(effects, KEY) == 1


def test_an_owner_whose_main_thread_ended_while_another_acts_is_alive(
    ledger: str,
    tmp_path: Path,
    children: Children,
) -> None:
    """pthread_exit in the main thread leaves a zombie leader; the acting thread keeps it alive."""
    effects = tmp_path / "effects"
    owner = children.start(ledger, effects, "--pause", "--pthread-exit")
    owner.expect("paused")
    stat = Path(f"/proc/{owner.pid}/stat")
    until(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", "the leader to end")
    with get_store(ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.ATTEMPTING
        assert not store._owner_gone(record)
        with pytest.raises(SafeError, match="running"):
            store.resolve(KEY, happened=False)
        outcome = children.run(ledger, effects, "--probe")
        assert (outcome["kind"], outcome["reason"]) == IN_FLIGHT
        assert withheld(store)
    owner.go()
    assert owner.outcome() == PAID
    assert count_effects(effects, KEY) == 1


def test_an_owner_in_its_own_time_namespace_is_alive(
    ledger: str,
    tmp_path: Path,
    children: Children,
) -> None:
    """Its start time as it reads it is a million ticks off ours; it is the same start."""
    namespaces_or_skip()
    shifted = ("unshare", "--time", "--boottime", "10000", "--fork")
    effects = tmp_path / "effects"
    owner = children.start(ledger, effects, "--pause", prefix=shifted)
    owner.expect("paused")
    with get_store(ledger) as store:
        record = store.get(KEY)
        assert record is not None
        stat = Path(f"/proc/{record.owner.pid}/stat").read_text()
        as_read_here = int(stat.rsplit(")", 1)[1].split()[19])
        assert record.owner.started == as_read_here
        assert not store._owner_gone(record)
        with pytest.raises(SafeError, match="running"):
            store.resolve(KEY, happened=False)
        assert withheld(store)
    owner.go()
    assert owner.outcome() == PAID
    assert count_effects(effects, KEY) == 1
