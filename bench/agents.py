"""The figure users feel: many concurrent agents whose action waits on a provider's API.

AGENTS asyncio tasks each make CALLS_EACH calls of an async tool whose action awaits
PROVIDER_SECONDS (a stand-in for an HTTP call), once guarded by safeact (each call a new
key, on a ledger file) and once unguarded, on one event loop. Reports calls per second of
the guarded run over the unguarded one, and the 99th percentile of the latency safeact
adds to a call: the guarded calls' p99 less the unguarded calls' p99.

    python -m bench.agents
"""

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from itertools import count
from pathlib import Path
from typing import NamedTuple

from safeact import get_store, safe

AGENTS = 100
CALLS_EACH = 10
PROVIDER_SECONDS = 0.020
RATIO = f"{AGENTS} agents awaiting a 20 ms provider, guarded / unguarded calls per second"
ADDED_P99 = f"{AGENTS} agents awaiting a 20 ms provider, p99 latency safeact adds"


class Run(NamedTuple):
    """One run of the agents: calls per second, and each call's latency in seconds."""

    rate: float
    latencies: list[float]


async def provider(n: int) -> int:
    """The provider's API: answers after PROVIDER_SECONDS."""
    await asyncio.sleep(PROVIDER_SECONDS)
    return n


async def agents(call: Callable[[int], Awaitable[object]], calls_each: int) -> Run:
    """AGENTS tasks, each making ``calls_each`` calls of ``call`` one after the other."""
    latencies: list[float] = []

    async def agent() -> None:
        for n in range(calls_each):
            started = time.perf_counter()
            await call(n)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(agent() for _ in range(AGENTS)))
    return Run(AGENTS * calls_each / (time.perf_counter() - started), latencies)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def agent_figures(scale: float = 1.0) -> tuple[dict[str, float], dict[str, float]]:
    """The ratio (unit x) and the added p99 (ms), each the median of three runs of each kind.

    ``scale`` shrinks the calls each agent makes (``--quick``).
    """
    calls_each = max(int(CALLS_EACH * scale), 2)
    ratios, added = [], []
    with tempfile.TemporaryDirectory() as folder:
        store = get_store(Path(folder) / "agents.db")
        keys = count()

        @safe(store, name="bench.provider")
        async def guarded(key: str, n: int) -> int:
            return await provider(n)

        async def guarded_call(n: int) -> object:
            return await guarded(f"agent-{next(keys)}", n)

        asyncio.run(guarded_call(0))  # the tool's first claim writes its description
        for _ in range(3):
            bare = asyncio.run(agents(provider, calls_each))
            safe_run = asyncio.run(agents(guarded_call, calls_each))
            ratios.append(safe_run.rate / bare.rate)
            added.append((p99(safe_run.latencies) - p99(bare.latencies)) * 1000)
        store.close()
    return {RATIO: statistics.median(ratios)}, {ADDED_P99: statistics.median(added)}


def main() -> None:
    ratio, added = agent_figures()
    print(f"{RATIO}: {ratio[RATIO]:.2f}x")
    print(f"{ADDED_P99}: {added[ADDED_P99]:.1f} ms")


if __name__ == "__main__":
    main()
