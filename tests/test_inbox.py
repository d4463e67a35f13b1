"""The web inbox over real HTTP: who gets in, what it shows, and the decisions made in it.

Each test serves a ledger with the real server on loopback (``tests.inbox``) and talks to it
as a browser would, cookies and forms included; tests/test_inbox_browser.py drives Chromium.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest

from safeact import (
    ApprovalState,
    AwaitingApproval,
    DoubtReason,
    State,
    Store,
    Succeeded,
    get_store,
    safe,
)
from safeact._cli import main
from safeact._cli_json import doubt_json
from safeact._cli_serve import host_names
from safeact._protocol import utc_now
from safeact._tool import SafeTool
from safeact._web import PAGE_SIZE, listening
from safeact._web_auth import Credentials, hash_password
from tests.actions import Receipt, bury_owners, expire_leases
from tests.inbox import TOKEN, Client, Served, running
from tests.test_corrupt_rows import spoil

pytestmark = pytest.mark.located

DASH = "\N{EN DASH}"
"""Between the first and the last row a page shows, as in ``1 to 50 of 51``."""


def charge_tool(store: Store, ran: list[str], *, approval: bool = False) -> SafeTool[..., Receipt]:
    """``tests.charge``: records each run of its action in ``ran``."""

    @safe(store, name="tests.charge", approval=approval, keep_arguments=True)
    def charge(key: str, to: str, amount: int) -> Receipt:
        ran.append(key)
        return Receipt(to, amount)

    return charge


def crashed(
    store: Store, key: str, *, to: str = "bob", amount: int = 20, again: bool = False
) -> None:
    """Leave ``key`` of ``tests.charge`` as a process killed in its action leaves it.

    ``again``: a released key, claimed again (attempt ``b-KEY``).
    """
    tool = charge_tool(store, [])
    claimed = store._claim(
        key,
        tool.name,
        tool._digest(key, (to, amount), {}),
        attempt_id=f"{'b' if again else 'a'}-{key}",
        previous=store._stored(key) if again else None,
        shape=tool._result_shape(),  # as the tool's own claim writes it
    )
    assert claimed is not None
    bury_owners(store)


def signed_in(served: Served, name: str = "alice") -> Client:
    client = served.client()
    assert client.sign_in(name).status == 303
    return client


def state_of(store: Store, key: str) -> State:
    record = store.get(key)
    assert record is not None
    return record.state


def test_the_inbox_lists_what_waits_and_counts_it_in_its_title(store: Store) -> None:
    """Keys in doubt and pending requests are listed, each linked to its page, and counted."""
    crashed(store, "refund-1")
    assert isinstance(charge_tool(store, [], approval=True)("pay-1", "eve", 5), AwaitingApproval)
    with running(store) as served:
        page = signed_in(served).get("/")
    assert page.status == 200
    assert f'<title data-title="safeact inbox · {store.location}">(2) ' in page.body
    assert 'href="/key?key=refund-1"' in page.body
    assert 'href="/key?key=pay-1"' in page.body
    assert "crashed" in page.body  # why refund-1 is in doubt
    assert "a-refund-1" in page.body  # its receipt: the attempt to look for
    assert "&#34;to&#34;: &#34;eve&#34;" in page.body  # the arguments the tool keeps
    assert '<option value="tests.charge">' in page.body  # a tool to filter by


def test_the_filters_keep_one_tools_keys_and_those_waiting_longer(store: Store) -> None:
    """``tool`` keeps that tool's keys and requests; ``older`` only those older than it."""
    crashed(store, "refund-1")

    @safe(store, name="tests.ask", approval=True)
    def ask(key: str) -> int:
        return 1

    assert isinstance(ask("ask-1"), AwaitingApproval)
    with running(store) as served:
        client = signed_in(served)
        every = client.get("/")
        only = client.get("/?tool=tests.ask")
        old = client.get("/?older=1h")
    assert '<option value="tests.ask">' in every.body  # it asks, never claimed: listed too
    assert '<option value="tests.ask" selected>' in only.body
    assert 'href="/key?key=ask-1"' in only.body
    assert 'href="/key?key=refund-1"' not in only.body
    assert "(1) safeact inbox" in only.body
    assert "Nothing in doubt." in old.body
    assert "Nothing waits for approval." in old.body


def test_a_page_is_a_slice_of_what_waits_in_the_order_of_list_in_doubt(store: Store) -> None:
    """Pages of doubts, marked and abandoned alike, filtered by tool and age, join up exactly."""
    tool = charge_tool(store, [])
    for n in range(7):
        crashed(store, f"k{n}")
    for n in range(0, 7, 2):  # some marked IN_DOUBT, the others ATTEMPTING under a dead owner
        assert store._mark_in_doubt(f"k{n}", f"a-k{n}", DoubtReason.CRASHED)
    tool("done", "bob", 1)  # settled: never listed
    every = [r.key for r in store.list_in_doubt()]
    assert len(every) == 7

    def pages(size: int, **filters: object) -> list[str]:
        keys: list[str] = []
        offset = 0
        while True:
            page = store._doubt_page(offset=offset, limit=size, **filters)  # type: ignore[arg-type]
            keys += [r.key for r in page.items]  # type: ignore[union-attr]
            offset += size
            if offset >= page.total:
                return keys

    assert pages(3, tool=None, before=None) == every
    assert pages(2, tool="tests.charge", before=None) == every
    assert pages(3, tool="another", before=None) == []
    assert pages(3, tool=None, before=utc_now() - timedelta(hours=1)) == []
    assert pages(3, tool=None, before=utc_now() + timedelta(seconds=1)) == every


def test_without_signing_in_nothing_is_shown_and_nothing_changes(store: Store) -> None:
    """Every page, the stream and the API want a session; every decision is refused."""
    crashed(store, "refund-1")
    assert isinstance(charge_tool(store, [], approval=True)("pay-1", "eve", 5), AwaitingApproval)
    with running(store) as served:
        stranger = served.client()
        for path in ("/", "/key?key=refund-1"):
            answer = stranger.get(path)
            assert (answer.status, answer.location) == (303, "/signin")
            assert "refund-1" not in answer.body
        for path in ("/api/doubt", "/api/approvals", "/api/key?key=refund-1", "/events"):
            answer = stranger.get(path)
            assert answer.status == 401
            assert "refund-1" not in answer.body
        stranger.get("/signin")  # a session without a person: its form token is no entry
        csrf = stranger.get("/signin").csrf()
        decisions = {
            "/resolve": {"key": "refund-1", "decision": "not_happened", "force": "yes"},
            "/approve": {"key": "pay-1", "seen": "pending"},
            "/deny": {"key": "pay-1", "seen": "pending"},
        }
        for path, form in decisions.items():
            assert stranger.post(path, {**form, "csrf": csrf}).status == 401
            assert stranger.post(path, form).status == 403
        assert stranger.get("/api/doubt", {"Authorization": "Bearer wrong"}).status == 401
    assert state_of(store, "refund-1") is State.IN_DOUBT
    approval = store.approval("pay-1")
    assert approval is not None
    assert approval.state is ApprovalState.PENDING


def test_a_wrong_token_or_no_name_signs_nobody_in(store: Store) -> None:
    """A wrong secret, or none, is refused, and the session stays without a person."""
    crashed(store, "refund-1")
    with running(store) as served:
        client = served.client()
        assert client.sign_in(secret=TOKEN[:-1] + "x").status == 401
        assert client.sign_in(secret="").status == 401
        assert client.sign_in(name=" ").status == 401
        assert client.get("/").status == 303
        assert client.get("/api/doubt").status == 401


def test_a_decision_without_the_forms_token_or_from_another_site_changes_nothing(
    store: Store,
) -> None:
    """Cross-site request forgery: a POST must carry the session's token, from its origin."""
    crashed(store, "refund-1")
    with running(store) as served:
        client = signed_in(served)
        page = client.get("/key?key=refund-1")
        form = {
            "key": "refund-1",
            "attempt": page.hidden("attempt"),
            "decision": "not_happened",
            "force": "yes",
            "note": "no charge at the bank",
        }
        assert client.post("/resolve", form).status == 403
        assert client.post("/resolve", {**form, "csrf": "guessed"}).status == 403
        other_site = {"Origin": "http://evil.example"}
        assert client.post("/resolve", {**form, "csrf": page.csrf()}, other_site).status == 403
        cross = {"Sec-Fetch-Site": "cross-site"}
        assert client.post("/resolve", {**form, "csrf": page.csrf()}, cross).status == 403
        assert state_of(store, "refund-1") is State.IN_DOUBT
        own = {"Origin": served.url, "Sec-Fetch-Site": "same-origin"}
        assert client.post("/resolve", {**form, "csrf": page.csrf()}, own).status == 303
    assert state_of(store, "refund-1") is State.RELEASED


def test_a_session_ends_after_its_minutes(store: Store) -> None:
    """Past its minutes, a session shows nothing and decides nothing: sign in again."""
    crashed(store, "refund-1")
    with running(store, session_minutes=10) as served:
        client = signed_in(served)
        page = client.get("/key?key=refund-1")
        served.clock.now += 10 * 60 + 1
        assert client.get("/").status == 303
        assert client.get("/api/doubt").status == 401
        form = {"key": "refund-1", "decision": "not_happened", "force": "yes"}
        assert client.post("/resolve", {**form, "csrf": page.csrf()}).status == 401
        assert state_of(store, "refund-1") is State.IN_DOUBT
        assert signed_in(served).get("/").status == 200


def test_signing_out_ends_the_session(store: Store) -> None:
    """After Sign out, the cookie shows nothing, nor does a copy of it taken before."""
    with running(store) as served:
        client = signed_in(served)
        page = client.get("/")
        assert page.status == 200
        copied = dict(client.cookies)
        signed_out = client.post("/signout", {"csrf": page.csrf()})
        assert (signed_out.status, signed_out.location) == (303, "/signin")
        assert client.get("/").status == 303
        assert client.get("/api/doubt").status == 401
        replayed = Client(served.port, copied)  # a copy of the cookie from before
        assert replayed.get("/").status == 303
        assert replayed.get("/api/doubt").status == 401
        served.clock.now += 31 * 60  # past the first session's end: it is forgotten, and
        later = signed_in(served)  # a later sign-out keeps only what could still be used
        assert later.post("/signout", {"csrf": later.get("/").csrf()}).status == 303
        assert later.get("/").status == 303


def test_happened_is_checked_against_the_return_type_and_recorded_with_who(store: Store) -> None:
    """A result that does not fit is refused; one that fits is replayed; the history says who."""
    ran: list[str] = []
    crashed(store, "refund-1")
    with running(store) as served:
        client = signed_in(served, "alice")
        page = client.get("/key?key=refund-1")
        form = {
            "csrf": page.csrf(),
            "key": "refund-1",
            "attempt": page.hidden("attempt"),
            "decision": "happened",
            "note": "bank ref 8841",
        }
        wrong = client.post("/resolve", {**form, "result": '{"to": "bob", "amount": "20"}'})
        assert wrong.status == 409
        assert "does not fit the return type of tests.charge" in wrong.body
        assert state_of(store, "refund-1") is State.IN_DOUBT
        not_json = client.post("/resolve", {**form, "result": "{to: bob}"})
        assert (not_json.status, "is not JSON" in not_json.body) == (409, True)
        done = client.post("/resolve", {**form, "result": '{"to": "bob", "amount": 20}'})
        assert (done.status, done.location) == (303, "/key?key=refund-1")
    outcome = charge_tool(store, ran)("refund-1", "bob", 20)
    assert outcome == Succeeded("refund-1", Receipt("bob", 20), replayed=True)
    assert ran == []
    (event,) = [e for e in store.history("refund-1") if e.to_state is State.SUCCEEDED]
    assert event.note == "by alice: bank ref 8841"
    assert event.by == "operator"


def test_a_decision_that_does_not_say_what_it_decides_is_refused(store: Store) -> None:
    """No decision, no attempt, no args hash: refused, never applied to whatever is there."""
    crashed(store, "refund-1")
    assert isinstance(charge_tool(store, [], approval=True)("pay-1", "eve", 5), AwaitingApproval)
    with running(store) as served:
        client = signed_in(served)
        page = client.get("/key?key=refund-1")
        form = {"csrf": page.csrf(), "key": "refund-1", "attempt": page.hidden("attempt")}
        assert client.post("/resolve", form).status == 400
        assert client.post("/resolve", {**form, "decision": "released"}).status == 400
        unseen = {**form, "attempt": "", "decision": "not_happened", "force": "yes", "note": "x"}
        assert client.post("/resolve", unseen).status == 400
        request = {"csrf": page.csrf(), "key": "pay-1", "seen": "pending"}
        assert client.post("/approve", request).status == 400
        assert client.post("/deny", {**request, "args_hash": ""}).status == 400
        assert client.get("/key?key=").status == 404  # no key is empty: none is known
    assert state_of(store, "refund-1") is State.IN_DOUBT
    approval = store.approval("pay-1")
    assert approval is not None
    assert approval.state is ApprovalState.PENDING


def test_not_happened_needs_proof_or_force(store: Store) -> None:
    """A lease that ran out is only suspicion: refused without force, released with it."""
    ran: list[str] = []
    tool = charge_tool(store, ran)
    store._claim(
        "refund-1",
        tool.name,
        tool._digest("refund-1", ("bob", 20), {}),
        attempt_id="a-1",
        previous=None,
    )
    expire_leases(store)
    with running(store) as served:
        client = signed_in(served, "bo")
        page = client.get("/key?key=refund-1")
        form = {
            "csrf": page.csrf(),
            "key": "refund-1",
            "attempt": "a-1",
            "decision": "not_happened",
            "note": "no payment at the bank",
        }
        refused = client.post("/resolve", form)
        assert refused.status == 409
        assert "not proven" in refused.body
        reasonless = client.post("/resolve", {**form, "force": "yes", "note": " "})
        assert reasonless.status == 400
        assert "say why in your note" in reasonless.body
        assert state_of(store, "refund-1") is State.IN_DOUBT
        assert client.post("/resolve", {**form, "force": "yes"}).status == 303
    assert state_of(store, "refund-1") is State.RELEASED
    assert tool("refund-1", "bob", 20) == Succeeded("refund-1", Receipt("bob", 20))
    assert ran == ["refund-1"]
    (event,) = [e for e in store.history("refund-1") if e.to_state is State.RELEASED]
    assert event.note is not None
    assert event.note.startswith("forced: ")
    assert event.note.endswith("; by bo: no payment at the bank")


def test_a_decision_on_a_key_that_moved_on_is_refused_with_its_new_state(store: Store) -> None:
    """A page drawn before the key was released and claimed again decides nothing."""
    crashed(store, "refund-1")
    with running(store) as served:
        client = signed_in(served)
        stale = client.get("/key?key=refund-1")
        store.resolve("refund-1", happened=False)
        crashed(store, "refund-1", again=True)  # in doubt again, at another attempt
        refused = client.post(
            "/resolve",
            {
                "csrf": stale.csrf(),
                "key": "refund-1",
                "attempt": stale.hidden("attempt"),
                "decision": "happened",
                "result": '{"to": "bob", "amount": 20}',
            },
        )
    assert refused.status == 409
    assert "attempt a-refund-1 is over, the key is now at attempt b-refund-1" in refused.body
    assert '<code id="attempt">b-refund-1</code>' in refused.body  # the key as it is now
    assert state_of(store, "refund-1") is State.IN_DOUBT


def test_approve_and_deny_record_who_and_why(store: Store) -> None:
    """An approval lets the call run once; a denial is replayed; both name the person."""
    ran: list[str] = []
    charge = charge_tool(store, ran, approval=True)
    assert isinstance(charge("pay-1", "eve", 5), AwaitingApproval)
    assert isinstance(charge("pay-2", "eve", 6), AwaitingApproval)
    with running(store) as served:
        client = signed_in(served, "carol")
        for key, verb, note in (("pay-1", "approve", "known payee"), ("pay-2", "deny", "twice")):
            page = client.get(f"/key?key={key}")
            form = {
                "csrf": page.csrf(),
                "key": key,
                "args_hash": page.hidden("args_hash"),
                "seen": "pending",
                "note": note,
            }
            assert client.post(f"/{verb}", form).status == 303
    assert charge("pay-1", "eve", 5) == Succeeded("pay-1", Receipt("eve", 5))
    assert charge("pay-1", "eve", 5) == Succeeded("pay-1", Receipt("eve", 5), replayed=True)
    assert ran == ["pay-1"]
    denied = store.approval("pay-2")
    assert denied is not None
    assert (denied.state, denied.decided_by, denied.note) == (
        ApprovalState.DENIED,
        "carol",
        "twice",
    )
    notes = [e.note for e in store.history("pay-1")]
    assert "approved by carol: known payee" in notes


def test_a_decision_on_a_request_decided_meanwhile_is_refused(store: Store) -> None:
    """A second tab's deny, drawn while the request was pending, does not undo an approval."""
    charge = charge_tool(store, [], approval=True)
    assert isinstance(charge("pay-1", "eve", 5), AwaitingApproval)
    with running(store) as served:
        client = signed_in(served)
        first, second = client.get("/key?key=pay-1"), client.get("/key?key=pay-1")
        form = {"key": "pay-1", "args_hash": first.hidden("args_hash"), "seen": "pending"}
        assert client.post("/approve", {**form, "csrf": first.csrf()}).status == 303
        refused = client.post("/deny", {**form, "csrf": second.csrf()})
    assert refused.status == 409
    assert "its approval is approved now, not pending as when you looked" in refused.body
    assert '<td id="approval-state">approved</td>' in refused.body
    approval = store.approval("pay-1")
    assert approval is not None
    assert approval.state is ApprovalState.APPROVED


def test_the_api_gives_the_command_lines_json(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """``/api/doubt`` items are ``doubt --json``'s, ``/api/key`` is ``show --json``'s."""
    crashed(store, "refund-1")
    crashed(store, "refund-2")
    assert main(["doubt", store.location, "--json"]) == 1
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with running(store) as served:
        answer = served.client().get("/api/doubt", {"Authorization": f"Bearer {TOKEN}"})
        shown = served.client().get("/api/key?key=refund-1", {"Authorization": f"Bearer {TOKEN}"})
    assert answer.status == 200
    body = answer.json()
    assert isinstance(body, dict)
    assert body["total"] == 2
    for item in [*printed, *body["items"]]:
        item.pop("age_seconds")  # a moment apart
    assert body["items"] == printed
    assert list(doubt_json(store.list_in_doubt()[0], utc_now())) == [*printed[0], "age_seconds"]
    assert main(["show", store.location, "refund-1", "--json"]) == 0
    assert shown.json() == json.loads(capsys.readouterr().out)


def test_the_event_stream_says_when_what_waits_changes(store: Store) -> None:
    """An open page hears of a new key in doubt, with the count waiting, without a reload."""
    crashed(store, "refund-1")
    with running(store) as served:
        client = signed_in(served)
        connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        connection.request("GET", "/events", headers={"Cookie": cookie})
        stream = connection.getresponse()
        assert stream.status == 200
        assert stream.getheader("content-type", "").startswith("text/event-stream")
        first = heard(stream)
        assert first["waiting"] == 1
        assert first["version"] == client.get("/").hidden_data("version")  # as drawn
        crashed(store, "refund-2")
        # Its claim is an event before its owner is seen gone: the version may move first.
        while (said := heard(stream))["waiting"] == 1:
            assert said["version"] != first["version"]
        assert said["waiting"] == 2
        served.clock.now += 31 * 60  # the session ends: the page is told to sign in again
        assert stream.readline() == b"event: expired\n"
        connection.close()


def heard(stream: http.client.HTTPResponse) -> dict[str, object]:
    """The next event of an event stream: its data, read as JSON."""
    line = stream.readline()
    assert line.startswith(b"data: "), line
    assert stream.readline() == b"\n"
    said: dict[str, object] = json.loads(line.removeprefix(b"data: "))
    return said


def test_what_a_page_shows_is_escaped_and_no_script_but_the_inboxs_runs(store: Store) -> None:
    """A key and a note holding markup are text; the policy allows only the inbox's script."""
    key = "<script>alert(1)</script>"
    crashed(store, key)
    store.resolve(key, happened=False, note='<img src=x onerror="alert(2)">')
    crashed(store, "other")
    with running(store) as served:
        client = signed_in(served, "<b>mallory</b>")
        inbox, page = client.get("/"), client.get(f"/key?key={quote(key, safe='')}")
    for answer in (inbox, page):
        assert "<script>alert" not in answer.body
        assert "<img" not in answer.body
        assert "<b>mallory" not in answer.body
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "default-src 'none'" in policy
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.body
    assert "&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in page.body
    assert "&lt;b&gt;mallory&lt;/b&gt;" in inbox.body


def test_secure_cookies_are_sent_over_https_only(store: Store) -> None:
    """``--secure-cookies``: the session cookie says Secure (behind a TLS proxy)."""
    with running(store, secure_cookies=True) as served:
        answer = served.client().get("/signin")
    cookie = answer.headers["set-cookie"].lower()
    assert "; secure" in cookie
    assert "; httponly" in cookie
    assert "samesite=strict" in cookie


def test_behind_a_tls_proxy_the_https_origin_is_the_inboxs_own(store: Store) -> None:
    """With ``--secure-cookies`` a form from https://host is the inbox's, one from http not."""
    with running(store, secure_cookies=True) as served:
        client = served.client()
        csrf = client.get("/signin").csrf()
        form = {"csrf": csrf, "name": "alice", "secret": TOKEN}
        plain = {"Origin": served.url}
        assert client.post("/signin", form, plain).status == 403
        tls = {"Origin": served.url.replace("http://", "https://")}
        assert client.post("/signin", form, tls).status == 303


def test_a_page_past_the_last_shows_the_last(store: Store) -> None:
    """An offset past what waits (fewer wait since) shows the last page, never an empty one."""
    for n in range(PAGE_SIZE + 1):
        crashed(store, f"k{n:03}")
    with running(store) as served:
        client = signed_in(served)
        past = client.get("/?doubts=100")
        odd = client.get("/?doubts=%C2%B2&approvals=%C2%B9")  # digits, but not ASCII ones
    assert f"{PAGE_SIZE + 1}{DASH}{PAGE_SIZE + 1} of {PAGE_SIZE + 1}, oldest first" in past.body
    assert f'href="/key?key=k{PAGE_SIZE:03}"' in past.body
    assert odd.status == 200
    assert f"1{DASH}{PAGE_SIZE} of {PAGE_SIZE + 1}" in odd.body


def test_a_result_that_could_not_be_checked_is_recorded_and_said(store: Store) -> None:
    """A tool that described no results: the result is recorded, and the page says so."""
    tool = charge_tool(store, [])
    store._claim(
        "refund-1",
        tool.name,
        tool._digest("refund-1", ("bob", 20), {}),
        attempt_id="a-1",
        previous=None,
    )  # no description of its results: as a tool from before schema 5 claims
    bury_owners(store)
    with running(store) as served:
        client = signed_in(served)
        page = client.get("/key?key=refund-1")
        form = {
            "csrf": page.csrf(),
            "key": "refund-1",
            "attempt": "a-1",
            "decision": "happened",
            "result": '{"to": "bob", "amount": 20}',
        }
        done = client.post("/resolve", form)
    assert done.status == 200
    assert "Recorded. safeact: warning: the result is not checked" in done.body
    assert state_of(store, "refund-1") is State.SUCCEEDED


def test_sign_ins_are_checked_two_at_a_time(store: Store) -> None:
    """A password's hash takes 128 MiB: sign-ins beyond two wait, however many arrive."""
    inside, most = [0], [0]
    entered, go = threading.Condition(), threading.Event()

    class Slow(Credentials):
        def admits(self, name: str, secret: str) -> bool:  # noqa: ARG002 - refuses everyone
            with entered:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                entered.notify_all()
            go.wait(timeout=60)
            with entered:
                inside[0] -= 1
            return False

    with running(store, Slow("passwords")) as served:
        checking = served.app.state.checking
        tries = [threading.Thread(target=served.client().sign_in) for _ in range(4)]
        for attempt in tries:
            attempt.start()
        with entered:
            assert entered.wait_for(lambda: inside[0] == 2, timeout=60)
        deadline = time.monotonic() + 60
        while checking.statistics().tasks_waiting < 2 and time.monotonic() < deadline:
            go.wait(0.01)  # polls the limiter's queue; nothing is let through meanwhile
        assert checking.statistics().tasks_waiting == 2
        assert inside[0] == 2
        go.set()
        for attempt in tries:
            attempt.join(timeout=60)
    assert most[0] == 2


def test_an_ipv6_address_is_answered_under_its_bracketed_name() -> None:
    """A browser sends Host: [2001:db8::1]:8765; the inbox bound to 2001:db8::1 answers it."""
    assert "[2001:db8::1]" in host_names("2001:db8::1", [])
    assert {"[::1]", "localhost", "127.0.0.1"} <= set(host_names("::1", []))
    assert host_names("192.0.2.1", ["inbox.example"]) == ("192.0.2.1", "inbox.example")


def test_a_row_changed_outside_safeact_is_shown_as_corrupt_not_hidden(store: Store) -> None:
    """A corrupt key is listed as corrupt, and its page and API say what is wrong."""
    crashed(store, "refund-1")
    spoil(store.location, "refund-1", "owner_pid", 0)
    with running(store) as served:
        client = signed_in(served)
        inbox, page = client.get("/"), client.get("/key?key=refund-1")
        shown = client.get("/api/key?key=refund-1").json()
        unknown = client.get("/api/key?key=nobody")
    assert "corrupt row: owner_pid is 0, not a process id" in inbox.body
    assert "Its row cannot be read: owner_pid is 0" in page.body
    assert 'id="happened"' not in page.body  # nothing to decide on a row nobody can read
    assert isinstance(shown, dict)
    assert shown["corrupt"]["column"] == "owner_pid"
    assert unknown.status == 404


def test_the_api_gives_the_requests_as_approvals_json(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """``/api/approvals`` items are ``safeact approvals --json``'s objects, a page at a time."""
    charge = charge_tool(store, [], approval=True)
    for n in range(3):
        assert isinstance(charge(f"pay-{n}", "eve", n), AwaitingApproval)
    assert main(["approvals", store.location, "--json"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with running(store) as served:
        client = signed_in(served)
        first = client.get("/api/approvals").json()
        past = client.get("/api/approvals?approvals=200").json()
    assert first == {"total": 3, "offset": 0, "items": printed}
    assert past == {"total": 3, "offset": 0, "items": printed}  # past the last: the last page


def test_serve_says_when_its_port_is_taken(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port another program listens on: one line, exit 2, nothing served."""
    with get_store(ledger) as store:
        crashed(store, "k")
    taken = listening("127.0.0.1", 0)
    try:
        port = str(taken.getsockname()[1])
        code = main(["serve", str(ledger), "--no-auth", "--port", port])
    finally:
        taken.close()
    assert code == 2
    assert f"cannot listen on 127.0.0.1 port {port}" in capsys.readouterr().err


def test_another_host_name_is_refused(store: Store) -> None:
    """A page asked for under a name the inbox was not bound to is refused (DNS rebinding)."""
    with running(store) as served:
        answer = served.client().get("/signin", {"Host": "attacker.example"})
    assert answer.status == 400


def test_passwords_are_kept_as_scrypt_hashes(tmp_path: Path) -> None:
    """``hash-password``'s line signs its person in with that password, and nobody else."""
    printed = subprocess.run(
        [sys.executable, "-m", "safeact", "hash-password", "alice"],
        input="correct horse\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed.startswith("alice:scrypt$17$8$1$")
    assert "correct horse" not in printed
    passwords = tmp_path / "passwords"
    passwords.write_text(printed + f"bob:{hash_password('other')}\n")
    who = Credentials.from_password_file(passwords)
    assert who.admits("alice", "correct horse")
    assert not who.admits("alice", "other")
    assert not who.admits("mallory", "correct horse")
    assert who.admits("bob", "other")


def test_serve_refuses_to_start_without_a_way_to_tell_who_comes_in(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No credentials, a short token, --no-auth off loopback, or any host name: exit 2."""
    with get_store(ledger) as store:
        crashed(store, "k")
    short = tmp_path / "short"
    short.write_text("abc\n")
    refusals = {
        (): "say who may come in: --token-file FILE or --passwords FILE",
        ("--token-file", str(short)): "the token has 3 characters",
        ("--no-auth", "--host", "192.0.2.1"): "--no-auth is for a loopback address only",
        ("--no-auth", "--host", "0.0.0.0"): "listens on every address",  # noqa: S104
        ("--passwords", str(short)): "line 1 is not NAME:HASH",
    }
    for options, said in refusals.items():
        assert main(["serve", str(ledger), "--port", "0", *options]) == 2
        assert said in capsys.readouterr().err


def test_serve_from_the_command_line_serves_the_ledger(ledger: Path, tmp_path: Path) -> None:
    """``safeact serve LEDGER --token-file F --port 0`` says where it listens, and serves."""
    with get_store(ledger) as store:
        crashed(store, "refund-1")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    command = ["serve", str(ledger), "--token-file", str(token), "--port", "0"]
    with subprocess.Popen(
        [sys.executable, "-m", "safeact", *command],
        stdout=subprocess.PIPE,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            said = server.stdout.readline()
            assert said.startswith(f"safeact inbox for {ledger} on http://127.0.0.1:")
            port = int(said.rsplit(":", 1)[1].split("/")[0])
            client = Client(port)
            assert client.sign_in().status == 303
            assert 'href="/key?key=refund-1"' in client.get("/").body
        finally:
            server.terminate()


def test_the_command_line_loads_the_web_stack_only_to_serve(ledger: Path, tmp_path: Path) -> None:
    """Other commands never import it; without the extra, serve says how to install it."""
    with get_store(ledger) as store:
        crashed(store, "k")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    code = (
        "import sys; from safeact._cli import main; main(['doubt', sys.argv[1]]); "
        "print(sorted({'starlette', 'uvicorn', 'jinja2', 'safeact._web'} & set(sys.modules)))"
    )
    listed = subprocess.run(
        [sys.executable, "-c", code, str(ledger)], capture_output=True, text=True, check=True
    )
    assert listed.stdout.splitlines()[-1] == "[]"
    without = (
        "import sys; sys.modules['starlette'] = None; from safeact._cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    refused = subprocess.run(
        [sys.executable, "-c", without, "serve", str(ledger), "--token-file", str(token)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        "safeact: error: the inbox needs the extra serve (starlette is missing): "
        "pip install 'safeact[serve]'\n"
    )
