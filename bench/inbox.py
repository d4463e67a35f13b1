"""The web inbox's first page on a ledger with 10,000 keys in doubt, served over HTTP.

The page is served by the real server (uvicorn, in a thread of this process) and fetched
over loopback by a signed-in client, as ``tests.inbox`` does; the figure is the median
time of a whole GET of ``/``, in milliseconds.
"""

import sqlite3
import statistics
import time
from pathlib import Path

from safeact import get_store, safe
from safeact._protocol import DoubtReason
from tests.inbox import running

DOUBTS = 10_000
FIGURE = f"inbox first page, {DOUBTS:,} keys in doubt"
FETCHES = 9


def inbox_figures(folder: Path) -> dict[str, float]:
    """``FIGURE``, in milliseconds: the median of ``FETCHES`` GETs after one to warm up."""
    ledger = folder / "inbox.db"
    seed(ledger, DOUBTS)
    with get_store(ledger) as store, running(store) as served:
        client = served.client()
        assert client.sign_in().status == 303
        times = []
        for _ in range(FETCHES + 1):
            started = time.perf_counter()
            page = client.get("/")
            times.append(time.perf_counter() - started)
            assert page.status == 200, page.body
            assert f"of {DOUBTS}, oldest first" in page.body  # the whole count, a page shown
    return {FIGURE: statistics.median(times[1:]) * 1000}


def seed(ledger: Path, doubts: int) -> None:
    """A ledger with ``doubts`` keys in doubt: one claimed and marked, copied in SQL."""
    store = get_store(ledger)

    @safe(store, name="bench.refund", keep_arguments=True)
    def refund(key: str, amount: int) -> int:
        return amount

    digest = refund._digest("seed", (1,), {})
    claimed = store._claim("seed", refund.name, digest, attempt_id="seed", previous=None)
    assert claimed is not None
    store._mark_in_doubt("seed", "seed", DoubtReason.INTERRUPTED)
    store.close()
    connection = sqlite3.connect(ledger, isolation_level=None)
    columns = [row[1] for row in connection.execute("PRAGMA table_info(calls)")]
    copied = ", ".join("? || " + c if c in ("key", "attempt_id") else c for c in columns)
    connection.execute("BEGIN")
    connection.executemany(
        f"INSERT INTO calls ({', '.join(columns)}) SELECT {copied} FROM calls "  # noqa: S608 - the table's own columns
        "WHERE key = 'seed'",
        ((f"k{n:05}-", f"a{n:05}-") for n in range(doubts - 1)),
    )
    connection.execute("COMMIT")
    connection.close()
