"""The read side over HTTP (issue: "The read side, complete"), on SQLite and PostgreSQL:
instance listings and counts, operation counts, registered workflows beside Workflow
resources, RFC 3339 time filters compared as instants, Spaces that do not exist, and
token revocation with the CLI's rights."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import spaces
from fastapi.testclient import TestClient

from blackops import Application
from blackops.http.app import create_http_app
from blackops.testing import FakeClock
from domain.access import Role
from domain.context import Actor

TOKEN = "read-side-system-token"
SYSTEM = {"Authorization": f"Bearer {TOKEN}"}


class Pause:
    def __init__(self, env: object) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any] | None:
        if (event.params or {}).get("wait"):
            await step.wait_for_event("go", type="go", timeout_seconds=3600)
        return {"done": True}


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    app.operation("t.echo")(lambda ctx, params: params)
    app.register_workflow(Pause, space="acme")
    spaces(app, "acme", "globex")
    with TestClient(create_http_app(app, TOKEN)) as test_client:
        yield test_client


def test_instances_of_a_workflow_are_listed_filtered_and_paged(
    client: TestClient, app: Application, clock: FakeClock
) -> None:
    binding = app.workflow("Pause")
    for n in range(5):
        asyncio.run(binding.create(id=f"p-{n}", params={"wait": n % 2 == 1}))
        clock.advance(1)
    asyncio.run(app.work_until_idle())
    base = "/v1/spaces/acme/workflows/Pause/instances"
    page = client.get(base, params={"limit": 2}, headers=SYSTEM).json()
    assert [i["id"] for i in page["items"]] == ["p-0", "p-1"] and page["next"]
    rest = client.get(base, params={"cursor": page["next"]}, headers=SYSTEM).json()
    assert [i["id"] for i in rest["items"]] == ["p-2", "p-3", "p-4"] and rest["next"] is None
    waiting = client.get(base, params={"status": "waiting"}, headers=SYSTEM).json()
    assert [i["id"] for i in waiting["items"]] == ["p-1", "p-3"]
    second = page["items"][1]["createdAt"]
    since = client.get(base, params={"since": second}, headers=SYSTEM).json()
    assert [i["id"] for i in since["items"]] == ["p-1", "p-2", "p-3", "p-4"]
    counts = client.get("/v1/spaces/acme/workflows/Pause/instance-counts", headers=SYSTEM)
    body = counts.json()
    assert body["instanceCounts"]["complete"] == 3 and body["instanceCounts"]["waiting"] == 2
    assert body["observedPosition"] == app.store.last_position()
    assert body["observedAt"] == "2026-11-30T09:00:05.000000Z"


def test_operation_counts_by_tenant(client: TestClient, app: Application) -> None:
    for _ in range(3):
        app.run("t.echo", {}, actor="a", tenant="acme")
    app.run("t.echo", {}, actor="a", tenant="globex")
    answer = client.get("/v1/operation-counts", params={"tenant": "acme"}, headers=SYSTEM)
    assert answer.status_code == 200
    assert answer.json()["counts"] == {"acme": {"t.echo": {**_zeros(), "completed": 3}}}
    everything = client.get("/v1/operation-counts", headers=SYSTEM).json()["counts"]
    assert set(everything) == {"acme", "globex"}


def _zeros() -> dict[str, int]:
    statuses = ("received", "accepted", "running", "retry_scheduled", "completed",
                "rejected", "failed", "dead_letter")  # fmt: skip
    return dict.fromkeys(statuses, 0)


def test_a_registered_workflow_is_listed_and_read_like_a_resource(client: TestClient) -> None:
    listed = client.get("/v1/spaces/acme/workflows", headers=SYSTEM).json()["items"]
    assert [(w["uid"], w["registered"], w["observed"]["ready"]) for w in listed] == [
        ("Pause", True, True)
    ]
    one = client.get("/v1/spaces/acme/workflows/Pause", headers=SYSTEM)
    assert one.status_code == 200 and one.json()["spec"] == {"className": "Pause"}
    # Read-only: it cannot be replaced or deleted, and another Space does not see it.
    assert client.delete("/v1/spaces/acme/workflows/Pause", headers=SYSTEM).status_code == 404
    elsewhere = client.get("/v1/spaces/globex/workflows/Pause", headers=SYSTEM)
    assert elsewhere.status_code == 404
    assert client.get("/v1/spaces/globex/workflows", headers=SYSTEM).json() == {"items": []}


@pytest.mark.parametrize("bad", ["yesterday", "0", "2026-12-01", "2026-12-01 09:10:00Z", ""])
def test_time_filters_refuse_anything_but_rfc_3339(client: TestClient, bad: str) -> None:
    for path in ("/v1/operations", "/v1/spaces/acme/workflows/Pause/instances"):
        answer = client.get(path, params={"tenant": "acme", "since": bad}, headers=SYSTEM)
        assert answer.status_code == 400, (path, bad, answer.text)
        assert answer.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    "query",
    [
        "tenant=acme&status=completed&status=rejected",
        "tenant=acme&status=completed&st%61tus=rejected",  # the name as the router decodes it
        "tenant=acme&tenant=globex",
        "tenant=acme&limit=1&limit=",
    ],
)
def test_a_query_parameter_named_twice_is_refused_not_cut_to_its_last_value(
    client: TestClient, app: Application, query: str
) -> None:
    """FastAPI keeps the last value of a repeated name: a filter given twice answered the
    last one's page alone (found by a defect hunt, stop 35; decisions H15)."""
    app.run("t.echo", {}, actor="a", tenant="acme")
    for path in ("/v1/operations", "/v1/operation-counts"):
        answer = client.get(f"{path}?{query}", headers=SYSTEM)
        assert answer.status_code == 400, (path, query, answer.text)
        assert answer.json()["error"]["code"] == "invalid_request"
    once = client.get("/v1/operations?tenant=acme&status=completed", headers=SYSTEM)
    assert once.status_code == 200 and len(once.json()["items"]) == 1
    # A name the API declares nowhere (a cache-buster) is ignored, also repeated: it was
    # refused (found by a defect hunt, stop 37).
    busted = client.get("/v1/operations?tenant=acme&_=1&_=2&status=completed", headers=SYSTEM)
    assert busted.status_code == 200 and len(busted.json()["items"]) == 1


def test_time_filters_compare_instants_whatever_the_offset(
    client: TestClient, app: Application, clock: FakeClock
) -> None:
    early = app.run("t.echo", {}, actor="a", tenant="acme").operation_id
    clock.advance(3600)
    late = app.run("t.echo", {}, actor="a", tenant="acme").operation_id
    # 09:30 UTC written three ways: the same instant, the same answer.
    for since in ("2026-11-30T09:30:00Z", "2026-11-30T15:00:00+05:30", "2026-11-30T04:30:00-05:00"):
        page = client.get(
            "/v1/operations", params={"tenant": "acme", "since": since}, headers=SYSTEM
        )
        assert [i["operationId"] for i in page.json()["items"]] == [late], since
        until = client.get(
            "/v1/operations", params={"tenant": "acme", "until": since}, headers=SYSTEM
        )
        assert [i["operationId"] for i in until.json()["items"]] == [early], since


def test_a_space_that_does_not_exist_is_not_found_even_for_the_system_token(
    client: TestClient, app: Application
) -> None:
    before = app.store.last_position()
    run = client.post("/v1/spaces/nosuchspace/operations/t.echo", json={}, headers=SYSTEM)
    assert run.status_code == 404 and run.json()["error"]["code"] == "not_found"
    deferred = client.post(
        "/v1/spaces/nosuchspace/operations/t.echo",
        json={},
        headers={**SYSTEM, "Prefer": "respond-async"},
    )
    assert deferred.status_code == 404
    for path in ("/v1/spaces/nosuchspace/journal", "/v1/spaces/nosuchspace/workflows"):
        assert client.get(path, headers=SYSTEM).status_code == 404, path
    assert client.get("/v1/operations?tenant=nosuchspace", headers=SYSTEM).status_code == 404
    assert app.store.last_position() == before


def test_a_rejection_is_rejected_never_invalid_params(client: TestClient, app: Application) -> None:
    from blackops import OperationRejected

    @app.operation("t.refuse")
    def refuse(ctx: Any, params: dict[str, Any]) -> None:
        raise OperationRejected("validation", "too_small", "n must be larger")

    refused = client.post("/v1/spaces/acme/operations/t.refuse", json={"n": 1}, headers=SYSTEM)
    malformed = client.post("/v1/spaces/acme/operations/t.echo", content=b"{", headers=SYSTEM)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "rejected"
    assert refused.json()["rejection"]["category"] == "validation"
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_params"


def test_tokens_are_revoked_over_http_with_the_clis_rights(
    client: TestClient, app: Application
) -> None:
    """A Space admin revokes a token scoped to its Space (it stops working at once), not
    one that also acts elsewhere; the system token revokes any; refusals change nothing."""
    actor = Actor("ops", "cli")
    access = app.access
    for pid, space, role in (("root", "acme", Role.ADMIN), ("bob", "acme", Role.READER)):
        access.create_principal(pid, app.access_context(actor, space))
        access.grant(pid, space, role, app.access_context(actor, space))
    access.grant("bob", "globex", Role.READER, app.access_context(actor, "globex"))
    admin, _ = access.issue_token("root", app.access_context(actor, "acme"), space="acme")
    scoped, scoped_record = access.issue_token(
        "bob", app.access_context(actor, "acme"), space="acme"
    )
    wide, wide_record = access.issue_token("bob", app.access_context(actor, "acme"))
    as_admin = {"Authorization": f"Bearer {admin}"}
    tokens = "/v1/spaces/acme/principals/bob/tokens/"
    assert (
        client.get(
            "/v1/spaces/acme/journal", headers={"Authorization": f"Bearer {scoped}"}
        ).status_code
        == 200
    )
    before = app.store.last_position()
    assert client.delete(tokens + wide_record["tokenId"], headers=as_admin).status_code == 404
    assert client.delete(tokens + "0" * 16, headers=as_admin).status_code == 404
    assert client.delete(tokens + "nothex", headers=as_admin).status_code == 400
    as_reader = {"Authorization": f"Bearer {wide}"}
    assert client.delete(tokens + scoped_record["tokenId"], headers=as_reader).status_code == 403
    assert app.store.last_position() == before
    revoked = client.delete(tokens + scoped_record["tokenId"], headers=as_admin)
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert (
        client.get(
            "/v1/spaces/acme/journal", headers={"Authorization": f"Bearer {scoped}"}
        ).status_code
        == 401
    )
    assert client.delete(tokens + wide_record["tokenId"], headers=SYSTEM).status_code == 200
    assert client.get("/v1/spaces/globex/journal", headers=as_reader).status_code == 401


def test_an_export_through_a_prefixed_base_url_links_its_manifest_under_the_prefix(
    app: Application, tmp_path: Path
) -> None:
    """Behind a proxy that serves the API under a path (root_path), the export's Link named
    /v1/... without it: the client's manifest request was a 404 and the export was lost
    (found by a defect hunt, stop 35)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from blackops.client import Client

    app.operation("t.echo")(lambda ctx, params: params)
    spaces(app, "acme")
    app.run("t.echo", {}, actor="a", tenant="acme")
    outer = Starlette(routes=[Mount("/blackops", app=create_http_app(app, TOKEN))])
    target = tmp_path / "acme.jsonl"
    with TestClient(outer) as http:
        answer = http.get("/blackops/v1/spaces/acme/journal/export", headers=SYSTEM)
        assert answer.headers["Link"].startswith("</blackops/v1/journal/exports/")
        with Client("http://testserver/blackops", TOKEN, transport=http._transport) as client:
            manifest = client.export(str(target), space="acme")
    assert manifest is not None and manifest["count"] == target.read_bytes().count(b"\n")
    assert Path(f"{target}.manifest.json").exists()


def test_behind_a_prefix_the_middleware_sees_the_routes_the_router_sees(
    app: Application,
) -> None:
    """Served under a prefix (a Mount here; a proxy's --root-path alike), the path holds the
    prefix: a filter named twice was cut to its last value again, a HEAD of an export ran
    the GET and journaled it, and a 405 named no allowed method (found by review, stop 35)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    app.operation("t.echo")(lambda ctx, params: params)
    spaces(app, "acme", "globex")
    app.run("t.echo", {}, actor="a", tenant="acme")
    outer = Starlette(routes=[Mount("/blackops", app=create_http_app(app, TOKEN))])
    before = app.store.last_position()
    with TestClient(outer) as http:
        repeated = http.get("/blackops/v1/operations?tenant=acme&tenant=globex", headers=SYSTEM)
        assert repeated.status_code == 400, repeated.text
        head = http.head("/blackops/v1/journal/export", headers=SYSTEM)
        assert head.status_code == 405 and "GET" in head.headers["Allow"]
        assert "HEAD" not in head.headers["Allow"]
        listed = http.head("/blackops/v1/operations?tenant=acme", headers=SYSTEM)
        assert listed.status_code == 200 and listed.content == b""
    assert app.store.last_position() == before  # no journal.exported


def test_behind_a_prefix_every_location_names_the_prefix(app: Application) -> None:
    """A 201's or 202's ``Location`` named /v1/... without the prefix the API is served under:
    a client following it from its base URL got a 404 (found by review, stop 37). The body's
    ``location`` stays the API path, as every answer names routes."""
    from resource_helpers import bundle, new_worker
    from starlette.applications import Starlette
    from starlette.routing import Mount

    app.operation("t.echo")(lambda ctx, params: params)
    app.register_workflow(Pause, space="acme")
    spaces(app, "acme")
    outer = Starlette(routes=[Mount("/blackops", app=create_http_app(app, TOKEN))])
    async_submit = {**SYSTEM, "Prefer": "respond-async"}
    with TestClient(outer) as http:
        submitted = http.post(
            "/blackops/v1/spaces/acme/operations/t.echo", json={}, headers=async_submit
        )
        created = http.post(
            "/blackops/v1/spaces/acme/workflows/Pause/instances", json={"id": "i"}, headers=SYSTEM
        )
        uploaded = http.post(
            f"/blackops/v1/spaces/acme/workers/{new_worker(app)}/versions",
            json=bundle(),
            headers=SYSTEM,
        )
        answers = (submitted, created, uploaded)
        assert [a.status_code for a in answers] == [202, 201, 202], [a.text for a in answers]
        for answer in answers:
            location = answer.headers["Location"]
            assert location.startswith("/blackops/v1/"), location
            assert http.get(location, headers=SYSTEM).status_code == 200, location
        assert submitted.json()["location"] == submitted.headers["Location"].removeprefix(
            "/blackops"
        )


def test_a_trailing_slash_names_no_route(client: TestClient) -> None:
    """``GET /v1/operations/`` was a 307 to an absolute URL the OpenAPI document never
    mentions; it is a 404 with the error body, like any path that names no route (decisions
    H17). The console's address without its slash still leads to it."""
    answer = client.get("/v1/operations/", headers=SYSTEM, follow_redirects=False)
    assert answer.status_code == 404
    assert answer.json() == {"error": {"code": "not_found", "message": "Not Found"}}
    console = client.get("/ui", follow_redirects=False)
    assert console.status_code == 303 and console.headers["Location"] == "/ui/"
