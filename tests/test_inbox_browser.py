"""The web inbox in a real browser: Debian's Chromium, headless, driven through WebDriver.

Each test serves a SQLite ledger on loopback (``tests.inbox``), lets real processes crash
and ask for approval in it, and has a person settle them in the page. Waits are WebDriver's
waits for a condition of the page, never sleeps. Screenshots of the pages go to
``artifacts/inbox`` (``SAFEACT_ARTIFACTS`` moves it), kept by CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from safeact import ApprovalState, State, get_store
from tests.inbox import TOKEN, Served, running
from tests.processes import CHILD, ended, report, run_python

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("SAFEACT_ARTIFACTS", Path(__file__).parent.parent / "artifacts"))
APPROVAL_CHILD = Path(__file__).with_name("approval_child.py")
SCRIPTED_KEY = "<script>window.pwned = 1</script>"
SCRIPTED_NOTE = '<img src=x onerror="window.pwned = 2">'


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """Chromium, headless; missing, the tests fail under CI (which installs it) and skip here."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        message = "Debian's chromium and chromium-driver are needed: apt-get install both"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not look for a driver online
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1280,900")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: webdriver.Chrome) -> Iterator[webdriver.Chrome]:
    """The browser with one tab and no cookies, as a person opening the inbox meets it."""
    yield browser
    for handle in browser.window_handles[1:]:
        browser.switch_to.window(handle)
        browser.close()
    browser.switch_to.window(browser.window_handles[0])
    browser.delete_all_cookies()


def until(browser: webdriver.Chrome, condition: object, what: str) -> None:
    """Wait (60 s at most, polling the page) until ``condition(browser)`` holds."""
    WebDriverWait(
        browser, 60, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
    ).until(condition, what)  # type: ignore[arg-type]


def click(browser: webdriver.Chrome, by: str, value: str) -> None:
    """Click the element, found again if the live refresh redrew it in between."""

    def clicked(b: webdriver.Chrome) -> bool:
        b.find_element(by, value).click()
        return True

    WebDriverWait(browser, 60, 0.05, ignored_exceptions=[StaleElementReferenceException]).until(
        clicked, f"a click on {value}"
    )


def text_of(browser: webdriver.Chrome, css: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, css).text


def sign_in(browser: webdriver.Chrome, served: Served, name: str = "alice") -> None:
    browser.get(f"{served.url}/signin")
    browser.find_element(By.ID, "name").send_keys(name)
    browser.find_element(By.ID, "secret").send_keys(TOKEN)
    browser.find_element(By.ID, "go").click()
    until(browser, lambda b: b.find_elements(By.ID, "lists"), "the inbox after signing in")


def screenshot(browser: webdriver.Chrome, name: str) -> None:
    ARTIFACTS.joinpath("inbox").mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "inbox" / f"{name}.png"))


def run(*command: str | Path) -> dict[str, object]:
    """Run a child process in a session of its own; the JSON it printed last, or killed.

    Its own session: its process group is its own, as an agent's is, so once it is killed
    no process of the browser's counts as its child, and it is provably gone.
    """
    done = run_python(*command, own_session=True)
    if ended(done) == "SIGKILL":  # as asked
        return {"kind": "killed"}
    found: dict[str, object] = report(done)
    return found


def effects_of(effects: Path) -> list[str]:
    return effects.read_text().splitlines() if effects.exists() else []


def test_a_crashed_key_appears_a_person_resolves_it_and_the_next_call_replays(
    page: webdriver.Chrome, tmp_path: Path
) -> None:
    """Killed after acting: the open page shows it, a person says it happened, it replays."""
    ledger, effects = tmp_path / "agent.db", tmp_path / "effects"
    assert run(CHILD, ledger, effects, "warm-up")["kind"] == "Succeeded"  # makes the ledger
    with get_store(ledger) as store, running(store) as served:
        sign_in(page, served)
        assert text_of(page, "#doubts .none") == "Nothing in doubt."
        assert run(CHILD, ledger, effects, "refund-1", "--kill-at", "after_call") == {
            "kind": "killed"
        }
        until(
            page,
            lambda b: b.find_elements(By.LINK_TEXT, "refund-1"),
            "the crashed key in the open page, without a reload",
        )
        until(page, lambda b: b.title.startswith("(1) "), "the count waiting in the title")
        assert "crashed" in text_of(page, "#doubts tbody")
        screenshot(page, "inbox")
        click(page, By.LINK_TEXT, "refund-1")
        until(page, lambda b: b.find_elements(By.ID, "happened-result"), "the key's page")
        screenshot(page, "key-in-doubt")
        page.find_element(By.ID, "happened-result").send_keys('{"to": "bob", "amount": 20}')
        page.find_element(By.ID, "happened-note").send_keys("bank ref 8841")
        page.find_element(By.ID, "happened-go").click()
        until(page, lambda b: text_of(b, "#state") == "succeeded", "the key resolved")
        assert "by alice: bank ref 8841" in text_of(page, "#history")
        screenshot(page, "key-resolved")
    assert run(CHILD, ledger, effects, "refund-1") == {
        "kind": "Succeeded",
        "replayed": True,
        "value": {"to": "bob", "amount": 20},
    }
    assert effects_of(effects) == ["warm-up", "refund-1"]  # it ran once, before the crash


def test_an_approval_request_appears_is_approved_and_the_action_runs_once(
    page: webdriver.Chrome, tmp_path: Path
) -> None:
    """An agent asks; the open page shows the request; approved, the next call runs, once."""
    ledger, effects = tmp_path / "agent.db", tmp_path / "effects"
    assert run(APPROVAL_CHILD, ledger, effects, "call", "warm-up")["kind"] == "AwaitingApproval"
    with get_store(ledger) as store, running(store) as served:
        sign_in(page, served, "carol")
        assert run(APPROVAL_CHILD, ledger, effects, "call", "pay-1")["kind"] == "AwaitingApproval"
        until(
            page,
            lambda b: b.find_elements(By.LINK_TEXT, "pay-1"),
            "the request in the open page, without a reload",
        )
        until(page, lambda b: b.title.startswith("(2) "), "both requests counted in the title")
        click(page, By.LINK_TEXT, "pay-1")
        until(page, lambda b: b.find_elements(By.ID, "approve"), "the request's page")
        screenshot(page, "approval-request")
        page.find_element(By.ID, "approve-note").send_keys("known payee")
        page.find_element(By.ID, "approve").click()
        until(page, lambda b: text_of(b, "#approval-state") == "approved", "the approval")
        approval = store.approval("pay-1")
        assert approval is not None
        assert (approval.state, approval.decided_by) == (ApprovalState.APPROVED, "carol")
    first = run(APPROVAL_CHILD, ledger, effects, "call", "pay-1")
    again = run(APPROVAL_CHILD, ledger, effects, "call", "pay-1")
    assert (first["kind"], first["replayed"]) == ("Succeeded", False)
    assert (again["kind"], again["replayed"]) == ("Succeeded", True)
    assert effects_of(effects) == ["pay-1"]


def test_a_second_tab_deciding_the_same_key_is_refused(
    page: webdriver.Chrome, tmp_path: Path
) -> None:
    """Two tabs on one key: the first decides; the second's decision is refused, with the news."""
    ledger, effects = tmp_path / "agent.db", tmp_path / "effects"
    assert run(CHILD, ledger, effects, "refund-1", "--kill-at", "after_claim") == {"kind": "killed"}
    with get_store(ledger) as store, running(store) as served:
        sign_in(page, served)
        page.get(f"{served.url}/key?key=refund-1")
        first = page.current_window_handle
        page.switch_to.new_window("tab")
        page.get(f"{served.url}/key?key=refund-1")
        second = page.current_window_handle
        page.switch_to.window(first)
        page.find_element(By.ID, "not-happened-note").send_keys("no charge at the bank")
        page.find_element(By.ID, "not-happened-go").click()
        until(page, lambda b: text_of(b, "#state") == "released", "the first tab's decision")
        page.switch_to.window(second)
        assert text_of(page, "#state") == "in_doubt"  # as drawn before the first decided
        page.find_element(By.ID, "happened-result").send_keys('{"to": "bob", "amount": 20}')
        page.find_element(By.ID, "happened-go").click()
        until(page, lambda b: b.find_elements(By.ID, "error"), "the refusal")
        assert "not in doubt" in text_of(page, "#error")
        assert text_of(page, "#state") == "released"  # the key as it is now
        screenshot(page, "second-tab-refused")
        record = store.get("refund-1")
        assert record is not None
        assert record.state is State.RELEASED


def test_a_key_and_a_note_holding_script_are_shown_as_text(
    page: webdriver.Chrome, tmp_path: Path
) -> None:
    """Markup in a key, a note and a name is shown as typed, and none of it runs."""
    ledger, effects = tmp_path / "agent.db", tmp_path / "effects"
    assert run(CHILD, ledger, effects, SCRIPTED_KEY, "--kill-at", "after_claim") == {
        "kind": "killed"
    }
    with get_store(ledger) as store, running(store) as served:
        sign_in(page, served, "<b>mallory</b>")
        until(page, lambda b: b.find_elements(By.LINK_TEXT, SCRIPTED_KEY), "the key, as text")
        assert text_of(page, "#who") == "<b>mallory</b>"
        click(page, By.LINK_TEXT, SCRIPTED_KEY)
        until(page, lambda b: b.find_elements(By.ID, "not-happened-note"), "the key's page")
        assert text_of(page, "#key") == SCRIPTED_KEY
        page.find_element(By.ID, "not-happened-note").send_keys(SCRIPTED_NOTE)
        page.find_element(By.ID, "not-happened-go").click()
        until(page, lambda b: text_of(b, "#state") == "released", "the decision")
        assert f"by <b>mallory</b>: {SCRIPTED_NOTE}" in text_of(page, "#history")
        assert page.execute_script("return window.pwned === undefined") is True
        screenshot(page, "script-as-text")
        (event,) = [e for e in store.history(SCRIPTED_KEY) if e.to_state is State.RELEASED]
        assert event.note == f"by <b>mallory</b>: {SCRIPTED_NOTE}"


def test_an_open_page_of_an_inbox_started_again_asks_to_sign_in(
    page: webdriver.Chrome, tmp_path: Path
) -> None:
    """A restart signs everyone out: the open page's stream is refused, and it says so."""
    ledger, effects = tmp_path / "agent.db", tmp_path / "effects"
    assert run(CHILD, ledger, effects, "warm-up")["kind"] == "Succeeded"
    with get_store(ledger) as store:
        with running(store) as served:
            sign_in(page, served)
            port = served.port
        with running(store, port=port):
            until(
                page,
                lambda b: b.current_url.endswith("/signin"),
                "the page sent to sign in again, not left still",
            )
            assert page.find_elements(By.ID, "secret")
