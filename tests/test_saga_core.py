"""The sans-IO core of a saga, driven directly by a world Hypothesis makes up.

``SagaRun`` is played, run after run of the same saga, against an in-memory ledger, with
steps and compensations whose fates are drawn as they are called: succeeded, failed, in
doubt, ran without a stored result, raised before running, or a crash that cuts the run
short (a rollback included, which the next run takes up). Between runs an operator may
resolve what is in doubt, by what really happened. Whatever the world does, the saga's
rules hold.
"""

from collections import Counter
from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeVar, cast

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safeact import DoubtReason, Failed, SafeError, SagaFailed, SagaRecord, SagaState, State
from safeact._outcome import Outcome, Succeeded, failed_from, in_doubt_from
from safeact._owner import Owner
from safeact._protocol import UNSETTLED, Record
from safeact._saga_run import (
    Begin,
    Compensate,
    Move,
    Read,
    ReadSaga,
    Rebuild,
    RecordStep,
    SagaRequest,
    SagaRun,
    Undo,
    _undo_kind,
)

R = TypeVar("R")
EXPLORE = settings(max_examples=300)
"""Each example is cheap, and the rarer fates need many to meet a rollback."""
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
OWNER = Owner(host="h", boot_id="boot", pid=7, started=70)
NAMES = ("charge", "book", "note", "send")
Fate = Literal["succeeded", "failed", "in_doubt", "unstored", "raised", "crash"]
SUCCESSES: tuple[Fate, ...] = ("succeeded",) * 8
"""Most calls succeed, so that sagas go far enough to have much to undo."""
STEP_FATES: tuple[Fate, ...] = (*SUCCESSES, "failed", "in_doubt", "unstored", "crash")
UNDO_FATES: tuple[Fate, ...] = ("succeeded", "succeeded", "failed", "in_doubt", "unstored")
UNDO_FATES += ("raised", "crash")


class Crash(BaseException):
    """The process dies here."""


class GaveUp(Exception):  # noqa: N818 - what the agent did
    """The saga's block raised."""


def undo(key: str, value: object) -> None:
    """A compensation; the world plays its calls, so it never runs."""


def record(
    key: str, state: State, result: object = None, reason: DoubtReason | None = None
) -> Record:
    return Record(
        key=key,
        tool="tool",
        state=state,
        args_hash="0" * 64,
        attempt_id=f"attempt-{key}",
        attempted_at=NOW - timedelta(seconds=5),
        owner=OWNER,
        lease_until=NOW + timedelta(seconds=25),
        result=result,  # type: ignore[arg-type] # ints and None: JSON
        error_type="RuntimeError" if state is State.FAILED else None,
        error_message="down" if state is State.FAILED else None,
        doubt_reason=reason,
    )


def replayed(found: Record) -> Outcome[object]:
    """What a guarded call of a key the ledger has settled or in doubt returns."""
    if found.state is State.SUCCEEDED:
        return Succeeded(found.key, found.result, replayed=True)
    if found.state is State.FAILED:
        return failed_from(found)
    return in_doubt_from(found, found.doubt_reason or DoubtReason.LEASE_EXPIRED)


@attrs.define
class Asked:
    """A compensation the core asked for, with its step's and its own record at that moment."""

    request: Compensate
    step: Record | None
    before: Record | None


@attrs.define
class Run:
    """What one run of the saga asked for and how it ended, with the ledger after it."""

    asked: list[Asked] = attrs.Factory(list)
    called: list[tuple[str, SagaState, State | None]] = attrs.Factory(list)
    """Each step called, with the saga's state and the step's in the ledger at that moment."""
    completed: list[str] = attrs.Factory(list)
    entered: SagaRecord | None = None
    ended: SagaFailed | BaseException | None = None
    saga: SagaRecord | None = None
    calls: dict[str, Record] = attrs.Factory(dict)


@attrs.define
class World:
    """The ledger, the truth outside it, and the fates drawn for each new call."""

    data: st.DataObject
    undoable: tuple[bool, ...]
    saga: SagaRecord | None = None
    calls: dict[str, Record] = attrs.Factory(dict)
    happened: Counter[str] = attrs.Factory(Counter)
    values: dict[str, int | None] = attrs.Factory(dict)
    refusal: Exception | None = None
    run: Run = attrs.Factory(Run)

    def drive(self, requests: Generator[SagaRequest, object, R]) -> R:
        answer: object = None
        try:
            while True:
                answer = self.answer(requests.send(answer))
        except StopIteration as done:
            return cast("R", done.value)

    def answer(self, request: SagaRequest) -> object:  # noqa: PLR0911 - a case per request
        match request:
            case Begin(saga_id):
                if self.saga is None:
                    self.saga = SagaRecord(
                        saga_id=saga_id, state=SagaState.RUNNING, started_at=NOW, updated_at=NOW
                    )
                return self.saga
            case RecordStep(_, index, _, key, compensation):
                assert self.saga is not None
                if index < len(self.saga.steps):
                    return self.saga.steps[index]
                self.saga = attrs.evolve(
                    self.saga,
                    steps=(*self.saga.steps, key),
                    compensations=(*self.saga.compensations, compensation),
                )
                return key
            case Move(_, state, aborted_step, abort_reason):
                assert self.saga is not None
                self.saga = attrs.evolve(
                    self.saga,
                    state=state,
                    aborted_step=self.saga.aborted_step or aborted_step,
                    abort_reason=self.saga.abort_reason or abort_reason,
                )
                return None
            case ReadSaga():
                return self.saga
            case Read(key):
                return self.calls.get(key)
            case Rebuild(record, replay):
                return replay(record)
            case Compensate(step, key, _, _):
                self.run.asked.append(Asked(request, self.calls.get(step), self.calls.get(key)))
                return self.call(key, None, UNDO_FATES)

    def call(self, key: str, value: int | None, fates: tuple[Fate, ...]) -> Outcome[object] | None:
        """A guarded call of ``key``: what the ledger has, replayed, or else a fate drawn now."""
        found = self.calls.get(key)
        if found is not None and found.state is not State.RELEASED:
            return replayed(found)
        self.values[key] = value
        fate = self.data.draw(st.sampled_from(fates), label=f"fate of {key}")
        match fate:
            case "succeeded":
                self.happened[key] += 1
                self.calls[key] = record(key, State.SUCCEEDED, value)
                return Succeeded(key, value)
            case "failed":
                self.calls[key] = record(key, State.FAILED)
                return Failed(key, "tool", "RuntimeError", "down", exception=RuntimeError("down"))
            case "in_doubt":
                self.happened[key] += self.data.draw(st.booleans(), label="acted")
                self.calls[key] = record(key, State.IN_DOUBT, reason=DoubtReason.LEASE_EXPIRED)
                return replayed(self.calls[key])
            case "unstored":
                self.happened[key] += 1
                self.calls[key] = record(key, State.IN_DOUBT, reason=DoubtReason.RESULT_NOT_STORED)
                return Succeeded(key, value)
            case "raised":
                return None
            case "crash":
                point = self.data.draw(st.sampled_from(["before claim", "claimed", "acted"]))
                if point != "before claim":
                    self.happened[key] += point == "acted"
                    self.calls[key] = record(key, State.IN_DOUBT, reason=DoubtReason.CRASHED)
                raise Crash

    def resolve(self) -> None:
        """An operator resolves some keys in doubt, by what really happened."""
        for key, found in sorted(self.calls.items()):
            if found.state in UNSETTLED and self.data.draw(st.booleans(), label=f"resolve {key}"):
                state = State.SUCCEEDED if self.happened[key] else State.RELEASED
                self.calls[key] = record(key, state, self.values[key])

    def block(self, saga: SagaRun) -> None:
        """The saga's code: take some steps in order, then end quietly, raise, or die."""
        reach = st.just(len(NAMES)) | st.integers(0, len(NAMES))
        for _ in range(self.data.draw(reach, label="steps reached")):
            index = saga.take_index()
            name = NAMES[index]
            compensation = Undo(f"undo_{name}", undo) if self.undoable[index] else None
            try:
                key = self.drive(saga.begin_step(index, name, compensation))
            except SagaFailed:
                raise
            except Exception as exc:  # as Saga.step does: what it refuses undoes nothing
                self.refusal = exc
                raise
            assert self.saga is not None
            found = self.calls.get(key)
            self.run.called.append((key, self.saga.state, None if found is None else found.state))
            outcome = self.call(key, 100 + index, STEP_FATES)
            assert outcome is not None
            self.drive(saga.settle_step(key, compensation, outcome, lambda found: found.result))
            self.run.completed.append(key)
        match self.data.draw(st.sampled_from(["quiet", "raise", "die"]), label="block ends"):
            case "raise":
                raise GaveUp
            case "die":
                raise Crash
            case _:
                pass

    def play(self) -> Run:
        """One run of the saga's code, as ``with Saga(...)`` runs it."""
        self.run = Run(entered=self.saga)
        saga = SagaRun("s", "memory")
        try:
            self.drive(saga.enter())
            try:
                self.block(saga)
            except BaseException as exc:
                self.drive(saga.end(exc, refused=exc is self.refusal))
                raise
            self.drive(saga.end(None, refused=False))
        except (SagaFailed, SafeError, GaveUp, Crash) as ended:
            self.run.ended = ended
        self.run.saga, self.run.calls = self.saga, dict(self.calls)
        return self.run


def play(data: st.DataObject) -> tuple[World, list[Run]]:
    """Run one saga's code several times over one ledger, an operator looking in between."""
    world = World(data, data.draw(st.tuples(*[st.booleans()] * len(NAMES)), label="undoable"))
    runs = []
    for _ in range(data.draw(st.integers(1, 5), label="runs")):
        runs.append(world.play())
        world.resolve()
    return world, runs


def state_of(run: Run, key: str) -> State | None:
    found = run.calls.get(key)
    return None if found is None else found.state


def index(run: Run, step: str) -> int:
    assert run.saga is not None
    return run.saga.steps.index(step)


@EXPLORE
@given(st.data())
def test_each_compensation_is_asked_for_once_newest_first(data: st.DataObject) -> None:
    """A run asks for each compensation at most once, newest step first, with its stored value."""
    _, runs = play(data)
    for run in runs:
        order = [index(run, asked.request.step) for asked in run.asked]
        assert sorted(set(order), reverse=True) == order
        for asked in run.asked:
            assert asked.step is not None
            expected = Compensate(
                asked.request.step,
                f"{asked.request.step}:compensate",
                asked.step.result,
                asked.request.undo,
            )
            assert expected == asked.request


@EXPLORE
@given(st.data())
def test_only_steps_that_succeeded_in_this_run_are_compensated(data: st.DataObject) -> None:
    """A compensated step succeeded in this run and is stored so: one in doubt never is."""
    _, runs = play(data)
    for run in runs:
        for asked in run.asked:
            assert asked.step is not None
            expected = (State.SUCCEEDED, True)
            assert expected == (asked.step.state, asked.request.step in run.completed)


@EXPLORE
@given(st.data())
def test_a_run_completes_the_saga_only_after_taking_every_step_stored(
    data: st.DataObject,
) -> None:
    """A run completes the saga only if it took every recorded step, each stored as succeeded."""
    _, runs = play(data)
    for run in runs:
        assert run.saga is not None
        if run.saga.state is not SagaState.COMPLETED:
            continue
        states = {state_of(run, key) for key in run.saga.steps}
        assert states <= {State.SUCCEEDED}
        if run.entered is None or run.entered.state is not SagaState.COMPLETED:
            assert list(run.saga.steps) == run.completed


@EXPLORE
@given(st.data())
def test_a_rollback_taken_up_again_calls_only_steps_it_can_replay(data: st.DataObject) -> None:
    """While the ledger says the saga is (being) undone, only steps with an outcome are called."""
    _, runs = play(data)
    for run in runs:
        for _, saga, step in run.called:
            if saga in (SagaState.COMPENSATING, SagaState.ROLLBACK_INCOMPLETE):
                assert step in (State.SUCCEEDED, State.FAILED)


@EXPLORE
@given(st.data())
def test_steps_without_a_compensation_are_skipped(data: st.DataObject) -> None:
    """No compensation is asked for a step without one, and the report lists it as skipped."""
    world, runs = play(data)
    for run in runs:
        for asked in run.asked:
            assert world.undoable[index(run, asked.request.step)]
        if isinstance(run.ended, SagaFailed) and run.saga is not None:
            expected = tuple(
                key
                for key, compensation in reversed(
                    list(zip(run.saga.steps, run.saga.compensations, strict=True))
                )
                if compensation is None and state_of(run, key) is State.SUCCEEDED
            )
            assert expected == run.ended.skipped


@EXPLORE
@given(st.data())
def test_compensated_only_when_everything_that_happened_was_undone(data: st.DataObject) -> None:
    """A saga ends COMPENSATED only if every step that happened and has an undo was undone."""
    world, runs = play(data)
    for run in runs:
        assert run.saga is not None
        if isinstance(run.ended, SagaFailed):
            expected = run.ended.fully_rolled_back
            assert expected == (run.saga.state is SagaState.COMPENSATED)
        if run.saga.state is not SagaState.COMPENSATED:
            continue
        for key, compensation in zip(run.saga.steps, run.saga.compensations, strict=True):
            step, done = run.calls.get(key), run.calls.get(f"{key}:compensate")
            if compensation is not None and step is not None:
                assert step.state not in UNSETTLED
                if step.state is State.SUCCEEDED:
                    assert done is not None
                    assert done.state is State.SUCCEEDED
    assert world.saga is not None
    if world.saga.state is SagaState.COMPENSATED:
        for key, compensation in zip(world.saga.steps, world.saga.compensations, strict=True):
            if compensation is not None and world.happened[key]:
                assert world.happened[f"{key}:compensate"] == 1


@EXPLORE
@given(st.data())
def test_the_report_partitions_the_steps(data: st.DataObject) -> None:
    """Each recorded step is in at most one list of the report, newest first: the one it earns."""
    _, runs = play(data)
    for run in runs:
        if not isinstance(run.ended, SagaFailed):
            continue
        assert run.saga is not None
        failure = run.ended
        lists = {
            "compensated": failure.compensated,
            "replayed": failure.replayed,
            "failed": failure.failed,
            "in_doubt": failure.in_doubt,
            "unreached": failure.unreached,
            "skipped": failure.skipped,
            "unresolved": failure.unresolved,
        }
        actual = {key: kind for kind, keys in lists.items() for key in keys}
        assert sum(len(keys) for keys in lists.values()) == len(actual)
        for keys in lists.values():
            order = [index(run, key) for key in keys]
            assert sorted(order, reverse=True) == order
        called = {asked.request.step: asked.before for asked in run.asked}
        expected = {
            key: kind
            for key, compensation in zip(run.saga.steps, run.saga.compensations, strict=True)
            if (kind := earned(run, key, compensation, called)) is not None
        }
        assert expected == actual


def earned(  # noqa: PLR0911 - a case per list of the report
    run: Run, key: str, compensation: str | None, called: dict[str, Record | None]
) -> str | None:
    """The list of the report a step belongs in, as ``SagaFailed``'s docstring defines them."""
    step, done = run.calls.get(key), run.calls.get(f"{key}:compensate")
    if step is not None and step.state in UNSETTLED and compensation is not None:
        return "unresolved"
    if step is None or step.state is not State.SUCCEEDED:
        return None
    if compensation is None:
        return "skipped"
    before = called.get(key)
    if key in called and (before is None or before.state is State.RELEASED):
        # Called in this run: how it went is what it left in the ledger; it raised if nothing.
        if done is None or done.state is State.RELEASED:
            return "failed"
        return {State.SUCCEEDED: "compensated", State.FAILED: "failed"}.get(done.state, "in_doubt")
    if done is None or done.state is State.RELEASED:
        return "unreached"
    return {State.SUCCEEDED: "replayed", State.FAILED: "failed"}.get(done.state, "in_doubt")


@pytest.mark.parametrize(
    ("outcome", "after", "kind"),
    [
        (Succeeded("u", 1), State.SUCCEEDED, "compensated"),
        (Succeeded("u", 1, replayed=True), State.SUCCEEDED, "replayed"),
        (Succeeded("u", 1, recorded=False), State.IN_DOUBT, "in_doubt"),
        (Failed("u", "undo", "RuntimeError", "down"), State.FAILED, "failed"),
        (
            replayed(record("u", State.IN_DOUBT, reason=DoubtReason.CRASHED)),
            State.IN_DOUBT,
            "in_doubt",
        ),
    ],
    ids=["ran", "ran before", "not stored", "failed", "in doubt"],
)
def test_a_compensation_called_in_this_run_is_classed_by_its_outcome_and_record(
    outcome: Outcome[object], after: State, kind: str
) -> None:
    """How a compensation called now went, for the report: its outcome, and what it left."""
    assert _undo_kind(outcome, record("u", after)) == kind


def test_a_run_that_rolled_back_takes_no_more_steps() -> None:
    """Once a run rolled the saga back, asking for another step raises the same report."""
    failure = SagaFailed("s", step=None, outcome=None, reason="GaveUp: ")
    saga = SagaRun(
        "s", "memory", state=SagaState.COMPENSATED, next_index=1, failure=failure, block="in"
    )
    with pytest.raises(SagaFailed) as caught:
        saga.take_index()
    assert failure is caught.value
    assert saga.next_index == 1


@pytest.mark.parametrize("exc", [ValueError("refused"), KeyboardInterrupt()])
def test_a_refusal_or_an_interrupt_rolls_nothing_back(exc: BaseException) -> None:
    """A block ended by step()'s refusal or by an interrupt asks for nothing: no rollback."""
    saga = SagaRun("s", "memory", recorded=("s:0:charge",), next_index=1)
    ending = saga.end(exc, refused=isinstance(exc, ValueError))
    with pytest.raises(StopIteration):
        next(ending)
    assert saga.state is SagaState.RUNNING
