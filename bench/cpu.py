"""CPU time per guarded call, with fsync out of the picture: the Python a call executes.

A ledger on tmpfs (``/dev/shm`` where there is one) makes a sync cost nothing, so what is
left of a call is the work of the process: the call's machine, the records, hashing,
encoding, sqlite3, the hand-offs. Timed with ``time.process_time`` (every thread of the
process, the group-commit thread included), the median over ROUNDS rounds.

    python -m bench.cpu
"""

import tempfile
import threading
import time
from itertools import count
from pathlib import Path

from bench.timing import per_call
from safeact import get_store, safe

NEW_KEY = "CPU per new key (tmpfs)"
NEW_KEY_IN_A_THREAD = "CPU per new key from a worker thread (tmpfs)"
REPLAY = "CPU per replay (tmpfs)"
NEW_KEY_CALLS = 2_000
REPLAY_CALLS = 10_000


def scratch_root() -> str | None:
    """Where a ledger costs no fsync: ``/dev/shm`` if this machine has one, else the default."""
    shm = Path("/dev/shm")  # noqa: S108 - a parent for mkdtemp, which makes a private folder
    return str(shm) if shm.is_dir() else None


def cpu_rows(scale: float = 1.0) -> dict[str, float]:
    """CPU seconds per new key and per replay of ``act(key, n: int) -> int``, on tmpfs.

    ``scale`` shrinks the loops (``--quick``).
    """
    with tempfile.TemporaryDirectory(dir=scratch_root()) as folder:
        store = get_store(Path(folder) / "cpu.db")
        keys = count()

        @safe(store, name="bench.cpu")
        def act(key: str, n: int) -> int:
            return n

        act("replay-me", 1)  # the tool's first claim writes its description: not timed

        def new_keys(calls: int) -> None:
            for _ in range(calls):
                act(f"k{next(keys)}", 1)

        def replays(calls: int) -> None:
            for _ in range(calls):
                act("replay-me", 1)

        def new_keys_in_a_thread(calls: int) -> None:
            worker = threading.Thread(target=new_keys, args=(calls,))
            worker.start()
            worker.join()

        new_key_calls = max(int(NEW_KEY_CALLS * scale), 1)
        cpu = time.process_time
        rows = {
            NEW_KEY: per_call(new_keys, new_key_calls, cpu),
            NEW_KEY_IN_A_THREAD: per_call(new_keys_in_a_thread, new_key_calls, cpu),
            REPLAY: per_call(replays, max(int(REPLAY_CALLS * scale), 1), cpu),
        }
        store.close()
    return rows


def main() -> None:
    for name, seconds in cpu_rows().items():
        print(f"{name:40}{seconds * 1e6:8.1f} µs")


if __name__ == "__main__":
    main()
