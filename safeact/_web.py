"""``safeact serve``: the operator's inbox, a web page of what waits on a person.

Keys in doubt and approval requests, live and a page at a time; each key's history; and
the decisions a person makes on them, through the very ledger calls the command line makes
(``_decide``, ``_decide_approval``: one transaction each, checked there, counted in the same
metrics). Server-rendered pages (Starlette, Jinja2 with autoescape, uvicorn), one small
script for the live refresh, no build step. Only ``safeact serve`` imports this module: it
needs the extra ``serve``.

What keeps people out who should not be in, and each part's reason:

- Every page, stream and API call needs a session (or, for the API, the token as a bearer):
  a sign-in with the operator's token or a password of the ``--passwords`` file.
- Sessions are signed cookies (``HttpOnly``, ``SameSite=Strict``, named for the port so two
  inboxes on one host do not sign each other out) that end ``session_minutes`` after sign-in.
- Each POST carries the session's anti-forgery token and must come from the inbox's own
  origin (``Origin``, ``Sec-Fetch-Site``); a refused POST changes nothing.
- Every value shown is escaped (autoescape), and the Content-Security-Policy allows only
  the inbox's own script: a key or a note holding ``<script>`` is text.
- Only the host names the inbox was bound to are served (DNS rebinding).
- A decision names what the person saw (the key's attempt, the request's state and args
  hash): the ledger refuses it if the key moved on, and the page shows the new state.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import anyio
import anyio.to_thread
import attrs
import jinja2
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from safeact._cli_json import approval_json, corrupt_json, doubt_json, show_json
from safeact._cli_text import SHORT_HASH, age, escaped, when
from safeact._codec import encode_untyped
from safeact._history import Event
from safeact._inbox import Page
from safeact._protocol import NO_RESULT, UNSETTLED, Approval, ApprovalState, Record, utc_now
from safeact._result_fit import parse_result, result_fit
from safeact._web_auth import same_origin, same_token
from safeact.exceptions import CorruptRecordError, SafeError

if TYPE_CHECKING:
    from starlette.requests import Request

    from safeact._store import Store
    from safeact._web_auth import Credentials

__all__ = ["Inbox", "inbox_app", "listening", "server"]

_PAGES = Path(__file__).with_name("_web_pages")

PAGE_SIZE = 50
"""Rows of each list on one page of the inbox."""

SIGN_INS = 2
"""Sign-ins checked at once; the others wait their turn."""

AGES = {"": None, "5m": 300, "1h": 3600, "1d": 86400, "7d": 7 * 86400}
"""The inbox's age filter: only what has waited longer than this (seconds; "" for all)."""

_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes a form's Origin "null"
    "Cache-Control": "no-store",
}


@attrs.frozen
class Inbox:
    """What the inbox serves and how: the ledger, who may come in, and its limits.

    ``clock`` gives seconds (``time.time``'s scale): sessions end by it. ``refresh`` is how
    often, in seconds, an open page asks the ledger whether what waits has changed.
    """

    store: Store
    credentials: Credentials
    port: int
    hosts: tuple[str, ...]
    session_minutes: float = 30.0
    refresh: float = 2.0
    secure_cookies: bool = False
    clock: Callable[[], float] = time.time


def inbox_app(inbox: Inbox) -> Starlette:
    """The ASGI application of ``inbox``: its pages, its stream, its JSON API."""
    pages = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_PAGES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    pages.filters.update(
        when=when, shown=escaped, arguments=_arguments, q=lambda v: quote(str(v), safe="")
    )
    pages.globals["short"] = SHORT_HASH
    site = _Site(inbox, pages)
    app = Starlette(
        routes=[
            Route("/", site.home),
            Route("/signin", site.sign_in_page, methods=["GET"]),
            Route("/signin", site.sign_in, methods=["POST"]),
            Route("/signout", site.sign_out, methods=["POST"]),
            Route("/key", site.key_page),
            Route("/resolve", site.resolve, methods=["POST"]),
            Route("/approve", site.approve, methods=["POST"]),
            Route("/deny", site.deny, methods=["POST"]),
            Route("/events", site.events),
            Route("/api/doubt", site.api_doubt),
            Route("/api/approvals", site.api_approvals),
            Route("/api/key", site.api_key),
            Mount("/static", StaticFiles(directory=_PAGES / "static"), name="static"),
        ],
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=list(inbox.hosts)),
            Middleware(_SecurityHeaders),
            Middleware(
                SessionMiddleware,
                secret_key=secrets.token_urlsafe(32),  # a restart signs everyone out
                session_cookie=f"safeact_inbox_{inbox.port}",
                max_age=max(1, int(inbox.session_minutes * 60)),
                same_site="strict",
                https_only=inbox.secure_cookies,
            ),
        ],
    )
    app.state.checking = site.checking  # how many sign-ins are checked, and wait, now
    return app


class _SecurityHeaders:
    """Adds ``_SECURITY_HEADERS`` to every response."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in _SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)


@attrs.frozen
class _Filters:
    """The inbox's filters, as its query string gives them."""

    tool: str | None
    older: str
    doubt_offset: int
    approval_offset: int

    @classmethod
    def of(cls, request: Request) -> _Filters:
        query = request.query_params
        older = query.get("older", "")
        return cls(
            tool=query.get("tool") or None,
            older=older if older in AGES else "",
            doubt_offset=_offset(query.get("doubts")),
            approval_offset=_offset(query.get("approvals")),
        )

    def before(self) -> datetime | None:
        """Only what was attempted (or requested) before this time is shown, if any."""
        seconds = AGES[self.older]
        return None if seconds is None else utc_now() - timedelta(seconds=seconds)

    def query(self, **changes: object) -> str:
        """The query string of these filters, with ``changes``; empty parts left out."""
        values: dict[str, object] = {
            "tool": self.tool,
            "older": self.older,
            "doubts": self.doubt_offset,
            "approvals": self.approval_offset,
        }
        values |= changes
        return urlencode({k: v for k, v in values.items() if v})


@attrs.frozen
class _Lists:
    """A page of the keys in doubt and one of the approval requests, as the inbox shows them."""

    filters: _Filters
    doubts: Page[Record | CorruptRecordError]
    approvals: Page[Approval | CorruptRecordError]
    tools: list[str]
    now: datetime
    latest: int
    size: int = PAGE_SIZE

    @property
    def version(self) -> str:
        """What the event stream calls this state of the lists (``_Site.fingerprint``)."""
        return _version(self.doubts.total, self.approvals.total, self.latest)

    @property
    def waiting(self) -> int:
        """How many keys wait on a person, under the filters."""
        return self.doubts.total + self.approvals.total

    def age(self, moment: datetime) -> str:
        return age(self.now - moment)


def _version(doubts: int, approvals: int, latest: int) -> str:
    return f"{doubts}.{approvals}.{latest}"


def _last(total: int) -> int:
    """The offset of the last page of ``total`` rows (0: there are none)."""
    return max(0, (total - 1) // PAGE_SIZE * PAGE_SIZE)


def _offset(text: str | None) -> int:
    if text is None or not (text.isascii() and text.isdigit()) or len(text) >= 10:
        return 0
    return int(text)


class _Site:
    """The inbox's handlers."""

    def __init__(self, inbox: Inbox, pages: jinja2.Environment) -> None:
        self.inbox = inbox
        self.store = inbox.store
        self.pages = pages
        self.ended: dict[str, float] = {}
        """Sessions signed out, each until it would have ended: a copy of its cookie is
        refused too (the cookie is all a session is)."""
        self.checking = anyio.CapacityLimiter(SIGN_INS)
        """Sign-ins checked at once: a password's hash takes 128 MiB."""

    # Who is signed in.

    def person(self, request: Request) -> str | None:
        """The name of whoever is signed in on ``request``'s session, if their session lasts."""
        name, until = request.session.get("name"), request.session.get("until")
        if not isinstance(name, str) or not isinstance(until, (int, float)):
            return None
        if request.session.get("sid") in self.ended:
            return None
        return name if self.inbox.clock() < until else None

    def csrf(self, request: Request) -> str:
        """The session's anti-forgery token, made once per session."""
        token = request.session.get("csrf")
        if not isinstance(token, str):
            token = secrets.token_urlsafe(32)
            request.session["csrf"] = token
        return token

    async def forged(self, request: Request) -> tuple[Response | None, dict[str, str]]:
        """The form of a POST, or the refusal of one not made by the inbox's own page."""
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        # Behind a TLS proxy (--secure-cookies) the browser's origin is https, this socket's not.
        scheme = "https" if self.inbox.secure_cookies else request.url.scheme
        own = f"{scheme}://{request.headers.get('host', '')}"
        if not same_origin(
            request.headers.get("origin"), request.headers.get("sec-fetch-site"), own
        ) or not same_token(request.session.get("csrf"), form.get("csrf")):
            return _refused(403, "this form did not come from the inbox's own page"), form
        return None, form

    def draw(self, name: str, status: int = 200, **values: object) -> HTMLResponse:
        page = self.pages.get_template(name).render(ledger=self.store.location, **values)
        return HTMLResponse(page, status_code=status)

    # Signing in and out.

    async def sign_in_page(self, request: Request) -> Response:
        return self.draw(
            "signin.html",
            csrf=self.csrf(request),
            kind=self.inbox.credentials.kind,
            error=None,
            waiting=None,
        )

    async def sign_in(self, request: Request) -> Response:
        refused, form = await self.forged(request)
        if refused is not None:
            return refused
        name, secret = form.get("name", "").strip(), form.get("secret", "")
        admitted = bool(name) and await anyio.to_thread.run_sync(
            self.inbox.credentials.admits, name, secret, limiter=self.checking
        )
        if not admitted:
            return self.draw(
                "signin.html",
                401,
                csrf=self.csrf(request),
                kind=self.inbox.credentials.kind,
                waiting=None,
                error="not signed in: the name or the secret is wrong"
                if name
                else "give your name: it goes into the history of what you decide",
            )
        request.session.clear()  # a new session, and a new anti-forgery token, for the person
        request.session.update(
            name=name,
            until=self.inbox.clock() + self.inbox.session_minutes * 60,
            csrf=secrets.token_urlsafe(32),
            sid=secrets.token_urlsafe(16),
        )
        return RedirectResponse("/", status_code=303)

    async def sign_out(self, request: Request) -> Response:
        refused, _ = await self.forged(request)
        if refused is not None:
            return refused
        now = self.inbox.clock()
        for over in [sid for sid, until in self.ended.items() if until <= now]:
            del self.ended[over]  # past its end anyway: the set stays as small as the sessions
        sid, until = request.session.get("sid"), request.session.get("until")
        if isinstance(sid, str) and isinstance(until, (int, float)):
            self.ended[sid] = until
        request.session.clear()
        return RedirectResponse("/signin", status_code=303)

    # The inbox.

    async def home(self, request: Request) -> Response:
        who = self.person(request)
        if who is None:
            return RedirectResponse("/signin", status_code=303)
        filters = _Filters.of(request)
        lists = await run_in_threadpool(self.lists, filters)
        if request.query_params.get("fragment"):
            return self.draw("lists.html", lists=lists, waiting=lists.waiting)
        return self.draw(
            "inbox.html",
            who=who,
            csrf=self.csrf(request),
            ages=list(AGES),
            lists=lists,
            waiting=lists.waiting,
        )

    def lists(self, filters: _Filters) -> _Lists:
        """The lists of the inbox under ``filters``: a page of each."""
        before = filters.before()
        doubts = self.store._doubt_page(
            tool=filters.tool, before=before, offset=filters.doubt_offset, limit=PAGE_SIZE
        )
        if doubts.offset and not doubts.items:  # fewer wait now: the last page instead
            doubts = self.store._doubt_page(
                tool=filters.tool, before=before, offset=_last(doubts.total), limit=PAGE_SIZE
            )
        approvals = self.store._approval_page(
            tool=filters.tool, before=before, offset=filters.approval_offset, limit=PAGE_SIZE
        )
        if approvals.offset and not approvals.items:
            approvals = self.store._approval_page(
                tool=filters.tool, before=before, offset=_last(approvals.total), limit=PAGE_SIZE
            )
        return _Lists(
            filters=filters,
            doubts=doubts,
            approvals=approvals,
            tools=sorted({*self.store._waiting_tools(), *filter(None, [filters.tool])}),
            now=utc_now(),
            latest=self.store._latest_event(),
        )

    async def events(self, request: Request) -> Response:
        """Server-sent events: ``waiting`` each time what waits (under the filters) changes."""
        if self.person(request) is None:
            return _refused(401, "sign in again")
        filters = _Filters.of(request)

        async def changes() -> AsyncIterator[str]:
            seen: str | None = None
            while not await request.is_disconnected():
                if self.person(request) is None:
                    yield "event: expired\ndata: {}\n\n"
                    return
                waiting, version = await run_in_threadpool(self.fingerprint, filters)
                if version != seen:
                    seen = version
                    yield f"data: {json.dumps({'waiting': waiting, 'version': version})}\n\n"
                await asyncio.sleep(self.inbox.refresh)  # a poll of the ledger, not a wait

        return StreamingResponse(changes(), media_type="text/event-stream")

    def fingerprint(self, filters: _Filters) -> tuple[int, str]:
        """How many wait under ``filters``, and a version that changes when the lists do.

        The version is made of the counts and the history's latest event (every change of
        a key or a request adds one); a key whose owner died adds none, but changes a count.
        """
        before = filters.before()
        doubts = self.store._doubt_page(tool=filters.tool, before=before, offset=0, limit=0)
        approvals = self.store._approval_page(tool=filters.tool, before=before, offset=0, limit=0)
        latest = self.store._latest_event()
        return doubts.total + approvals.total, _version(doubts.total, approvals.total, latest)

    # One key, and the decisions on it.

    async def key_page(self, request: Request) -> Response:
        who = self.person(request)
        if who is None:
            return RedirectResponse("/signin", status_code=303)
        key = request.query_params.get("key", "")
        return await self.draw_key(request, who, key, error=None)

    async def draw_key(  # noqa: PLR0913 - the page, and what to say on it
        self,
        request: Request,
        who: str,
        key: str,
        *,
        error: str | None,
        status: int = 200,
        notice: str | None = None,
    ) -> Response:
        seen = await run_in_threadpool(self.key_values, key)
        if seen is None:
            return self.draw(
                "missing.html", 404, who=who, key=key, csrf=self.csrf(request), waiting=None
            )
        return self.draw(
            "key.html",
            status,
            who=who,
            csrf=self.csrf(request),
            error=error,
            notice=notice,
            view=seen,
            waiting=None,
        )

    def key_values(self, key: str) -> _KeyView | None:
        """What the key's page shows: its record, approval and history; None if unknown."""
        try:
            record: Record | CorruptRecordError | None = self.store.get(key)
        except CorruptRecordError as exc:
            record = exc
        except (ValueError, TypeError):  # no key can be this (empty, say): none is known
            return None
        try:
            approval: Approval | CorruptRecordError | None = self.store.approval(key)
        except CorruptRecordError as exc:
            approval = exc
        events = self.store.scan_history(key)
        if record is None and approval is None and not events:
            return None
        return _KeyView(key, record, approval, events, utc_now())

    async def resolve(self, request: Request) -> Response:
        who, form, refused = await self.decision(request)
        if refused is not None:
            return refused
        key = form.get("key", "")
        said = _resolution(form)
        if isinstance(said, str):  # nothing is decided by default
            return await self.draw_key(request, who, key, error=said, status=400)
        attempt, happened, force = said
        note = _note(who, form.get("note", ""))
        try:
            result = parse_result(form.get("result", "")) if happened else NO_RESULT
            record = await run_in_threadpool(self.store.get, key)
            tool, unchecked = (
                await run_in_threadpool(result_fit, self.store, record, result)
                if happened
                else (None, None)
            )
            await run_in_threadpool(
                lambda: self.store._decide(
                    key,
                    happened=happened,
                    result=result,
                    encode=encode_untyped,
                    tool=tool,
                    attempt_id=attempt,
                    note=note,
                    force=force,
                )
            )
        except (SafeError, ValueError, TypeError) as exc:
            return await self.draw_key(request, who, key, error=str(exc), status=409)
        if unchecked is not None:  # recorded; the person is told what was not checked
            return await self.draw_key(request, who, key, error=None, notice=unchecked)
        return RedirectResponse(f"/key?key={quote(key, safe='')}", status_code=303)

    async def approve(self, request: Request) -> Response:
        return await self.decide_approval(request, approve=True)

    async def deny(self, request: Request) -> Response:
        return await self.decide_approval(request, approve=False)

    async def decide_approval(self, request: Request, *, approve: bool) -> Response:
        who, form, refused = await self.decision(request)
        if refused is not None:
            return refused
        key = form.get("key", "")
        note = form.get("note", "").strip() or None
        args_hash = form.get("args_hash", "")
        if not args_hash:
            return _refused(400, "say which arguments you decide (the form's args_hash)")
        try:
            seen = ApprovalState(form.get("seen", ""))
            await run_in_threadpool(
                lambda: self.store._decide_approval(
                    key,
                    approve=approve,
                    by=who,
                    note=note,
                    args_hash=args_hash,
                    seen=seen,
                )
            )
        except (SafeError, ValueError, TypeError) as exc:
            return await self.draw_key(request, who, key, error=str(exc), status=409)
        return RedirectResponse(f"/key?key={quote(key, safe='')}", status_code=303)

    async def decision(self, request: Request) -> tuple[str, dict[str, str], Response | None]:
        """Who decides, and the decision's form; or why it is refused (nothing changes)."""
        refused, form = await self.forged(request)
        who = self.person(request)
        if refused is None and who is None:
            refused = _refused(401, "your session has ended: sign in again")
        return who or "", form, refused

    # The JSON API: the command line's --json shapes, a page at a time.

    def api_allowed(self, request: Request) -> bool:
        return self.person(request) is not None or self.inbox.credentials.bearer(
            request.headers.get("authorization")
        )

    async def api_doubt(self, request: Request) -> Response:
        if not self.api_allowed(request):
            return _api_refused()
        lists = await run_in_threadpool(self.lists, _Filters.of(request))
        page = lists.doubts
        return JSONResponse(
            {
                "total": page.total,
                "offset": page.offset,
                "items": [
                    doubt_json(r, lists.now) if isinstance(r, Record) else corrupt_json(r)
                    for r in page.items
                ],
            }
        )

    async def api_approvals(self, request: Request) -> Response:
        if not self.api_allowed(request):
            return _api_refused()
        lists = await run_in_threadpool(self.lists, _Filters.of(request))
        page = lists.approvals
        return JSONResponse(
            {
                "total": page.total,
                "offset": page.offset,
                "items": [
                    approval_json(a) if isinstance(a, Approval) else corrupt_json(a)
                    for a in page.items
                ],
            }
        )

    async def api_key(self, request: Request) -> Response:
        if not self.api_allowed(request):
            return _api_refused()
        key = request.query_params.get("key", "")
        shown = await run_in_threadpool(self.key_json, key)
        if shown is None:
            return JSONResponse({"error": f"no key {key!r}"}, status_code=404)
        return JSONResponse(shown)

    def key_json(self, key: str) -> dict[str, object] | None:
        """``key`` as ``safeact show --json`` prints it; None if the ledger knows nothing of it."""
        seen = self.key_values(key)
        if seen is None:
            return None
        record = seen.record
        late = [] if not isinstance(record, Record) else self.store.scan_late_completions(key)
        recorded = self.store._stored(key) if isinstance(record, Record) else None
        return show_json(key, record, recorded, late, seen.events, approval=seen.approval)


@attrs.frozen
class _KeyView:
    """One key as its page shows it."""

    key: str
    record: Record | CorruptRecordError | None
    approval: Approval | CorruptRecordError | None
    events: list[Event | CorruptRecordError]
    now: datetime

    @property
    def in_doubt(self) -> bool:
        return isinstance(self.record, Record) and self.record.state in UNSETTLED

    @property
    def undecided(self) -> bool:
        return isinstance(self.approval, Approval) and self.approval.state in (
            ApprovalState.PENDING,
            ApprovalState.APPROVED,
        )

    def age(self, moment: datetime) -> str:
        return age(self.now - moment)


def _resolution(form: dict[str, str]) -> tuple[str, bool, bool] | str:
    """What a resolve's form decides (the attempt, whether it happened, force), or why not.

    Nothing is taken by default: a form that does not name its decision and the attempt
    it is about decides nothing, and forcing a release needs the person's reason.
    """
    decision, attempt = form.get("decision"), form.get("attempt", "")
    if decision not in ("happened", "not_happened"):
        return "say whether it happened: the form's decision is happened or not_happened"
    if not attempt:
        return "say which attempt you decide: the form names none"
    happened = decision == "happened"
    force = not happened and form.get("force") == "yes"
    if force and not form.get("note", "").strip():
        return "forcing a release asserts its owner can no longer act: say why in your note"
    return attempt, happened, force


def _note(who: str, said: str) -> str:
    """A resolve's note in the history: who decided, then what they wrote."""
    said = said.strip()
    return f"by {who}" if not said else f"by {who}: {said}"


def _arguments(kept: object) -> str:
    return "" if kept is None else json.dumps(kept, ensure_ascii=False)


def _refused(status: int, why: str) -> Response:
    return HTMLResponse(
        f"<!doctype html><title>refused</title><p>{why}; nothing was changed.</p>",
        status_code=status,
    )


def _api_refused() -> Response:
    return JSONResponse(
        {"error": "sign in, or send the token as Authorization: Bearer TOKEN"}, status_code=401
    )


def listening(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``'s ``port`` (0: any free one), for ``serve``.

    Raises:
        OSError: the address cannot be bound (in use, or not this machine's).

    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)  # connections wait in the backlog until the server takes them
    except OSError:
        sock.close()
        raise
    return sock


def server(inbox: Inbox) -> uvicorn.Server:
    """The HTTP server of ``inbox``; run it with ``run(sockets=[listening(...)])``.

    An open page's event stream would keep a stopping server waiting: it gets a second.
    """
    config = uvicorn.Config(
        inbox_app(inbox),
        log_level="warning",
        lifespan="off",
        proxy_headers=False,  # the client's address is the socket's: no header can claim another
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    return uvicorn.Server(config)
