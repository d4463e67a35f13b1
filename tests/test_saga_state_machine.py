"""Sagas under random failures and in-process crashes during progress and rollback.

The machine runs on both backends, on a fresh ledger per example: a SQLite file, then a
PostgreSQL schema; and in both forms of a saga: ``with Saga(...)`` with plain functions
(``SafeTool``), and ``async with Saga(...)`` awaiting ``async def`` steps and compensations
(``AsyncSafeTool``), each run on an event loop of its own.
"""

import asyncio
from collections import Counter
from typing import ClassVar, Literal

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from safeact import Saga, SagaFailed, SagaState, State, get_store
from safeact._protocol import CALL_CHECKPOINTS, UNSETTLED, Checkpoint, checkpoint_hook
from tests.actions import bury_owners
from tests.conftest import new_ledger, require

Driver = Literal["sync", "async"]

SAGAS = st.sampled_from(["s0", "s1", "s2"])
STEPS = 3
UNDONE = (0, 1)  # steps that have a compensation


class Crash(BaseException):
    """The process dies here."""


class SagaMachine(RuleBasedStateMachine):
    backend: ClassVar[str] = "sqlite"
    driver: ClassVar[Driver] = "sync"

    def __init__(self) -> None:
        super().__init__()
        self.location, self.remove = new_ledger(self.backend)
        self.store = get_store(self.location)
        self.runs: Counter[str] = Counter()  # every real action, by key; outside the store
        self.plans: dict[str, tuple[int | None, int | None]] = {}

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            self.remove()

    def run_saga(self, saga_id: str) -> list[int]:
        failing_step, failing_undo = self.plans[saga_id]

        def act(key: str, index: int) -> int:
            self.runs[key] += 1
            if index == failing_step:
                raise RuntimeError(f"step {index} fails")
            return index

        def undo(key: str, value: int) -> None:
            self.runs[key] += 1
            if value == failing_undo:
                raise RuntimeError(f"undo {value} fails")

        if self.driver == "sync":
            with Saga(saga_id, self.store) as saga:
                return [
                    saga.step(act, index, compensate=undo if index in UNDONE else None)
                    for index in range(STEPS)
                ]

        async def act_async(key: str, index: int) -> int:
            return act(key, index)

        async def undo_async(key: str, value: int) -> None:
            undo(key, value)

        async def run() -> list[int]:
            async with Saga(saga_id, self.store) as saga:
                return [
                    await saga.step(
                        act_async, index, compensate=undo_async if index in UNDONE else None
                    )
                    for index in range(STEPS)
                ]

        return asyncio.run(run())

    @rule(
        saga_id=SAGAS,
        failing_step=st.none() | st.integers(0, STEPS - 1),
        failing_undo=st.none() | st.sampled_from(UNDONE),
        point=st.sampled_from(CALL_CHECKPOINTS),
        nth=st.integers(1, 2 * STEPS + 1),
        crash=st.booleans(),
    )
    def run(  # noqa: PLR0913, PLR0917 - one argument per random choice
        self,
        saga_id: str,
        failing_step: int | None,
        failing_undo: int | None,
        point: Checkpoint,
        nth: int,
        crash: bool,
    ) -> None:
        """Run a saga (its plan is fixed at first use), maybe dying at the nth checkpoint."""
        self.plans.setdefault(saga_id, (failing_step, failing_undo))
        reached: Counter[str] = Counter()

        def die(name: Checkpoint) -> None:
            reached[name] += 1
            if crash and name == point and reached[name] == nth:
                raise Crash

        ended: object
        try:
            with checkpoint_hook(die):
                ended = self.run_saga(saga_id)
        except Crash:
            bury_owners(self.store)
            self.store.close()
            self.store = get_store(self.location)
            return
        except SagaFailed as failure:
            ended = failure.saga_id
        assert ended in (list(range(STEPS)), saga_id)

    @rule(saga_id=SAGAS)
    def resolve(self, saga_id: str) -> None:
        """An operator resolves the saga's in-doubt steps and undos by what really happened."""
        saga = self.store.get_saga(saga_id)
        for step in saga.steps if saga else ():
            for key in (step, f"{step}:compensate"):
                record = self.store.get(key)
                if record is None or record.state not in UNSETTLED:
                    continue
                if self.runs[key]:
                    value = None if key == f"{step}:compensate" else int(step.split(":")[1])
                    self.store.resolve(key, happened=True, result=value)
                else:
                    self.store.resolve(key, happened=False, force=True)  # its run is over

    @invariant()
    def every_action_ran_at_most_once(self) -> None:
        assert all(count == 1 for count in self.runs.values()), self.runs

    @invariant()
    def finished_sagas_did_what_they_say(self) -> None:
        for saga_id in self.plans:
            saga = self.store.get_saga(saga_id)
            if saga is None:
                continue
            succeeded = []
            for key in saga.steps:
                record = self.store.get(key)
                if record is not None and record.state is State.SUCCEEDED:
                    succeeded.append(key)
            undone = [key for key in succeeded if int(key.split(":")[1]) in UNDONE]
            if saga.state is SagaState.COMPLETED:
                assert len(succeeded) == STEPS
                assert not any(self.runs[f"{key}:compensate"] for key in succeeded)
            if saga.state is SagaState.COMPENSATED:
                # Every undoable step that may have had an effect, in doubt or not, was undone.
                acted = [key for key in saga.steps if self._acted(key)]
                assert all(self.runs[f"{key}:compensate"] == 1 for key in acted), acted
            if saga.state is SagaState.ROLLBACK_INCOMPLETE:
                assert all(self.runs[f"{key}:compensate"] <= 1 for key in undone)

    def _acted(self, key: str) -> bool:
        """Whether an undoable step's action really ran and did not fail."""
        record = self.store.get(key)
        return (
            int(key.split(":")[1]) in UNDONE
            and self.runs[key] == 1
            and (record is None or record.state is not State.FAILED)
        )


class PostgresSagaMachine(SagaMachine):
    """The same machine on a PostgreSQL schema."""

    backend = "postgres"


class AsyncSagaMachine(SagaMachine):
    """The same machine with async sagas."""

    driver = "async"


class AsyncPostgresSagaMachine(PostgresSagaMachine):
    """The same machine with async sagas on a PostgreSQL schema."""

    driver = "async"


MACHINES: dict[tuple[str, Driver], type[SagaMachine]] = {
    ("sqlite", "sync"): SagaMachine,
    ("postgres", "sync"): PostgresSagaMachine,
    ("sqlite", "async"): AsyncSagaMachine,
    ("postgres", "async"): AsyncPostgresSagaMachine,
}
EXAMPLES = {
    "sqlite": max(settings().max_examples, 100),
    # A PostgreSQL example costs a schema, a migration and a new pool at every crash: about
    # four times a SQLite one, so it runs half as many to keep the suite short.
    "postgres": max(settings().max_examples // 2, 50),
}


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_saga_state_machine(backend: str, driver: Driver) -> None:
    """Random sagas, failures and crashes: every action runs once; ended sagas did what they say."""
    require(backend)
    run_state_machine_as_test(
        MACHINES[backend, driver],
        settings=settings(settings(), max_examples=EXAMPLES[backend], stateful_step_count=20),
    )
