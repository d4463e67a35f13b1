"""An owner whose action leaves a detached child behind, for the tests of proof on PostgreSQL.

Usage: python tests/detach_child.py DSN KEY

Claims KEY on the ledger at DSN with a 1 s lease (renewed every 0.3 s); its action forks a
child that starts a session of its own (``setsid``, as a daemon does) and prints
{"detached": PID}. That child keeps every descriptor it inherited, the socket of the owner's
PostgreSQL liveness session among them, and waits for stdin to end; so does the owner, after
printing {"acting": PID}. The test kills both; nothing else ends them.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safeact import get_store, safe

TOOL = "tests.detach"


def say(what: dict[str, int]) -> None:
    """Print ``what`` as one line, in one write: the owner and its child share the pipe."""
    os.write(sys.stdout.fileno(), (json.dumps(what) + "\n").encode())


def main() -> None:
    dsn, key = sys.argv[1:]
    store = get_store(dsn, lease=1.0, heartbeat=0.3)

    @safe(store, name=TOOL)
    def act(key: str) -> int:
        if os.fork() == 0:
            os.setsid()
            say({"detached": os.getpid()})
            sys.stdin.read()
            os._exit(0)
        say({"acting": os.getpid()})
        sys.stdin.read()
        return 1

    act(key)


if __name__ == "__main__":
    main()
