"""Telemetry: spans, metrics and log records of calls, saga steps, probes and resolves.

With the real OpenTelemetry SDK: its global providers can be set once per process, so this
module sets them once (an in-memory span exporter, an in-memory metric reader) and empties
the exporter before each test; metrics are cumulative, so each test that reads them uses
tool names of its own. Without OpenTelemetry, calls are checked in a fresh interpreter.
"""

import asyncio
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from attrs import evolve
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util._once import Once

import safeact
import safeact._telemetry
import safeact.otel
from safeact import (
    DoubtReason,
    Failed,
    Happened,
    InDoubt,
    KeyConflictError,
    NotHappened,
    NotProvenError,
    SafeError,
    Saga,
    SagaFailed,
    Store,
    StoreError,
    Succeeded,
    Verdict,
    get_store,
    safe,
)
from safeact._cli import main as cli
from safeact._tool import _Guard
from safeact.otel import observe_in_doubt
from tests.actions import Receipt, bury_owners, expire_leases
from tests.inbox import running
from tests.test_corrupt_rows import spoil
from tests.test_inbox import crashed, signed_in


@pytest.fixture(scope="module")
def otel() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    """The process's OpenTelemetry SDK, set up once: spans kept in memory, metrics on demand."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(meters)
    # Its instruments and gauge come from this provider.
    safeact._telemetry._otel.cache_clear()
    safeact.otel._gauge.cache_clear()
    yield exporter, reader
    exporter.shutdown()  # the rest of the session's spans are not kept
    meters.shutdown()
    # The API sets its global meter provider once per process: undone here, as its own test
    # utilities do, so that another session in this process (mutmut runs several) sets its
    # own and reads only its own counts.
    metrics_api._METER_PROVIDER_SET_ONCE = Once()
    metrics_api._METER_PROVIDER = None
    metrics_api._PROXY_METER_PROVIDER = metrics_api._ProxyMeterProvider()
    safeact._telemetry._otel.cache_clear()
    safeact.otel._gauge.cache_clear()


@pytest.fixture
def spans(otel: tuple[InMemorySpanExporter, InMemoryMetricReader]) -> InMemorySpanExporter:
    """The span exporter, emptied."""
    exporter, _ = otel
    exporter.clear()
    return exporter


@pytest.fixture
def reader(otel: tuple[InMemorySpanExporter, InMemoryMetricReader]) -> InMemoryMetricReader:
    return otel[1]


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def attributes(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def parent_of(exporter: InMemorySpanExporter, span: ReadableSpan) -> ReadableSpan:
    assert span.parent is not None, span.name
    (parent,) = (
        found
        for found in exporter.get_finished_spans()
        if found.context is not None and found.context.span_id == span.parent.span_id
    )
    return parent


def left_in_doubt(store: Store, tool: _Guard[object], key: str, *args: object) -> None:
    """Leave ``key`` as a crashed process leaves it: ATTEMPTING under an owner that is gone."""
    store._claim(key, tool.name, tool._digest(key, args, {}), attempt_id="crashed", previous=None)
    bury_owners(store)


def points(reader: InMemoryMetricReader, name: str) -> dict[frozenset[tuple[str, object]], object]:
    """The data points of metric ``name``, by their attributes (counters: their values)."""
    found: dict[frozenset[tuple[str, object]], object] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    assert scope.scope.name == "safeact"
                    for point in metric.data.data_points:
                        key = frozenset(dict(point.attributes or {}).items())
                        found[key] = getattr(point, "value", point)
    return found


def of(**attrs: object) -> frozenset[tuple[str, object]]:
    return frozenset({f"safeact.{name}": value for name, value in attrs.items()}.items())


def test_a_new_call_is_a_span_with_its_tool_key_outcome_and_attempt(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """A call that runs its action: one span, tracer safeact, with what the call came to."""

    @safe(store, name="send")
    def send(key: str, to: str) -> Receipt:
        return Receipt(to, 5)

    assert send("k-1", "a@b.c") == Succeeded("k-1", Receipt("a@b.c", 5))
    (span,) = spans.get_finished_spans()
    record = store.get("k-1")
    assert record is not None
    assert span.name == "safeact.call"
    assert span.instrumentation_scope is not None
    assert (span.instrumentation_scope.name, span.instrumentation_scope.version) == (
        "safeact",
        safeact.__version__,
    )
    assert attributes(span) == {
        "safeact.tool": "send",
        "safeact.key": "k-1",
        "safeact.outcome": "succeeded",
        "safeact.replayed": False,
        "safeact.recorded": True,
        "safeact.attempt_id": record.attempt_id,
    }
    assert span.status.status_code is StatusCode.UNSET


def test_a_replay_is_a_span_marked_replayed_with_the_attempt_it_replays(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """A second call with the key: replayed=True, and the attempt that ran it."""

    @safe(ledger, name="send")
    def send(key: str) -> int:
        return 1

    send("k-1")
    spans.clear()
    assert send("k-1") == Succeeded("k-1", 1, replayed=True)
    (span,) = named(spans, "safeact.call")
    record = send.store.get("k-1")
    assert record is not None
    assert attributes(span)["safeact.replayed"] is True
    assert attributes(span)["safeact.attempt_id"] == record.attempt_id


def test_an_in_doubt_call_carries_its_reason_and_attempt(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """A call that finds its key's owner crashed: outcome in_doubt, the reason, the attempt."""

    @safe(store, name="refund")
    def refund(key: str) -> int:
        return 1

    left_in_doubt(store, refund, "k-1")
    outcome = refund("k-1")
    assert isinstance(outcome, InDoubt)
    (span,) = named(spans, "safeact.call")
    assert {
        name: attributes(span).get(f"safeact.{name}")
        for name in ("outcome", "doubt_reason", "attempt_id")
    } == {"outcome": "in_doubt", "doubt_reason": "crashed", "attempt_id": "crashed"}
    assert span.status.status_code is StatusCode.UNSET  # not known to have failed


def test_a_failed_call_records_the_exception_and_an_error_status(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """The action raised: the span has its exception event and status ERROR."""

    @safe(ledger, name="charge")
    def charge(key: str) -> int:
        raise ValueError("card declined")

    assert isinstance(charge("k-1"), Failed)
    (span,) = named(spans, "safeact.call")
    assert attributes(span)["safeact.outcome"] == "failed"
    assert attributes(span)["safeact.error_type"] == "ValueError"
    assert (span.status.status_code, span.status.description) == (
        StatusCode.ERROR,
        "ValueError: card declined",
    )
    (event,) = span.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.type"] == "ValueError"
    assert dict(event.attributes or {})["exception.message"] == "card declined"


class UnprintableError(Exception):
    """An exception that cannot say what it is: its ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError


def test_an_exception_whose_str_breaks_still_gives_failed_with_telemetry_on(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """Recording an exception whose __str__ raises must not break the call it records."""

    @safe(ledger, name="charge")
    def charge(key: str) -> int:
        raise UnprintableError

    outcome = charge("k-1")
    assert isinstance(outcome, Failed)
    (span,) = named(spans, "safeact.call")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == f"{outcome.error_type}: {outcome.message}"
    (event,) = span.events
    assert (event.name, dict(event.attributes or {})) == (
        "exception",
        {"exception.type": outcome.error_type},  # all the exception could say of itself
    )
    assert outcome.error_type.endswith(".UnprintableError")


def test_an_error_raised_out_of_a_call_is_its_spans_status(
    ledger: Path, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """A call that raises (a key of other arguments) ends its span in ERROR, saying why."""
    caplog.set_level(logging.DEBUG, logger="safeact.events")

    @safe(ledger, name="charge")
    def charge(key: str, cents: int) -> int:
        return cents

    charge("k-1", 5)
    with pytest.raises(KeyConflictError) as raised:
        charge("k-1", 6)
    span = named(spans, "safeact.call")[-1]
    assert (span.status.status_code, span.status.description) == (
        StatusCode.ERROR,
        f"KeyConflictError: {raised.value}",
    )
    logged = [record.getMessage() for record in caplog.records if record.name == "safeact.events"]
    assert logged[-1] == f"call charge 'k-1': raised {attributes(span)['safeact.error_type']}"
    assert logged[-1].endswith("KeyConflictError")


def test_an_interrupted_call_records_the_interrupt_without_calling_it_an_error(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """An interrupt propagates; the span has its exception event and is not ERROR."""

    @safe(ledger, name="charge")
    def charge(key: str) -> int:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        charge("k-1")
    (span,) = named(spans, "safeact.call")
    assert attributes(span)["safeact.error_type"] == "KeyboardInterrupt"
    assert [event.name for event in span.events] == ["exception"]
    assert span.status.status_code is StatusCode.UNSET


def test_an_async_call_is_a_span_with_its_attempt(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """An awaited call: its span has the attempt claimed in the worker thread."""

    @safe(ledger, name="send")
    async def send(key: str) -> int:
        await asyncio.sleep(0)
        return 1

    assert asyncio.run(send("k-1")) == Succeeded("k-1", 1)
    (span,) = named(spans, "safeact.call")
    record = send.store.get("k-1")
    assert record is not None
    assert attributes(span)["safeact.outcome"] == "succeeded"
    assert attributes(span)["safeact.attempt_id"] == record.attempt_id


def saga_attributes(span: ReadableSpan) -> dict[str, object]:
    """The safeact attributes a saga's span has of those it may have, by their short names."""
    names = ("saga_id", "step", "key", "tool", "outcome")
    return {
        name: attributes(span)[f"safeact.{name}"]
        for name in names
        if f"safeact.{name}" in attributes(span)
    }


def tool_name(fn: Callable[..., object]) -> str:
    """The name a saga gives the tool it makes of ``fn``: its module and qualified name."""
    return f"{fn.__module__}.{fn.__qualname__}"


def trip_spans(
    spans: InMemorySpanExporter,
    saga_id: str,
    book: Callable[..., object],
    pay: Callable[..., object],
    unbook: Callable[..., object],
) -> list[ReadableSpan]:
    """Check the spans of a trip that booked, failed to pay and unbooked; return its steps'."""
    steps = named(spans, "safeact.saga.step")
    assert [saga_attributes(step) for step in steps] == [
        {
            "saga_id": saga_id,
            "key": f"{saga_id}:0:book",
            "tool": tool_name(book),
            "outcome": "succeeded",
        },
        {
            "saga_id": saga_id,
            "key": f"{saga_id}:1:pay",
            "tool": tool_name(pay),
            "outcome": "failed",
        },
    ]
    (undo,) = named(spans, "safeact.saga.compensate")
    assert saga_attributes(undo) == {
        "saga_id": saga_id,
        "step": f"{saga_id}:0:book",
        "key": f"{saga_id}:0:book:compensate",
        "tool": tool_name(unbook),
        "outcome": "succeeded",
    }
    calls = named(spans, "safeact.call")
    assert [parent_of(spans, call).name for call in calls] == [
        "safeact.saga.step",
        "safeact.saga.step",
        "safeact.saga.compensate",
    ]
    return steps


def test_a_saga_step_and_its_compensation_are_spans_over_their_calls(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """Each step is a span over its call; the rollback's compensation too, with its step."""
    undone: list[str] = []

    def book(key: str, seat: str) -> str:
        return f"booked {seat}"

    def unbook(key: str, booking: str) -> None:
        undone.append(booking)

    def pay(key: str, amount: int) -> int:
        raise RuntimeError("declined")

    with pytest.raises(SagaFailed), Saga("trip-1", ledger) as saga:
        saga.step(book, "12A", compensate=unbook)
        saga.step(pay, 50)
    assert undone == ["booked 12A"]
    steps = trip_spans(spans, "trip-1", book, pay, unbook)
    assert steps[1].status.status_code is StatusCode.ERROR


def test_an_async_sagas_step_and_compensation_are_spans_over_their_calls(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """The same spans when the saga's steps and compensations are awaited."""

    async def book(key: str, seat: str) -> str:
        return f"booked {seat}"

    async def unbook(key: str, booking: str) -> None:
        await asyncio.sleep(0)

    async def pay(key: str, amount: int) -> int:
        raise RuntimeError("declined")

    async def trip() -> None:
        async with Saga("trip-2", ledger) as saga:
            await saga.step(book, "12A", compensate=unbook)
            await saga.step(pay, 50)

    with pytest.raises(SagaFailed):
        asyncio.run(trip())
    trip_spans(spans, "trip-2", book, pay, unbook)


def test_a_probe_asked_by_reconcile_is_a_span_with_its_verdict(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """Store.reconcile asks a probe: a span with the key, the doubt and the verdict applied."""

    @safe(ledger, name="charge")
    def charge(key: str, amount: int) -> Receipt:
        return Receipt("a@b.c", amount)

    def probe(key: str, receipt: InDoubt) -> Verdict[Receipt]:
        return Happened(Receipt("a@b.c", 5))

    left_in_doubt(charge.store, charge, "k-1", 5)
    charge.store.reconcile({"charge": probe})
    (span,) = named(spans, "safeact.probe")
    assert attributes(span) == {
        "safeact.tool": "charge",
        "safeact.key": "k-1",
        "safeact.attempt_id": "crashed",
        "safeact.doubt_reason": "crashed",
        "safeact.verdict": "happened",
        "safeact.history": "reconciled",
        "safeact.state": "succeeded",
    }
    assert span.status.status_code is StatusCode.UNSET


def test_a_probe_that_raises_records_its_exception_inside_the_calls_span(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """The tool's own probe, asked by a call: a child span, ERROR with the probe's exception."""

    def probe(key: str, receipt: InDoubt) -> Verdict[int]:
        raise ConnectionError("bank unreachable")

    @safe(ledger, name="charge", reconcile=probe)
    def charge(key: str) -> int:
        return 1

    left_in_doubt(charge.store, charge, "k-1")
    assert isinstance(charge("k-1"), InDoubt)
    (span,) = named(spans, "safeact.probe")
    assert attributes(span)["safeact.verdict"] == "failed"
    assert (span.status.status_code, span.status.description) == (
        StatusCode.ERROR,
        "the probe raised ConnectionError: bank unreachable",
    )
    (event,) = span.events
    assert dict(event.attributes or {})["exception.type"] == "ConnectionError"
    assert parent_of(spans, span).name == "safeact.call"


def test_a_probe_whose_exception_cannot_say_what_it_is_is_named_by_its_type(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """A probe's exception whose __str__ raises: the span's status names its type alone."""

    def probe(key: str, receipt: InDoubt) -> Verdict[int]:
        raise UnprintableError

    @safe(ledger, name="charge", reconcile=probe)
    def charge(key: str) -> int:
        return 1

    left_in_doubt(charge.store, charge, "k-1")
    assert isinstance(charge("k-1"), InDoubt)
    (span,) = named(spans, "safeact.probe")
    assert (span.status.status_code, span.status.description) == (
        StatusCode.ERROR,
        "the probe raised UnprintableError",
    )


def test_a_resolve_is_a_span_with_the_operators_decision(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """Store.resolve: a span with the key, its tool and attempt, the decision, the new state."""

    @safe(store, name="charge")
    def charge(key: str) -> int:
        return 1

    left_in_doubt(store, charge, "k-1")
    store.resolve("k-1", happened=True, result=1)
    (span,) = named(spans, "safeact.resolve")
    assert attributes(span) == {
        "safeact.key": "k-1",
        "safeact.tool": "charge",
        "safeact.decision": "happened",
        "safeact.force": False,
        "safeact.attempt_id": "crashed",
        "safeact.state": "succeeded",
    }


def test_a_decision_that_is_not_a_boolean_makes_no_span(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """happened="false" is refused before any span could label it by its truthiness."""

    @safe(store, name="charge")
    def charge(key: str) -> int:
        return 1

    left_in_doubt(store, charge, "k-1")
    with pytest.raises(TypeError, match="happened must be True or False"):
        store.resolve("k-1", happened="false", result=1)  # type: ignore[arg-type]
    assert named(spans, "safeact.resolve") == []


def test_a_refused_resolve_of_a_tool_records_the_refusal(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """A tool's resolve refused (the owner is not proven gone): ERROR, with the exception."""

    @safe(ledger, name="charge")
    def charge(key: str) -> int:
        return 1

    charge.store._claim(
        "k-1", "charge", charge._digest("k-1", (), {}), attempt_id="a", previous=None
    )
    expire_leases(charge.store)
    with pytest.raises(NotProvenError):
        charge.resolve("k-1", happened=False)
    (span,) = named(spans, "safeact.resolve")
    assert (attributes(span)["safeact.tool"], attributes(span)["safeact.decision"]) == (
        "charge",
        "not_happened",
    )
    assert span.status.status_code is StatusCode.ERROR
    (event,) = span.events
    assert dict(event.attributes or {})["exception.type"] == "safeact.exceptions.NotProvenError"


def test_an_approval_decision_is_a_span_with_the_decision(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """Store.approve and deny: a span each with the key, the decision, the tool, the state."""

    @safe(store, name="charge", approval=True)
    def charge(key: str) -> int:
        return 1

    charge("k-1")
    charge("k-2")
    store.approve("k-1", by="grace")
    store.deny("k-2", by="ada", note="not this one")
    assert [attributes(span) for span in named(spans, "safeact.approval")] == [
        {
            "safeact.key": "k-1",
            "safeact.decision": "approved",
            "safeact.tool": "charge",
            "safeact.state": "approved",
        },
        {
            "safeact.key": "k-2",
            "safeact.decision": "denied",
            "safeact.tool": "charge",
            "safeact.state": "denied",
        },
    ]


def test_a_refused_approval_decision_ends_its_span_in_error(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """Approving a key nobody asked about: ERROR, with the SafeError that refused it."""
    with pytest.raises(SafeError):
        store.approve("k-1", by="grace")
    (span,) = named(spans, "safeact.approval")
    assert (attributes(span), span.status.status_code) == (
        {
            "safeact.key": "k-1",
            "safeact.decision": "approved",
            "safeact.error_type": "safeact.exceptions.SafeError",
        },
        StatusCode.ERROR,
    )


def test_the_metrics_count_calls_replays_and_doubts_and_time_claims_and_fsyncs(
    ledger: Path, reader: InMemoryMetricReader
) -> None:
    """After a known sequence of calls, each instrument holds exactly what happened."""

    @safe(ledger, name="metered")
    def act(key: str, error: str) -> int:
        if error:
            raise ValueError(error)
        return 1

    fsyncs_before = points(reader, "safeact.fsync.duration")
    act("ok", "")
    act("ok", "")
    act("ok", "")
    act("bad", "declined")
    act("bad", "declined")
    left_in_doubt(act.store, act, "lost", "")
    act("lost", "")
    tool = "metered"
    assert {
        attrs: value
        for attrs, value in points(reader, "safeact.calls").items()
        if ("safeact.tool", tool) in attrs
    } == {
        of(tool=tool, outcome="succeeded"): 3,
        of(tool=tool, outcome="failed"): 2,
        of(tool=tool, outcome="in_doubt"): 1,
    }
    assert {
        attrs: value
        for attrs, value in points(reader, "safeact.replays").items()
        if ("safeact.tool", tool) in attrs
    } == {of(tool=tool, outcome="succeeded"): 2, of(tool=tool, outcome="failed"): 1}
    assert points(reader, "safeact.calls.in_doubt")[of(tool=tool, doubt_reason="crashed")] == 1
    claims = points(reader, "safeact.claim.duration")[of(tool=tool)]
    assert getattr(claims, "count", None) == 2  # "ok" and "bad": the replays claim nothing
    assert 0 < getattr(claims, "sum", 0) < 10
    (fsyncs,) = points(reader, "safeact.fsync.duration").values()
    before = sum(getattr(point, "count", 0) for point in fsyncs_before.values())
    synced = getattr(fsyncs, "count", 0) - before
    assert synced >= 2  # each claim waited for one
    took = getattr(fsyncs, "sum", 0) - sum(getattr(p, "sum", 0) for p in fsyncs_before.values())
    assert 0 < took < 10 * synced  # seconds each fsync took, not a time on the clock


def test_a_sagas_calls_are_counted_once_not_again_as_its_steps(
    ledger: Path, reader: InMemoryMetricReader
) -> None:
    """A step's or compensation's span wraps a call: the metrics count the call alone."""

    def book(key: str, seat: str) -> str:
        return f"booked {seat}"

    def unbook(key: str, booking: str) -> None:
        pass

    def pay(key: str, amount: int) -> int:
        raise RuntimeError("declined")

    with pytest.raises(SagaFailed), Saga("trip-counted", ledger) as saga:
        saga.step(book, "12A", compensate=unbook)
        saga.step(pay, 50)
    tools = {tool_name(fn) for fn in (book, unbook, pay)}
    assert {
        attrs: value
        for attrs, value in points(reader, "safeact.calls").items()
        if dict(attrs)["safeact.tool"] in tools
    } == {
        of(tool=tool_name(book), outcome="succeeded"): 1,
        of(tool=tool_name(pay), outcome="failed"): 1,
        of(tool=tool_name(unbook), outcome="succeeded"): 1,
    }


def test_spans_are_made_while_safeacts_log_is_silenced(
    store: Store, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """Whether a call is watched is OpenTelemetry's or the log's to say: either suffices."""
    caplog.set_level(logging.ERROR, logger="safeact")

    @safe(store, name="unlogged")
    def act(key: str) -> int:
        return 1

    act("k")
    (span,) = named(spans, "safeact.call")
    assert attributes(span)["safeact.tool"] == "unlogged"
    assert caplog.records == []


def two_in_doubt(store: Store) -> None:
    """Leave keys k-1 and k-2 of tool "gauged" in doubt in ``store``."""

    @safe(store, name="gauged")
    def act(key: str) -> int:
        return 1

    left_in_doubt(store, act, "k-1")
    left_in_doubt(store, act, "k-2")


def test_the_gauge_reports_the_keys_in_doubt_of_an_observed_store(
    store: Store, reader: InMemoryMetricReader
) -> None:
    """observe_in_doubt: the gauge holds the store's keys in doubt by tool, 0 once resolved."""
    where = {"ledger": store.location, "tool": "gauged"}

    def gauge() -> object:
        return points(reader, "safeact.keys.in_doubt").get(of(**where))

    observe_in_doubt(store)
    assert gauge() is None
    two_in_doubt(store)
    assert gauge() == 2
    store.resolve("k-1", happened=True, result=1)
    store.resolve("k-2", happened=False)
    assert gauge() == 0


def gauged(
    reader: InMemoryMetricReader, store: Store
) -> dict[frozenset[tuple[str, object]], object]:
    """The gauge's points for ``store``'s ledger, collected now."""
    found = points(reader, "safeact.keys.in_doubt")
    return {
        where: value
        for where, value in found.items()
        if ("safeact.ledger", store.location) in where
    }


def test_the_gauge_reads_0_for_each_tool_of_a_healthy_ledger(
    store: Store, reader: InMemoryMetricReader
) -> None:
    """A tool with no key in doubt reads 0, not nothing, and reads 0 again once resolved."""

    @safe(store, name="gauged.healthy")
    def act(key: str) -> int:
        return 1

    act("k-0")  # its first claim: the ledger knows the tool
    observe_in_doubt(store)
    assert gauged(reader, store) == {of(ledger=store.location, tool="gauged.healthy"): 0}
    left_in_doubt(store, act, "k-1")
    assert gauged(reader, store) == {of(ledger=store.location, tool="gauged.healthy"): 1}
    store.resolve("k-1", happened=True, result=1)
    assert gauged(reader, store) == {of(ledger=store.location, tool="gauged.healthy"): 0}


def test_a_ledger_that_knows_no_tool_reads_one_0_that_gives_way_to_its_tools(
    store: Store, reader: InMemoryMetricReader
) -> None:
    """Before any tool claims: one 0 with no tool; after, only the tools' (a sum stays exact)."""

    @safe(store, name="gauged.first")
    def act(key: str) -> int:
        return 1

    observe_in_doubt(store)
    assert gauged(reader, store) == {of(ledger=store.location): 0}
    act("k-0")
    assert gauged(reader, store) == {of(ledger=store.location, tool="gauged.first"): 0}


def test_the_gauge_reads_0_for_a_tool_only_another_store_called(
    tmp_path: Path, reader: InMemoryMetricReader
) -> None:
    """A tool the ledger knows (another process's, or an earlier run's) reads 0 here too."""
    with get_store(tmp_path / "shared.db") as elsewhere:

        @safe(elsewhere, name="gauged.elsewhere")
        def act(key: str) -> int:
            return 1

        act("k-0")
    with get_store(tmp_path / "shared.db") as store:
        observe_in_doubt(store)
        found = gauged(reader, store)
    assert found == {of(ledger=store.location, tool="gauged.elsewhere"): 0}


@pytest.mark.located  # spoils a row through the ledger's location
def test_the_gauge_counts_a_corrupt_row_in_doubt_apart(
    store: Store, reader: InMemoryMetricReader
) -> None:
    """A row in doubt safeact cannot read is counted under "(corrupt)", not dropped."""
    observe_in_doubt(store)
    two_in_doubt(store)
    spoil(store.location, "k-2", "attempted_at", "yesterday")
    gauge = points(reader, "safeact.keys.in_doubt")
    assert gauge[of(ledger=store.location, tool="gauged")] == 1
    assert gauge[of(ledger=store.location, tool="(corrupt)")] == 1


def test_log_records_carry_the_fields_at_their_levels(
    ledger: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Succeeded at DEBUG, failed at INFO, in doubt at WARNING, each with its fields."""

    @safe(ledger, name="logged")
    def act(key: str, error: str) -> int:
        if error:
            raise ValueError(error)
        return 1

    caplog.set_level(logging.DEBUG, logger="safeact.events")
    act("ok", "")
    act("bad", "declined")
    left_in_doubt(act.store, act, "lost", "")
    act("lost", "")
    records = [record for record in caplog.records if record.name == "safeact.events"]
    ok = act.store.get("ok")
    bad = act.store.get("bad")
    assert ok is not None
    assert bad is not None
    fields = [
        {name: value for name, value in vars(record).items() if name.startswith("safeact_")}
        for record in records
    ]
    common = {"safeact_event": "call", "safeact_tool": "logged", "safeact_replayed": False}
    assert [record.levelno for record in records] == [logging.DEBUG, logging.INFO, logging.WARNING]
    assert fields == [
        {
            **common,
            "safeact_key": "ok",
            "safeact_outcome": "succeeded",
            "safeact_recorded": True,
            "safeact_attempt_id": ok.attempt_id,
        },
        {
            **common,
            "safeact_key": "bad",
            "safeact_outcome": "failed",
            "safeact_recorded": True,
            "safeact_error_type": "ValueError",
            "safeact_attempt_id": bad.attempt_id,
        },
        {
            **common,
            "safeact_key": "lost",
            "safeact_outcome": "in_doubt",
            "safeact_doubt_reason": DoubtReason.CRASHED.value,
            "safeact_attempt_id": "crashed",
        },
    ]
    assert records[2].getMessage() == "call logged 'lost': in doubt (crashed)"


def test_a_replay_and_an_operators_decision_say_so_in_their_log_messages(
    ledger: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A replay says "(replayed)"; a decision names what it decided and the state it left."""

    @safe(ledger, name="said")
    def act(key: str) -> int:
        return 1

    caplog.set_level(logging.DEBUG, logger="safeact.events")
    act("k")
    act("k")
    left_in_doubt(act.store, act, "lost")
    act.store.resolve("lost", happened=True, result=2)
    messages = [record.getMessage() for record in caplog.records if record.name == "safeact.events"]
    assert messages == [
        "call said 'k': succeeded",
        "call said 'k': succeeded (replayed)",
        "resolve said 'lost': happened -> succeeded",
    ]


def test_a_busy_key_logs_at_info_and_an_unstored_result_at_warning(
    ledger: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In flight (its owner still runs) needs nobody: INFO; a result not stored does: WARNING."""

    @safe(ledger, name="levels", wait=0)
    def act(key: str) -> float:
        return float("inf")  # JSON cannot hold it: the result is not stored

    caplog.set_level(logging.DEBUG, logger="safeact.events")
    act.store._claim("busy", "levels", act._digest("busy", (), {}), attempt_id="a", previous=None)
    assert isinstance(act("busy"), InDoubt)
    assert act("lost") == Succeeded("lost", float("inf"), recorded=False)
    records = [record for record in caplog.records if record.name == "safeact.events"]
    assert [(record.levelno, record.getMessage()) for record in records] == [
        (logging.INFO, "call levels 'busy': in doubt (in_flight)"),
        (logging.WARNING, "call levels 'lost': succeeded (not recorded)"),
    ]


def test_a_probes_not_happened_is_its_verdict_and_the_key_released(
    ledger: Path, spans: InMemorySpanExporter
) -> None:
    """NotHappened on a crashed owner's key: verdict not_happened, the key released."""

    @safe(ledger, name="charge")
    def charge(key: str) -> int:
        return 1

    left_in_doubt(charge.store, charge, "k-1")

    def probe(key: str, receipt: InDoubt) -> Verdict[int]:
        return NotHappened()

    charge.store.reconcile({"charge": probe})
    (span,) = named(spans, "safeact.probe")
    assert (attributes(span)["safeact.verdict"], attributes(span)["safeact.state"]) == (
        "not_happened",
        "released",
    )


def test_the_gauge_skips_a_closed_store(
    tmp_path: Path, reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    """A store closed after it was observed reports nothing; the open ones still report."""
    closed = get_store(tmp_path / "closed.db")
    observe_in_doubt(closed)
    closed.close()
    with get_store(tmp_path / "open.db") as store:

        @safe(store, name="gauged.open")
        def act(key: str) -> int:
            return 1

        observe_in_doubt(store)
        left_in_doubt(store, act, "k-1")
        found = points(reader, "safeact.keys.in_doubt")
    assert found[of(ledger=store.location, tool="gauged.open")] == 1
    assert not [attrs for attrs in found if ("safeact.ledger", closed.location) in attrs]
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    said = f"could not count the keys in doubt of {closed.location}"
    (warned,) = [w for w in warnings if w.getMessage() == said]
    assert isinstance(warned.exc_info, tuple)  # with what went wrong
    assert isinstance(warned.exc_info[1], StoreError)


class Breaking(SpanProcessor):
    """A span processor that raises when a span starts or ends: the SDK does not guard it."""

    armed = False

    def on_start(self, span: object, parent_context: object = None) -> None:  # noqa: ARG002 - the SDK's signature
        if self.armed:
            raise RuntimeError("the span processor is broken")

    def on_end(self, span: object) -> None:  # noqa: ARG002 - the SDK's signature
        if self.armed:
            raise RuntimeError("the span processor is broken")


@pytest.fixture
def broken(otel: tuple[InMemorySpanExporter, InMemoryMetricReader]) -> Iterator[None]:
    """Every span start and end raises while the test runs."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    if not any(isinstance(p, Breaking) for p in provider._active_span_processor._span_processors):
        provider.add_span_processor(Breaking())
    Breaking.armed = True
    try:
        yield
    finally:
        Breaking.armed = False


def test_a_broken_span_processor_changes_no_outcome(broken: None, tmp_path: Path) -> None:
    """With spans that raise, a call, a replay, a failure and a saga end as without them."""
    runs: list[str] = []
    with get_store(tmp_path / "agent.db") as store:

        @safe(store, name="broken.pay")
        def pay(key: str) -> int:
            runs.append(key)
            if key == "bad":
                raise ValueError("declined")
            return 5

        @safe(store, name="broken.undo")
        def undo(key: str, paid: int) -> None:
            runs.append(key)

        assert pay("k") == Succeeded("k", 5)
        assert pay("k") == Succeeded("k", 5, replayed=True)
        assert isinstance(pay("bad"), Failed)
        with pytest.raises(SagaFailed), Saga("order-1", store) as saga:
            saga.step(pay, compensate=undo)
            saga.step(pay)
            raise RuntimeError("abort")
        finished = store.get_saga("order-1")
        assert finished is not None
        assert finished.state.value == "compensated"
    assert runs == [
        "k",
        "bad",
        "order-1:0:broken.pay",
        "order-1:1:broken.pay",
        "order-1:0:broken.pay:compensate",
    ]


def test_a_broken_span_processor_lets_an_interrupt_through(broken: None, tmp_path: Path) -> None:
    """A KeyboardInterrupt in the action comes out as itself, not as telemetry's error."""
    with get_store(tmp_path / "agent.db") as store:

        @safe(store, name="broken.interrupted")
        def stop(key: str) -> int:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            stop("k")


def test_a_broken_span_processor_lets_a_cancellation_through(broken: None, tmp_path: Path) -> None:
    """An async call cancelled while its action runs raises CancelledError, nothing else."""
    with get_store(tmp_path / "agent.db") as store:
        started = asyncio.Event()

        @safe(store, name="broken.cancelled")
        async def wait(key: str) -> int:
            started.set()
            await asyncio.Event().wait()
            return 1

        async def cancel() -> None:
            call = asyncio.create_task(wait("k"))
            await started.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

        asyncio.run(cancel())


class RaisingInstrument:
    """An instrument that raises whatever it is given (a broken metrics pipeline)."""

    def record(self, *_: object, **__: object) -> None:
        raise RuntimeError("the instrument is broken")

    add = record


def test_a_broken_fsync_histogram_neither_hangs_nor_fails_commits(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, otel: object
) -> None:
    """With the fsync and claim instruments raising, claims still commit, sync and return."""
    found = safeact._telemetry._otel()
    assert found is not None
    raising: Any = RaisingInstrument()  # in the place of the SDK's instruments
    broken = evolve(found, fsyncs=raising, claims=raising, calls=raising)
    monkeypatch.setattr(safeact._telemetry, "_otel", lambda: broken)
    with get_store(tmp_path / "agent.db") as store:

        @safe(store, name="broken.synced")
        def pay(key: str) -> int:
            return 5

        outcomes = [pay(f"k{n}") for n in range(3)]
    assert outcomes == [Succeeded(f"k{n}", 5) for n in range(3)]


WITHOUT_OTEL = """
import asyncio, logging, sys
sys.modules["opentelemetry"] = None  # as if it were not installed: importing it fails
import safeact
from safeact import Happened, Saga, Succeeded, get_store, safe
from safeact import _telemetry

records = []
factory = logging.getLogRecordFactory()
def counted(*args, **kwargs):
    record = factory(*args, **kwargs)
    records.append(record)
    return record
logging.setLogRecordFactory(counted)

store = get_store(sys.argv[1])

@safe(store, name="plain")
def plain(key: str) -> int:
    return 1

@safe(store, name="awaited")
async def awaited(key: str) -> int:
    return 2

def undo(key: str, value: int) -> None:
    pass

logging.getLogger("safeact").setLevel(logging.ERROR)  # logging off
assert _telemetry.call("plain", "k") is _telemetry.QUIET
assert plain("k-1") == Succeeded("k-1", 1)
assert asyncio.run(awaited("k-2")) == Succeeded("k-2", 2)
assert records == [], records

logging.getLogger("safeact").setLevel(logging.DEBUG)  # logging on, still no OpenTelemetry
assert plain("k-1") == Succeeded("k-1", 1, replayed=True)
try:
    with Saga("s-1", store) as saga:
        saga.step(plain, compensate=undo)
        raise RuntimeError("abort")
except safeact.SagaFailed:
    pass
store._claim("k-3", "plain", plain._digest("k-3", (), {}), attempt_id="a", previous=None)
with store._transaction(sync=False) as db:
    db.execute(  # another start and an empty group: a killed owner's
        "UPDATE calls SET owner_started = -2, owner_group = 2147483647 "
        "WHERE state = 'attempting'"
    )
assert isinstance(plain("k-3"), safeact.InDoubt)  # a WARNING: no handler prints it
store.reconcile({"plain": lambda key, receipt: Happened(1)})

@safe(store, name="other")
def other(key: str) -> int:
    return 3

try:
    other("k-1")  # the key is plain's: raised out of the call, so a WARNING with its type
except safeact.KeyConflictError:
    pass
try:
    from safeact.otel import observe_in_doubt
    observe_in_doubt(store)
except ImportError as exc:
    print("observe_in_doubt:", exc)
events = [r for r in records if r.name == "safeact.events"]
print(*sorted({r.safeact_event for r in events}))
print(*[f"{r.levelname} {r.getMessage()}" for r in events if ": raised " in r.getMessage()])
print(*sorted(m for m, v in sys.modules.items() if m.startswith("opentelemetry") and v))
"""


def test_without_opentelemetry_calls_work_and_nothing_of_it_loads(tmp_path: Path) -> None:
    """OpenTelemetry unimportable: calls, sagas and probes work, and log; nothing of it loads."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, str(tmp_path / "agent.db")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no lastResort output either
    assert done.stdout.splitlines() == [
        "observe_in_doubt: observe_in_doubt needs OpenTelemetry's API: pip install 'safeact[otel]'",
        "call compensation probe saga_step",
        "WARNING call other 'k-1': raised safeact.exceptions.KeyConflictError",
        "",
    ]


def test_opentelemetry_loads_at_the_first_call_not_at_import(tmp_path: Path) -> None:
    """``import safeact`` leaves OpenTelemetry unloaded; the first call decides and loads it."""
    code = textwrap.dedent(
        """
        import sys
        import safeact
        print("opentelemetry" in sys.modules)
        def act(key: str) -> None:
            pass
        tool = safeact.safe(sys.argv[1], name="t")(act)
        print("opentelemetry" in sys.modules)
        tool("k")
        print("opentelemetry" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "agent.db")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["False", "False", "True"]


def test_the_attribute_names_are_under_the_safeact_namespace(
    ledger: Path, spans: InMemorySpanExporter, reader: InMemoryMetricReader
) -> None:
    """Every attribute safeact sets on a span or a metric is named safeact.<field>."""

    @safe(ledger, name="named")
    def act(key: str) -> int:
        return 1

    act("k-1")
    names: set[str] = set()
    for span in spans.get_finished_spans():
        names.update(attributes(span))
    for metric in ("safeact.calls", "safeact.claim.duration"):
        for attrs in points(reader, metric):
            names.update(name for name, _ in attrs)
    assert names
    assert all(name.startswith("safeact.") for name in names), names


def test_decisions_in_the_inbox_and_on_the_command_line_are_counted_alike(
    ledger: Path, reader: InMemoryMetricReader
) -> None:
    """``safeact.decisions`` counts each person's decision, recorded or refused, wherever made."""
    with get_store(ledger) as store:
        crashed(store, "cli-1")
        crashed(store, "web-1")
        before = points(reader, "safeact.decisions")
        assert cli(["resolve", str(ledger), "cli-1", "--not-happened"]) == 0
        with running(store) as served:
            client = signed_in(served)
            page = client.get("/key?key=web-1")
            form = {
                "csrf": page.csrf(),
                "key": "web-1",
                "attempt": page.hidden("attempt"),
                "decision": "not_happened",
            }
            assert client.post("/resolve", form).status == 303
            assert client.post("/resolve", form).status == 409  # released already: refused
    after = points(reader, "safeact.decisions")
    recorded = of(tool="tests.charge", decision="not_happened", outcome="recorded")
    refused = of(decision="not_happened", outcome="refused")
    assert after[recorded] == before.get(recorded, 0) + 2  # type: ignore[operator]
    assert after[refused] == before.get(refused, 0) + 1  # type: ignore[operator]
