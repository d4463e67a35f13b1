"""The crash harness: a user's call, killed (SIGKILL) at each point where a crash matters.

A *subject* is what a fresh process does: call one guarded tool (``calling``), or run a
module-level function of the user's on a ledger location (a graph, an MCP session, a saga).
Each run is a new interpreter started with ``python -c`` that imports the subject; the
parent only counts effects (the user's ``effects()``) and reads the ledgers.

For each crash point reached in an uncrashed run (every checkpoint of record-before-execute,
each time the run reaches it, and the user's own ``effect_made()`` marks), on a ledger of
its own: run and kill there; run again; resolve what is in doubt as an operator who looked
would (the action ran if the kill came after its effect); run again, and once more. The
verdicts are pure functions of what the processes reported (``judge``).
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import inspect
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Generic, Literal, ParamSpec, TypeAlias, TypeVar, get_args

import attrs

from safeact._open import StoreHandle, get_store
from safeact._outcome import AwaitingApproval, Failed, InDoubt, Succeeded
from safeact._protocol import CALL_CHECKPOINTS, State, checkpoint_hook
from safeact._saga_run import SagaFailed
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import InDoubtError

__all__ = [
    "CRASH_POINTS",
    "Calling",
    "CrashPoint",
    "CrashReport",
    "Ended",
    "Point",
    "PointReport",
    "assert_crash_safe",
    "calling",
    "crash_report",
    "effect_made",
    "run_crash_schedule",
]

P = ParamSpec("P")
T = TypeVar("T")

Point: TypeAlias = Literal["before_claim", "after_claim", "effect", "after_call", "after_record"]
"""Where a run is killed: a checkpoint of the call, or ``effect``, the user's own mark."""

CRASH_POINTS: tuple[Point, ...] = get_args(Point)
"""The points, in the order a call reaches them."""

AFTER_THE_EFFECT: frozenset[Point] = frozenset({"effect", "after_call"})
"""Killed here, the action had made its effect: an operator who looked would say it ran."""

TIMEOUT = 120.0
"""Seconds one run may take before it is killed and reported."""

Run: TypeAlias = Callable[[str], object]
"""A module-level function a fresh process runs on a ledger location (sync or async)."""


@attrs.frozen
class CrashPoint:
    """The ``occurrence``-th time a run reaches ``point`` (counted from 1)."""

    point: Point
    occurrence: int = 1

    def __str__(self) -> str:
        return self.point if self.occurrence == 1 else f"{self.point} #{self.occurrence}"


@attrs.frozen
class Calling(Generic[P, T]):
    """One call of a module-level guarded tool, as a fresh process will make it."""

    tool: SafeTool[P, T] | AsyncSafeTool[P, T]
    key: str
    args: tuple[object, ...]
    kwargs: dict[str, object]


def calling(
    tool: SafeTool[P, T] | AsyncSafeTool[P, T], key: str, /, *args: P.args, **kwargs: P.kwargs
) -> Calling[P, T]:
    """Describe the call ``tool(key, *args, **kwargs)`` for the harness.

    Each run calls the tool on the harness's own ledger, whatever ledger the tool names.

    Raises:
        ValueError: the tool is not a module-level name a fresh process can import.
        TypeError: it is not a guarded tool, or the arguments do not pickle.

    """
    if not isinstance(tool, SafeTool | AsyncSafeTool):
        raise TypeError(f"calling() takes a guarded tool (made with safeact.safe), not {tool!r}")
    subject = Calling(tool, key, args, kwargs)
    _reference(subject)
    try:
        pickle.dumps((args, kwargs))
    except Exception as exc:  # whatever pickle raises, the same advice
        raise TypeError(
            f"the arguments of {tool.name} must pickle to reach a fresh process: {exc}"
        ) from exc
    return subject


Subject: TypeAlias = "Calling[Any, Any] | Run"


@attrs.frozen
class Ended:
    """How one run ended: killed at its crash point, or what its call gave.

    ``outcome`` describes an ``Outcome`` (``Succeeded``, ``Succeeded (replayed)``,
    ``Failed``..., ``InDoubt (crashed)``), a value of a run that is no ``Outcome``, or the
    exception it raised; ``in_doubt`` and ``replayed`` say what it told its caller.
    """

    killed: bool
    outcome: str = ""
    in_doubt: bool = False
    replayed: bool = False
    is_outcome: bool = False
    raised: bool = False
    reached: tuple[tuple[str, int], ...] = ()
    said: str = ""
    """The whole answer: the value's ``repr``, or the exception's type and message."""

    def __str__(self) -> str:
        return "killed" if self.killed else self.outcome


@attrs.frozen
class PointReport:
    """What became of one crash point: the runs, the effects counted after each, the verdict.

    ``effects`` are counted after the kill, after the next run, after the resolve's run and
    after the last run; ``resolved`` says how each key left in doubt was resolved.
    """

    crash: CrashPoint
    runs: tuple[Ended, ...]
    effects: tuple[int, ...]
    resolved: tuple[str, ...]
    problems: tuple[str, ...]


@attrs.frozen
class CrashReport:
    """The harness's findings: safe when no point (and no run) shows a problem."""

    subject: str
    effects: int
    points: tuple[PointReport, ...]
    problems: tuple[str, ...] = ()

    @property
    def safe(self) -> bool:
        """Whether every crash point kept the promise."""
        return not self.problems and not any(point.problems for point in self.points)

    def __str__(self) -> str:
        verdict = "safe" if self.safe else "NOT SAFE"
        lines = [
            (
                f"{self.subject}: {verdict} ({self.effects} effect(s) uncrashed, "
                f"{len(self.points)} crash point(s))"
            ),
            *(f"  {problem}" for problem in self.problems),
        ]
        for point in self.points:
            runs = " -> ".join(map(str, point.runs))
            counts = ", ".join(map(str, point.effects))
            lines.append(f"  {point.crash}: {'ok' if not point.problems else 'FAILED'}")
            lines.append(f"    runs: {runs}; effects after each: {counts}")
            lines.extend(f"    resolved {how}" for how in point.resolved)
            lines.extend(f"    problem: {problem}" for problem in point.problems)
        return "\n".join(lines)


def assert_crash_safe(
    subject: Calling[Any, Any] | Run,
    *,
    effects: Callable[[], int],
    timeout: float = TIMEOUT,
) -> CrashReport:
    """Crash ``subject`` at each crash point and check the promise; return the report.

    ``effects`` counts the real effect as the user sees it (their fake provider's records):
    the harness reads it before and after each run. See ``crash_report``.

    Raises:
        AssertionError: a crash point shows an effect made more often than in an uncrashed
            run, an outcome that hides the doubt, or a call that does not replay once
            resolved; the message is the report, a line per crash point.

    """
    report = crash_report(subject, effects=effects, timeout=timeout)
    if not report.safe:
        raise AssertionError(str(report))
    return report


def crash_report(
    subject: Calling[Any, Any] | Run,
    *,
    effects: Callable[[], int],
    timeout: float = TIMEOUT,
) -> CrashReport:
    """Run ``subject`` uncrashed, then killed at each crash point it reached; report each.

    Every run is a fresh process on a fresh SQLite ledger per crash point (in a temporary
    directory, removed afterwards). Checked for each point: the effect never happens more
    often than in the uncrashed run; the run after the crash says ``InDoubt`` (with its key
    in doubt in the ledger), replays, or runs what had not started (a saga may say
    ``SagaFailed``: its own answer); after a resolve as an operator who checked would make it
    (the action ran if the kill came after its effect), the last run replays: it makes no
    effect, says nothing in doubt and leaves no key unsettled.

    Raises:
        ValueError: the subject is not a module-level name a fresh process can import.

    """
    name = _reference(subject)[2]
    workdir = Path(tempfile.mkdtemp(prefix="safeact-crash-"))
    try:
        return _Harness(subject, effects, timeout, workdir).report(name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@attrs.frozen
class _Harness:
    """One subject's runs: each in a fresh process, in ``workdir``, within ``timeout``."""

    subject: Subject
    effects: Callable[[], int]
    timeout: float
    workdir: Path

    def report(self, name: str) -> CrashReport:
        start = self.effects()
        clean_ledger = str(self.workdir / "uncrashed.db")
        clean = _run(self.subject, clean_ledger, None, self.timeout, self.workdir)
        made = self.effects() - start
        problems = _uncrashed_problems(clean, made) or _elsewhere(clean, clean_ledger)
        if problems:
            return CrashReport(name, made, (), problems)
        reached = dict(clean.reached)
        crashes = [
            CrashPoint(point, occurrence)
            for point in CRASH_POINTS
            for occurrence in range(1, reached.get(point, 0) + 1)
        ]
        points = tuple(
            self.crash_at(crash, made, clean_ledger, str(self.workdir / f"{index}.db"))
            for index, crash in enumerate(crashes)
        )
        return CrashReport(name, made, points)

    def crash_at(self, crash: CrashPoint, made: int, clean_ledger: str, ledger: str) -> PointReport:
        """Kill a run at ``crash``, carry on as an operator would, and judge what happened."""
        start = self.effects()
        runs: list[Ended] = []
        counts: list[int] = []

        def run(at: CrashPoint | None) -> None:
            runs.append(_run(self.subject, ledger, at, self.timeout, self.workdir))
            counts.append(self.effects() - start)

        run(crash)
        run(None)
        doubts = _in_doubt(ledger)
        resolved = _resolve(ledger, doubts, clean_ledger, happened=crash.point in AFTER_THE_EFFECT)
        if doubts:
            run(None)
        run(None)
        problems = judge(runs, counts, made, doubts=doubts, unsettled=_unsettled(ledger))
        return PointReport(crash, tuple(runs), tuple(counts), resolved, problems)


def _elsewhere(clean: Ended, ledger: str) -> tuple[str, ...]:
    """Whether the uncrashed run's guarded calls went to a ledger other than the harness's.

    Then every run would replay from that ledger, and no crash would touch what is judged.
    """
    if not any(point in CALL_CHECKPOINTS for point, _ in clean.reached):
        return ()
    if Path(ledger).exists():
        with get_store(ledger) as store:
            if store.records():
                return ()
    return (
        (
            "the uncrashed run's guarded calls recorded nothing in the ledger the harness "
            "gave it: they went to another ledger. Make the run's tools on its ledger "
            "argument (safe(ledger)), not on a ledger of their own"
        ),
    )


def _uncrashed_problems(clean: Ended, made: int) -> tuple[str, ...]:
    """Why an uncrashed run cannot be the measure of the crashed ones, if it cannot."""
    if clean.raised and not clean.in_doubt:
        return (f"the uncrashed run raised {clean.outcome}",)
    if clean.in_doubt:
        return (f"the uncrashed run ended in doubt: {clean.outcome}",)
    if made < 1:
        return ("the uncrashed run made no effect that effects() counts: count the real one",)
    if not clean.reached:
        return (
            (
                f"the uncrashed run made {made} effect(s) and reached no crash point: nothing "
                "guards them (guard the action with safeact.safe, or mark the effect with "
                "safeact.testing.effect_made() to have the harness crash after it)"
            ),
        )
    return ()


def judge(
    runs: list[Ended],
    counts: list[int],
    made: int,
    *,
    doubts: list[tuple[str, str]],
    unsettled: list[str],
) -> tuple[str, ...]:
    """The problems one crash point shows, given its runs and the effects after each.

    ``runs`` are the killed run, the run after it, (when ``doubts`` were resolved) the run
    after the resolve, and the last run; ``made`` the effects of an uncrashed run. The run
    after the crash tells its caller of a doubt with an ``InDoubt``, an ``InDoubtError``, a
    ``SagaFailed`` in doubt, or any answer that names each key in doubt;
    ``doubts`` the keys (and tools) in doubt after the run that followed the crash;
    ``unsettled`` the keys still unsettled at the end.
    """
    problems: list[str] = []
    if not runs[0].killed:
        problems.append(
            f"the run was not killed: it never reached this point ({runs[0].outcome}); the "
            "subject does not do the same thing in every run"
        )
    most = max(counts)
    if most > made:
        problems.append(
            f"the effect happened {most} time(s), {made} in an uncrashed run: it ran again "
            "after the crash"
        )
    problems += _after_the_crash(runs[1], doubts)
    last = runs[-1]
    if last.in_doubt or last.raised:
        problems.append(f"after the resolve, the last run said {last.outcome}")
    elif last.is_outcome and not last.replayed:
        problems.append(f"after the resolve, the last run did not replay: {last.outcome}")
    if counts[-1] != counts[-2]:
        problems.append("the last run made an effect: it did not replay")
    if unsettled:
        problems.append(f"keys left unsettled in the end: {', '.join(unsettled)}")
    return tuple(problems)


def _after_the_crash(after: Ended, doubts: list[tuple[str, str]]) -> list[str]:
    """What is wrong with the run that followed the crash, given the keys then in doubt."""
    problems: list[str] = []
    # An adapter tells of a doubt in its framework's words (an MCP error result, a LangGraph
    # interrupt, a message to the model), each naming the key: that is telling the caller.
    told = after.in_doubt or (bool(doubts) and all(key in after.said for key, _ in doubts))
    if after.killed:
        problems.append("the run after the crash was killed too")
    elif after.raised and not told:
        problems.append(f"the run after the crash raised {after.outcome}")
    elif after.in_doubt and not doubts:
        problems.append(
            f"the run after the crash said {after.outcome}, but no key is in doubt in the ledger"
        )
    elif doubts and not told:
        keys = ", ".join(key for key, _ in doubts)
        problems.append(
            f"{keys} is in doubt in the ledger, but the run after the crash said "
            f"{after.outcome}, naming no such key: it hides the doubt from its caller"
        )
    return problems


def _in_doubt(ledger: str) -> list[tuple[str, str]]:
    """The keys in doubt on ``ledger`` (an abandoned attempt counts), with their tools."""
    with get_store(ledger) as store:
        return [(record.key, record.tool) for record in store.list_in_doubt()]


def _unsettled(ledger: str) -> list[str]:
    with get_store(ledger) as store:
        return [record.key for record in store.records(unsettled=True)]


def _resolve(
    ledger: str, doubts: list[tuple[str, str]], clean_ledger: str, *, happened: bool
) -> tuple[str, ...]:
    """Resolve each key in doubt as an operator who checked the provider would.

    A key that ran gets the result the uncrashed run recorded for it; one the uncrashed run
    did not record as a success cannot be resolved as having run, and is left for the runs
    after to report.
    """
    if not doubts:
        return ()
    with get_store(clean_ledger) as clean:
        results = {key: clean.get(key) for key, _ in doubts}
    done: list[str] = []
    with get_store(ledger) as store:
        for key, _ in doubts:
            record = results[key]
            if not happened:
                store.resolve(key, happened=False, note="crash harness: it did not run")
                done.append(f"{key}: not happened")
            elif record is not None and record.state is State.SUCCEEDED:
                store.resolve(
                    key, happened=True, result=record.result, note="crash harness: it ran"
                )
                done.append(f"{key}: happened")
            else:
                done.append(f"{key}: left in doubt (the uncrashed run has no result for it)")
    return tuple(done)


def _reference(subject: object) -> tuple[str, str, str]:
    """The module and attribute a fresh process imports the subject by, and its name.

    Raises:
        ValueError: the subject is not reachable as ``module.attribute``.
        TypeError: it is neither a ``Calling`` nor a function.

    """
    if isinstance(subject, Calling):
        target: object = subject.tool
        fn = subject.tool.__wrapped__
        shown = f"{subject.tool.name}({subject.key!r}, ...)"
    elif callable(subject):
        target = fn = subject
        shown = getattr(subject, "__qualname__", repr(subject))
    else:
        raise TypeError(f"the harness takes calling(tool, key, ...) or a function, not {subject!r}")
    module_name = getattr(fn, "__module__", None)
    module = sys.modules.get(module_name or "")
    found = [name for name, value in vars(module).items() if value is target] if module else []
    if module_name in (None, "__main__") or not found:
        raise ValueError(
            f"{shown} is not a module-level name of an importable module: each run is a fresh "
            "process, which imports it; define it at the top level of a module"
        )
    return str(module_name), found[0], shown


def _run(
    subject: Subject,
    ledger: str,
    crash: CrashPoint | None,
    timeout: float,
    workdir: Path,
) -> Ended:
    """Run ``subject`` on ``ledger`` in a fresh process, killed at ``crash`` if given."""
    module, attribute, _ = _reference(subject)
    call = (subject.key, subject.args, subject.kwargs) if isinstance(subject, Calling) else None
    order = workdir / "run.pickle"
    answer = workdir / "ended.json"
    answer.unlink(missing_ok=True)
    order.write_bytes(
        pickle.dumps(
            (module, attribute, call, ledger, None if crash is None else attrs.astuple(crash))
        )
    )
    path = os.pathsep.join([entry or str(Path.cwd()) for entry in sys.path])
    env = {**os.environ, "PYTHONPATH": path}
    code = f"from safeact._crash import child; child({str(order)!r}, {str(answer)!r})"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Ended(killed=False, outcome=f"timed out after {timeout} s", raised=True)
    if done.returncode == -signal.SIGKILL:
        return Ended(killed=True)
    if done.returncode != 0 or not answer.exists():
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return Ended(killed=False, outcome=f"a crash of the process: {last}", raised=True)
    told = json.loads(answer.read_text())
    told["reached"] = tuple(tuple(pair) for pair in told["reached"])
    return Ended(killed=False, **told)


def run_crash_schedule(
    subject: Calling[Any, Any] | Run,
    schedule: tuple[CrashPoint, ...],
    *,
    ledger: str,
    timeout: float = TIMEOUT,
) -> tuple[Ended, ...]:
    """Run ``subject`` on ``ledger`` once per crash point of ``schedule``, then once more.

    Each run is a fresh process killed at its point (or ending without reaching it); the
    last runs to its end. For properties of one's own, with ``crash_schedules()``.

    Raises:
        ValueError: as ``crash_report``.

    """
    _reference(subject)
    workdir = Path(tempfile.mkdtemp(prefix="safeact-crash-"))
    try:
        return tuple(_run(subject, ledger, crash, timeout, workdir) for crash in (*schedule, None))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


_reached: Callable[[str], None] | None = None
"""In a harness's run: what counts a point reached, and kills the process at its crash."""


def effect_made() -> None:
    """Mark that the real effect just happened (call it in a fake provider, after the effect).

    Under the crash harness a run can be killed here: inside the action, after its effect,
    before anything is recorded. Anywhere else it does nothing.
    """
    if _reached is not None:
        _reached("effect")


def child(order: str, answer: str) -> None:
    """In a fresh process: import the subject, run it as ordered, write how it ended."""
    global _reached  # noqa: PLW0603 - this process is the harness's run, all of it
    module, attribute, call, ledger, crash = pickle.loads(Path(order).read_bytes())  # noqa: S301 - written by the parent just now
    subject = getattr(importlib.import_module(module), attribute)
    counts: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def reached(point: str) -> None:
        with lock:
            counts[point] += 1
            if crash is not None and (point, counts[point]) == tuple(crash):
                os.kill(os.getpid(), signal.SIGKILL)

    _reached = reached
    with checkpoint_hook(lambda point: reached(point) if point in CALL_CHECKPOINTS else None):
        told = _ran(subject, call, ledger)
    Path(answer).write_text(json.dumps({**told, "reached": sorted(counts.items())}))


def _ran(subject: Any, call: Any, ledger: str) -> dict[str, object]:
    """Run the subject and describe what it gave."""
    try:
        if call is None:
            value = subject(ledger)
        else:
            key, args, kwargs = call
            tool = type(subject)(
                subject.__wrapped__,
                StoreHandle(ledger),
                name=subject.name,
                wait=subject.wait,
                compensate=subject.compensate,
                reconcile=subject.reconcile,
                ignore=subject.ignore,
            )
            value = tool(key, *args, **kwargs)
        if inspect.iscoroutine(value):
            value = asyncio.run(_awaited(value))
    except InDoubtError as exc:
        return {"outcome": f"InDoubtError ({exc.key})", "in_doubt": True, "raised": True}
    except SagaFailed as exc:
        # The saga's own answer, replayed by every later run: not a crash of the run.
        doubt = bool(exc.in_doubt or exc.unresolved or isinstance(exc.outcome, InDoubt))
        how = "in doubt" if doubt else "rolled back"
        return {"outcome": f"SagaFailed ({exc.saga_id}: {how})", "in_doubt": doubt}
    except Exception as exc:  # noqa: BLE001 - any failure of the run is reported, not raised
        said = f"{type(exc).__name__}: {_text(exc)}"
        return {"outcome": _short(said), "raised": True, "said": said}
    return {**_described(value), "said": _text(value, repr)}


async def _awaited(value: Coroutine[Any, Any, object]) -> object:
    return await value


def _described(value: object) -> dict[str, object]:
    match value:
        case Succeeded(replayed=replayed):
            kind = "Succeeded (replayed)" if replayed else "Succeeded"
            return {"outcome": kind, "replayed": replayed, "is_outcome": True}
        case Failed(replayed=replayed):
            kind = "Failed (replayed)" if replayed else "Failed"
            return {"outcome": kind, "replayed": replayed, "is_outcome": True}
        case InDoubt(key=key, reason=reason):
            return {
                "outcome": f"InDoubt ({reason.value}, {key})",
                "in_doubt": True,
                "is_outcome": True,
            }
        case AwaitingApproval(key=key):
            return {"outcome": f"AwaitingApproval ({key})", "is_outcome": True}
        case _:
            return {"outcome": f"returned {_short(_text(value, repr))}"}


def _text(value: object, show: Callable[[object], str] = str) -> str:
    """``show(value)``, or a placeholder when it raises: a broken ``repr`` is no verdict."""
    try:
        return show(value)
    except Exception:  # noqa: BLE001 - any failure of the user's __repr__ or __str__
        return f"<a {type(value).__name__} that cannot be shown>"


def _short(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:77]}..."
