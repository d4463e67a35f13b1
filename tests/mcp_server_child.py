"""A stdio MCP server with a guarded refund tool, on whichever mcp major is installed.

Usage: python tests/mcp_server_child.py LEDGER EFFECTS MODE

LEDGER is the safeact ledger, EFFECTS the fake bank's payments (tests/fake_bank.py), a
synced line each time the refund really runs. MODE ``kill``: the process SIGKILLs itself
inside the tool, right after the payment; ``serve``: the tool returns. The key comes from
the request's ``_meta``.

``new_server`` is also how tests/test_mcp.py makes servers: ``MCPServer`` on mcp 2.x,
``FastMCP`` on 1.x.
"""

import importlib
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safeact.mcp import add_tool
from tests.fake_bank import refunds

MAJOR = int(version("mcp").split(".")[0])


def new_server(name: str = "safeact-test") -> Any:
    """A server of the installed major (typed Any: mypy sees only the installed one)."""
    if MAJOR >= 2:
        return importlib.import_module("mcp.server.mcpserver").MCPServer(name)
    return importlib.import_module("mcp.server.fastmcp").FastMCP(name)


def main() -> None:
    ledger, effects, mode = sys.argv[1:4]

    refund = refunds(ledger, Path(effects), ["sigkill-after"] if mode == "kill" else [])
    server = new_server()
    add_tool(server, refund, name="refund", destructive=True)
    server.run()  # stdio, the default transport on both majors


if __name__ == "__main__":
    main()
