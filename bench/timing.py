"""How every row of the benchmark is timed, so safeact's rows and its peers' agree."""

import statistics
import time
from collections.abc import Callable

ROUNDS = 5


def per_call(
    run: Callable[[int], None], calls: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median seconds per call of ``run(calls)`` over ROUNDS rounds, on ``clock``."""
    times = []
    for _ in range(ROUNDS):
        started = clock()
        run(calls)
        times.append((clock() - started) / calls)
    return statistics.median(times)


def repeat(call: Callable[[], object]) -> Callable[[int], None]:
    """A run of ``n`` calls of ``call``."""

    def run(calls: int) -> None:
        for _ in range(calls):
            call()

    return run


def shares(calls: int, workers: int) -> list[int]:
    """``calls`` split over ``workers`` as evenly as can be, adding up to ``calls`` exactly.

    Rows that split their calls divide by ``calls``: rounding each share down would make
    them look faster than they are.
    """
    share, rest = divmod(calls, workers)
    return [share + 1] * rest + [share] * (workers - rest)
