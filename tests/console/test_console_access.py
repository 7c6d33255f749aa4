"""The console's access rules (issue 15), without a browser, on SQLite and PostgreSQL.

Two Spaces, ``acme`` (a reader, an operator, an admin; a completed and a dead letter
operation; a queued instance of a registered workflow) and ``globex`` (an admin and an
operation). Checked: every ``/ui/`` route without a session (to the sign-in page, or 401),
another Space's objects answer the same 404 page as missing ones, the role matrix of every
action, and that a form without a valid CSRF token is 403 and leaves the journal's last
position where it was. The ``/ui/`` routes are not in the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from console_forms import Flow, csrf_of  # type: ignore[import-not-found, unused-ignore]
from fastapi import FastAPI
from fastapi.testclient import TestClient

from blackops import Application, ExecutionContext, Retryable, Supervision
from blackops.audit.checkpoints import CheckpointService
from blackops.http.app import create_http_app
from blackops.http.responses import every_route
from blackops.testing import FakeClock
from replay.notes import SigningKey

SYSTEM = "console-system-token"
ACME, GLOBEX = "acme", "globex"
MISSING_OPERATION = "01900000-0000-7000-8000-000000000000"


FLOW_SOURCE = (
    "class Flow:\n"
    "    def __init__(self, env):\n"
    "        self.env = env\n"
    "    async def run(self, event, step):\n"
    "        return await step.do('a', lambda: {'v': 1})\n"
)


@dataclass
class World:
    app: Application
    api: FastAPI
    tokens: dict[str, str] = field(default_factory=dict)  # "acme-reader" -> token
    done: str = ""
    dead: str = ""
    foreign: str = ""
    version: str = ""

    def client(self, *, https: bool = False) -> TestClient:
        base = "https://testserver" if https else "http://testserver"
        return TestClient(self.api, base_url=base, follow_redirects=False)

    def signed_in(self, who: str) -> TestClient:
        client = self.client()
        token = SYSTEM if who == "system" else self.tokens[who]
        answer = client.post("/ui/login", data={"csrf": login_csrf(client), "token": token})
        assert answer.status_code == 303, answer.text
        return client


def login_csrf(client: TestClient) -> str:
    return csrf_of(client.get("/ui/login").text)


@pytest.fixture
def world(store_url: str, clock: FakeClock) -> Iterator[World]:
    app = Application(store_url, clock=clock)

    @app.operation("demo.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"echo": params}

    @app.operation("demo.dead", supervision=Supervision(max_attempts=1, exhausted="dead_letter"))
    def dead(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("never")

    app.register_workflow(Flow, space=ACME)
    checkpoints = CheckpointService(app.store, SigningKey.generate("example.com/acme"), clock)
    api = create_http_app(app, SYSTEM, checkpoints=checkpoints)
    w = World(app, api)
    with TestClient(api) as client:
        system = {"Authorization": f"Bearer {SYSTEM}"}
        for space in (ACME, GLOBEX):
            assert client.post("/v1/spaces", json={"name": space}, headers=system).is_success
        for space, role in [(ACME, "reader"), (ACME, "operator"), (ACME, "admin"),
                            (GLOBEX, "admin")]:  # fmt: skip
            path = f"/v1/spaces/{space}/principals/{space}-{role}"
            assert client.put(path, json={"role": role}, headers=system).is_success
            w.tokens[f"{space}-{role}"] = client.post(
                path + "/tokens", json={}, headers=system
            ).json()["token"]
        operator = {"Authorization": f"Bearer {w.tokens['acme-operator']}"}
        run = "/v1/spaces/acme/operations/"
        w.done = client.post(run + "demo.echo", json={}, headers=operator).json()["operationId"]
        w.dead = client.post(
            run + "demo.dead", json={}, headers={**operator, "Prefer": "respond-async"}
        ).json()["operationId"]
        made = client.post("/v1/spaces/acme/workers", json={"name": "w1"}, headers=system)
        versions = f"/v1/spaces/acme/workers/{made.json()['uid']}/versions"
        bundle = {"modules": {"flows": FLOW_SOURCE}, "main": "flows"}
        w.version = client.post(versions, json=bundle, headers=system).json()["version"]
        asyncio.run(app.work_until_idle())
        assert app.status(w.dead)["status"] == "dead_letter"
        made = client.post("/v1/spaces/acme/workflows/Flow/instances", json={"id": "i1"},
                           headers=operator)  # fmt: skip
        assert made.status_code == 201, made.text
        w.foreign = client.post(
            "/v1/spaces/globex/operations/demo.echo", json={}, headers=system
        ).json()["operationId"]
        checkpoints.sign()
    try:
        yield w
    finally:
        app.close()


def ui_routes(api: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every console route (as tests/http's table reads the app)."""
    found: set[tuple[str, str]] = set()
    for route in every_route(api):
        path = getattr(route, "path", "")
        if path == "/ui" or path.startswith("/ui/"):
            found.update((method, path) for method in getattr(route, "methods", ()))
    return found


def main_of(html: str) -> str:
    """The page's <main>: what it says (the navigation marks the current page)."""
    found = re.search(r"<main.*</main>", html, re.S)
    assert found, html[:300]
    return found.group(0)


#: Every console route with a real acme target (``{op}``: the completed operation).
UI = {
    ("GET", "/ui"): None,  # public: it only leads to /ui/, which asks for a session
    ("GET", "/ui/"): "/ui/",
    ("GET", "/ui/login"): None,  # the sign-in page itself: public
    ("POST", "/ui/login"): None,  # public, but CSRF-checked (below)
    ("POST", "/ui/logout"): "/ui/logout",
    ("GET", "/ui/static/{name}"): None,  # the stylesheet and the script: public
    ("GET", "/ui/operations"): "/ui/operations",
    ("GET", "/ui/operations/{operation_id}"): "/ui/operations/{op}",
    ("GET", "/ui/operations/{operation_id}/receipt.json"): "/ui/operations/{op}/receipt.json",
    ("GET", "/ui/operations/{operation_id}/actions/{action}"): "/ui/operations/{op}/actions/hold",
    ("POST", "/ui/operations/{operation_id}/actions/{action}"): (
        "/ui/operations/{op}/actions/hold"
    ),
    ("GET", "/ui/workflows"): "/ui/workflows",
    ("GET", "/ui/spaces/{space}/workflows"): "/ui/spaces/acme/workflows",
    ("GET", "/ui/spaces/{space}/workflows/{uid}"): "/ui/spaces/acme/workflows/Flow",
    ("GET", "/ui/spaces/{space}/workflows/{uid}/instances/{instance_id:any_path}"): (
        "/ui/spaces/acme/workflows/Flow/instances/i1"
    ),
    ("GET", "/ui/spaces/{space}/workflows/{uid}/receipts/{instance_id:any_path}"): (
        "/ui/spaces/acme/workflows/Flow/receipts/i1"
    ),
    ("GET", "/ui/spaces/{space}/workflows/{uid}/terminate/{instance_id:any_path}"): (
        "/ui/spaces/acme/workflows/Flow/terminate/i1"
    ),
    ("POST", "/ui/spaces/{space}/workflows/{uid}/terminate/{instance_id:any_path}"): (
        "/ui/spaces/acme/workflows/Flow/terminate/i1"
    ),
    ("GET", "/ui/journal"): "/ui/journal",
}


def test_the_table_covers_every_console_route(world: World) -> None:
    assert ui_routes(world.api) == set(UI)


def test_the_console_is_not_in_the_openapi_document(world: World) -> None:
    paths = world.client().get("/openapi.json").json()["paths"]
    assert paths and not [path for path in paths if path.startswith("/ui")]


@pytest.mark.parametrize("cookie", [None, "garbage", "bo_" + "A" * 43])
def test_without_a_session_every_page_goes_to_sign_in(world: World, cookie: str | None) -> None:
    before = world.app.store.last_position()
    for (method, _), template in UI.items():
        if template is None:
            continue
        client = world.client()
        if cookie is not None:
            client.cookies.set("blackops_session", cookie)
        path = template.format(op=world.done)
        answer = client.request(method, path, data={"csrf": "x", "reason": "r"})
        if method == "GET":
            assert answer.status_code == 303, (path, answer.status_code)
            assert answer.headers["location"].startswith("/ui/login?next=")
        else:
            assert answer.status_code == 401, (path, answer.status_code)
            assert "Sign-in needed" in answer.text
    assert world.app.store.last_position() == before


def test_sign_in_sets_a_strict_http_only_cookie(world: World) -> None:
    client = world.client(https=True)
    answer = client.post(
        "/ui/login", data={"csrf": login_csrf(client), "token": world.tokens["acme-reader"],
                           "next": "/ui/journal"},
    )  # fmt: skip
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/journal"
    cookie = next(c for c in answer.headers.get_list("set-cookie") if "blackops_session" in c)
    attributes = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=strict", "secure", "path=/"} <= attributes
    assert client.get("/ui/journal").status_code == 200
    # Plain http: no Secure attribute (the browser would drop the cookie).
    plain = world.client()
    answer = plain.post("/ui/login", data={"csrf": login_csrf(plain),
                                           "token": world.tokens["acme-reader"]})  # fmt: skip
    cookie = next(c for c in answer.headers.get_list("set-cookie") if "blackops_session" in c)
    assert "secure" not in cookie.lower()


def test_sign_in_refusals(world: World) -> None:
    client = world.client()
    csrf = login_csrf(client)
    bad = client.post("/ui/login", data={"csrf": csrf, "token": "bo_" + "B" * 43})
    assert bad.status_code == 401 and "not accepted" in bad.text
    assert "blackops_session" not in bad.headers.get("set-cookie", "")
    for forged in ("", "0" * 64, csrf[:-1] + ("0" if csrf[-1] != "0" else "1")):
        refused = client.post("/ui/login", data={"csrf": forged, "token": SYSTEM})
        assert refused.status_code == 403 and "CSRF" in refused.text
        assert "blackops_session" not in refused.headers.get("set-cookie", "")
    # Another browser's login token (its nonce cookie differs) is refused too.
    other = world.client()
    refused = other.post("/ui/login", data={"csrf": csrf, "token": SYSTEM})
    assert refused.status_code == 403
    # Somewhere else after signing in: never.
    answer = client.post("/ui/login", data={"csrf": csrf, "token": SYSTEM,
                                            "next": "//evil.example/ui/"})  # fmt: skip
    assert answer.headers["location"] == "/ui/operations"


def test_sign_out_needs_the_csrf_token_and_ends_the_session(world: World) -> None:
    client = world.signed_in("acme-reader")
    page = client.get("/ui/operations")
    assert client.post("/ui/logout", data={"csrf": "0" * 64}).status_code == 403
    assert client.get("/ui/operations").status_code == 200
    answer = client.post("/ui/logout", data={"csrf": csrf_of(page.text)})
    assert answer.status_code == 303
    assert client.get("/ui/operations").status_code == 303  # to the sign-in page


def test_another_spaces_objects_are_not_found_like_missing_ones(world: World) -> None:
    client = world.signed_in("acme-admin")
    missing = client.get(f"/ui/operations/{MISSING_OPERATION}")
    assert missing.status_code == 404
    for path in (f"/ui/operations/{world.foreign}", f"/ui/operations/{world.foreign}/receipt.json",
                 f"/ui/operations/{world.foreign}/actions/hold"):  # fmt: skip
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert main_of(answer.text).replace(world.foreign, "ID") == main_of(missing.text).replace(
            MISSING_OPERATION, "ID"
        )
    nowhere = client.get("/ui/spaces/nowhere/workflows")
    for path in ("/ui/spaces/globex/workflows", "/ui/journal?space=globex",
                 "/ui/operations?tenant=globex"):  # fmt: skip
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert main_of(answer.text).replace("globex", "S") == main_of(nowhere.text).replace(
            "nowhere", "S"
        )
    # The live streams take the session cookie, with the same rule.
    assert client.get("/v1/spaces/globex/journal/stream?limit=1").status_code == 404
    assert client.get("/v1/journal/stream?limit=1").status_code == 403  # not a system principal
    with client.stream("GET", "/v1/spaces/acme/journal/stream?limit=1") as stream:
        assert stream.status_code == 200
        assert next(stream.iter_lines()).startswith("id: ")
    # And the system principal sees globex's operation.
    assert world.signed_in("system").get(f"/ui/operations/{world.foreign}").status_code == 200


def test_no_other_api_route_takes_the_cookie(world: World) -> None:
    client = world.signed_in("acme-admin")
    assert client.get(f"/v1/operations/{world.done}").status_code == 401
    hold = client.post(f"/v1/operations/{world.done}/hold", json={"reason": "x"})
    assert hold.status_code == 401


#: action -> (the path, its form, the least role, the status a success answers)
ACTIONS = {
    "hold": ("/ui/operations/{done}/actions/hold", {"reason": "audit"}, "operator"),
    "redrive": ("/ui/operations/{dead}/actions/redrive", {}, "operator"),
    "terminate": ("/ui/spaces/acme/workflows/Flow/terminate/i1", {}, "operator"),
}
RANK = {"reader": 0, "operator": 1, "admin": 2}


@pytest.mark.parametrize("role", ["reader", "operator", "admin"])
@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_role_matrix_of_the_actions(world: World, action: str, role: str) -> None:
    template, form, least = ACTIONS[action]
    path = template.format(done=world.done, dead=world.dead)
    client = world.signed_in(f"acme-{role}")
    before = world.app.store.last_position()
    confirm = client.get(path)
    if RANK[role] < RANK[least]:
        assert confirm.status_code == 403 and "Not allowed" in confirm.text
        csrf = csrf_of(client.get("/ui/operations").text)
        done = client.post(path, data={"csrf": csrf, **form})
        assert done.status_code == 403
        assert world.app.store.last_position() == before
        return
    assert confirm.status_code == 200 and "Confirm" in confirm.text
    done = client.post(path, data={"csrf": csrf_of(confirm.text), **form})
    assert done.status_code == 303, done.text
    assert world.app.store.last_position() > before
    if action == "hold":
        assert any(e["type"] == "operation.held" for e in world.app.events(world.done))
    elif action == "redrive":
        new = done.headers["location"].rsplit("/", 1)[1]
        assert new != world.dead and world.app.status(new)["tenant"] == ACME
    else:
        assert "terminated" in client.get(done.headers["location"]).text


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_release_needs_an_admin(world: World, role: str) -> None:
    world.app.hold(world.done, reason="keep", actor="acme-admin")
    client = world.signed_in(f"acme-{role}")
    path = f"/ui/operations/{world.done}/actions/release"
    before = world.app.store.last_position()
    confirm = client.get(path)
    form_page = confirm if confirm.status_code == 200 else client.get("/ui/operations")
    csrf = csrf_of(form_page.text)
    done = client.post(path, data={"csrf": csrf, "reason": "done"})
    if role == "operator":
        assert confirm.status_code == 403 and done.status_code == 403
        assert world.app.store.last_position() == before
    else:
        assert done.status_code == 303
        assert world.app.events(world.done)[-1]["type"] == "operation.released"


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("csrf", ["missing", "wrong", "another-session"])
def test_an_action_without_a_valid_csrf_token_changes_nothing(
    world: World, action: str, csrf: str
) -> None:
    template, form, _ = ACTIONS[action]
    path = template.format(done=world.done, dead=world.dead)
    client = world.signed_in("acme-admin")
    valid = csrf_of(client.get(path).text)
    supplied = {
        "missing": None,
        "wrong": valid[:-2] + ("00" if not valid.endswith("00") else "11"),
        "another-session": csrf_of(world.signed_in("acme-operator").get(path).text),
    }[csrf]
    before = world.app.store.last_position()
    data = dict(form) if supplied is None else {"csrf": supplied, **form}
    refused = client.post(path, data=data)
    assert refused.status_code == 403 and "CSRF" in refused.text
    assert world.app.store.last_position() == before


def test_pages_render_for_a_reader(world: World) -> None:
    client = world.signed_in("acme-reader")
    for path in ("/ui/operations", f"/ui/operations/{world.done}",
                 "/ui/operations?status=dead_letter&tenant=acme", "/ui/workflows",
                 "/ui/spaces/acme/workflows", "/ui/spaces/acme/workflows/Flow",
                 "/ui/spaces/acme/workflows/Flow/instances/i1", "/ui/journal"):  # fmt: skip
        answer = client.get(path, follow_redirects=True)
        assert answer.status_code == 200, (path, answer.text[:300])
        assert "Content-Security-Policy" in answer.headers
        assert "Hold…" not in answer.text and "Terminate…" not in answer.text  # read only
    workers = client.get("/ui/spaces/acme/workflows").text
    assert "w1" in workers and world.version in workers and "<td>pending</td>" not in workers
    listing = client.get("/ui/operations?status=dead_letter").text
    assert world.dead in listing and world.done not in listing
    receipt = client.get(f"/ui/operations/{world.done}").text
    assert "Verified by this server" in receipt
    bad = client.get("/ui/operations?since=yesterday")
    assert bad.status_code == 400 and "invalid_request" in bad.text


def test_the_journal_page_lists_only_the_exports_a_principal_may_know(world: World) -> None:
    api = world.client()
    system = {"Authorization": f"Bearer {SYSTEM}"}
    acme = {"Authorization": f"Bearer {world.tokens['acme-admin']}"}
    globex = {"Authorization": f"Bearer {world.tokens['globex-admin']}"}
    assert api.get("/v1/journal/export", headers=system).status_code == 200
    assert api.get("/v1/spaces/acme/journal/export", headers=acme).status_code == 200
    assert api.get("/v1/spaces/globex/journal/export", headers=globex).status_code == 200
    outputs = re.compile(r"GET /v1/[a-z/]*journal/export(?: \(space [a-z]+\))?")
    seen = outputs.findall(world.signed_in("acme-reader").get("/ui/journal").text)
    assert seen == ["GET /v1/journal/export (space acme)"]
    every = outputs.findall(world.signed_in("system").get("/ui/journal").text)
    assert sorted(every) == [
        "GET /v1/journal/export",
        "GET /v1/journal/export (space acme)",
        "GET /v1/journal/export (space globex)",
    ]
