"""The console facing what it did not expect (from an adversarial review): a journal line
or event deeper than orjson reads and the stdlib encoder writes (journaled before documents
had a depth limit), a URL longer than the sign-in's ``next`` limit, instance ids ``.`` and
``..``. Also held: reading pages changes nothing, a 500 shows no traceback, and a form
token holds across processes for its own session only (decisions U6). SQLite only."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
from console_forms import Flow, csrf_of  # type: ignore[import-not-found, unused-ignore]
from fastapi import FastAPI
from fastapi.testclient import TestClient

from blackops import Application, ExecutionContext
from blackops.audit.checkpoints import CheckpointService
from blackops.http.app import create_http_app
from blackops.testing import FakeClock
from replay.notes import SigningKey

SYSTEM = "untrusted-input-system-token"
H = {"Authorization": f"Bearer {SYSTEM}"}


class World:
    def __init__(self, app: Application, api: FastAPI, db: Path) -> None:
        self.app, self.api, self.db = app, api, db
        self.tokens: dict[str, str] = {}

    def signed_in(self, token: str, api: FastAPI | None = None) -> TestClient:
        client = TestClient(api or self.api, follow_redirects=False)
        csrf = csrf_of(client.get("/ui/login").text)
        answer = client.post("/ui/login", data={"csrf": csrf, "token": token})
        assert answer.status_code == 303, answer.text
        return client

    def quiet(self, signed_in: TestClient) -> TestClient:
        """A client of the same session that gets a 500 as an answer, not an exception."""
        quiet = TestClient(self.api, follow_redirects=False, raise_server_exceptions=False)
        quiet.cookies = signed_in.cookies
        return quiet


def new_api(app: Application, clock: FakeClock) -> FastAPI:
    checkpoints = CheckpointService(app.store, SigningKey.generate("example.com/r"), clock)
    return create_http_app(app, SYSTEM, checkpoints=checkpoints)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    db = tmp_path / "journal.sqlite3"
    clock = FakeClock(datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC))
    app = Application(f"sqlite:///{db}", clock=clock)
    app.register_workflow(Flow, space="acme")

    @app.operation("demo.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"echo": params}

    w = World(app, new_api(app, clock), db)
    with TestClient(w.api) as client:
        for space in ("acme", "globex"):
            assert client.post("/v1/spaces", json={"name": space}, headers=H).is_success
        path = "/v1/spaces/acme/principals/acme-admin"
        assert client.put(path, json={"role": "admin"}, headers=H).is_success
        w.tokens["acme"] = client.post(path + "/tokens", json={}, headers=H).json()["token"]
        ops = "/v1/spaces/acme/operations/demo.echo"
        assert client.post(ops, json={"x": 1}, headers=H).is_success
    try:
        yield w
    finally:
        app.close()


def _deepen_last_event(db: Path, depth: int = 1100) -> None:
    """Nest the last event's data 1,100 levels deep, as a journal from before P45 may hold."""
    with sqlite3.connect(db) as con:
        oid, version, state = con.execute(
            "SELECT originator_id, originator_version, state FROM stored_events "
            "ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        deep = b"[" * depth + b"]" * depth
        deeper = bytes(state).replace(b'"data":{', b'"data":{"deep":' + deep + b",", 1)
        assert deeper != bytes(state)
        con.execute(
            "UPDATE stored_events SET state=? WHERE originator_id=? AND originator_version=?",
            (deeper, oid, version),
        )


@pytest.mark.parametrize("who", ["system", "acme"])
def test_journal_page_shows_a_line_deeper_than_orjson_reads(world: World, who: str) -> None:
    _deepen_last_event(world.db)
    quiet = world.quiet(world.signed_in(SYSTEM if who == "system" else world.tokens["acme"]))
    # the API stream reads the same line (tenant_of's fallback parser)
    assert quiet.get("/v1/journal/stream?limit=1&after=0", headers=H).status_code == 200
    answer = quiet.get("/ui/journal")
    assert answer.status_code == 200
    assert "operation." in answer.text  # the deep line's row is there, with its type


def test_operation_page_shows_an_event_deeper_than_the_stdlib_encoder_goes(
    world: World,
) -> None:
    op = world.app.list_operations(tenant="acme", limit=1)["items"][0]["operationId"]
    _deepen_last_event(world.db)  # the operation's terminal event
    quiet = world.quiet(world.signed_in(SYSTEM))
    assert quiet.get(f"/v1/operations/{op}/events", headers=H).status_code == 200
    answer = quiet.get(f"/ui/operations/{op}")
    assert answer.status_code == 200
    assert "[" * 1100 + "]" * 1100 in answer.text  # shown as its text, on one line


def test_a_url_longer_than_the_next_limit_still_reaches_the_sign_in_page(world: World) -> None:
    client = TestClient(world.api, follow_redirects=False)
    answer = client.get("/ui/operations?type=" + "a" * 250)
    assert answer.status_code == 303
    login = client.get(answer.headers["location"])
    assert login.status_code == 200, login.text[:300]
    csrf = csrf_of(login.text)
    signed = client.post("/ui/login", data={"csrf": csrf, "token": SYSTEM})
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/operations"


def test_an_over_long_next_is_dropped_not_refused(world: World) -> None:
    client = TestClient(world.api, follow_redirects=False)
    login = client.get("/ui/login", params={"next": "/ui/operations?type=" + "a" * 300})
    assert login.status_code == 200
    assert "a" * 300 not in login.text


def test_every_read_page_leaves_the_journal_alone(world: World) -> None:
    client = world.signed_in(SYSTEM)
    op = world.app.list_operations(tenant="acme", limit=1)["items"][0]["operationId"]
    before = world.app.store.last_position()
    for path in ["/ui/operations", f"/ui/operations/{op}", f"/ui/operations/{op}/receipt.json",
                 f"/ui/operations/{op}/actions/hold", f"/ui/operations/{op}/actions/release",
                 "/ui/journal", "/ui/journal?space=acme", "/ui/workflows",
                 "/ui/spaces/acme/workflows"]:  # fmt: skip
        assert client.get(path).status_code < 500, path
    # The operation page signs a checkpoint when none covers the terminal event yet
    # (receipt_for, as GET /v1/operations/{id}/receipt does, docs/audit.md); nothing else.
    appended = [e.type for e in world.app.store.read_after(before, 100)]
    assert set(appended) <= {"journal.checkpoint"}, appended


@pytest.mark.parametrize("instance_id", [".", ".."])
def test_links_to_instances_with_dot_ids_resolve_to_themselves(
    world: World, instance_id: str
) -> None:
    with TestClient(world.api) as client:
        made = client.post("/v1/spaces/acme/workflows/Flow/instances", json={"id": instance_id},
                           headers=H)  # fmt: skip
        assert made.status_code == 201, made.text
    signed = world.signed_in(SYSTEM)
    page = signed.get("/ui/spaces/acme/workflows/Flow").text
    links = re.findall(r'href="(/ui/spaces/acme/workflows/Flow/instances/[^"]*)"', page)
    assert links
    base = "http://testserver/ui/spaces/acme/workflows/Flow"
    # what a browser requests for each link (RFC 3986 / WHATWG remove dot segments)
    resolved = [urljoin(base, link) for link in links]
    assert resolved == ["http://testserver" + link for link in links], resolved
    for link in links:  # and each one is that instance's page
        answer = signed.get(link)
        assert answer.status_code == 200 and "Instance" in answer.text, link


def test_form_tokens_hold_across_console_apps_for_their_session_only(world: World) -> None:
    """Two apps (two processes, or one before and after a restart) over the same journal:
    a form opened on one is accepted by the other; another session's token is refused."""
    clock = FakeClock(datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC))
    other_app = Application(f"sqlite:///{world.db}", clock=clock)
    try:
        other = new_api(other_app, clock)
        system = world.signed_in(SYSTEM)
        acme = world.signed_in(world.tokens["acme"])
        system_csrf = csrf_of(system.get("/ui/operations").text)
        acme_csrf = csrf_of(acme.get("/ui/operations").text)
        assert system_csrf != acme_csrf
        elsewhere = TestClient(other, follow_redirects=False)
        elsewhere.cookies = system.cookies
        assert csrf_of(elsewhere.get("/ui/operations").text) == system_csrf
        before = world.app.store.last_position()
        refused = elsewhere.post("/ui/logout", data={"csrf": acme_csrf})
        assert refused.status_code == 403
        assert world.app.store.last_position() == before
        accepted = elsewhere.post("/ui/logout", data={"csrf": system_csrf})
        assert accepted.status_code == 303, accepted.text[:300]
    finally:
        other_app.close()


def test_a_500_page_shows_no_traceback(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("internal detail orjson")

    monkeypatch.setattr("blackops.console.pages.recent_lines", failing)
    answer = world.quiet(world.signed_in(SYSTEM)).get("/ui/journal")
    assert answer.status_code == 500
    assert "Traceback" not in answer.text and "internal detail" not in answer.text


# -- found by a defect hunt, stop 36 ------------------------------------------------------------


def _tamper_terminal_event(db: Path, operation_id: str) -> None:
    """Change one letter of the operation's terminal event, behind the journal's back."""
    with sqlite3.connect(db) as con:
        rowid, state = con.execute(
            "SELECT rowid, state FROM stored_events WHERE originator_id=? "
            "ORDER BY originator_version DESC LIMIT 1",
            (operation_id,),
        ).fetchone()
        changed = bytes(state).replace(b'"at":"2', b'"at":"3', 1)
        assert changed != bytes(state)
        con.execute("UPDATE stored_events SET state=? WHERE rowid=?", (changed, rowid))


def test_a_tampered_terminal_event_is_an_alarm_not_no_receipt_yet(world: World) -> None:
    """It read "No receipt yet", as for an operation still running, where the API answers
    409 journal_rewritten."""
    done = world.app.run("demo.echo", {"n": 1}, actor="t", tenant="acme").operation_id
    _tamper_terminal_event(world.db, done)
    client = world.signed_in(SYSTEM)
    page = client.get(f"/ui/operations/{done}").text
    receipt = page[page.index('<h2 id="receipt">') :]
    assert 'role="alert"' in receipt.split("</section>")[0]
    assert "no longer holds what was appended" in receipt
    assert "No receipt yet" not in receipt


def test_a_purged_outcome_is_shown_with_its_tombstone(tmp_path: Path) -> None:
    """Its tombstone is on the Outcome Record's own stream: the page said "None" under
    holds and tombstones, and "No outcome." with no reason."""
    from blackops import Retention

    clock = FakeClock(datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC))
    app = Application(f"sqlite:///{tmp_path}/j.sqlite3", clock=clock)

    @app.operation("short.outcome", retention=Retention(outcome_seconds=60))
    def short(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"kept": "briefly"}

    w = World(app, new_api(app, clock), tmp_path / "j.sqlite3")
    try:
        with TestClient(w.api) as client:
            assert client.post("/v1/spaces", json={"name": "acme"}, headers=H).is_success
        submitted = app.submit("short.outcome", {}, actor="t", tenant="acme")
        import asyncio

        asyncio.run(app.work_until_idle())
        clock.advance(3600)
        assert len(app.purge(actor="ops").items) == 1  # the outcome only: the journal keeps more
        page = w.signed_in(SYSTEM).get(f"/ui/operations/{submitted}").text
        holds = page[page.index('<h2 id="holds">') :].split("</section>")[0]
        assert "None" not in holds and "Outcome Record" in holds
        outcome = page[page.index('<h2 id="outcome">') :].split("</section>")[0]
        assert "its Outcome Record was purged" in outcome
    finally:
        app.close()


def test_the_journal_page_lists_a_quiet_spaces_latest_lines(world: World) -> None:
    """Only the last 500 positions were read: after 500 lines of another Space, a Space's
    page listed none (and said nothing)."""
    for n in range(510):
        world.app.run("demo.echo", {"n": n}, actor="t", tenant="globex")
    client = world.signed_in(world.tokens["acme"])
    page = client.get("/ui/journal?space=acme").text
    body = page[page.index('<table class="list" id="tail"') :].split("</table>")[0]
    assert body.count("<tr>") - 1 >= 1  # acme's lines, under the header row
    assert ">globex<" not in body


def test_an_export_is_shown_to_a_space_by_its_record_not_its_file_name(
    world: World, tmp_path: Path
) -> None:
    """A whole-journal export to a file named "... (space acme)" was listed to acme's
    readers as acme's export (the Space was read from the output's name)."""
    from blackops.cli.main import main

    store = f"sqlite:///{world.db}"
    named = tmp_path / "whole (space acme)"
    assert main(["journal", "export", "--output", str(named), "--store", store]) == 0
    with TestClient(world.api) as client:
        mine = client.get("/v1/spaces/acme/journal/export", headers=H)
        assert mine.status_code == 200
    page = world.signed_in(world.tokens["acme"]).get("/ui/journal?space=acme").text
    assert str(named) not in page  # the whole journal's export: not acme's to see
    assert "GET /v1/journal/export (space acme)" in page  # its own Space's export is


@pytest.mark.parametrize(
    "path",
    [
        "/ui/spaces/acme/workflows/Flow/instances/%FF",
        "/ui/spaces/acme/workflows/Flow/instances/?id=%FF",
        "/ui/spaces/acme/workflows/Flow/receipts/%FF",
        "/ui/spaces/acme/workflows/Flow/terminate/%FF",
    ],
)
def test_an_instance_id_that_is_not_utf8_is_refused_not_read_as_another(
    world: World, path: str
) -> None:
    """The console read ``%FF`` as U+FFFD and showed, and terminated, the instance named so
    (found by a defect hunt, stop 38); the API answers 400 for it (P42), so does the console."""
    with TestClient(world.api) as client:
        made = client.post("/v1/spaces/acme/workflows/Flow/instances", json={"id": "\ufffd"},
                           headers=H)  # fmt: skip
        assert made.status_code == 201, made.text
    signed = world.signed_in(SYSTEM)
    page = signed.get("/ui/spaces/acme/workflows/Flow/instances/%EF%BF%BD")
    assert page.status_code == 200
    refused = signed.get(path)
    assert refused.status_code == 400 and "invalid_request" in refused.text, refused.text[:500]
    if "/terminate/" in path:
        posted = signed.post(path, data={"csrf": csrf_of(page.text)})
        assert posted.status_code == 400, posted.status_code
    with TestClient(world.api) as client:
        status = client.get("/v1/spaces/acme/workflows/Flow/instances/%EF%BF%BD", headers=H).json()[
            "status"
        ]
    assert status != "terminated"
