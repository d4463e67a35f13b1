"""An MCP server whose ticket tool opens one ticket per key, and a host that retries.

Offline: the client talks to the server in memory (a real host connects over stdio or
HTTP). Needs ``safeact[mcp]`` (mcp 2.x); run ``python examples/mcp_help_desk.py``. The host
calls ``open_ticket`` and retries it under the same key: one ticket. A call keyed by the
host run's position, and one with no key, which the server refuses.
"""

import asyncio
import tempfile
from pathlib import Path

import attrs
from mcp import Client  # mcp 2.x
from mcp.server.mcpserver import MCPServer  # mcp 1.x: from mcp.server.fastmcp import FastMCP
from mcp.types import TextContent

from safeact import run_scope, safe
from safeact.mcp import REPLAYED, add_tool, call_tool

ledger = Path(tempfile.mkdtemp()) / "tickets.db"
opened: list[tuple[str, str, str]] = []  # the help desk's side effect: key, order, text


@attrs.frozen
class Ticket:
    id: str
    order_id: str


@safe(ledger)
def open_ticket(key: str, order_id: str, text: str) -> Ticket:
    """Open a support ticket about an order."""
    opened.append((key, order_id, text))
    return Ticket(id=f"T-{len(opened)}", order_id=order_id)


server = MCPServer("help-desk")
add_tool(server, open_ticket, destructive=False)  # the key comes in _meta["io.safeact/key"]


async def host() -> None:
    async with Client(server) as client:  # in memory; a real host connects over stdio or HTTP
        for attempt in (1, 2):  # the second is a retry after, say, a timeout
            result = await call_tool(
                client, "open_ticket", {"order_id": "A-17", "text": "late"}, key="ticket-A-17"
            )
            print(attempt, result.structured_content, "replayed:", (result.meta or {})[REPLAYED])
        with run_scope("host-run-42"):  # or: keys from the host run's position
            result = await call_tool(client, "open_ticket", {"order_id": "B-3", "text": "broken"})
            print("keyed by run:", result.structured_content)
        refused = await client.call_tool("open_ticket", {"order_id": "C-9", "text": "?"})
        (said,) = refused.content
        assert isinstance(said, TextContent)
        print("no key:", refused.is_error, said.text[:60])
    print("tickets opened:", [order_id for _, order_id, _ in opened])


if __name__ == "__main__":
    asyncio.run(host())
