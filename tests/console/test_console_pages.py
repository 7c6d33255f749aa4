"""What the console's pages say, and how its POSTs run, in cases a defect hunt found wrong:
counts under a type filter, the hold/release buttons, deep links with percent-encoded ids
through sign-in, the receipt file name hint, the journal page's list meeting its live tail,
and token look-ups kept off the event loop. SQLite only."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from console_forms import Flow, csrf_of  # type: ignore[import-not-found, unused-ignore]
from fastapi import FastAPI
from fastapi.testclient import TestClient

from blackops import Application, ExecutionContext, Retryable, Supervision
from blackops.audit.checkpoints import CheckpointService
from blackops.control.access import AccessService
from blackops.http.app import create_http_app
from blackops.http.bodies import path_segment
from blackops.testing import FakeClock
from replay.export import observed_lines as real_observed_lines
from replay.notes import SigningKey

SYSTEM = "console-pages-system-token"
H = {"Authorization": f"Bearer {SYSTEM}"}


class World:
    def __init__(self, app: Application, api: FastAPI, service: CheckpointService) -> None:
        self.app, self.api, self.service = app, api, service
        self.tokens: dict[str, str] = {}
        self.done = self.dead = ""

    def client(self) -> TestClient:
        return TestClient(self.api, follow_redirects=False)

    def signed_in(self, who: str) -> TestClient:
        client = self.client()
        csrf = csrf_of(client.get("/ui/login").text)
        token = SYSTEM if who == "system" else self.tokens[who]
        answer = client.post("/ui/login", data={"csrf": csrf, "token": token})
        assert answer.status_code == 303, answer.text
        return client

    def instance(self, instance_id: str) -> None:
        with TestClient(self.api) as client:
            made = client.post("/v1/spaces/acme/workflows/Flow/instances",
                               json={"id": instance_id}, headers=H)  # fmt: skip
            assert made.status_code == 201, made.text


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    clock = FakeClock(datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC))
    app = Application(f"sqlite:///{tmp_path / 'journal.sqlite3'}", clock=clock)
    app.register_workflow(Flow, space="acme")

    @app.operation("demo.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"echo": params}

    @app.operation("demo.dead", supervision=Supervision(max_attempts=1, exhausted="dead_letter"))
    def dead(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("never")

    service = CheckpointService(app.store, SigningKey.generate("example.com/p"), clock)
    w = World(app, create_http_app(app, SYSTEM, checkpoints=service), service)
    with TestClient(w.api) as client:
        assert client.post("/v1/spaces", json={"name": "acme"}, headers=H).is_success
        for role in ("reader", "operator", "admin"):
            path = f"/v1/spaces/acme/principals/acme-{role}"
            assert client.put(path, json={"role": role}, headers=H).is_success
            issued = client.post(path + "/tokens", json={}, headers=H)
            w.tokens[f"acme-{role}"] = issued.json()["token"]
        run = "/v1/spaces/acme/operations/"
        for n in range(3):
            answer = client.post(run + "demo.echo", json={"n": n}, headers=H)
            w.done = answer.json()["operationId"]
        async_ = {**H, "Prefer": "respond-async"}
        w.dead = client.post(run + "demo.dead", json={}, headers=async_).json()["operationId"]
        asyncio.run(app.work_until_idle())
    try:
        yield w
    finally:
        app.close()


def counts_of(page: str) -> dict[str, tuple[int, str]]:
    """status -> (the count shown, its link) of the operations page's counts table."""
    table = re.search(r'<table class="counts">.*?</table>', page, re.S)
    assert table, page[:300]
    heads = re.findall(r'<th scope="col">(\w+)</th>', table.group(0))
    cells = re.findall(r'<td><a href="([^"]*)">(\d+)</a></td>', table.group(0))
    return {h: (int(n), html.unescape(link)) for h, (link, n) in zip(heads, cells, strict=True)}


def test_status_counts_follow_the_type_filter(world: World) -> None:
    reader = world.signed_in("acme-reader")
    every = counts_of(reader.get("/ui/operations").text)
    assert (every["completed"][0], every["dead_letter"][0]) == (3, 1)
    dead = counts_of(reader.get("/ui/operations?type=demo.dead").text)
    assert (dead["completed"][0], dead["dead_letter"][0]) == (0, 1)
    assert "type=demo.dead" in dead["dead_letter"][1]


def test_status_counts_say_they_ignore_the_time_filters(world: World) -> None:
    """The counts projection has no creation time: with since/until the page says the
    counts ignore them, and the count links leave them out (each links what it counts)."""
    reader = world.signed_in("acme-reader")
    page = reader.get("/ui/operations?type=demo.echo&since=2020-01-01T00:00:00Z").text
    assert "ignore" in page
    completed, link = counts_of(page)["completed"]
    assert completed == 3 and "type=demo.echo" in link and "since" not in link
    assert "ignore" not in reader.get("/ui/operations?type=demo.echo").text


def test_hold_and_release_are_offered_by_whether_a_hold_is_active(world: World) -> None:
    admin = world.signed_in("acme-admin")
    op = f"/ui/operations/{world.done}"

    def offered() -> tuple[bool, bool]:
        page = admin.get(op).text
        return f"{op}/actions/hold" in page, f"{op}/actions/release" in page

    assert offered() == (True, False)
    csrf = csrf_of(admin.get(op).text)
    held = admin.post(f"{op}/actions/hold", data={"csrf": csrf, "reason": "audit"})
    assert held.status_code == 303, held.text
    assert offered() == (False, True)
    released = admin.post(f"{op}/actions/release", data={"csrf": csrf, "reason": "done"})
    assert released.status_code == 303, released.text
    assert offered() == (True, False)  # a past hold is no reason to offer a release


@pytest.mark.parametrize("instance_id", ["..", "a%2Fb", "a/b c?d#e"])
def test_a_deep_link_to_an_encoded_instance_id_survives_sign_in(
    world: World, instance_id: str
) -> None:
    world.instance(instance_id)
    url = "/ui/spaces/acme/workflows/Flow/instances/" + path_segment(instance_id)
    client = world.client()
    sent = client.get(url)
    assert sent.status_code == 303
    login = client.get(sent.headers["location"])
    next_ = parse_qs(urlsplit(sent.headers["location"]).query)["next"][0]
    assert next_ == url
    signed = client.post(
        "/ui/login",
        data={"csrf": csrf_of(login.text), "token": world.tokens["acme-reader"], "next": next_},
    )
    assert signed.status_code == 303 and signed.headers["location"] == url
    if "%" in instance_id:
        return  # the TestClient decodes a path twice (a server once): %252F would be a /
    page = client.get(url)
    assert page.status_code == 200
    assert f'<span class="mono">{html.escape(instance_id)}</span>' in page.text


def test_only_console_paths_are_followed_after_sign_in(world: World) -> None:
    for target in ("//evil.example/ui/", "https://evil.example/ui/", "/v1/operations"):
        client = world.client()
        login = client.get("/ui/login", params={"next": target})
        signed = client.post("/ui/login", data={"csrf": csrf_of(login.text), "next": target,
                                                "token": world.tokens["acme-reader"]})  # fmt: skip
        assert signed.status_code == 303, (target, signed.text[-800:])
        assert signed.headers["location"] == "/ui/operations", target


def test_the_receipt_command_names_the_file_the_download_gives(world: World) -> None:
    instance_id = 'x/y "z"'
    world.instance(instance_id)
    asyncio.run(world.app.work_until_idle())
    world.service.sign(force=True)
    reader = world.signed_in("acme-reader")
    page = reader.get("/ui/spaces/acme/workflows/Flow/instances/" + path_segment(instance_id))
    assert page.status_code == 200
    hint = re.search(r"blackops verify-receipt (.+?) --key", page.text)
    assert hint, page.text
    download = reader.get("/ui/spaces/acme/workflows/Flow/receipts/" + path_segment(instance_id))
    assert download.status_code == 200, download.text
    assert download.headers["content-disposition"] == f'attachment; filename="{hint.group(1)}"'
    assert hint.group(1) == "receipt-xyz.json"


def test_no_line_falls_between_the_journal_list_and_its_live_tail(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines committed while the page reads its list appear in the list or after the
    position the live tail starts from: the list ends where the tail begins."""

    def commit() -> None:
        world.app.run("demo.echo", {}, actor="a", tenant="acme")

    def racing(*args: Any, **kwargs: Any) -> Any:
        commit()  # committed after the page took the last position
        lines = list(real_observed_lines(*args, **kwargs))
        commit()  # committed after the list was read
        return lines

    monkeypatch.setattr("blackops.console.views.observed_lines", racing)
    page = world.signed_in("system").get("/ui/journal").text
    tail = re.search(r'<table class="list" id="tail"[^>]*data-after="(\d+)".*?</table>', page, re.S)
    assert tail, page[:300]
    after = int(tail.group(1))
    shown = [int(p) for p in re.findall(r"<tr><td>(\d+)</td>", tail.group(0))]
    assert shown and max(shown) == after, (shown[:3], after)


def test_console_posts_look_tokens_up_off_the_event_loop(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token look-up reads the store: on the event loop it would stall every request
    meanwhile, so the console's POSTs (and their refusal pages) make it in the thread pool,
    as the API's ``caller`` does."""
    real = AccessService.authenticate
    on_loop: list[bool] = []

    def spied(self: AccessService, token: str) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:  # a worker thread: no loop runs here
            on_loop.append(False)
        return real(self, token)

    operator = world.signed_in("acme-operator")
    csrf = csrf_of(operator.get("/ui/operations").text)
    monkeypatch.setattr(AccessService, "authenticate", spied)
    monkeypatch.setattr(AccessService, "cached_principal", lambda self, token: None)
    fresh = world.client()
    login_csrf = csrf_of(fresh.get("/ui/login").text)
    op = f"/ui/operations/{world.done}/actions"
    world.instance("t1")
    posts = [
        (fresh, "/ui/login", {"csrf": login_csrf, "token": "bo_" + "x" * 43}, 401),
        (fresh, "/ui/login", {"csrf": login_csrf, "token": world.tokens["acme-reader"]}, 303),
        (operator, f"{op}/hold", {"csrf": "wrong", "reason": "r"}, 403),
        (operator, f"{op}/hold", {"csrf": csrf, "reason": "r"}, 303),
        (operator, f"{op}/release", {"csrf": csrf, "reason": "r"}, 403),  # an admin's
        (operator, f"/ui/operations/{world.dead}/actions/redrive", {"csrf": csrf}, 303),
        (operator, "/ui/spaces/acme/workflows/Flow/terminate/t1", {"csrf": csrf}, 303),
        (operator, "/ui/logout", {"csrf": csrf}, 303),
    ]
    for client, path, form, status in posts:
        on_loop.clear()
        answer = client.post(path, data=form)
        assert answer.status_code == status, (path, answer.text[:300])
        assert on_loop and not any(on_loop), (path, on_loop)
    on_loop.clear()
    gone = world.client()
    gone.cookies.set("blackops_session", "bo_" + "y" * 43)
    assert gone.post("/ui/logout", data={"csrf": csrf}).status_code == 401
    assert on_loop and not any(on_loop), on_loop


def test_a_purged_operation_offers_neither_hold_nor_redrive(world: World) -> None:
    """A purged Dead Letter operation still reads `dead_letter`, so its page offered
    Redrive… (whose POST answered 500) and Hold… (refused 409); neither can work once its
    params are gone (found by a defect hunt, stop 35). A refusal, not a 500, if posted."""
    from domain.retention import Retention

    system = world.signed_in("system")
    page = system.get(f"/ui/operations/{world.dead}").text
    assert "Redrive…" in page and "Hold…" in page  # the control: offered before the purge
    world.app._runtime.retention = Retention(journal_seconds=1)
    world.app._runtime.clock.advance(10)  # type: ignore[attr-defined]
    assert world.dead in {i.operation_id for i in world.app.purge(actor="janitor").items}
    page = system.get(f"/ui/operations/{world.dead}").text
    assert "Redrive…" not in page and "Hold…" not in page
    csrf = csrf_of(page)
    answer = system.post(f"/ui/operations/{world.dead}/actions/redrive", data={"csrf": csrf})
    assert answer.status_code == 409, answer.status_code
