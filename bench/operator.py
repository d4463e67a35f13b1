"""What an operator's read costs on ledgers of 1,000 and 1,000,000 keys (1,000 in doubt).

    python -m bench.operator [--json PATH]

Each command runs in a fresh interpreter of its own, as an operator's cron or a health
check runs it; the figures are its wall time (the command itself, the interpreter's start
left out) and its peak resident memory (the whole process, ``ru_maxrss``). The ledger is
made in SQL: one key claimed through a tool and settled, one left in doubt, each copied
under new keys with one history event apiece, so a million keys take seconds to make.
Issue 36 holds ``doubt``, ``stats`` and the gauge to 100 ms and 100 MB at a million keys,
and each read that costs what it returns to 2x growth from 1,000 (``OPERATOR_TARGETS``);
this module measures and prints each verdict, it asserts nothing.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.targets import OPERATOR_TARGETS, Judged, judge
from safeact import get_store, safe
from safeact._protocol import DoubtReason
from tests.big_ledger import copy_key

DOUBTS = 1_000

_MEASURE = """
import json, resource, sys, time
from safeact._cli import main
started = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"code": code, "seconds": seconds, "peak_bytes": peak}), file=sys.stderr)
"""

_GAUGE = """
import json, resource, sys, time
from safeact import get_store
from safeact.otel import _in_doubt, _observed
store = get_store(sys.argv[1])
_observed.add(store)
started = time.perf_counter()
total = sum(count for count, _ in _in_doubt())
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"code": total, "seconds": seconds, "peak_bytes": peak}), file=sys.stderr)
"""


OLD = "2026-01-01T00:00:00.000000+00:00"
"""When the old settled keys (the ones a purge takes) were attempted and finished."""


def make_ledger(path: Path, keys: int, doubts: int = DOUBTS) -> int:
    """A ledger of ``keys`` keys: ``doubts`` in doubt, the rest succeeded, 90 % of them old.

    Returns how many old settled keys it holds (``purge --older-than 30d`` takes those).
    """
    store = get_store(path)

    @safe(store, name="bench.refund", keep_arguments=True)
    def refund(key: str, amount: int) -> int:
        return amount

    refund("settled", 1)
    digest = refund._digest("doubted", (1,), {})
    assert store._claim("doubted", refund.name, digest, attempt_id="d", previous=None)
    store._mark_in_doubt("doubted", "d", DoubtReason.INTERRUPTED)
    store.close()
    settled = max(0, keys - doubts - 2)  # a ledger of 1,000 keys is the 1,000 in doubt
    old = settled * 9 // 10
    copy_key(path, "settled", old, "old", at=OLD)
    copy_key(path, "settled", settled - old, "new")
    copy_key(path, "doubted", doubts, "new")
    return old


def measure(script: str, *arguments: str) -> dict[str, float]:
    """Run ``script`` with ``arguments`` in a fresh interpreter; what it reported."""
    done = subprocess.run(
        [sys.executable, "-c", script, *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    report: dict[str, float] = json.loads(done.stderr.strip().splitlines()[-1])
    return report


def figures(folder: Path, keys: int) -> dict[str, dict[str, float]]:
    """Each read on a ledger of ``keys`` keys, then a purge of its old settled keys."""
    ledger = folder / f"ledger-{keys}.db"
    old = make_ledger(ledger, keys)
    location = str(ledger)
    found = {
        "doubt": measure(_MEASURE, "doubt", location, "--json"),
        "stats": measure(_MEASURE, "stats", location, "--json"),
        "show": measure(_MEASURE, "show", location, "doubted-new-0000001", "--json"),
        "ls --state in_doubt": measure(_MEASURE, "ls", location, "--state", "in_doubt"),
        "the in-doubt gauge": measure(_GAUGE, location),
        "ls (every key)": measure(_MEASURE, "ls", location, "--json"),
        "check (every row)": measure(_MEASURE, "check", location, "--json"),
        "purge (the settled keys of 30 days ago)": measure(
            _MEASURE, "purge", location, "--older-than", "30d", "--state", "succeeded"
        ),
    }
    found["purge (the settled keys of 30 days ago)"]["keys"] = old
    return found


def verdicts(
    small: dict[str, dict[str, float]], large: dict[str, dict[str, float]]
) -> list[Judged]:
    """Issue 36's targets judged on a run's ledgers of 1,000 and 1,000,000 keys."""
    measured: dict[str, float] = {}
    for read, at in large.items():
        measured[f"{read} at 1,000,000 keys"] = at["seconds"] * 1000
        measured[f"peak memory of {read} at 1,000,000 keys"] = at["peak_bytes"] / 2**20
        measured[f"{read}, 1,000,000 keys / 1,000"] = at["seconds"] / small[read]["seconds"]
    return judge(measured, OPERATOR_TARGETS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, default=Path("bench-operator.json"))
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        small, large = (figures(Path(scratch), keys) for keys in (1_000, 1_000_000))
    print(f"{'read':44}{'1,000 keys':>24}{'1,000,000 keys':>24}")
    for read in small:
        cells = [
            f"{at[read]['seconds'] * 1000:9.0f} ms {at[read]['peak_bytes'] / 2**20:6.0f} MB"
            for at in (small, large)
        ]
        print(f"{read:44}" + "".join(f"{cell:>24}" for cell in cells))
    print(f"(the purge at 1,000,000 keys removed {large[next(reversed(large))]['keys']:,.0f})")
    judged = verdicts(small, large)
    print()
    for found in judged:
        shown = "-" if found.measured is None else found.target.show(found.measured)
        print(f"{found.figure:56}{shown:>12}  target {found.target}: {found.verdict}")
    options.json.write_text(
        json.dumps(
            {
                "1000": small,
                "1000000": large,
                "targets": [
                    {
                        "figure": j.figure,
                        "measured": j.measured,
                        "target": str(j.target),
                        "verdict": j.verdict,
                    }
                    for j in judged
                ],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
