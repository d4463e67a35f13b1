"""Random calls, crashes, frozen owners, restarts, probes and resolves, against a model.

The machine runs on both backends, on a fresh ledger per example: a SQLite file, then a
PostgreSQL schema; and through both drivers of the guarded call: a ``SafeTool`` called
directly, and an ``AsyncSafeTool`` (the same action as an ``async def``) awaited on an
event loop of its own per call, with the same rules, model and invariants.

An owner can freeze inside its action (a thread blocked on an event, or an async action
awaiting it on its loop in its own thread, standing for a SIGSTOPped, swapped-out or
GIL-starved process) while other rules run: callers, leases
running out, probes, resolves, crash marks, other crashes; it then thaws and completes, or
dies with its process at the next restart. ``frozen_owner`` packs such an interleaving into
one call. The model knows the release rule: a key is released only on proof that its owner
is finished (its process died, or it recorded its interruption) or by an operator's force.
So the action runs at most once per key, plus once per such release; two runs of one key
never overlap unless an operator forced the first one out; a key settled as happened keeps
its value, and an owner that completes afterwards is a late completion; a key whose result
could not be stored is never released. Calls come by explicit keys, and from a host program's
run: a model that asks for the same call again and an MCP host that retries it must reach the
first ask's key (``in_run``, ``key_for``), through doubts, crashes and restarts of the run.
"""

import asyncio
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import ClassVar, Concatenate, Literal, ParamSpec, TypeVar

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from safeact import (
    AsyncSafeTool,
    DoubtReason,
    Failed,
    Happened,
    InDoubt,
    KeyConflictError,
    NotHappened,
    NotProvenError,
    Outcome,
    SafeError,
    SagaState,
    State,
    StoreError,
    Succeeded,
    ToolCall,
    Unknown,
    Verdict,
    Why,
    get_store,
    in_run,
    run_scope,
    safe,
)
from safeact._protocol import CALL_CHECKPOINTS, PROOF, UNSETTLED, Checkpoint, checkpoint_hook
from safeact.mcp import key_for
from tests.actions import Receipt, bury_attempt, bury_owners, expire_leases
from tests.conftest import new_ledger, require

P = ParamSpec("P")
T = TypeVar("T")

Driver = Literal["sync", "async"]
Answer = Literal["happened", "not_happened", "unknown"]
Op = Literal[
    "expire",
    "call",
    "mark_crashed",
    "resolve:happened",
    "resolve:released",
    "resolve:forced",
    "probe:happened",
    "probe:not_happened",
    "probe:unknown",
    "reconcile:happened",
    "reconcile:not_happened",
    "reconcile:unknown",
]

KEYS = st.sampled_from(["a", "b", "c"])
VARIANTS = st.integers(0, 1)
CHECKPOINTS = st.sampled_from(CALL_CHECKPOINTS)
ANSWERS: st.SearchStrategy[Answer] = st.sampled_from(["happened", "not_happened", "unknown"])
BY_NAME: dict[str, Answer] = {"happened": "happened", "not_happened": "not_happened"}
SCENARIOS: list[list[Op]] = [
    ["expire", "resolve:released", "resolve:forced", "call"],  # forced out, run again: late
    ["expire", "resolve:happened", "call"],  # settled as happened under its owner: late
    ["expire", "probe:not_happened", "reconcile:not_happened", "resolve:released"],  # withheld
    ["mark_crashed", "expire", "mark_crashed", "probe:unknown", "resolve:forced"],
]
"""Interleavings worth trying in every run, besides the random ones."""
OPS: st.SearchStrategy[list[Op]] = st.one_of(
    st.sampled_from(SCENARIOS),
    st.lists(
        st.sampled_from(
            [
                "expire",
                "call",
                "mark_crashed",
                "resolve:happened",
                "resolve:released",
                "resolve:forced",
                "probe:happened",
                "probe:not_happened",
                "probe:unknown",
                "reconcile:happened",
                "reconcile:not_happened",
                "reconcile:unknown",
            ]
        ),
        min_size=1,
        max_size=6,
    ),
)
LEASE = 3600.0
"""So long that no heartbeat renews a lease during an example: only ``expire`` ends one."""
PROBED = 300
"""The amount a probe answering "happened" reports."""
RUN = "run-1"
"""The host program's run key: a restart runs it again, under the same key."""
DEADLINE = 10.0
"""Seconds a frozen owner may take to reach its action or to end once let go."""


class Crash(BaseException):
    """The process dies here: no `except Exception` may catch it."""


def awaited(tool: AsyncSafeTool[P, T]) -> Callable[Concatenate[str, P], Outcome[T]]:
    """``tool`` as a blocking call: each call awaited to its end on a new event loop.

    The loop runs in the calling thread, or, when that thread's loop is busy (a call made
    inside an async action, by a rule that runs meanwhile), in a thread of its own.
    """

    def call(key: str, /, *args: P.args, **kwargs: P.kwargs) -> Outcome[T]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            busy = False  # run outside this handler, or its error chains to every failure
        else:
            busy = True
        if not busy:
            return asyncio.run(tool(key, *args, **kwargs))
        with ThreadPoolExecutor(1, thread_name_prefix="caller") as elsewhere:
            return elsewhere.submit(asyncio.run, tool(key, *args, **kwargs)).result()

    return call


@attrs.define
class Expected:
    """What the model says about one key."""

    variant: int
    fail: bool
    state: State | None = None
    value: Receipt | None = None
    reason: DoubtReason | None = None
    """What a caller is told while the key is unsettled; IN_FLIGHT: a live owner, lease held."""
    attempt: int = 0
    """How many attempts have claimed the key."""
    runs: int = 0
    proven: int = 0
    """Releases made on proof that the released attempt's owner was finished."""
    forced: int = 0
    """Releases an operator forced."""
    late: int = 0


@attrs.define(eq=False)
class Running:
    """One run of the action, from its start to its end (or its process's death)."""

    key: str
    forced_out: bool = False
    """An operator released its attempt by force: a new run may overlap it."""


@attrs.define(eq=False)
class Frozen:
    """An owner frozen inside its action, until it thaws or dies with its process."""

    key: str
    variant: int
    fail: bool
    attempt: int
    attempt_id: str = ""
    entered: threading.Event = attrs.Factory(threading.Event)
    go: threading.Event = attrs.Factory(threading.Event)
    dying: bool = False
    thread: threading.Thread | None = None
    """None for the owner of ``frozen_owner``, frozen in the machine's own thread."""
    outcome: object = None

    def woke(self) -> None:
        """The owner was let go: it goes on with its action, unless its process died."""
        if self.dying:
            raise Crash


class LedgerMachine(RuleBasedStateMachine):
    backend: ClassVar[str] = "sqlite"
    driver: ClassVar[Driver] = "sync"

    def __init__(self) -> None:
        super().__init__()
        self.location, self.remove = new_ledger(self.backend)
        self.runs: Counter[str] = Counter()  # side effects, kept outside the store
        self.running: list[Running] = []
        self.overlaps: list[str] = []  # keys whose runs overlapped without a forced release
        self.model: dict[str, Expected] = {}
        self.frozen: list[Frozen] = []
        self.freezing: dict[str, Frozen] = {}  # the next run of this key freezes
        self.interrupting = False
        self.answer: Answer = "unknown"  # what the probed tool's probe says
        self.during: Callable[[str], None] | None = None  # runs inside the action, once
        self.broken: list[Exception] = []  # errors of `during`, which the tool would record
        self.asked: defaultdict[tuple[str, int, bool], set[str]] = defaultdict(set)
        self.run = ExitStack()  # the host's run_scope, entered anew by each process
        self.open()

    def open(self) -> None:
        self.run.close()
        self.run.enter_context(run_scope(RUN))
        self.store = get_store(self.location, lease=LEASE)

        def act(key: str, variant: int, fail: bool) -> Receipt:
            with self.action(key) as frozen:
                if frozen is not None:
                    frozen.go.wait()
                    frozen.woke()
            return self.ending(key, variant, fail)

        async def act_async(key: str, variant: int, fail: bool) -> Receipt:
            with self.action(key) as frozen:
                if frozen is not None:
                    await asyncio.to_thread(frozen.go.wait)  # suspended; its loop is idle
                    frozen.woke()
            return self.ending(key, variant, fail)

        def probe(key: str, receipt: InDoubt) -> Verdict[Receipt]:
            match self.answer:
                case "happened":
                    return Happened(Receipt(key, PROBED))
                case "not_happened":
                    return NotHappened()
                case "unknown":
                    return Unknown()

        plain = safe(self.store, name="act", wait=0)
        probing = safe(self.store, name="act", wait=0, reconcile=probe)
        self.digest = plain(act)._digest
        self.act: Callable[[str, int, bool], Outcome[Receipt]]
        self.probed: Callable[[str, int, bool], Outcome[Receipt]]
        if self.driver == "sync":
            self.act, self.probed = plain(act), probing(act)
        else:
            self.act, self.probed = awaited(plain(act_async)), awaited(probing(act_async))

    @contextmanager
    def action(self, key: str) -> Iterator[Frozen | None]:
        """One run of the action, counted and checked for overlap; it yields the owner to freeze.

        The block freezes that owner, if there is one; then ``during`` runs.
        """
        self.runs[key] += 1
        if any(run.key == key and not run.forced_out for run in self.running):
            self.overlaps.append(key)
        me = Running(key)
        self.running.append(me)
        try:
            frozen = self.freezing.pop(key, None)
            if frozen is not None:
                frozen.entered.set()
            yield frozen
            self.meanwhile(key)
        finally:
            self.running.remove(me)

    def ending(self, key: str, variant: int, fail: bool) -> Receipt:
        """How the action ends: interrupted, raising, or returning its receipt."""
        if self.interrupting:
            raise KeyboardInterrupt
        if fail:
            raise ValueError(f"declined {variant}")
        return Receipt(key, variant)

    def meanwhile(self, key: str) -> None:
        """Run ``during`` (once) inside the action, as the tool would see it."""
        during, self.during = self.during, None
        if during is not None:
            try:
                during(key)
            except Exception as exc:
                self.broken.append(exc)  # the tool would take it for the action's failure
                raise

    def check_during(self) -> None:
        if self.broken:
            raise self.broken[0]

    def teardown(self) -> None:
        try:
            self.kill_frozen()
        finally:
            self.run.close()
            self.remove()

    # The model's steps, used by the rules and inside a frozen owner.

    def expected(self, key: str, variant: int, fail: bool) -> Expected | None:
        """The model of ``key``, or None if this call conflicts with how it was first used."""
        known = self.model.get(key)
        if known is None or known.state is None:  # the key is bound by its first record
            known = self.model[key] = Expected(variant, fail)
        if (known.variant, known.fail) != (variant, fail):
            with pytest.raises(KeyConflictError):
                self.act(key, variant, fail)
            return None
        return known

    def claimed(self, known: Expected) -> None:
        """A new attempt claimed the key and its action started."""
        known.attempt += 1
        known.runs += 1
        known.reason = None

    def ran(self, key: str, known: Expected, outcome: Outcome[Receipt]) -> None:
        """A call ran the action to its end, now: check its outcome, which the key keeps."""
        self.claimed(known)
        if known.fail:
            assert outcome == Failed(key, "act", "ValueError", f"declined {known.variant}")
            known.state, known.value = State.FAILED, None
        else:
            known.state, known.value = State.SUCCEEDED, Receipt(key, known.variant)
            assert outcome == Succeeded(key, known.value)

    def released(self, key: str, *, forced: bool) -> None:
        """``key`` was released: by force, or on proof, which must be true of the model."""
        known = self.model[key]
        known.state, known.reason = State.RELEASED, None
        if forced:
            known.forced += 1
            for run in self.running:
                if run.key == key:
                    run.forced_out = True
        else:
            assert not any(run.key == key and not run.forced_out for run in self.running), (
                "the model took a live owner for finished"
            )
            known.proven += 1

    def answered(self, key: str, answer: Answer) -> bool:
        """A probe answered for IN_DOUBT ``key``; return whether a release was withheld."""
        known = self.model[key]
        if answer == "happened":
            known.state, known.value, known.reason = State.SUCCEEDED, Receipt(key, PROBED), None
        elif answer == "not_happened":
            if known.reason not in PROOF:
                return True
            self.released(key, forced=False)
        return False

    def call_once(self, key: str, variant: int, fail: bool, answer: Answer | None = None) -> None:
        """A caller calls the tool; with ``answer``, the tool's probe answers that."""
        known = self.expected(key, variant, fail)
        if known is None:
            return
        if answer is None:
            outcome = self.act(key, variant, fail)
        else:
            self.answer = answer
            outcome = self.probed(key, variant, fail)
        withheld = False
        if known.state in UNSETTLED and known.reason is not DoubtReason.IN_FLIGHT:
            known.state = State.IN_DOUBT  # the caller marks it
            if answer is not None:
                withheld = self.answered(key, answer)
        match known.state:
            case None | State.RELEASED:
                self.ran(key, known, outcome)
            case State.SUCCEEDED:
                assert outcome == Succeeded(key, known.value, replayed=True)
            case State.FAILED:
                assert outcome == Failed(
                    key, "act", "ValueError", f"declined {variant}", replayed=True
                )
            case State.ATTEMPTING | State.IN_DOUBT:
                assert isinstance(outcome, InDoubt)
                assert (outcome.key, outcome.tool, outcome.reason) == (key, "act", known.reason)
                assert (outcome.note is not None) is withheld

    def expire(self) -> None:
        """Every running attempt's lease runs out: its owner looks frozen, or cut off."""
        expire_leases(self.store)
        for known in self.model.values():
            if known.state is State.ATTEMPTING and known.reason is DoubtReason.IN_FLIGHT:
                known.reason = DoubtReason.LEASE_EXPIRED

    def decide(self, key: str, *, happened: bool, force: bool, amount: int) -> None:
        """An operator resolves ``key``."""
        known = self.model[key]

        def resolve() -> None:
            if happened:
                self.store.resolve(key, happened=True, result=Receipt(key, amount), force=force)
            else:
                self.store.resolve(key, happened=False, force=force)

        if happened and force:
            with pytest.raises(ValueError, match="force=True goes with happened=False"):
                resolve()  # a misuse: happened needs no proof
        elif known.state not in UNSETTLED or known.reason is DoubtReason.IN_FLIGHT:
            with pytest.raises(SafeError) as refused:
                resolve()  # nothing to resolve, or its owner is running
            assert not isinstance(refused.value, NotProvenError)
        elif happened:
            resolve()
            known.state, known.value, known.reason = State.SUCCEEDED, Receipt(key, amount), None
        elif known.reason is DoubtReason.RESULT_NOT_STORED:
            with pytest.raises(SafeError, match="can only be resolved as happened") as refused:
                resolve()
            assert not isinstance(refused.value, NotProvenError)
        elif known.reason in PROOF:
            resolve()
            assert self.store.history(key)[-1].why is Why.RESOLVED
            self.released(key, forced=False)
        elif not force:
            with pytest.raises(NotProvenError):
                resolve()
        else:
            resolve()
            assert self.store.history(key)[-1].why is Why.FORCED_RELEASE
            self.released(key, forced=True)

    def reconcile_all(self, key: str, answer: Answer) -> None:
        """``Store.reconcile``: the probe answers ``answer`` for ``key``, unknown for the rest."""

        def probe(asked: str, receipt: InDoubt) -> Verdict[Receipt]:
            match answer if asked == key else "unknown":
                case "happened":
                    return Happened(Receipt(key, PROBED))
                case "not_happened":
                    return NotHappened()
                case _:
                    return Unknown()

        self.store.reconcile({"act": probe})
        for known in self.model.values():
            if known.state in UNSETTLED and known.reason is not DoubtReason.IN_FLIGHT:
                known.state = State.IN_DOUBT  # every abandoned key is marked first
        known = self.model[key]
        if known.state is State.IN_DOUBT and self.answered(key, answer):
            assert self.store.history(key)[-1].why is Why.RELEASE_WITHHELD

    def mark_crashed(self, key: str) -> None:
        """A process records that ``key``'s owner crashed: written only if it is proven."""
        known = self.model[key]
        record = self.store.get(key)
        if record is None:
            return
        proven = known.state in UNSETTLED and known.reason is DoubtReason.CRASHED
        assert self.store._mark_in_doubt(key, record.attempt_id, DoubtReason.CRASHED) is proven
        if proven:
            known.state = State.IN_DOUBT

    def step(self, key: str, op: Op) -> None:
        """Do ``op`` to ``key``, while its owner is frozen."""
        known = self.model[key]
        kind, _, how = op.partition(":")
        answer = BY_NAME.get(how, "unknown")
        if kind == "expire":
            self.expire()
        elif kind == "call":
            self.call_once(key, known.variant, known.fail)
        elif kind == "mark_crashed":
            self.mark_crashed(key)
        elif kind == "resolve":
            self.decide(key, happened=how == "happened", force=how == "forced", amount=150)
        elif kind == "probe":
            self.call_once(key, known.variant, known.fail, answer)
        else:
            self.reconcile_all(key, answer)

    def froze(self, frozen: Frozen) -> None:
        """``frozen`` claimed its key and is inside its action."""
        known = self.model[frozen.key]
        self.claimed(known)
        known.state, known.reason = State.ATTEMPTING, DoubtReason.IN_FLIGHT
        record = self.store.get(frozen.key)
        assert record is not None
        frozen.attempt_id = record.attempt_id
        self.frozen.append(frozen)

    def completed(self, frozen: Frozen, outcome: object) -> None:
        """``frozen`` thawed and its action returned ``outcome``, which it recorded."""
        self.frozen.remove(frozen)
        key, known = frozen.key, self.model[frozen.key]
        if frozen.fail:
            assert outcome == Failed(key, "act", "ValueError", f"declined {frozen.variant}")
        else:
            assert outcome == Succeeded(key, Receipt(key, frozen.variant))
        current = frozen.attempt == known.attempt
        if current and known.state in {State.ATTEMPTING, State.IN_DOUBT, State.RELEASED}:
            known.state = State.FAILED if frozen.fail else State.SUCCEEDED
            known.value = None if frozen.fail else Receipt(key, frozen.variant)
            known.reason = None
            return
        known.late += 1  # settled as happened, or released and run again, meanwhile
        (late,) = [
            done
            for done in self.store.late_completions(key)
            if done.attempt_id == frozen.attempt_id
        ]
        assert late.state is (State.FAILED if frozen.fail else State.SUCCEEDED)

    def kill_frozen(self) -> list[Frozen]:
        """The process dies: its frozen owners die with it, and the store closes."""
        self.store.close()
        dead = [frozen for frozen in self.frozen if frozen.thread is not None]
        self.frozen = []
        for frozen in dead:
            frozen.dying = True
            frozen.go.set()
        for frozen in dead:
            assert frozen.thread is not None
            frozen.thread.join(DEADLINE)
            assert not frozen.thread.is_alive()
            assert frozen.outcome == "died", frozen.outcome
        return dead

    # The rules.

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans())
    def call(self, key: str, variant: int, fail: bool) -> None:
        self.call_once(key, variant, fail)

    @rule(variant=VARIANTS, fail=st.booleans())
    def model_asks_again(self, variant: int, fail: bool) -> None:
        """The model asks for a call in the run (again: after a doubt, an error, a crash).

        Its key is ``in_run``'s, as ``keyed`` makes it for each ask (a new tool-call id each
        time): the same call in the same run must get the first ask's key.
        """
        arguments = {"variant": variant, "fail": fail}
        call = ToolCall("act", arguments, self.digest("-", (variant, fail), {}))
        key = in_run(call)
        self.asked["model", variant, fail].add(key)
        self.call_once(key, variant, fail)

    @rule(variant=VARIANTS, fail=st.booleans())
    def host_retries(self, variant: int, fail: bool) -> None:
        """An MCP host sends a call in its run (again: a retry after a time-out, a restart).

        Its key is ``safeact.mcp.key_for``'s: the same call in the same run must get the
        first send's key.
        """
        key = key_for("act", {"variant": variant, "fail": fail})
        self.asked["host", variant, fail].add(key)
        self.call_once(key, variant, fail)

    @invariant()
    def the_same_call_in_the_run_has_one_key(self) -> None:
        """However often a call is asked for or sent in the run, it has one key: one action."""
        assert all(len(keys) == 1 for keys in self.asked.values())

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        """A caller retries a key it used before, with the same arguments."""
        key = data.draw(st.sampled_from(sorted(self.model)))
        known = self.model[key]
        self.call_once(key, known.variant, known.fail)

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans(), answer=ANSWERS)
    def probed_call(self, key: str, variant: int, fail: bool, answer: Answer) -> None:
        """A caller whose tool has a probe: its answer applies only as far as the rule allows."""
        self.call_once(key, variant, fail, answer)

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans(), point=CHECKPOINTS)
    def crash(self, key: str, variant: int, fail: bool, point: Checkpoint) -> None:
        """The process dies at ``point`` of a call that runs the action; then it restarts."""
        known = self.expected(key, variant, fail)
        if known is None or known.state not in (None, State.RELEASED):
            return

        def die(reached: Checkpoint) -> None:
            if reached == point:
                raise Crash

        with checkpoint_hook(die), pytest.raises(Crash):
            self.act(key, variant, fail)
        if point != "before_claim":
            known.attempt += 1
        if point in ("after_call", "after_record"):
            known.runs += 1
        if point in ("after_claim", "after_call"):
            known.state, known.reason = State.ATTEMPTING, DoubtReason.CRASHED
        elif point == "after_record":
            known.state, known.reason = State.FAILED if fail else State.SUCCEEDED, None
            known.value = None if fail else Receipt(key, variant)
        bury_owners(self.store)  # the process that owned it is gone
        self.restart()

    @rule(key=KEYS, variant=VARIANTS)
    def interrupt(self, key: str, variant: int) -> None:
        """A KeyboardInterrupt inside the action propagates and leaves the key in doubt."""
        known = self.expected(key, variant, fail=False)
        if known is None or known.state not in (None, State.RELEASED):
            return
        self.interrupting = True
        try:
            with pytest.raises(KeyboardInterrupt):
                self.act(key, variant, False)  # noqa: FBT003
        finally:
            self.interrupting = False
        self.claimed(known)
        known.state, known.reason = State.IN_DOUBT, DoubtReason.INTERRUPTED

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans())
    def unrecorded(self, key: str, variant: int, fail: bool) -> None:
        """The ledger cannot take the outcome: the key is in doubt, as the owner says at once."""
        known = self.expected(key, variant, fail)
        if known is None or known.state not in (None, State.RELEASED):
            return

        def lose_the_ledger(running: str) -> None:
            def finish(*_: object, **__: object) -> bool:
                raise StoreError("connection lost")

            self.store._finish = finish  # type: ignore[method-assign] # the ledger breaks here

        self.during = lose_the_ledger
        try:
            outcome = self.act(key, variant, fail)
        finally:
            vars(self.store).pop("_finish", None)
        self.check_during()
        if fail:
            assert outcome == Failed(
                key, "act", "ValueError", f"declined {variant}", recorded=False
            )
        else:
            assert outcome == Succeeded(key, Receipt(key, variant), recorded=False)
        self.claimed(known)
        known.state = State.IN_DOUBT
        known.reason = DoubtReason.FAILURE_NOT_STORED if fail else DoubtReason.RESULT_NOT_STORED

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans())
    def racing_caller(self, key: str, variant: int, fail: bool) -> None:
        """Another caller claims the key between this one's read and its claim: this one replays."""
        known = self.expected(key, variant, fail)
        if known is None or known.state not in (None, State.RELEASED):
            return
        ahead: list[Outcome[Receipt]] = []
        racing = True

        def race(reached: Checkpoint) -> None:
            nonlocal racing
            if reached == "before_claim" and racing:
                racing = False
                ahead.append(self.act(key, variant, fail))

        with checkpoint_hook(race):
            outcome = self.act(key, variant, fail)
        assert len(ahead) == 1
        self.ran(key, known, ahead[0])
        if fail:
            assert outcome == Failed(key, "act", "ValueError", f"declined {variant}", replayed=True)
        else:
            assert outcome == Succeeded(key, Receipt(key, variant), replayed=True)

    @rule(key=KEYS, variant=VARIANTS)
    def concurrent_caller(self, key: str, variant: int) -> None:
        """A second caller arrives while the owner runs: in flight, nothing marked or re-run."""
        known = self.expected(key, variant, fail=False)
        if known is None or known.state not in (None, State.RELEASED):
            return
        seen: list[object] = []

        def second_caller(running: str) -> None:
            seen.append(self.act(running, variant, False))  # noqa: FBT003

        self.during = second_caller
        outcome = self.act(key, variant, False)  # noqa: FBT003
        self.check_during()
        assert len(seen) == 1
        assert isinstance(seen[0], InDoubt)
        assert seen[0].reason is DoubtReason.IN_FLIGHT
        self.ran(key, known, outcome)

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans(), ops=OPS)
    def frozen_owner(self, key: str, variant: int, fail: bool, ops: list[Op]) -> None:
        """The owner freezes inside its action while ``ops`` happen to its key, then completes."""
        known = self.expected(key, variant, fail)
        if known is None or known.state not in (None, State.RELEASED):
            return
        owner = Frozen(key, variant, fail, known.attempt + 1)

        def meanwhile(running: str) -> None:
            self.froze(owner)
            for op in ops:
                self.step(key, op)

        self.during = meanwhile
        outcome = self.act(key, variant, fail)
        self.check_during()
        self.completed(owner, outcome)

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans())
    def freeze(self, key: str, variant: int, fail: bool) -> None:
        """An owner claims the key and freezes inside its action; other rules go on meanwhile."""
        known = self.expected(key, variant, fail)
        if known is None or known.state not in (None, State.RELEASED):
            return
        owner = Frozen(key, variant, fail, known.attempt + 1)
        act = self.act

        def run() -> None:
            try:
                owner.outcome = act(key, variant, fail)
            except Crash:
                owner.outcome = "died"
            except BaseException as exc:  # noqa: BLE001 - the rule that thaws it reports it
                owner.outcome = exc

        self.freezing[key] = owner
        owner.thread = threading.Thread(target=run, name=f"owner-{key}", daemon=True)
        owner.thread.start()
        while not owner.entered.wait(0.01):
            if not owner.thread.is_alive():
                self.freezing.pop(key, None)
                pytest.fail(f"the owner of {key!r} did not run its action: {owner.outcome!r}")
        self.froze(owner)

    @precondition(lambda self: any(frozen.thread is not None for frozen in self.frozen))
    @rule(data=st.data())
    def thaw(self, data: st.DataObject) -> None:
        """A frozen owner wakes up, finishes its action and records its outcome."""
        owner = data.draw(st.sampled_from(self.frozen))
        assert owner.thread is not None
        owner.go.set()
        owner.thread.join(DEADLINE)
        assert not owner.thread.is_alive()
        self.completed(owner, owner.outcome)

    @rule()
    def expire_all(self) -> None:
        self.expire()

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def crash_mark(self, data: st.DataObject) -> None:
        self.mark_crashed(data.draw(st.sampled_from(sorted(self.model))))

    @rule()
    def restart(self) -> None:
        """The process restarts: frozen owners die with it, provably (their pid is reused)."""
        dead = self.kill_frozen()
        self.open()
        for frozen in dead:
            bury_attempt(self.store, frozen.attempt_id)
            known = self.model[frozen.key]
            if frozen.attempt == known.attempt and known.state in UNSETTLED:
                known.reason = DoubtReason.CRASHED

    @precondition(lambda self: self.model)
    @rule(
        data=st.data(),
        happened=st.booleans(),
        force=st.booleans(),
        amount=st.integers(100, 199),
    )
    def resolve(self, data: st.DataObject, happened: bool, force: bool, amount: int) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        self.decide(key, happened=happened, force=force, amount=amount)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), answer=ANSWERS)
    def reconcile(self, data: st.DataObject, answer: Answer) -> None:
        """A probe answers for every key in doubt; the key follows its answer if it may."""
        self.reconcile_all(data.draw(st.sampled_from(sorted(self.model))), answer)

    @invariant()
    def history_replays_to_the_record(self) -> None:
        """Each key's history, change after change, leads to the state in its record."""
        for key in self.model:
            state: State | SagaState | None = None
            for event in self.store.history(key):
                if event.why is not Why.LATE_COMPLETION:
                    assert event.from_state is state, event
                    state = event.to_state
            record = self.store._stored(key)  # the row as written: what the history leads to
            assert state is (record.state if record else None)

    @invariant()
    def ledger_matches_model(self) -> None:
        """Every key is in the state the model says, and a succeeded key holds its value."""
        for key, known in self.model.items():
            record = self.store._stored(key)  # the model is of the row as written
            assert (record.state if record else None) is known.state
            if record is not None and known.state is State.SUCCEEDED:
                assert known.value is not None
                assert record.result == attrs.asdict(known.value)

    @invariant()
    def the_settled_keys_are_counted_as_the_model_says(self) -> None:
        """The counts the ledger's triggers keep (``stats``) agree with the model's states."""
        expected: Counter[tuple[str, State]] = Counter()
        for key, known in self.model.items():
            record = self.store._stored(key)
            if record is not None and known.state is not None and known.state not in UNSETTLED:
                expected[record.tool, known.state] += 1
        counted = {
            group: n for group, n in self.store.counts().items() if group[1] not in UNSETTLED
        }
        assert counted == dict(expected)

    @invariant()
    def every_late_completion_is_recorded(self) -> None:
        for key, known in self.model.items():
            assert len(self.store.late_completions(key)) == known.late

    @invariant()
    def each_action_ran_at_most_once_per_release(self) -> None:
        """One run per key, plus one per release made on proof or forced; no overlap unforced."""
        assert self.overlaps == []
        for key, known in self.model.items():
            assert self.runs[key] == known.runs
            assert self.runs[key] <= 1 + known.proven + known.forced


class PostgresLedgerMachine(LedgerMachine):
    """The same machine on a PostgreSQL schema."""

    backend = "postgres"


class AsyncLedgerMachine(LedgerMachine):
    """The same machine through the async driver."""

    driver = "async"


class AsyncPostgresLedgerMachine(PostgresLedgerMachine):
    """The same machine on a PostgreSQL schema, through the async driver."""

    driver = "async"


MACHINES: dict[tuple[str, Driver], type[LedgerMachine]] = {
    ("sqlite", "sync"): LedgerMachine,
    ("postgres", "sync"): PostgresLedgerMachine,
    ("sqlite", "async"): AsyncLedgerMachine,
    ("postgres", "async"): AsyncPostgresLedgerMachine,
}
EXAMPLES = {
    "sqlite": max(settings().max_examples, 100),
    # A PostgreSQL example costs a schema, a migration and a new pool at every restart:
    # about five times a SQLite one, so it runs half as many to keep the suite short.
    "postgres": max(settings().max_examples // 2, 50),
}


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_ledger_state_machine(backend: str, driver: Driver) -> None:
    """Random calls, crashes, frozen owners, restarts, resolves and probes keep to the model."""
    require(backend)
    run_state_machine_as_test(
        MACHINES[backend, driver],
        settings=settings(settings(), max_examples=EXAMPLES[backend], stateful_step_count=30),
    )
