"""How long the event loop is held up while async tools do their ledger work.

A ticker task asks to wake every millisecond and records how late each wake-up is, while
200 concurrent calls on new keys run. Measured twice in one run: through ``AsyncSafeTool``
(ledger work in worker threads) and through a sync tool called on the loop (ledger work
blocking it), which is what the async tool exists to avoid. Prints the worst and the 99th
percentile lateness of each, and their ratio.

    python -m bench.loop_lag
"""

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from safeact import get_store, safe

CALLS = 200


async def lateness_during(work: Callable[[], Awaitable[object]]) -> list[float]:
    """Run ``work`` while a 1 ms ticker records how late it wakes, in milliseconds."""
    late: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            planned = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            late.append((time.perf_counter() - planned) * 1000)

    tick = asyncio.create_task(ticker())
    await work()
    done.set()
    await tick
    return late


def p99(late: list[float]) -> float:
    """The 99th percentile of ``late`` (the only figure, when there is one)."""
    return statistics.quantiles(late, n=100)[98] if len(late) > 1 else late[0]


async def measure(folder: Path) -> dict[str, list[float]]:
    store = get_store(folder / "bench.db")

    @safe(store, name="bench.async")
    async def act_async(key: str) -> int:
        return len(key)

    @safe(store, name="bench.sync")
    def act_sync(key: str) -> int:
        return len(key)

    async def through_threads() -> object:
        return await asyncio.gather(*(act_async(f"a{n}") for n in range(CALLS)))

    async def on_the_loop() -> object:
        async def one(n: int) -> object:
            await asyncio.sleep(0)
            return act_sync(f"s{n}")

        return await asyncio.gather(*(one(n) for n in range(CALLS)))

    results = {
        "AsyncSafeTool": await lateness_during(through_threads),
        "sync tool on the loop": await lateness_during(on_the_loop),
    }
    store.close()
    return results


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        results = asyncio.run(measure(Path(scratch)))
    print(f"event-loop lateness during {CALLS} concurrent calls on new keys (ms)")
    print(f"{'':24}{'worst':>10}{'p99':>10}{'median':>10}")
    summary = {}
    for name, late in results.items():
        summary[name] = max(late)
        print(f"{name:24}{max(late):10.2f}{p99(late):10.2f}{statistics.median(late):10.2f}")
    ratio = summary["sync tool on the loop"] / summary["AsyncSafeTool"]
    print(f"worst lateness, blocking / async tool: {ratio:.1f}x")


if __name__ == "__main__":
    main()
