"""OpenTelemetry for safeact: ``pip install "safeact[otel]"``.

With OpenTelemetry's API installed, every guarded call, saga step, compensation, probe and
resolve is a span of the tracer ``safeact``, and the meter ``safeact`` counts calls and
times claims and fsyncs, through the providers the application sets up (nothing is sent
without an SDK); this module is not needed for that. It adds what needs a store:
``observe_in_doubt(store)`` reports the keys of ``store`` that need a decision now as the
gauge ``safeact.keys.in_doubt``, by tool, each time the metrics are collected.
"""

from safeact._telemetry import observe_in_doubt

__all__ = ["observe_in_doubt"]
