"""The client refuses what the in-process API refuses, where the server would answer
something else (found by a defect hunt, stop 36): an empty Space or tenant was read as "not
given" (a run in the client's default Space; ``space=""`` read the whole journal, every
Space's lines, with a system token); a misspelled filter was sent, ignored by the server,
and answered the whole listing; and a typed operation's params refused over HTTP raised a
class ``except InvalidRequest`` missed, where in process it is an InvalidRequest."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from blackops import Application, DocumentError, ExecutionContext
from blackops.client import AsyncClient, Client
from blackops.client.calls import INSTANCE_FILTERS, OPERATION_FILTERS
from blackops.http.app import create_http_app
from domain.errors import InvalidRequest

TOKEN = "systok"


class Invoice(BaseModel):
    amount: int


class Idle:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> None:
        return None


@pytest.fixture
def served(store_url: str) -> Iterator[tuple[Application, TestClient]]:
    app = Application(store_url)
    for space in ("default", "acme"):
        app.access.create_space(space, app.access_context({"id": "root", "kind": "system"}, space))
    app.operation("t.echo")(lambda ctx, params: params)

    @app.operation("t.invoice")
    def invoice(ctx: ExecutionContext, params: Invoice) -> dict[str, Any]:
        return {}

    app.register_workflow(Idle)
    for space in ("default", "acme"):
        app.run("t.echo", {"space": space}, actor="t", tenant=space)
    try:
        with TestClient(create_http_app(app, TOKEN)) as http:
            yield app, http
    finally:
        app.close()


def _client(http: TestClient) -> Client:
    return Client("http://testserver", TOKEN, transport=http._transport)


def test_an_empty_space_or_tenant_is_refused_as_in_process(
    served: tuple[Application, TestClient], tmp_path: Any
) -> None:
    app, http = served
    with pytest.raises(InvalidRequest):
        app.run("t.echo", {}, actor="t", tenant="")
    before = len(app.store.read_raw_after(0, 10_000))
    with _client(http) as client:
        for call in (
            lambda: client.run("t.echo", {}, tenant=""),
            lambda: client.submit("t.echo", {}, tenant=""),
            lambda: client.journal(space=""),
            lambda: next(iter(client.stream(space="", reconnect=False, max_seconds=1))),
            lambda: client.export(str(tmp_path / "x.jsonl"), space=""),
            lambda: client.workflow("Idle", space="").get("one"),
            lambda: client.list_instances("Idle", space=""),
            lambda: client.instance_counts("Idle", space=""),
        ):
            with pytest.raises(InvalidRequest):
                call()
    assert len(app.store.read_raw_after(0, 10_000)) == before  # nothing run or recorded
    assert not (tmp_path / "x.jsonl").exists()

    async def asynchronously() -> None:
        transport = httpx.ASGITransport(app=http.app)
        async with AsyncClient("http://testserver", TOKEN, transport=transport) as client:
            with pytest.raises(InvalidRequest):
                await client.run("t.echo", {}, tenant="")
            with pytest.raises(InvalidRequest):
                await client.journal(space="")
            with pytest.raises(InvalidRequest):
                await client.list_instances("Idle", space="")

    asyncio.run(asynchronously())


def test_a_filter_the_listing_has_not_is_a_type_error_as_in_process(
    served: tuple[Application, TestClient],
) -> None:
    app, http = served
    with pytest.raises(TypeError):
        app.list_operations(tennant="acme")
    with _client(http) as client:
        with pytest.raises(TypeError, match="tennant"):
            client.list_operations(tennant="acme")
        with pytest.raises(TypeError, match="statuss"):
            client.list_instances("Idle", statuss="complete")
        acme = client.list_operations(tenant="acme")["items"]
        assert acme and {item["tenant"] for item in acme} == {"acme"}

    async def asynchronously() -> None:
        transport = httpx.ASGITransport(app=http.app)
        async with AsyncClient("http://testserver", TOKEN, transport=transport) as client:
            with pytest.raises(TypeError):
                await client.list_operations(tenatn="acme")

    asyncio.run(asynchronously())


def test_the_client_knows_exactly_the_filters_the_routes_take(
    served: tuple[Application, TestClient],
) -> None:
    paths = served[1].get("/openapi.json").json()["paths"]

    def query_names(path: str) -> set[str]:
        return {p["name"] for p in paths[path]["get"]["parameters"] if p["in"] == "query"}

    assert query_names("/v1/operations") == set(OPERATION_FILTERS)
    assert query_names("/v1/spaces/{space}/workflows/{uid}/instances") == set(INSTANCE_FILTERS)


def test_refused_params_are_an_invalid_request_in_process_and_over_http(
    served: tuple[Application, TestClient],
) -> None:
    app, http = served
    with pytest.raises(InvalidRequest) as in_process:
        app.submit("t.invoice", {"amount": "nope"}, actor="t", tenant="default")
    with _client(http) as client, pytest.raises(InvalidRequest) as over_http:
        client.submit("t.invoice", {"amount": "nope"})
    assert in_process.value.code == over_http.value.code == "invalid_params"
    assert isinstance(over_http.value, DocumentError)  # what it is over HTTP, still
