"""Telemetry: OpenTelemetry spans and metrics, and log records, of what safeact does.

The one module that uses OpenTelemetry: the call paths call the plain functions below and
never import it. Only its API (``opentelemetry-api``, the extra ``otel``) is used, through
the global providers an application sets up; without an SDK every span and instrument is a
no-op. Whether ``opentelemetry`` can be imported is decided once, at first use, so that
``import safeact`` never loads it.

| event | span | log record's ``safeact_event`` | watched by |
|---|---|---|---|
| a guarded call | ``safeact.call`` | ``call`` | ``call`` |
| a step of a saga | ``safeact.saga.step`` | ``saga_step`` | ``saga_step`` |
| the compensation of a step | ``safeact.saga.compensate`` | ``compensation`` | ``compensation`` |
| a probe asked about a key in doubt | ``safeact.probe`` | ``probe`` | ``probe`` |
| an operator's decision (``resolve``) | ``safeact.resolve`` | ``resolve`` | ``resolving`` |
| a person's decision on an approval request | ``safeact.approval`` | ``approval`` | ``approving`` |

Span attributes are named ``safeact.<field>``; log records carry the same fields as
``safeact_<field>`` attributes (``extra=``), for a JSON handler to pick up. Records go to the
logger ``safeact.events`` (``_level`` says at which level). It has a ``NullHandler`` and no
other, so an application that set up no logging sees none of them (``logging.lastResort``
stays quiet); safeact's own errors still go to the ``safeact`` logger as before.

Cost: without ``opentelemetry`` and with ``safeact.events`` off at WARNING, an event costs a
cached check and ``isEnabledFor``. Otherwise a small object gathers the event's fields; a
span is made only if a tracer provider is set, and a record only if its level is enabled.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Self, TypeVar, cast

import attrs

from safeact._history import Why
from safeact._outcome import AwaitingApproval, Failed, InDoubt, Outcome, Succeeded
from safeact._protocol import Approval, DoubtReason, Record, State

if TYPE_CHECKING:
    import contextlib
    from types import ModuleType, TracebackType

    from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, Observation
    from opentelemetry.trace import Span, Tracer

    from safeact._history import Event

__all__ = [
    "QUIET",
    "Quiet",
    "Watch",
    "approving",
    "attempt",
    "call",
    "claimed",
    "compensation",
    "events",
    "fsynced",
    "observe",
    "probe",
    "raised",
    "resolving",
    "saga_step",
]

P = ParamSpec("P")
S = TypeVar("S")

events = logging.getLogger("safeact.events")
"""Where the events' records go; a ``NullHandler`` keeps ``lastResort`` from printing them."""
events.addHandler(logging.NullHandler())

_logger = logging.getLogger("safeact")

SECONDS = (
    *(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05),
    *(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
"""Bucket bounds advised for the latency histograms: fsyncs and claims take 0.1 to 100 ms
(OpenTelemetry's default bounds are made for milliseconds)."""


@attrs.frozen
class _Otel:
    """OpenTelemetry's trace module, and safeact's tracer and instruments, made once."""

    trace: ModuleType
    tracer: Tracer
    meter: Meter
    calls: Counter
    replays: Counter
    in_doubt: Counter
    decisions: Counter
    claims: Histogram
    fsyncs: Histogram


@functools.cache
def _otel() -> _Otel | None:
    """OpenTelemetry's tracer and instruments, or None when it cannot be imported (or used).

    The tracer and the meter come from the global providers, proxies until the application
    sets them, so they may be made before it does.
    """
    try:
        from opentelemetry import metrics, trace  # noqa: PLC0415 - optional: the extra otel
    except ImportError:
        return None
    try:
        from importlib.metadata import version  # noqa: PLC0415 - once, at first use

        meter = metrics.get_meter("safeact", version("safeact"))
        return _Otel(
            trace=trace,
            tracer=trace.get_tracer("safeact", version("safeact")),
            meter=meter,
            calls=meter.create_counter(
                "safeact.calls", unit="{call}", description="Guarded calls, by tool and outcome"
            ),
            replays=meter.create_counter(
                "safeact.replays",
                unit="{call}",
                description="Guarded calls answered from the ledger (nothing ran), by tool "
                "and outcome",
            ),
            in_doubt=meter.create_counter(
                "safeact.calls.in_doubt",
                unit="{call}",
                description="Guarded calls that returned InDoubt, by tool and reason",
            ),
            decisions=meter.create_counter(
                "safeact.decisions",
                unit="{decision}",
                description="People's decisions on keys in doubt and approval requests (the "
                "command line's, the web inbox's, the API's), by tool, decision and whether "
                "the ledger recorded or refused it",
            ),
            claims=meter.create_histogram(
                "safeact.claim.duration",
                unit="s",
                description=(
                    "Time to claim a key, its durable commit included (an async tool's on "
                    "SQLite: its commit, the batch's fsync being in safeact.fsync.duration), "
                    "by tool"
                ),
                explicit_bucket_boundaries_advisory=SECONDS,
            ),
            fsyncs=meter.create_histogram(
                "safeact.fsync.duration",
                unit="s",
                description="Time of one fsync of a SQLite ledger's WAL, shared by the claims "
                "waiting on it",
                explicit_bucket_boundaries_advisory=SECONDS,
            ),
        )
    except Exception:  # an API too old for the advisory, say: telemetry must not break calls
        _logger.warning(
            "opentelemetry is installed but cannot be used (safeact[otel] needs "
            "opentelemetry-api>=1.30); safeact makes no spans or metrics",
            exc_info=True,
        )
        return None


_F = TypeVar("_F", bound=Callable[..., object])
_broken_at: set[str] = set()
"""Where telemetry has failed already (each is said once)."""


def _harmless(fallback: Callable[[tuple[object, ...]], object]) -> Callable[[_F], _F]:
    """Make a hook that never raises: telemetry must never change what a call does.

    An exception from OpenTelemetry (a span processor or an instrument that raises, which
    the SDK does not guard) or from the log's handlers is caught (``Exception``, never an
    interrupt), said once per hook on the ``safeact`` logger, and the hook returns
    ``fallback(args)`` instead: what the call path would have got back.
    """

    def harmless(hook: _F) -> _F:
        @functools.wraps(hook)
        def guarded(*args: object, **kwargs: object) -> object:
            try:
                return hook(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - telemetry's failure is never the call's
                if hook.__qualname__ not in _broken_at:
                    _broken_at.add(hook.__qualname__)
                    logging.getLogger("safeact").warning(
                        "telemetry failed in %s and is skipped there, the call goes on: %s: %s",
                        hook.__qualname__,
                        type(exc).__name__,
                        exc,
                    )
                return fallback(args)

        return cast("_F", guarded)

    return harmless


def _nothing(_: tuple[object, ...]) -> None:
    return None


def _second(args: tuple[object, ...]) -> object:
    return args[1]


_watching: ContextVar[Watch | None] = ContextVar("safeact_watching", default=None)
"""The innermost event being watched, for the hooks deep in a call to add to it."""


class Quiet:
    """An event nobody watches: every hook is a no-op."""

    __slots__ = ()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return

    def ended(self, outcome: Outcome[S]) -> Outcome[S]:
        """Note how a call ended; return ``outcome``."""
        return outcome

    def came_to(self, event: Event | None) -> Event | None:
        """Note what a probe's answer came to (the event it added, if any); return ``event``."""
        return event

    def attempt(self, attempt_id: str) -> None:
        """Note the attempt the event is about."""

    def raised(self, exc: Exception) -> None:
        """Note an exception caught inside the event (a probe's) that ended it in error."""


QUIET = Quiet()


class Watch(Quiet):
    """One event watched: its fields, its span while it runs, its log record when it ends.

    A context manager: on entry the span (if a tracer provider is set) becomes the current
    one and the watch the innermost one; on exit an exception is recorded, the log record
    written (if its level is enabled) and the span ended.
    """

    __slots__ = (
        "_counted",
        "_name",
        "_otel",
        "_scope",
        "_token",
        "event",
        "fields",
        "level",
        "outcome",
        "span",
    )

    def __init__(self, event: str, name: str, *, counted: bool = False, **fields: object) -> None:
        """Watch ``event`` as span ``name``; ``counted`` calls are counted in the metrics."""
        self.event = event
        self.fields = fields
        self.level = logging.DEBUG
        self.outcome: Outcome[object] | None = None
        self.span: Span | None = None
        self._name = name
        self._counted = counted
        self._otel = _otel()
        self._scope: contextlib.AbstractContextManager[Span] | None = None

    def __enter__(self) -> Self:
        self._token = _watching.set(self)
        self._start()
        return self

    @_harmless(_nothing)
    def _start(self) -> None:
        otel = self._otel
        if otel is not None:
            span = otel.tracer.start_span(self._name)
            # No tracer provider: an invalid span, which nothing would see (not made current).
            if span.get_span_context().is_valid:
                self.span = span
                span.set_attributes(_attributes(self.fields))
                self._scope = otel.trace.use_span(span, end_on_exit=True)
                self._scope.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Never raises, and so never replaces the exception in flight (an interrupt, a
        # cancellation): each part is harmless, and the span is ended whatever happened.
        _watching.reset(self._token)
        try:
            self._close(exc)
        finally:
            self._end()

    @_harmless(_nothing)
    def _close(self, exc: BaseException | None) -> None:
        if exc is not None:
            self.level = logging.WARNING
            self.set(error_type=_type_name(type(exc)))
            if self.span is not None:
                _record(self.span, exc)
                if isinstance(exc, Exception):  # an interrupt is no error of the call's
                    self._error(describe(exc))
        elif self.outcome is not None:
            self.level = _level(self.outcome)
        if events.isEnabledFor(self.level):
            self._log(exc)

    @_harmless(_nothing)
    def _end(self) -> None:
        if self._scope is not None:
            # Recorded in _close, where a broken __str__ cannot break the call: the scope
            # only makes the span current no more, and ends it.
            self._scope.__exit__(None, None, None)

    @_harmless(_nothing)
    def set(self, **fields: object) -> None:
        """Add ``fields`` to the record and the span (a None field is left off the span)."""
        self.fields.update(fields)
        if self.span is not None:
            self.span.set_attributes(_attributes(fields))

    def attempt(self, attempt_id: str) -> None:
        """Note the attempt the event is about."""
        self.set(attempt_id=attempt_id)

    @_harmless(_nothing)
    def raised(self, exc: Exception) -> None:
        """Record ``exc``, caught inside the event, on the span: it ended the event in error."""
        self.set(error_type=_type_name(type(exc)))
        if self.span is not None:
            _record(self.span, exc)  # the status is the event's note, which says it

    @_harmless(_second)
    def ended(self, outcome: Outcome[S]) -> Outcome[S]:
        """Note how a call (a step's, a compensation's) ended; return ``outcome``."""
        self.outcome = outcome
        if self.span is not None:
            self.span.set_attributes(_attributes(_outcome_fields(outcome)))
            if isinstance(outcome, Failed):
                if outcome.exception is not None:
                    _record(self.span, outcome.exception)
                self._error(f"{outcome.error_type}: {outcome.message}")
        if self._counted and self._otel is not None:
            self._count(outcome)
        return outcome

    @_harmless(_second)
    def came_to(self, event: Event | None) -> Event | None:
        """Note what a probe's answer came to (the event it added, if any); return ``event``."""
        self.level = logging.INFO
        if event is None:
            self.set(verdict="moved_on")  # the key moved on meanwhile: nothing was applied
            return event
        verdict = _VERDICTS.get(event.why, event.why.value)
        if event.why is Why.RECONCILED and event.to_state is State.RELEASED:
            verdict = "not_happened"
        state = None if event.to_state is None else event.to_state.value
        self.set(verdict=verdict, history=event.why.value, state=state)
        if event.why is Why.PROBE_FAILED:
            self.level = logging.WARNING
            self._error(event.note or "the probe failed")
        return event

    def _count(self, outcome: Outcome[object]) -> None:
        assert self._otel is not None
        tool = str(self.fields["tool"])
        ended = _outcome_fields(outcome)
        counted = {"safeact.tool": tool, "safeact.outcome": str(ended["outcome"])}
        self._otel.calls.add(1, counted)
        if ended["replayed"]:
            self._otel.replays.add(1, counted)
        if isinstance(outcome, InDoubt):
            reason = outcome.reason.value
            self._otel.in_doubt.add(1, {"safeact.tool": tool, "safeact.doubt_reason": reason})

    def _error(self, description: str) -> None:
        """Set the span's status to ERROR."""
        if self._otel is not None and self.span is not None:
            trace = self._otel.trace
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, description))

    def _log(self, exc: BaseException | None) -> None:
        fields = {**self.fields}
        if self.outcome is not None:
            fields.update(_outcome_fields(self.outcome))
        said = f"raised {fields['error_type']}" if exc is not None else _said(fields)
        where = " ".join(str(fields[name]) for name in ("saga_id", "tool") if fields.get(name))
        extra = {f"safeact_{name}": value for name, value in fields.items()}
        extra["safeact_event"] = self.event
        events.log(
            self.level, "%s %s %r: %s", self.event, where, fields.get("key"), said, extra=extra
        )


def _outcome_fields(outcome: Outcome[object]) -> dict[str, object]:
    """The fields that say how a call ended."""
    match outcome:
        case Succeeded(replayed=replayed, recorded=recorded):
            return {"outcome": "succeeded", "replayed": replayed, "recorded": recorded}
        case Failed(replayed=replayed, recorded=recorded, error_type=error_type):
            return {
                "outcome": "failed",
                "replayed": replayed,
                "recorded": recorded,
                "error_type": error_type,
            }
        case InDoubt(reason=reason, attempt_id=attempt_id):
            return {
                "outcome": "in_doubt",
                "replayed": False,
                "doubt_reason": reason.value,
                "attempt_id": attempt_id,
            }
        case AwaitingApproval():
            return {"outcome": "awaiting_approval", "replayed": False}


def _level(outcome: Outcome[object]) -> int:
    """The level of a call's record: what needs a person is WARNING; what ran normally, less.

    In doubt (but in flight: the owner is still running), or ran without its outcome
    stored: WARNING. The action raised now, or it waits for approval: INFO. Succeeded, or a
    failure replayed: DEBUG.
    """
    match outcome:
        case Succeeded(recorded=False) | Failed(recorded=False):
            return logging.WARNING
        case Succeeded() | Failed(replayed=True):
            return logging.DEBUG
        case Failed():
            return logging.INFO
        case InDoubt(reason=DoubtReason.IN_FLIGHT):
            return logging.INFO
        case InDoubt():
            return logging.WARNING
        case AwaitingApproval():
            return logging.INFO  # a person is asked; nothing went wrong


def _said(fields: dict[str, object]) -> str:
    """What the event came to, in a few words for the log message."""
    parts = [
        str(fields[name]).replace("_", " ")
        for name in ("outcome", "verdict", "decision")
        if fields.get(name) is not None
    ]
    if fields.get("replayed"):
        parts.append("(replayed)")
    parts.extend(f"({fields[name]})" for name in ("error_type", "doubt_reason") if fields.get(name))
    if fields.get("recorded") is False:
        parts.append("(not recorded)")
    if fields.get("state"):
        parts.append(f"-> {fields['state']}")
    return " ".join(parts) or "ended"


def _attributes(fields: dict[str, object]) -> dict[str, str | bool | int]:
    """``fields`` as span attributes: ``safeact.<name>``, None ones left off."""
    return {
        f"safeact.{name}": value
        for name, value in fields.items()
        if isinstance(value, str | bool | int)
    }


def _record(span: Span, exc: BaseException) -> None:
    """Record ``exc`` on ``span`` as an exception event, whatever its ``__str__`` does."""
    try:
        span.record_exception(exc)
    except Exception:  # noqa: BLE001 - telemetry must not break the call it watches
        span.add_event("exception", {"exception.type": _type_name(type(exc))})


def describe(exc: BaseException) -> str:
    """``Type: message``, or the type's name alone if the exception cannot say more."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - a broken __str__ must not break the call
        return type(exc).__name__


def _type_name(cls: type[BaseException]) -> str:
    """An exception's type as the ledger records it: ``module.qualname``, builtins bare."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _watched() -> bool:
    """Whether anything could see an event: OpenTelemetry, or a record at WARNING."""
    return _otel() is not None or events.isEnabledFor(logging.WARNING)


@_harmless(lambda _: QUIET)
def call(tool: str, key: str) -> Quiet:
    """Watch a guarded call of ``tool`` under ``key``; the driver ends it with ``ended``."""
    if not _watched():
        return QUIET
    return Watch("call", "safeact.call", counted=True, tool=tool, key=key)


@_harmless(lambda _: QUIET)
def saga_step(saga_id: str, key: str, tool: str) -> Quiet:
    """Watch a step of saga ``saga_id`` (the call of ``tool`` under ``key``)."""
    if not _watched():
        return QUIET
    return Watch("saga_step", "safeact.saga.step", saga_id=saga_id, key=key, tool=tool)


@_harmless(lambda _: QUIET)
def compensation(saga_id: str, step: str, key: str, tool: str) -> Quiet:
    """Watch the compensation of step ``step`` of saga ``saga_id`` (``tool`` under ``key``)."""
    if not _watched():
        return QUIET
    return Watch(
        "compensation", "safeact.saga.compensate", saga_id=saga_id, step=step, key=key, tool=tool
    )


_VERDICTS = {
    Why.RECONCILED: "happened",
    Why.RELEASE_WITHHELD: "not_happened",
    Why.PROBE_UNKNOWN: "unknown",
    Why.PROBE_FAILED: "failed",
}
"""A probe's verdict, by the event its answer added to the key's history."""


@_harmless(lambda _: QUIET)
def probe(record: Record, reason: DoubtReason) -> Quiet:
    """Watch the probe asked about ``record``, in doubt for ``reason``; end with ``came_to``."""
    if not _watched():
        return QUIET
    return Watch(
        "probe",
        "safeact.probe",
        tool=record.tool,
        key=record.key,
        attempt_id=record.attempt_id,
        doubt_reason=reason.value,
    )


def resolving(
    decide: Callable[Concatenate[S, str, P], Record],
) -> Callable[Concatenate[S, str, P], Record]:
    """Watch each call of ``decide``, a ledger's ``_decide(key, *, happened, tool, ...)``."""

    @functools.wraps(decide)
    def watched(ledger: S, key: str, /, *args: P.args, **kwargs: P.kwargs) -> Record:
        if not _watched():
            return decide(ledger, key, *args, **kwargs)
        with Watch(
            "resolve",
            "safeact.resolve",
            key=key,
            tool=kwargs.get("tool"),
            decision="happened" if kwargs.get("happened") else "not_happened",
            force=bool(kwargs.get("force")),
            attempt_id=kwargs.get("attempt_id"),
        ) as watch:
            try:
                record = decide(ledger, key, *args, **kwargs)
            except Exception:
                _decided(watch, recorded=False)
                raise
            watch.set(tool=record.tool, attempt_id=record.attempt_id, state=record.state.value)
            watch.level = logging.INFO
            _decided(watch, recorded=True)
        return record

    return watched


def approving(
    decide: Callable[Concatenate[S, str, P], Approval],
) -> Callable[Concatenate[S, str, P], Approval]:
    """Watch each call of ``decide``, a ledger's ``_decide_approval(key, *, approve, ...)``.

    As ``resolving`` watches an operator's resolve: a span with the key, the decision
    (``approved`` or ``denied``), and once recorded the tool and the approval's state; a
    refusal ends it in error. Who decided and why stay in the ledger's history, not here.
    """

    @functools.wraps(decide)
    def watched(ledger: S, key: str, /, *args: P.args, **kwargs: P.kwargs) -> Approval:
        if not _watched():
            return decide(ledger, key, *args, **kwargs)
        with Watch(
            "approval",
            "safeact.approval",
            key=key,
            decision="approved" if kwargs.get("approve") else "denied",
        ) as watch:
            try:
                approval = decide(ledger, key, *args, **kwargs)
            except Exception:
                _decided(watch, recorded=False)
                raise
            watch.set(tool=approval.tool, state=approval.state.value)
            watch.level = logging.INFO
            _decided(watch, recorded=True)
        return approval

    return watched


@_harmless(_nothing)
def _decided(watch: Watch, *, recorded: bool) -> None:
    """Count a person's decision ``watch`` watches, recorded or refused, in ``safeact.decisions``.

    A refused decision's tool is the one it named, if any (the key may be unknown).
    """
    otel = _otel()
    if otel is None:
        return
    counted = {
        "safeact.decision": str(watch.fields["decision"]),
        "safeact.outcome": "recorded" if recorded else "refused",
    }
    tool = watch.fields.get("tool")
    if tool is not None:
        counted["safeact.tool"] = str(tool)
    otel.decisions.add(1, counted)


def attempt(attempt_id: str) -> None:
    """Tell the innermost watched event which attempt it is about (claimed, or replayed)."""
    watch = _watching.get()
    if watch is not None:
        watch.attempt(attempt_id)


def raised(exc: Exception) -> None:
    """Tell the innermost watched event that ``exc``, caught inside it, ended it in error."""
    watch = _watching.get()
    if watch is not None:
        watch.raised(exc)


@_harmless(_nothing)
def claimed(tool: str, record: Record | None, seconds: float) -> None:
    """A claim of a key of ``tool`` took ``seconds``; ``record`` is what it claimed, if any."""
    otel = _otel()
    if otel is not None:
        otel.claims.record(seconds, {"safeact.tool": tool})
    if record is not None:
        attempt(record.attempt_id)


@_harmless(_nothing)
def fsynced(seconds: float) -> None:
    """One fsync of a ledger took ``seconds``."""
    otel = _otel()
    if otel is not None:
        otel.fsyncs.record(seconds)


def observe(
    name: str,
    read: Callable[[], Iterable[tuple[int, dict[str, str]]]],
    *,
    unit: str,
    description: str,
) -> bool:
    """Make ``name`` an observable gauge of safeact's meter, for ``safeact.otel``.

    Each collection of the metrics reports the ``(value, attributes)`` pairs ``read`` gives
    then. Returns False, and makes nothing, when OpenTelemetry cannot be imported (or used).
    """
    otel = _otel()
    if otel is None:
        return False

    def observed(_: CallbackOptions) -> Iterator[Observation]:
        from opentelemetry.metrics import Observation  # noqa: PLC0415 - only once it is used

        for value, attributes in read():
            yield Observation(value, attributes)

    otel.meter.create_observable_gauge(
        name, callbacks=[observed], unit=unit, description=description
    )
    return True
