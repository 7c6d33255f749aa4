"""HTTP API on SQLite and PostgreSQL: auth, Inline 200, taxonomy mapping, hostile bodies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import spaces
from fastapi.testclient import TestClient

from blackops import Application, ExecutionContext, OperationRejected, Retryable
from blackops.http.app import create_http_app
from domain.errors import HTTP_STATUS

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    @app.operation("greeting.say")
    def say(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"hello": params.get("name", "world"), "by": ctx.actor.id, "space": ctx.tenant}

    @app.operation("order.place")
    def place(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected(params["category"], "refused", "not today")

    @app.operation("job.crash")
    def crash(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("boom")

    spaces(app, "acme")
    with TestClient(create_http_app(app, TOKEN)) as test_client:
        yield test_client


def post(client: TestClient, path: str, body: bytes | str = b"{}", **headers: str) -> Any:
    return client.post(
        path, content=body, headers={**AUTH, "content-type": "application/json", **headers}
    )


def test_inline_run_answers_200_with_the_outcome(client: TestClient, app: Application) -> None:
    response = post(client, "/v1/spaces/acme/operations/greeting.say", b'{"name": "ana"}')
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "completed"
    assert body["outcome"] == {"hello": "ana", "by": "dev", "space": "acme"}
    status = client.get(f"/v1/operations/{body['operationId']}", headers=AUTH)
    assert status.status_code == 200 and status.json()["status"] == "completed"
    events = client.get(f"/v1/operations/{body['operationId']}/events", headers=AUTH).json()
    assert [e["type"] for e in events["events"]] == [
        "operation.received",
        "attempt.started",
        "attempt.finalizing",
        "operation.completed",
    ]
    assert events["events"][0]["context"]["actor"] == {"id": "dev", "kind": "token"}


def test_empty_body_means_empty_params(client: TestClient) -> None:
    response = post(client, "/v1/spaces/acme/operations/greeting.say", b"")
    assert response.status_code == 200 and response.json()["outcome"]["hello"] == "world"


@pytest.mark.parametrize("body", [b"\n", b"  ", b"\t\r\n"])
def test_a_whitespace_body_is_not_an_empty_one(
    client: TestClient, app: Application, body: bytes
) -> None:
    # Only zero bytes mean "no body"; whitespace alone is not JSON text (schemathesis found
    # an instance create answering 201 to "\n").
    before = app.store.last_position()
    response = post(client, "/v1/spaces/acme/operations/greeting.say", body)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_params"
    assert app.store.last_position() == before


@pytest.mark.parametrize(
    ("category", "status", "code"),
    [
        # Every category is ``rejected`` (decisions Q1): never mistaken for bad input.
        ("validation", 422, "rejected"),
        ("authorization", 422, "rejected"),
        ("not_found", 422, "rejected"),
        ("conflict", 422, "rejected"),
        ("business_rule", 422, "rejected"),
    ],
)
def test_ol6_rejections_map_to_the_taxonomy(
    client: TestClient, category: str, status: int, code: str
) -> None:
    response = post(
        client, "/v1/spaces/acme/operations/order.place", f'{{"category": "{category}"}}'
    )
    assert response.status_code == status == HTTP_STATUS[code]
    body = response.json()
    assert body["error"]["code"] == code and body["status"] == "rejected"
    assert body["rejection"] == {"category": category, "code": "refused", "message": "not today"}


def test_failure_maps_to_operation_failed(client: TestClient) -> None:
    response = post(client, "/v1/spaces/acme/operations/job.crash")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "operation_failed"
    assert response.json()["status"] == "failed"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer "},
    ],
)
def test_requests_without_the_token_get_401(
    client: TestClient, app: Application, headers: dict[str, str]
) -> None:
    before = app.store.last_position()
    for response in (
        client.post("/v1/spaces/acme/operations/greeting.say", content=b"{}", headers=headers),
        client.get("/v1/operations/x", headers=headers),
        client.get("/v1/operations/x/events", headers=headers),
    ):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    assert app.store.last_position() == before


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b'{"a": 1, "a": 2}', 400, "invalid_params"),  # duplicate keys would lose data
        (b'{"a": NaN}', 400, "invalid_params"),
        (b'{"a": Infinity}', 400, "invalid_params"),
        (b'{"a": 1e400}', 400, "invalid_params"),
        (b'{"a": 9007199254740992}', 400, "invalid_params"),
        (b'{"a": "\\ud800"}', 400, "invalid_params"),
        (b"[1, 2]", 400, "invalid_params"),
        (b"null", 400, "invalid_params"),
        (b'{"a": ', 400, "invalid_params"),
        (b'{"a": "\xff"}', 400, "invalid_params"),
        (b'{"a": ' + b"1" * 5000 + b"}", 400, "invalid_params"),  # over int() limits
        (
            ("{" + ",".join(f'"k{i}": {i}' for i in range(1025)) + "}").encode(),
            413,
            "document_too_large",
        ),
        (b'{"a": "' + b"x" * 1_048_576 + b'"}', 413, "document_too_large"),
        (b" " * (4 * 1_048_576 + 1), 413, "document_too_large"),
    ],
)
def test_dw_doc_1_dw_doc_2_dw_doc_5_hostile_bodies_are_refused_and_change_nothing(
    client: TestClient, app: Application, body: bytes, status: int, code: str
) -> None:
    before = app.store.last_position()
    response = post(client, "/v1/spaces/acme/operations/greeting.say", body)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert app.store.last_position() == before


def test_bad_names_and_unknown_things(client: TestClient, app: Application) -> None:
    before = app.store.last_position()
    assert (
        post(client, "/v1/spaces/acme/operations/nope.nope").json()["error"]["code"] == "not_found"
    )
    assert (
        post(client, "/v1/spaces/acme/operations/Bad Type").json()["error"]["code"]
        == "invalid_request"
    )
    assert (
        post(client, "/v1/spaces/a%20b/operations/greeting.say").json()["error"]["code"]
        == "invalid_request"
    )
    # A malformed traceparent is ignored, as W3C Trace Context says (decisions Q11).
    bad_trace = post(client, "/v1/spaces/acme/operations/greeting.say", traceparent="zzz")
    assert bad_trace.status_code == 200
    traced = app.events(bad_trace.json()["operationId"])[0]["context"]
    assert traced["traceparent"] is None
    before = app.store.last_position()
    assert (
        client.get("/v1/operations/0190f6c1-0000-7000-8000-000000000000", headers=AUTH).status_code
        == 404
    )
    assert app.store.last_position() == before


def test_openapi_document_is_served(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    assert "/v1/spaces/{space}/operations/{type}" in document["paths"]
    assert "/v1/operations/{operation_id}/events" in document["paths"]


def test_dw_doc_2_depth_up_to_the_limit_is_answered_deeper_is_refused(
    client: TestClient, app: Application
) -> None:
    """Decisions P45: 128 levels in and out; 5,000 (deeper than orjson and the stdlib parser
    go) is 400 invalid_params with nothing journaled."""
    depth = 127  # the body's root object is level 1
    body = b'{"deep": ' + b"[" * depth + b"]" * depth + b"}"
    response = post(client, "/v1/spaces/acme/operations/greeting.say", body)
    assert response.status_code == 200
    events = client.get(f"/v1/operations/{response.json()['operationId']}/events", headers=AUTH)
    assert events.status_code == 200
    assert b"[" * depth + b"]" * depth in events.content
    before = app.store.last_position()
    for depth in (128, 5000):
        body = b'{"deep": ' + b"[" * depth + b"]" * depth + b"}"
        response = post(client, "/v1/spaces/acme/operations/greeting.say", body)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_params"
    assert app.store.last_position() == before


def test_framework_errors_use_the_taxonomy_body(app: Application) -> None:
    @app.operation("bug.here")
    def bug(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        return None

    api = create_http_app(app, TOKEN)

    @api.get("/v1/boom")
    def boom() -> None:
        raise RuntimeError("secret internals")

    with TestClient(api, raise_server_exceptions=False) as test_client:
        missing = test_client.get("/v1/nothing-here", headers=AUTH)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        wrong = test_client.delete("/v1/operations/x", headers=AUTH)
        assert wrong.status_code == 405
        assert wrong.json()["error"]["code"] == "invalid_request"
        crash = test_client.get("/v1/boom")
        assert crash.status_code == 500
        assert crash.json()["error"]["code"] == "internal_error"
        assert "secret" not in crash.text


def test_a_cached_principal_is_authenticated_without_a_thread_hop(
    client: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller dependency reads the access cache on the event loop; only a cache miss
    (a store read) goes to the thread pool, and a revoked token is still refused at once."""
    from starlette.concurrency import run_in_threadpool

    from domain.access import Role
    from domain.context import Actor

    actor = Actor("ops", "cli")
    app.access.create_principal("ana", app.access_context(actor, "acme"))
    app.access.grant("ana", "acme", Role.OPERATOR, app.access_context(actor, "acme"))
    token, record = app.access.issue_token("ana", app.access_context(actor, "acme"))
    lookups: list[str] = []

    async def counted(function: Any, *args: Any) -> Any:
        lookups.append(function.__name__)
        return await run_in_threadpool(function, *args)

    monkeypatch.setattr("blackops.http.auth.run_in_threadpool", counted)
    as_ana = {"Authorization": f"Bearer {token}", "Prefer": "respond-async"}
    for _ in range(3):
        answer = client.post("/v1/spaces/acme/operations/greeting.say", headers=as_ana)
        assert answer.status_code == 202, answer.text
    assert lookups == ["authenticate"]  # the first request only: the cache had no entry
    assert client.post("/v1/spaces/acme/operations/greeting.say", headers=AUTH).status_code == 200
    assert lookups == ["authenticate"]  # the system token needs no look-up either
    app.access.revoke_token("ana", record["tokenId"], app.access_context(actor, "acme"))
    refused = client.post("/v1/spaces/acme/operations/greeting.say", headers=as_ana)
    assert refused.status_code == 401
