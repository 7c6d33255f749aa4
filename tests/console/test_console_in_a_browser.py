"""The web console in a real browser (issue 15): headless Chromium against a real
``blackops serve``. Each test writes a screenshot of each page it visits to
``artifacts/screenshots/<test>-<page>.png``."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from cli_processes import BLACKOPS, ROOT
from console_world import CHROMIUM, SCREENSHOTS, World, console_world, need_browser, until

from blackops.http.bodies import path_segment
from replay.notes import SigningKey

pytestmark = pytest.mark.browser
#: A laptop screen (the issue's "usable on a laptop").
VIEWPORT = {"width": 1366, "height": 768}


# One server and one browser per module (they are slow to start; the tests only read,
# but for the lines the live tail test appends).
@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    need_browser()
    with console_world(tmp_path_factory.mktemp("console")) as found:
        yield found


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield browser
        finally:
            browser.close()


def shot(page: Any, request: pytest.FixtureRequest, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{request.node.name}-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


@pytest.fixture
def context(chromium: Any) -> Iterator[Any]:
    found = chromium.new_context(viewport=VIEWPORT, accept_downloads=True)
    found.set_default_timeout(15_000)
    try:
        yield found
    finally:
        found.close()


def sign_in(page: Any, world: World, token: str, start: str = "/ui/operations") -> None:
    page.goto(world.url + start)
    assert "/ui/login" in page.url  # no session: the sign-in page
    page.get_by_label("Bearer token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(start) + r"(\?|$)"))


def test_sign_in_and_find_an_operation_by_filter(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    page = context.new_page()
    page.goto(world.url + "/ui/operations")
    shot(page, request, "login")
    sign_in(page, world, world.admin)
    cookie = next(c for c in context.cookies() if c["name"] == "blackops_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    page.get_by_label("Type", exact=True).fill("inventory.reserve")
    page.get_by_label("Status", exact=True).select_option("completed")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"type=inventory\.reserve"))
    rows = page.locator("table.list tbody tr")
    assert rows.count() == 1
    assert world.retried in rows.first.inner_text()
    assert world.invoice not in page.content()
    shot(page, request, "operations")


def test_operation_timeline_and_receipt_verified_offline(
    world: World, context: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    page = context.new_page()
    sign_in(page, world, world.admin)
    page.get_by_role("link", name=world.retried).click()
    page.wait_for_url(f"**/ui/operations/{world.retried}")
    timeline = page.locator("ol.timeline").inner_text()
    stages = [s for s in ("Received", "Accepted", "Attempt failed", "Completed") if s in timeline]
    assert stages == ["Received", "Accepted", "Attempt failed", "Completed"]
    # The failed attempt's context: attempt 1 with fencing token 1 on a named worker.
    failed = page.locator("li.event", has_text="Attempt failed").first
    assert re.search(r"attempt\s+1\s", failed.inner_text())
    assert "fencing token" in failed.inner_text()
    assert page.locator(".verified").is_visible()
    shot(page, request, "operation")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the receipt file").click()
    receipt = tmp_path / "receipt.json"
    download.value.save_as(str(receipt))
    assert json.loads(receipt.read_text())["entry"]
    checked = subprocess.run(
        [*BLACKOPS, "verify-receipt", str(receipt), "--key", world.key, "--json"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The same file with another key is refused: the check is the key's, not the server's.
    wrong_key = SigningKey.generate("console.test/log").verifier().encode()
    refused = subprocess.run(
        [*BLACKOPS, "verify-receipt", str(receipt), "--key", wrong_key],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert refused.returncode != 0


def test_instance_step_history(
    world: World, context: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    page = context.new_page()
    sign_in(page, world, world.admin)
    page.get_by_role("link", name="Workflows").click()
    page.wait_for_url("**/ui/spaces/default/workflows")
    shot(page, request, "workflows")
    page.get_by_role("link", name="OrderApproval").click()
    page.get_by_role("link", name=world.instance).click()
    page.wait_for_url(f"**/instances/{world.instance}")
    steps = page.locator("ol.timeline > li")
    texts = [steps.nth(i).inner_text() for i in range(steps.count())]
    assert [t.split("\n")[0].split("·")[0].strip() for t in texts] == [
        "do “price the order”", "sleep “cooling-off period”",
        "wait_for_event “manager decision”", "do “charge the customer”",
    ]  # fmt: skip
    assert "consumed event #1" in texts[2]
    assert "complete" in page.locator("table.facts").inner_text()
    # The completed instance's receipt: checked here, and offline with the log's key.
    assert page.locator(".verified").is_visible()
    shot(page, request, "instance")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the receipt file").click()
    receipt = tmp_path / "receipt.json"
    download.value.save_as(str(receipt))
    checked = subprocess.run(
        [*BLACKOPS, "verify-receipt", str(receipt), "--key", world.key, "--json"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_live_tail_shows_a_new_event(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    page = context.new_page()
    sign_in(page, world, world.admin, start="/ui/journal")
    page.locator("#tail-state", has_text="Live:").wait_for()  # the EventSource is open
    with world.api(world.admin) as api:
        made = api.post("/v1/spaces/default/operations/greeting.say", json={"name": "tail"})
    assert made.status_code == 200, made.text
    new_id = made.json()["operationId"]
    page.locator("#tail tr.new", has_text=new_id).first.wait_for()
    tail = page.locator("#tail tr.new").all_inner_texts()
    assert any("operation.completed" in row and new_id in row for row in tail)
    # Filtered by Space: no line of globex reaches default's admin.
    with world.api(world.system) as api:
        foreign = api.post("/v1/spaces/globex/operations/greeting.say", json={})
    assert foreign.status_code == 200
    with world.api(world.admin) as api:
        after = api.post("/v1/spaces/default/operations/greeting.say", json={"name": "last"})
    page.locator("#tail tr.new", has_text=after.json()["operationId"]).first.wait_for()
    assert foreign.json()["operationId"] not in page.locator("#tail").inner_text()
    shot(page, request, "journal")


def test_live_tail_says_why_a_refusal_ended_it(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    """A role removed while the journal page is open: the stream's last event carries the
    refusal, and the page says so and stops, where it said "reconnecting" for ever (F167)."""
    with world.api(world.system) as api:
        granted = api.put("/v1/spaces/default/principals/watcher", json={"role": "reader"})
        assert granted.status_code < 300, granted.text
        issued = api.post("/v1/spaces/default/principals/watcher/tokens", json={})
        assert issued.status_code < 300, issued.text
    page = context.new_page()
    sign_in(page, world, issued.json()["token"], start="/ui/journal")
    page.locator("#tail-state", has_text="Live:").wait_for()
    with world.api(world.system) as api:
        removed = api.delete("/v1/spaces/default/principals/watcher")
        assert removed.status_code == 200, removed.text
    ended = page.locator("#tail-state", has_text="Live tail ended: ")
    ended.wait_for()  # the stream re-checks access every heartbeat (1 s here)
    assert "reconnecting" not in ended.inner_text()
    shot(page, request, "journal-ended")


def after_of(url: str) -> int:
    found = re.search(r"[?&]after=([0-9]+)", url)
    assert found is not None, url
    return int(found.group(1))


def test_live_tail_builds_a_new_source_when_the_browser_gives_up(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    """The store unreachable: the stream ends with a backend_unavailable event, the browser
    reconnects by itself, and while the store is still down that reconnection is answered 503,
    which fails an EventSource for good (WHATWG: any status but 200). The page said
    "reconnecting" for ever; now it builds a new source, after a pause, from the last line
    it received, until one opens (found by review)."""
    unreachable = json.dumps(
        {"error": {"code": "backend_unavailable", "message": "the journal store cannot be reached"}}
    )
    seen: list[str] = []

    def stream(route: Any) -> None:
        seen.append(route.request.url)
        if len(seen) == 1:  # a line, then the store's refusal: the browser reconnects itself
            after = after_of(route.request.url)
            line = {"type": "tail.test", "at": "2026-12-01T00:00:00Z", "stream": "s", "context": {}}
            route.fulfill(
                status=200,
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
                body=f"retry: 100\n\nid: {after - 1}\ndata: {json.dumps(line)}\n\n"
                f"event: error\ndata: {unreachable}\n\n",
            )
        elif len(seen) <= 3:  # still down: 503, as the server answers before a stream
            route.fulfill(status=503, content_type="application/json", body=unreachable)
        else:
            route.continue_()

    page = context.new_page()
    page.route(re.compile(r"/journal/stream\?"), stream)
    sign_in(page, world, world.admin, start="/ui/journal")
    page.locator("#tail tr.new", has_text="tail.test").wait_for()
    for _ in range(150):  # the page waits 1 s, then 2 s, before its own sources
        if len(seen) == 4:
            break
        page.wait_for_timeout(100)  # route handlers run while Playwright waits
    assert len(seen) == 4, seen
    page.locator("#tail-state", has_text="Live:").wait_for()  # the fourth went through
    # The page asked why (its probe, answered 503), then built a source: both resume after
    # the last line received, not the page's start.
    assert "limit=1" in seen[2] and "limit=" not in seen[3], seen
    assert [after_of(url) for url in seen[2:]] == [after_of(seen[0]) - 1] * 2
    with world.api(world.admin) as api:
        made = api.post("/v1/spaces/default/operations/greeting.say", json={"name": "again"})
    assert made.status_code == 200, made.text
    page.locator("#tail tr.new", has_text=made.json()["operationId"]).first.wait_for()
    shot(page, request, "journal-reconnected")


def test_live_tail_says_why_a_reconnection_was_refused(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    """A refusal before a stream begins (a session that expired while the connection was
    down) is an HTTP status the browser does not show: the page retried it for ever,
    "reconnecting in 30 s" (found by review). It asks once, then says why and stops."""
    refused = json.dumps({"error": {"code": "unauthorized", "message": "sign in again"}})
    seen: list[str] = []

    def stream(route: Any) -> None:
        seen.append(route.request.url)
        if len(seen) == 1:  # a line, then the connection ends: the browser reconnects
            line = {"type": "tail.gone", "at": "2026-12-01T00:00:00Z", "stream": "s", "context": {}}
            route.fulfill(
                status=200,
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
                body=f"retry: 100\n\nid: {after_of(route.request.url)}\n"
                f"data: {json.dumps(line)}\n\n",
            )
        else:
            route.fulfill(status=401, content_type="application/json", body=refused)

    page = context.new_page()
    page.route(re.compile(r"/journal/stream\?"), stream)
    sign_in(page, world, world.admin, start="/ui/journal")
    page.locator("#tail-state", has_text="Live tail ended: sign in again").wait_for()
    asked = len(seen)
    page.wait_for_timeout(2500)  # past the next pause: nothing more is asked
    assert len(seen) == asked == 3, seen  # the stream, the browser's retry, the page's probe
    shot(page, request, "journal-refused")


def test_live_tail_retries_a_proxys_502(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    """A server restarting behind a proxy answers 502: the page's probe took it for a
    refusal and ended the tail for good (found by review). Only a 4xx refusal is final."""
    seen: list[str] = []

    def stream(route: Any) -> None:
        seen.append(route.request.url)
        if len(seen) == 1:  # a line, then the connection ends: the browser reconnects
            line = {"type": "tail.502", "at": "2026-12-01T00:00:00Z", "stream": "s", "context": {}}
            route.fulfill(
                status=200,
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
                body=f"retry: 100\n\nid: {after_of(route.request.url)}\n"
                f"data: {json.dumps(line)}\n\n",
            )
        elif len(seen) <= 3:  # the browser's retry and the page's probe: the proxy's 502
            route.fulfill(status=502, content_type="text/html", body="<h1>Bad Gateway</h1>")
        else:
            route.continue_()

    page = context.new_page()
    page.route(re.compile(r"/journal/stream\?"), stream)
    sign_in(page, world, world.admin, start="/ui/journal")
    page.locator("#tail tr.new", has_text="tail.502").wait_for()
    for _ in range(150):
        if len(seen) >= 4:
            break
        page.wait_for_timeout(100)  # route handlers run while Playwright waits
    page.locator("#tail-state", has_text="Live:").wait_for()
    assert "ended" not in page.locator("#tail-state").inner_text()
    shot(page, request, "journal-502")


def test_another_spaces_urls_show_not_found(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    page = context.new_page()
    sign_in(page, world, world.admin)
    missing = page.goto(world.url + "/ui/operations/01900000-0000-7000-8000-000000000000")
    assert missing is not None and missing.status == 404
    missing_text = page.locator("main").inner_text()
    for path in (
        f"/ui/operations/{world.foreign}",
        f"/ui/operations/{world.foreign}/receipt.json",
        "/ui/spaces/globex/workflows",
        "/ui/operations?tenant=globex",
        "/ui/journal?space=globex",
    ):
        response = page.goto(world.url + path)
        assert response is not None and response.status == 404, path
        assert page.locator("h1").inner_text() == "Not found"
        assert "greeting" not in page.content()  # nothing of the object itself
    shot(page, request, "not-found")
    # The page for another Space's operation reads as the page for a missing one.
    page.goto(world.url + f"/ui/operations/{world.foreign}")
    assert page.locator("main").inner_text().replace(world.foreign, "ID") == (
        missing_text.replace("01900000-0000-7000-8000-000000000000", "ID")
    )
    # globex's admin does see it.
    other = context.browser.new_context(viewport=VIEWPORT)
    try:
        theirs = other.new_page()
        sign_in(theirs, world, world.globex, start=f"/ui/operations/{world.foreign}")
        assert theirs.locator("h1").inner_text().endswith(world.foreign)
    finally:
        other.close()


def test_pages_work_with_javascript_disabled(
    world: World, chromium: Any, request: pytest.FixtureRequest
) -> None:
    context = chromium.new_context(viewport=VIEWPORT, java_script_enabled=False)
    try:
        page = context.new_page()
        sign_in(page, world, world.reader)
        page.get_by_label("Type", exact=True).fill("invoice.issue")
        page.get_by_role("button", name="Filter").click()
        page.get_by_role("link", name=world.invoice).click()
        page.wait_for_url(f"**/ui/operations/{world.invoice}")
        assert page.locator(".verified").is_visible()
        assert not page.locator("button.copy").first.is_visible()  # shown by the script only
        assert page.locator("a.button", has_text="Hold").count() == 0  # a reader: read only
        page.locator("summary", has_text="data").first.click()  # <details> opens without JS
        shot(page, request, "operation")
        page.goto(world.url + "/ui/journal")
        assert page.locator("#tail tbody tr").count() > 0  # the latest lines, server-rendered
        assert "✔" in page.locator("table.facts").inner_text()
        shot(page, request, "journal")
    finally:
        context.close()


def test_hold_and_release_an_operation_through_the_console(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    """An action end to end: the button, the confirmation page, the POST with its CSRF token,
    the journal's record; and a form replayed without the token changes nothing."""
    with world.api(world.admin) as api:
        made = api.post("/v1/spaces/default/operations/greeting.say", json={"name": "held"})
    assert made.status_code == 200, made.text
    op = made.json()["operationId"]
    page = context.new_page()
    sign_in(page, world, world.admin, start=f"/ui/operations/{op}")
    assert page.get_by_role("link", name="Release…").count() == 0  # nothing held yet
    page.get_by_role("link", name="Hold…").click()
    page.wait_for_url(f"**/ui/operations/{op}/actions/hold")
    shot(page, request, "confirm-hold")
    # The reason is required: the browser refuses to send the form without one.
    page.get_by_role("button", name="Confirm").click()
    assert page.url.endswith(f"/ui/operations/{op}/actions/hold")
    page.get_by_label("Reason (recorded)").fill("legal review 7")
    page.get_by_role("button", name="Confirm").click()
    page.wait_for_url(re.compile(re.escape(f"/ui/operations/{op}") + "$"))
    holds = page.locator("section[aria-labelledby=holds]").inner_text()
    assert "legal review 7" in holds
    shot(page, request, "held")
    with world.api(world.admin) as api:
        hold = api.get(f"/v1/operations/{op}").json().get("hold")
    assert hold is not None and hold["reason"] == "legal review 7"
    # The same form posted without the session's CSRF token (a forged request from another
    # site would carry the cookie only): 403, and the hold stays.
    forged = page.request.post(
        world.url + f"/ui/operations/{op}/actions/release", form={"reason": "forged"}
    )
    assert forged.status == 403
    with world.api(world.admin) as api:
        assert api.get(f"/v1/operations/{op}").json().get("hold") is not None
    page.reload()
    page.get_by_role("link", name="Release…").click()
    page.get_by_label("Reason (recorded)").fill("review closed")
    page.get_by_role("button", name="Confirm").click()
    page.wait_for_url(re.compile(re.escape(f"/ui/operations/{op}") + "$"))
    assert "review closed" in page.locator("section[aria-labelledby=holds]").inner_text()
    with world.api(world.admin) as api:
        assert api.get(f"/v1/operations/{op}").json().get("hold") is None


@pytest.mark.parametrize(("path", "shown"), [("/docs", "/v1/journal"), ("/redoc", "BlackOps")])
def test_api_docs_run_only_this_origins_files(
    world: World, context: Any, request: pytest.FixtureRequest, path: str, shown: str
) -> None:
    """/docs and /redoc share the console's origin (and its session cookie): they render
    the schema with files this server sends, and their Content-Security-Policy stops every
    request for another host in the browser (ReDoc's hard-coded logo) (decisions H10)."""
    page = context.new_page()
    page.add_init_script(
        "window.__violations = [];"
        "document.addEventListener('securitypolicyviolation',"
        " e => window.__violations.push(e.effectiveDirective + ' ' + e.blockedURI));"
    )
    asked: list[str] = []
    stopped: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.on("requestfailed", lambda r: stopped.append(f"{r.url} {r.failure}"))
    page.goto(world.url + path)
    page.get_by_text(shown).first.wait_for()
    shot(page, request, path.strip("/"))
    ours = (world.url + "/", "data:", "blob:")
    elsewhere = sorted({url for url in asked if not url.startswith(ours)})
    # Chromium names the refusal "csp" (or net::ERR_BLOCKED_BY_CSP, by release).
    blocked = sorted({f.split()[0] for f in stopped if f.endswith((" csp", "BLOCKED_BY_CSP"))})
    assert elsewhere == blocked  # each was stopped before it left the browser
    violated = page.evaluate("window.__violations")
    assert [v for v in violated if not v.startswith("img-src ")] == []
    assert any(url.endswith("/openapi.json") for url in asked)


# -- hostile instance ids and sign-in targets (a defect hunt, decisions U7, U16, U23) --------

APPROVALS = "/v1/spaces/default/workflows/OrderApproval/instances"


def waiting_instance(world: World, instance_id: str) -> None:
    """An OrderApproval instance waiting for its decision (so it may be terminated)."""
    params = {"order": "B-1", "amount": 1, "cool_off_seconds": 0}
    with world.api(world.admin) as api:
        made = api.post(APPROVALS, json={"id": instance_id, "params": params})
        assert made.status_code in (201, 409), made.text
        url = f"{APPROVALS}/{path_segment(instance_id)}"
        until("the instance to wait", lambda: api.get(url).json()["status"] == "waiting")


@pytest.mark.parametrize("instance_id", [".", ".."])
def test_instances_dot_and_dot_dot_are_reached_by_their_links(
    world: World, context: Any, request: pytest.FixtureRequest, tmp_path: Path, instance_id: str
) -> None:
    """A browser removes "." and ".." from a path however they are spelled (WHATWG URL reads
    %2E as "."): the instance page, Terminate…, its redirect and the receipt link all reach
    the instance itself, where they reached the workflow page or "Not found"."""
    waiting_instance(world, instance_id)
    page = context.new_page()
    flow = "/ui/spaces/default/workflows/OrderApproval"
    sign_in(page, world, world.admin, start=f"{flow}/instances/?id={instance_id}")  # a deep link
    heading = page.locator("h1 .mono")
    assert heading.inner_text() == instance_id, page.url
    page.goto(world.url + flow)
    named = page.locator("table.list a").filter(has_text=re.compile(f"^{re.escape(instance_id)}$"))
    named.click()
    page.get_by_role("link", name="Terminate…").wait_for()
    assert heading.inner_text() == instance_id, page.url
    page.get_by_role("link", name="Terminate…").click()
    page.get_by_role("heading", name="Confirm: Terminate").wait_for()
    assert heading.inner_text() == instance_id, page.url
    shot(page, request, "confirm")
    page.get_by_role("button", name="Confirm").click()
    page.locator("h1", has_text="Instance").wait_for()
    assert heading.inner_text() == instance_id, page.url
    with world.api(world.admin) as api:
        url = f"{APPROVALS}/{path_segment(instance_id)}"
        assert api.get(url).json()["status"] == "terminated"
        until("a checkpoint covering it", lambda: api.get(f"{url}/receipt").status_code == 200)
        expected = api.get(f"{url}/receipt").json()
    page.reload()
    assert heading.inner_text() == instance_id and "terminated" in page.content()
    shot(page, request, "instance")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the receipt file").click()
    receipt = tmp_path / "receipt.json"
    download.value.save_as(str(receipt))
    assert json.loads(receipt.read_text())["entry"] == expected["entry"]


#: Characters that reorder or hide text; none may reach a page's text as itself.
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\u200b-\u200d\u2060\ufeff]")


def test_ids_with_bidi_controls_cannot_pass_for_others(
    world: World, context: Any, request: pytest.FixtureRequest
) -> None:
    """An id "\\u202e24-redro" showed as "order-42" (its RLO reverses it), and "inv-7\\u202e"
    reversed the text after it: every invisible character shows as its escape, on the
    pages and in the live tail, and the Copy button still copies the id itself."""
    spoof, real, spill = "\u202e24-redro", "order-42", "inv-7\u202e"
    for instance_id in (spoof, real, spill):
        waiting_instance(world, instance_id)
    seen: list[str] = []

    def stream(route: Any) -> None:  # a line the live tail's script renders, then the real one
        seen.append(route.request.url)
        if len(seen) > 1:
            route.continue_()
            return
        line = {"type": "x", "at": "2026-12-01T00:00:00Z", "stream": spoof, "context": {}}
        route.fulfill(
            status=200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
            body=f"id: {after_of(route.request.url)}\ndata: {json.dumps(line)}\n\n",
        )

    page = context.new_page()
    page.route(re.compile(r"/journal/stream\?"), stream)
    sign_in(page, world, world.admin, start="/ui/journal")
    tail = page.locator("#tail tr.new", has_text="24-redro").first
    tail.wait_for()
    assert "\\u202e24-redro" in tail.inner_text()
    assert not BIDI.search(page.locator("#tail").inner_text())
    page.goto(world.url + "/ui/spaces/default/workflows/OrderApproval?status=waiting")
    names = page.locator("table.list tbody td:first-child a").all_inner_texts()
    assert names.count(real) == 1 and "\\u202e24-redro" in names and "inv-7\\u202e" in names
    assert not BIDI.search(page.locator("body").inner_text())
    shot(page, request, "list")
    page.locator("table.list a", has_text="inv-7").click()
    page.get_by_role("link", name="Terminate…").wait_for()
    assert page.locator("h1 .mono").inner_text() == "inv-7\\u202e"
    assert page.locator("button.copy").first.get_attribute("data-copy") == spill
    page.get_by_role("link", name="Terminate…").click()
    heading = page.locator("h1")
    heading.filter(has_text="Confirm: Terminate").wait_for()
    assert heading.inner_text() == "Confirm: Terminate inv-7\\u202e"
    assert page.title().startswith("Terminate inv-7\\u202e")
    assert not BIDI.search(page.locator("body").inner_text() + page.title())
    shot(page, request, "confirm")


@pytest.mark.parametrize(
    "target",
    [
        "/ui/../docs",
        "/ui/%2e%2e/v1/spaces/default/journal/stream?limit=1&max_seconds=1",
        "/ui/%2E./openapi.json",
        "/ui/..\t/openapi.json",
        "/ui/operations/.%2e/.%2E/redoc",
    ],
)
def test_sign_in_never_leaves_the_console_through_dot_segments(
    world: World, context: Any, target: str
) -> None:
    page = context.new_page()
    page.goto(world.url + "/ui/login?next=" + quote(target, safe=""))
    page.get_by_label("Bearer token").fill(world.reader)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    assert urlsplit(page.url).path == "/ui/operations", page.url


def test_sign_out_after_the_token_stopped_signing_in_clears_the_cookie(
    world: World, context: Any
) -> None:
    """The page was open when the token was revoked: Sign out still deletes the cookie
    (it answered 401 and kept it)."""
    with world.api(world.system) as api:
        granted = api.put("/v1/spaces/default/principals/leaver", json={"role": "reader"})
        assert granted.status_code < 300, granted.text
        issued = api.post("/v1/spaces/default/principals/leaver/tokens", json={}).json()
    page = context.new_page()
    sign_in(page, world, issued["token"])
    with world.api(world.system) as api:
        path = f"/v1/spaces/default/principals/leaver/tokens/{issued['tokenId']}"
        assert api.delete(path).status_code < 300
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/login")
    assert [c for c in context.cookies() if c["name"] == "blackops_session"] == []
