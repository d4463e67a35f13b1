"""OpenTelemetry for safeact: ``pip install "safeact[otel]"``.

With OpenTelemetry's API installed, every guarded call, saga step, compensation, probe and
resolve is a span of the tracer ``safeact``, and the meter ``safeact`` counts calls and
times claims and fsyncs, through the providers the application sets up (nothing is sent
without an SDK); this module is not needed for that. It adds what needs a store:
``observe_in_doubt(store)`` reports the keys of ``store`` that need a decision now as the
gauge ``safeact.keys.in_doubt``, by tool, each time the metrics are collected.

The gauge is never absent for a ledger that can be read, and counts each key in doubt once.
Each tool the ledger knows reports, 0 when none of its keys is in doubt: the tools that have
claimed a key since the ledger reached schema 5 (its ``tools`` table, shared by every
process), those with a key in doubt, and those this process reported before. Keys whose
rows cannot be read are counted under the tool ``(corrupt)``. A ledger that knows no tool
yet reports one 0 without ``safeact.tool``, which gives way to its tools' own. So
``absent_over_time(safeact_keys_in_doubt[10m])`` fires only when a ledger cannot be read
(that is logged) or nothing reports it, and ``max by (safeact_ledger, safeact_tool)
(safeact_keys_in_doubt) > 0`` (max: every process that observes a ledger reports the same
counts) whenever a key needs a person; the zeros add nothing to a sum.
"""

from __future__ import annotations

import functools
import logging
import weakref
from typing import TYPE_CHECKING

import safeact._telemetry as telemetry
from safeact._protocol import State
from safeact.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from safeact._store import Store

__all__ = ["observe_in_doubt"]

_CORRUPT = "(corrupt)"
"""The tool under which keys in doubt whose rows cannot be read are counted."""

_logger = logging.getLogger("safeact")

_observed: weakref.WeakSet[Store] = weakref.WeakSet()
_seen: weakref.WeakKeyDictionary[Store, set[str]] = weakref.WeakKeyDictionary()
"""The stores ``observe_in_doubt`` was given, and the tools each has reported."""


def observe_in_doubt(store: Store) -> None:
    """Report ``store``'s keys in doubt as the gauge ``safeact.keys.in_doubt``, by tool.

    Each collection of the metrics reads the keys in doubt of every store given here (as
    ``Store.list_in_doubt`` does) that is still open: one value per tool the ledger knows,
    0 for a tool with no key in doubt, or a single 0 without ``safeact.tool`` while it
    knows none (see the module's docstring). This does not keep the store alive.

    Raises:
        ImportError: ``opentelemetry`` cannot be imported (install ``safeact[otel]``).

    """
    if not _gauge():
        raise ImportError("observe_in_doubt needs OpenTelemetry's API: pip install 'safeact[otel]'")
    _observed.add(store)


@functools.cache
def _gauge() -> bool:
    """Make the gauge, once (False: OpenTelemetry cannot be used); it reads the stores."""
    return telemetry.observe(
        "safeact.keys.in_doubt",
        _in_doubt,
        unit="{key}",
        description="Keys that need a decision now (as `safeact doubt` lists them), by ledger "
        "and tool",
    )


def _in_doubt() -> Iterator[tuple[int, dict[str, str]]]:
    """Each observed store's keys in doubt now, by tool, as ``(count, attributes)``."""
    for store in list(_observed):
        try:
            known = store._known_tools()  # noqa: SLF001 - the store's own read for its gauge
            found = store.scan_records(state=State.IN_DOUBT)
        except Exception:
            # Said, not hidden: an alert on "> 0" cannot fire for a ledger that reports
            # nothing; alert on the series being absent as well.
            _logger.warning(
                "could not count the keys in doubt of %s", store.location, exc_info=True
            )
            continue
        counts = dict.fromkeys({*known, *_seen.get(store, ())}, 0)
        for record in found:
            # A corrupt row needs a person as much as a doubt does: counted, apart.
            tool = _CORRUPT if isinstance(record, CorruptRecordError) else record.tool
            counts[tool] = counts.get(tool, 0) + 1
        _seen[store] = set(counts)
        ledger = {"safeact.ledger": store.location}
        if not counts:
            # Present, so an absent_over_time alert stays quiet; 0, so a sum is unchanged.
            yield 0, ledger
        for tool, count in sorted(counts.items()):
            yield count, {**ledger, "safeact.tool": tool}
