"""The web inbox under test: a real uvicorn server on loopback, and a plain HTTP client.

``running`` starts ``safeact serve``'s application on a free port in a thread of this
process (so a test can move its clock) and stops it; ``Client`` keeps cookies and never
follows a redirect, so a test sees each answer as the browser would get it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import attrs
import uvicorn
from starlette.applications import Starlette

from safeact._web import Inbox, inbox_app, listening
from safeact._web_auth import Credentials

if TYPE_CHECKING:
    from safeact._store import Store

TOKEN = "a-token-for-the-tests-0123456789abcdef"  # noqa: S105 - a test server's
"""The token the tests' inboxes are served with (``Credentials.from_token_file`` reads one)."""


@attrs.define
class Clock:
    """A clock the test moves: sessions end by it."""

    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class _Server(uvicorn.Server):
    """uvicorn's server, saying when it listens (no sleep stands in for it)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


@attrs.frozen
class Served:
    """An inbox being served: its address, its clock, and a client factory."""

    url: str
    port: int
    clock: Clock
    app: Starlette

    def client(self) -> Client:
        return Client(self.port)


@contextlib.contextmanager
def running(  # noqa: PLR0913 - one keyword per setting a test changes
    store: Store,
    credentials: Credentials | None = None,
    *,
    session_minutes: float = 30.0,
    refresh: float = 0.05,
    secure_cookies: bool = False,
    port: int = 0,
) -> Iterator[Served]:
    """Serve ``store``'s inbox on 127.0.0.1 (the token ``TOKEN`` unless told) until the end.

    On ``port``, if given: an inbox started again where a browser knows it.
    """
    sock = listening("127.0.0.1", port)
    port = sock.getsockname()[1]
    clock = Clock()
    inbox = Inbox(
        store=store,
        credentials=Credentials("token", token=TOKEN) if credentials is None else credentials,
        port=port,
        hosts=("127.0.0.1", "localhost"),
        session_minutes=session_minutes,
        refresh=refresh,
        secure_cookies=secure_cookies,
        clock=clock,
    )
    app = inbox_app(inbox)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = _Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert server.listening.wait(timeout=60), "the inbox did not start"
    try:
        yield Served(f"http://127.0.0.1:{port}", port, clock, app)
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()


@attrs.frozen
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    @property
    def location(self) -> str | None:
        return self.headers.get("location")

    def json(self) -> object:
        return json.loads(self.body)

    def csrf(self) -> str:
        """The anti-forgery token of the page's first form."""
        found = re.search(r'name="csrf" value="([^"]+)"', self.body)
        assert found is not None, self.body
        return found[1]

    def hidden_data(self, name: str) -> str:
        """The value of the page's first ``data-NAME`` attribute."""
        found = re.search(rf'data-{name}="([^"]*)"', self.body)
        assert found is not None, (name, self.body)
        return found[1]

    def hidden(self, name: str) -> str:
        """The value of the page's first hidden field ``name``."""
        found = re.search(rf'name="{name}" value="([^"]*)"', self.body)
        assert found is not None, (name, self.body)
        return found[1]


@attrs.define
class Client:
    """An HTTP client of one inbox: it keeps the cookies it is given, follows no redirect."""

    port: int
    cookies: dict[str, str] = attrs.field(factory=dict)

    def request(
        self,
        method: str,
        path: str,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        sent = dict(headers or {})
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            for header, value in response.getheaders():
                if header.lower() == "set-cookie":
                    name, _, rest = value.partition("=")
                    self.cookies[name] = rest.split(";")[0]
            return Answer(
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                response.read().decode(),
            )
        finally:
            connection.close()

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        return self.request("GET", path, headers=headers)

    def post(
        self, path: str, form: dict[str, str], headers: dict[str, str] | None = None
    ) -> Answer:
        return self.request("POST", path, form=form, headers=headers)

    def sign_in(self, name: str = "alice", secret: str = TOKEN) -> Answer:
        page = self.get("/signin")
        return self.post("/signin", {"csrf": page.csrf(), "name": name, "secret": secret})
