"""Decisions P45: documents nest at most MAX_DEPTH levels, on every surface, before anything
is recorded; the journal holds nothing deeper; and the per-Space journal view reads each
line's tenant without recursion, so a line journaled before the limit existed (deeper than
any parser's recursion) never breaks it. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import spaces
from fastapi.testclient import TestClient

from blackops import Application, BlackOpsError, ExecutionContext
from blackops.http.app import create_http_app
from blackops.jsonbody import parse_document
from blackops.testing import FakeClock
from domain import documents
from domain.documents import ENVELOPE_MAX_DEPTH, MAX_DEPTH, DocumentError
from domain.events import NewEvent
from domain.json_text import load_canonical
from journal.store import Append

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
HUGE = 100_000


def nested(depth: int) -> dict[str, Any]:
    """A document of exactly ``depth`` levels: the root and ``depth - 1`` lists."""
    inner: list[Any] = []
    for _ in range(depth - 2):
        inner = [inner]
    return {"deep": inner} if depth > 1 else {}


def nested_text(depth: int) -> bytes:
    return b'{"deep": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def depth_of(value: Any) -> int:
    """Levels of nested objects and arrays, counted without recursion."""
    level, depth = [value], 0
    while any(type(item) in (dict, list) for item in level):
        depth += 1
        level = gc.get_referents(*[item for item in level if type(item) in (dict, list)])
    return depth


def deepest_record(app: Application) -> int:
    rows = app.store.read_raw_after(0, 10_000)
    return max((depth_of(load_canonical(row.state)) for row in rows), default=0)


class Echo:
    """Returns its params; a step returns what the event asks for."""

    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        return event.params


class DeepStep:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        await step.do("deep", lambda: nested(MAX_DEPTH + 1))
        return {}


def test_the_limit_is_128_with_room_for_the_journal_envelope() -> None:
    assert MAX_DEPTH == 128
    assert MAX_DEPTH < ENVELOPE_MAX_DEPTH < 254  # every record stays within orjson's reach
    assert depth_of(nested(MAX_DEPTH)) == MAX_DEPTH


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 255, 1025, HUGE])
def test_json_text_deeper_than_the_limit_is_refused(depth: int) -> None:
    with pytest.raises(DocumentError) as caught:
        parse_document(nested_text(depth))
    assert caught.value.code == "invalid_params"
    assert "deeper than 128 levels" in caught.value.message
    assert depth_of(parse_document(nested_text(MAX_DEPTH))) == MAX_DEPTH


def test_inline_and_deferred_params_deeper_than_the_limit_record_nothing(
    app: Application,
) -> None:
    @app.operation("deep.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return params

    for depth in (MAX_DEPTH + 1, HUGE):
        with pytest.raises(DocumentError) as caught:
            app.run("deep.echo", nested(depth), actor="t", tenant="acme")
        assert caught.value.code == "invalid_params"
        with pytest.raises(DocumentError):
            app.submit("deep.echo", nested(depth), actor="t", tenant="acme")
    assert app.store.last_position() == 0
    result = app.run("deep.echo", nested(MAX_DEPTH), actor="t", tenant="acme")
    assert result.status == "completed" and depth_of(result.outcome) == MAX_DEPTH
    assert deepest_record(app) <= ENVELOPE_MAX_DEPTH


def test_an_outcome_deeper_than_the_limit_is_never_journaled(app: Application) -> None:
    @app.operation("deep.outcome")
    def deep(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return nested(MAX_DEPTH + 1)

    result = app.run("deep.outcome", {}, actor="t", tenant="acme")
    assert result.status == "failed"
    operation_id = app.submit("deep.outcome", {}, actor="t", tenant="acme")
    asyncio.run(app.work_until_idle())
    assert app.status(operation_id)["status"] in ("failed", "dead_letter")
    assert deepest_record(app) <= MAX_DEPTH


def test_workflow_params_payloads_and_step_results_deeper_than_the_limit(
    app: Application, clock: FakeClock
) -> None:
    binding = app.register_workflow(Echo)
    with pytest.raises(BlackOpsError) as caught:
        asyncio.run(binding.create(id="p", params=nested(MAX_DEPTH + 1)))
    assert caught.value.code == "invalid_params"
    instance = asyncio.run(binding.create(id="ok", params=nested(MAX_DEPTH)))
    with pytest.raises(BlackOpsError) as refused:
        asyncio.run(instance.send_event(type="t", payload=nested(HUGE)))
    assert refused.value.code == "invalid_params"
    asyncio.run(app.work_until_idle())
    assert asyncio.run(instance.status())["status"] == "complete"
    deep = asyncio.run(app.register_workflow(DeepStep).create(id="s"))
    for _ in range(50):  # D9: not a document, so the attempt failed; retries until errored
        asyncio.run(app.work_until_idle())
        if asyncio.run(deep.status())["status"] == "errored":
            break
        clock.advance(3600)
    assert asyncio.run(deep.status())["status"] == "errored"
    assert deepest_record(app) <= ENVELOPE_MAX_DEPTH


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    @app.operation("greeting.say")
    def say(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"space": ctx.tenant}

    app.register_workflow(Echo, space="acme")
    spaces(app, "acme", "globex")
    with TestClient(create_http_app(app, TOKEN)) as test_client:
        yield test_client


def test_http_bodies_deeper_than_the_limit_are_400_and_journal_nothing(
    client: TestClient, app: Application
) -> None:
    """The issue's case: a 100,000-deep Inline body was refused but still journaled, and every
    Space's journal view then answered 500."""
    say = "/v1/spaces/acme/operations/greeting.say"
    instances = "/v1/spaces/acme/workflows/Echo/instances"
    before = app.store.last_position()
    for body in (nested_text(MAX_DEPTH + 1), nested_text(HUGE)):
        for path, headers in ((say, {}), (say, {"Prefer": "respond-async"})):
            response = client.post(path, content=body, headers={**AUTH, **headers})
            assert response.status_code == 400
            assert response.json()["error"]["code"] == "invalid_params"
        params = b'{"id": "i", "params": ' + body + b"}"
        assert client.post(instances, content=params, headers=AUTH).status_code == 400
    assert app.store.last_position() == before
    assert client.post(say, content=nested_text(MAX_DEPTH), headers=AUTH).status_code == 200
    created = client.post(instances, content=b'{"id": "i"}', headers=AUTH)
    assert created.status_code == 201
    event = b'{"type": "t", "payload": ' + nested_text(HUGE) + b"}"
    assert client.post(f"{instances}/i/events", content=event, headers=AUTH).status_code == 400
    for space in ("acme", "globex"):
        assert client.get(f"/v1/spaces/{space}/journal", headers=AUTH).status_code == 200


def test_a_line_journaled_before_the_limit_never_breaks_the_space_view(
    client: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record deeper than every parser's recursion, written straight into the store as
    before the limit existed (no depth check on the envelope either): the view answers 200
    for every Space and shows each Space its own lines, the deep one included."""
    say = "/v1/spaces/acme/operations/greeting.say"
    assert client.post(say, content=b"{}", headers=AUTH).status_code == 200
    with monkeypatch.context() as before_the_limit:
        before_the_limit.setattr(documents, "_ENVELOPE", documents._UNLIMITED)
        context = {"tenant": "acme", "actor": {"id": "old", "kind": "principal"}}
        deep = NewEvent("legacy.deep", "2026-11-30T09:00:00.000000Z", context, nested(HUGE))
        app.store.append(Append("legacy-deep", 0, [deep]))
    with pytest.raises(DocumentError):  # today the envelope refuses it
        app.store.append(Append("legacy-deep-2", 0, [deep]))
    assert client.post(say, content=b'{"after": 1}', headers=AUTH).status_code == 200
    total = len(app.store.read_raw_after(0, 1000))
    everything = client.get("/v1/journal", headers=AUTH)
    assert everything.status_code == 200 and len(everything.content.splitlines()) == total
    acme = client.get("/v1/spaces/acme/journal", headers=AUTH)
    assert acme.status_code == 200
    lines = acme.content.splitlines()
    of_globex = [line for line in everything.content.splitlines() if b'"globex"' in line]
    assert len(of_globex) == 1  # the Space's creation; every other line is acme's
    assert len(lines) == total - 1 > 5  # both runs' lines and the deep one
    assert [line for line in lines if b'"type":"legacy.deep"' in line] == [
        line for line in everything.content.splitlines() if b"legacy.deep" in line
    ]
    globex = client.get("/v1/spaces/globex/journal", headers=AUTH)
    assert globex.status_code == 200 and globex.content.splitlines() == of_globex
