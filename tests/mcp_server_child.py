"""A stdio MCP server with a guarded refund tool, on whichever mcp major is installed.

Usage: python tests/mcp_server_child.py LEDGER EFFECTS MODE

LEDGER is the safeact ledger, EFFECTS the file the refund appends a line to (synced) each
time it really runs. MODE ``kill``: the process SIGKILLs itself inside the tool, right after
the side effect; ``serve``: the tool returns. The key comes from the request's ``_meta``.

``new_server`` is also how tests/test_mcp.py makes servers: ``MCPServer`` on mcp 2.x,
``FastMCP`` on 1.x.
"""

import importlib
import os
import signal
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safeact import safe
from safeact.mcp import add_tool
from tests.actions import Receipt, record_effect

MAJOR = int(version("mcp").split(".")[0])


def new_server(name: str = "safeact-test") -> Any:
    """A server of the installed major (typed Any: mypy sees only the installed one)."""
    if MAJOR >= 2:
        return importlib.import_module("mcp.server.mcpserver").MCPServer(name)
    return importlib.import_module("mcp.server.fastmcp").FastMCP(name)


def main() -> None:
    ledger, effects, mode = sys.argv[1:4]

    @safe(ledger, name="refund")
    def refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        record_effect(Path(effects), "refund")
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return Receipt(to, amount)

    server = new_server()
    add_tool(server, refund, destructive=True)
    server.run()  # stdio, the default transport on both majors


if __name__ == "__main__":
    main()
