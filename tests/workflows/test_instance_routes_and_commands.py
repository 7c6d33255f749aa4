"""Workflow instance surfaces on SQLite and PostgreSQL: the HTTP routes under
``/v1/spaces/{space}/workflows/{uid}/instances`` and the ``blackops wf`` commands.

Contexts run in this process with ``work_until_idle()`` on the fake clock; the CLI runs
as real processes, and one test drives the example app through ``blackops serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from conftest import spaces
from fastapi.testclient import TestClient

from blackops import Application, WorkflowEvent
from blackops.http.app import create_http_app
from blackops.testing import FakeClock
from domain.context import Actor
from journal.instances import instance_stream
from journal.store import EventStore

ROOT = Path(__file__).resolve().parents[2]
BLACKOPS = [sys.executable, "-m", "blackops.cli.main"]
TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASE = "/v1/spaces/acme/workflows"
DEV = {"id": "dev", "kind": "token"}
MIB = 1_048_576


# -- workflows under test ------------------------------------------------------------------


class Approval:
    """Sleeps a minute, then waits an hour for ``approved``."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Any) -> dict[str, Any]:
        await step.sleep("cool off", 60)
        answer = await step.wait_for_event("decision", type="approved", timeout_seconds=3600)
        return {"params": event.params, "by": answer["by"] if answer else None}


class Thrower:
    def __init__(self, env: Any) -> None:
        self.env = env

    def run(self, event: WorkflowEvent, step: Any) -> None:
        raise ValueError("no such order")


class StepFails:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Any) -> None:
        await step.do("charge", self.charge)

    @staticmethod
    def charge() -> None:
        raise RuntimeError("card declined")


class Quiet:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Any) -> None:
        return None


class Hidden:
    """Registered in another Space: ``acme`` must not see it."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Any) -> None:
        return None


# -- helpers -------------------------------------------------------------------------------


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    for cls in (Approval, Thrower, StepFails, Quiet):
        app.register_workflow(cls, space="acme")
    app.register_workflow(Hidden, space="other")
    spaces(app, "acme", "other", "default")
    with TestClient(create_http_app(app, TOKEN)) as test_client:
        yield test_client


def drive(app: Application) -> None:
    asyncio.run(app.work_until_idle())


def segment(instance_id: str) -> str:
    """One percent-encoded path segment; ``.`` and ``..`` too, or clients drop them."""
    encoded = quote(instance_id, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


def instances(uid: str = "Approval", space: str = "acme") -> str:
    return f"/v1/spaces/{space}/workflows/{uid}/instances"


def at(instance_id: str, uid: str = "Approval", action: str = "") -> str:
    return f"{instances(uid)}/{segment(instance_id)}{'/' + action if action else ''}"


def post(client: TestClient, path: str, body: bytes | str | None = None) -> httpx.Response:
    headers = {**AUTH, "content-type": "application/json"}
    response: httpx.Response = client.post(path, content=body or b"", headers=headers)
    return response


def send(client: TestClient, path: str, document: dict[str, Any]) -> httpx.Response:
    return post(client, path, json.dumps(document))


def error_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    return str(body["error"]["code"])


def create(client: TestClient, instance_id: str, uid: str = "Approval", **more: Any) -> None:
    response = send(client, instances(uid), {"id": instance_id, **more})
    assert response.status_code == 201, response.text


def status(client: TestClient, instance_id: str, uid: str = "Approval") -> dict[str, Any]:
    response = client.get(at(instance_id, uid), headers=AUTH)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def actors(app: Application, uid: str, instance_id: str) -> list[dict[str, Any]]:
    """Who each event of the instance's stream records as its actor."""
    events = app.store.read_stream(instance_stream(uid, instance_id))
    return [event.context["actor"] for event in events]


# -- HTTP: create, get, status -------------------------------------------------------------


def test_dw_inst_1_create_answers_201_queued_with_location(
    client: TestClient, app: Application
) -> None:
    """DW-INST-1, decisions D2/D5: 201 ``{id, status: queued}``, a Location to GET, a UUID
    when the id is left out (empty body or ``{}``), the token's actor recorded."""
    response = send(client, instances(), {"id": "o-1", "params": {"order": "A-1"}})
    assert response.status_code == 201
    assert response.json() == {"id": "o-1", "status": "queued"}
    location = response.headers["location"]
    assert location == f"{BASE}/Approval/instances/o-1"
    assert client.get(location, headers=AUTH).json() == {"status": "queued"}
    assert actors(app, "Approval", "o-1") == [DEV]

    for body in (None, "{}", '{"params": {}}'):
        generated = post(client, instances(), body)
        assert generated.status_code == 201
        new_id = generated.json()["id"]
        assert str(uuid.UUID(new_id)) == new_id
        assert client.get(generated.headers["location"], headers=AUTH).json() == {
            "status": "queued"
        }


def test_dw_inst_2_a_retained_id_is_409_instance_exists_and_writes_nothing(
    client: TestClient, app: Application
) -> None:
    """DW-INST-2: a second create under the same id, with any params, is refused."""
    create(client, "o-1", params={"n": 1})
    before = app.store.last_position()
    for body in ({"id": "o-1"}, {"id": "o-1", "params": {"n": 2}}):
        response = send(client, instances(), body)
        assert response.status_code == 409 and error_of(response) == "instance_exists"
    # Still taken once it ended (retention, DW-RET-1).
    assert post(client, at("o-1", action="terminate")).status_code == 200
    after_terminate = app.store.last_position()
    assert error_of(send(client, instances(), {"id": "o-1"})) == "instance_exists"
    assert app.store.last_position() == after_terminate > before


def test_dw_inst_3_dw_evt_2_unknown_instances_are_404_unknown_instance(
    client: TestClient, app: Application
) -> None:
    """DW-INST-3 / DW-EVT-2: get, events and terminate of an unknown id, even an id of
    257 characters that no instance can have; the same id under another workflow
    (decisions D17) is another instance."""
    create(client, "o-1")
    before = app.store.last_position()
    for instance_id, uid in (("nope", "Approval"), ("x" * 257, "Approval"), ("o-1", "Quiet")):
        for response in (
            client.get(at(instance_id, uid), headers=AUTH),
            send(client, at(instance_id, uid, "events"), {"type": "approved"}),
            post(client, at(instance_id, uid, "terminate")),
        ):
            assert response.status_code == 404 and error_of(response) == "unknown_instance"
    assert app.store.last_position() == before


def test_dw_inst_4_dw_evt_1_statuses_and_the_complete_shape(
    client: TestClient, app: Application, clock: FakeClock
) -> None:
    """DW-INST-4, DW-EVT-1: queued → sleeping → waiting → complete over HTTP; an event
    answers 202 with its per-instance sequence; complete is exactly ``{status, output}``."""
    create(client, "o-1", params={"order": "A-1"})
    assert status(client, "o-1") == {"status": "queued"}
    drive(app)
    assert status(client, "o-1") == {"status": "sleeping"}
    clock.advance(60)
    drive(app)
    assert status(client, "o-1") == {"status": "waiting"}

    other = send(client, at("o-1", action="events"), {"type": "other"})
    assert other.status_code == 202
    assert other.json() == {"id": "o-1", "type": "other", "sequence": 1}
    approved = send(
        client, at("o-1", action="events"), {"type": "approved", "payload": {"by": "ana"}}
    )
    assert approved.status_code == 202
    assert approved.json() == {"id": "o-1", "type": "approved", "sequence": 2}
    assert actors(app, "Approval", "o-1")[-1] == DEV
    drive(app)
    assert status(client, "o-1") == {
        "status": "complete",
        "output": {"params": {"order": "A-1"}, "by": "ana"},
    }


def test_dw_inst_4_dw_inst_5_errored_and_empty_complete_shapes(
    client: TestClient, app: Application
) -> None:
    """DW-INST-4 / DW-INST-5 / decisions D18, D20: ``error`` only when errored, with a
    spec reason; a run returning None is complete without ``output``."""
    for uid in ("Thrower", "StepFails", "Quiet"):
        create(client, "i-1", uid)
    drive(app)
    thrown = status(client, "i-1", "Thrower")
    assert thrown == {
        "status": "errored",
        "error": {"reason": "run_threw", "message": thrown["error"]["message"]},
    }
    assert "no such order" in thrown["error"]["message"]
    failed = status(client, "i-1", "StepFails")
    assert set(failed) == {"status", "error"} and failed["status"] == "errored"
    assert failed["error"]["reason"] == "step_failed"
    assert set(failed["error"]) <= {"reason", "message"}
    assert status(client, "i-1", "Quiet") == {"status": "complete"}


# -- HTTP: events and terminate ------------------------------------------------------------


def test_dw_evt_2_an_event_for_a_terminal_instance_is_409_instance_terminal(
    client: TestClient, app: Application
) -> None:
    """DW-EVT-2: complete, errored and terminated instances take no event."""
    create(client, "done", "Quiet")
    create(client, "threw", "Thrower")
    create(client, "stopped")
    drive(app)
    assert post(client, at("stopped", action="terminate")).status_code == 200
    before = app.store.last_position()
    for instance_id, uid in (("done", "Quiet"), ("threw", "Thrower"), ("stopped", "Approval")):
        response = send(client, at(instance_id, uid, "events"), {"type": "approved"})
        assert response.status_code == 409 and error_of(response) == "instance_terminal"
    assert app.store.last_position() == before


def test_dw_evt_3_a_full_queue_is_429_event_queue_full(
    client: TestClient, app: Application
) -> None:
    """DW-EVT-3: 1024 unconsumed events, or 1,048,576 stored bytes, and no more."""
    create(client, "many")
    resource = app.workflow("Approval").resource
    for _ in range(1024):
        app.instances.send_event(resource, "many", "note", None, Actor("t", "service"))
    before = app.store.last_position()
    refused = send(client, at("many", action="events"), {"type": "note"})
    assert refused.status_code == 429 and error_of(refused) == "event_queue_full"
    assert app.store.last_position() == before

    create(client, "heavy")
    big = {"type": "note", "payload": {"blob": "x" * (MIB // 2)}}
    assert send(client, at("heavy", action="events"), big).status_code == 202
    before = app.store.last_position()
    too_much = send(client, at("heavy", action="events"), big)
    assert too_much.status_code == 429 and error_of(too_much) == "event_queue_full"
    assert app.store.last_position() == before


def test_dw_term_1_terminate_answers_200_once_stopped(client: TestClient, app: Application) -> None:
    """DW-TERM-1 / decisions D13: a queued instance ends at once, a sleeping one too (no
    context is running); terminate again succeeds; an instance that had already ended
    keeps its status (decisions P41); empty body or ``{}``."""
    create(client, "queued")
    response = post(client, at("queued", action="terminate"))
    assert response.status_code == 200
    assert response.json() == {"id": "queued", "status": "terminated"}
    assert status(client, "queued") == {"status": "terminated"}
    assert actors(app, "Approval", "queued")[-1] == DEV
    drive(app)  # no context ever runs for it
    assert status(client, "queued") == {"status": "terminated"}

    create(client, "sleeping")
    drive(app)
    assert status(client, "sleeping") == {"status": "sleeping"}
    again = post(client, at("sleeping", action="terminate"), "{}")
    assert again.json() == {"id": "sleeping", "status": "terminated"}

    create(client, "done", "Quiet")
    drive(app)
    before = app.store.last_position()
    repeated = post(client, at("queued", action="terminate"), " {} ")
    assert repeated.status_code == 200 and repeated.json()["status"] == "terminated"
    ended = post(client, at("done", "Quiet", "terminate"))
    assert ended.status_code == 200 and ended.json() == {"id": "done", "status": "complete"}
    assert status(client, "done", "Quiet") == {"status": "complete"}
    assert app.store.last_position() == before  # an ended instance is left as it is


# -- HTTP: hostile bodies, spaces, ids, auth -----------------------------------------------

_TOO_MANY_KEYS = "{" + ",".join(f'"k{i}": {i}' for i in range(1025)) + "}"
_TOO_BIG = '{"blob": "' + "x" * MIB + '"}'

HOSTILE: list[tuple[str, bytes, int, str]] = [
    # create: the envelope is invalid_request; params documents as everywhere (P13, DW-DOC-5)
    ("create", b"[]", 400, "invalid_request"),
    ("create", b"null", 400, "invalid_request"),
    ("create", b'"o-1"', 400, "invalid_request"),
    ("create", b"7", 400, "invalid_request"),
    ("create", b'{"id": "o-9", "extra": 1}', 400, "invalid_request"),
    ("create", b'{"instanceId": "o-9"}', 400, "invalid_request"),
    ("create", b'{"id": null}', 400, "invalid_request"),
    ("create", b'{"id": 7}', 400, "invalid_request"),
    ("create", b'{"id": ["o-9"]}', 400, "invalid_request"),
    ("create", b'{"id": ""}', 400, "invalid_request"),
    ("create", b'{"id": "' + b"x" * 257 + b'"}', 400, "invalid_request"),
    ("create", b'{"id": "a\\ud800"}', 400, "invalid_request"),
    ("create", b'{"params": null}', 400, "invalid_params"),
    ("create", b'{"params": [1]}', 400, "invalid_params"),
    ("create", b'{"params": "x"}', 400, "invalid_params"),
    ("create", b'{"params": {"a": NaN}}', 400, "invalid_params"),
    ("create", b'{"params": {"a": 1, "a": 2}}', 400, "invalid_params"),
    ("create", b'{"params": {"a": 9007199254740992}}', 400, "invalid_params"),
    ("create", b'{"params": {"a": "\\udc00"}}', 400, "invalid_params"),
    ("create", b'{"params": {"a": "\xff"}}', 400, "invalid_params"),
    ("create", b'{"params": {"a": ', 400, "invalid_params"),
    ("create", b'{"params": ' + _TOO_MANY_KEYS.encode() + b"}", 413, "document_too_large"),
    ("create", b'{"params": ' + _TOO_BIG.encode() + b"}", 413, "document_too_large"),
    ("create", b" " * (4 * MIB + 1), 413, "document_too_large"),
    # events
    ("events", b"", 400, "invalid_request"),
    ("events", b"{}", 400, "invalid_request"),
    ("events", b'[{"type": "approved"}]', 400, "invalid_request"),
    ("events", b'{"type": null}', 400, "invalid_request"),
    ("events", b'{"type": ""}', 400, "invalid_request"),
    ("events", b'{"type": 7}', 400, "invalid_request"),
    ("events", b'{"type": "' + b"t" * 257 + b'"}', 400, "invalid_request"),
    ("events", b'{"type": "approved", "by": "ana"}', 400, "invalid_request"),
    ("events", b'{"type": "approved", "payload": null}', 400, "invalid_params"),
    ("events", b'{"type": "approved", "payload": [1]}', 400, "invalid_params"),
    ("events", b'{"type": "approved", "payload": {"a": Infinity}}', 400, "invalid_params"),
    (
        "events",
        b'{"type": "approved", "payload": ' + _TOO_BIG.encode() + b"}",
        413,
        "document_too_large",
    ),
    # terminate carries no document: anything but empty / {} is invalid_request
    ("terminate", b'{"force": true}', 400, "invalid_request"),
    ("terminate", b"[]", 400, "invalid_request"),
    ("terminate", b"null", 400, "invalid_request"),
    ("terminate", b"{", 400, "invalid_request"),
    ("terminate", b'{"a": 1, "a": 1}', 400, "invalid_request"),
]


@pytest.mark.parametrize(("route", "body", "status_code", "code"), HOSTILE)
def test_dw_doc_4_dw_doc_5_hostile_bodies_are_refused_and_write_nothing(
    client: TestClient, app: Application, route: str, body: bytes, status_code: int, code: str
) -> None:
    """DW-DOC-4 (``null`` is not "none"), DW-DOC-5 (invalid_params vs document_too_large,
    unknown input keys refused), DW-INST-1 / DW-EVT-1 (1-256 characters): nothing is
    written, and the instance is untouched."""
    create(client, "o-1")
    before = app.store.last_position()
    path = instances() if route == "create" else at("o-1", action=route)
    response = post(client, path, body)
    assert response.status_code == status_code, response.text
    assert error_of(response) == code
    assert app.store.last_position() == before
    assert status(client, "o-1") == {"status": "queued"}


def test_another_spaces_workflow_is_404_not_found_and_leaks_nothing(
    client: TestClient, app: Application
) -> None:
    """A workflow of Space ``acme`` read through ``other`` (and ``other``'s through
    ``acme``) answers exactly like a uid that exists nowhere."""
    create(client, "o-1")
    before = app.store.last_position()

    def answer(space: str, uid: str, suffix: str) -> httpx.Response:
        path = f"/v1/spaces/{space}/workflows/{uid}/instances{suffix}"
        if suffix in ("", "/o-1/events", "/o-1/terminate"):
            return post(client, path, '{"type": "approved"}' if "events" in suffix else None)
        response: httpx.Response = client.get(path, headers=AUTH)
        return response

    for suffix in ("", "/o-1", "/o-1/events", "/o-1/terminate"):
        for space, uid in (("other", "Approval"), ("acme", "Hidden"), ("acme", "Nowhere")):
            response = answer(space, uid, suffix)
            assert response.status_code == 404
            assert response.json() == {
                "error": {"code": "not_found", "message": f"no workflow {uid!r} in space {space!r}"}
            }
    malformed = client.get("/v1/spaces/a%20b/workflows/Approval/instances/o-1", headers=AUTH)
    assert malformed.status_code == 400 and error_of(malformed) == "invalid_request"
    assert app.store.last_position() == before
    assert status(client, "o-1") == {"status": "queued"}


ODD_IDS = [
    "ünïcödé 🚀",
    "order A-1",
    " ",
    "a/b",
    "/",
    "a%2Fb",
    "50%",
    "%41",
    "?x=1&y=2#frag",
    ".",
    "..",
    "...",
    "+;,=:@!$'()*",
    "x" * 256,
    "🚀" * 256,
]


@pytest.mark.parametrize("instance_id", ODD_IDS)
def test_dw_inst_1_any_scalar_values_round_trip_percent_encoded(
    client: TestClient, app: Application, instance_id: str
) -> None:
    """DW-INST-1 / decisions D4, P42: an id of 1-256 scalar values, spaces, ``/``, ``%``
    and dots included, is one percent-encoded path segment on every route."""
    response = send(client, instances(), {"id": instance_id})
    assert response.status_code == 201, response.text
    assert response.json()["id"] == instance_id
    assert response.headers["location"] == at(instance_id)
    assert status(client, instance_id) == {"status": "queued"}
    event = send(client, at(instance_id, action="events"), {"type": "ünï/type %2F"})
    assert event.status_code == 202
    assert event.json() == {"id": instance_id, "type": "ünï/type %2F", "sequence": 1}
    stopped = post(client, at(instance_id, action="terminate"))
    assert stopped.json() == {"id": instance_id, "status": "terminated"}
    assert app.instances.status(app.workflow("Approval").resource, instance_id) == {
        "status": "terminated"
    }


def test_p42_paths_that_are_not_one_utf8_segment(client: TestClient, app: Application) -> None:
    """Decisions P42: an unencoded ``/`` is not part of an id (no such route), and a
    segment that is not UTF-8 is refused rather than read as U+FFFD."""
    create(client, "a/b")
    create(client, "\ufffd")
    before = app.store.last_position()
    unencoded = client.get(f"{instances()}/a/b", headers=AUTH)
    assert unencoded.status_code == 404 and error_of(unencoded) == "not_found"
    for response in (
        client.get(f"{instances()}/%FF", headers=AUTH),
        post(client, f"{instances()}/%FF/events", '{"type": "t"}'),
        post(client, f"{instances()}/%C3/terminate"),
    ):
        assert response.status_code == 400 and error_of(response) == "invalid_request"
    assert status(client, "\ufffd") == {"status": "queued"}
    assert app.store.last_position() == before


def test_instance_routes_need_the_token(client: TestClient, app: Application) -> None:
    create(client, "o-1")
    before = app.store.last_position()
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        for response in (
            client.post(instances(), content=b'{"id": "o-2"}', headers=headers),
            client.get(at("o-1"), headers=headers),
            client.post(at("o-1", action="events"), content=b'{"type": "t"}', headers=headers),
            client.post(at("o-1", action="terminate"), headers=headers),
        ):
            assert response.status_code == 401 and error_of(response) == "unauthorized"
    assert app.store.last_position() == before
    assert status(client, "o-1") == {"status": "queued"}


def test_openapi_documents_the_instance_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    route = "/v1/spaces/{space}/workflows/{uid}/instances"
    assert "post" in paths[route]
    assert "get" in paths[route + "/{instance_id}"]
    assert "post" in paths[route + "/{instance_id}/events"]
    assert "post" in paths[route + "/{instance_id}/terminate"]


def test_dw_term_2_an_unreachable_store_is_503_backend_unavailable() -> None:
    """DW-TERM-2: every instance route answers 503 when the journal cannot be reached."""
    application = Application("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1")
    application.register_workflow(Approval, space="acme")
    with TestClient(create_http_app(application, TOKEN)) as unreachable:
        for response in (
            send(unreachable, instances(), {"id": "o-1"}),
            unreachable.get(at("o-1"), headers=AUTH),
            send(unreachable, at("o-1", action="events"), {"type": "approved"}),
            post(unreachable, at("o-1", action="terminate")),
        ):
            assert response.status_code == 503 and error_of(response) == "backend_unavailable"


# -- CLI -----------------------------------------------------------------------------------


def wf(*args: str, store: str) -> subprocess.CompletedProcess[str]:
    """``blackops wf ...`` on the example app, as a user runs it."""
    return subprocess.run(
        [*BLACKOPS, "wf", *args, "--app", "examples.shop:app", "--store", store],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "USER": "ops"},
    )


def one_json(done: subprocess.CompletedProcess[str]) -> Any:
    """``--json`` prints exactly one document."""
    return json.loads(done.stdout)


def position(store: str) -> int:
    with EventStore(store) as journal:
        return journal.last_position()


def test_wf_cli_list_create_send_terminate(store_url: str) -> None:
    """DW-INST-1/2/3, DW-EVT-1/2, DW-TERM-1 on the CLI: one JSON document each, exit 0 on
    success and 1 with the taxonomy code; the actor is the operator (kind ``cli``)."""
    listed = wf("list", "--json", store=store_url)
    assert listed.returncode == 0, listed.stderr
    assert one_json(listed) == {
        "workflows": [{"uid": "OrderApproval", "space": "default", "className": "OrderApproval"}]
    }
    assert "OrderApproval" in wf("list", store=store_url).stdout

    odd = "order ü/1 %41"
    params = '{"order": "A-1", "amount": 42}'
    created = wf(
        "create",
        "OrderApproval",
        "--id",
        odd,
        "--params",
        params,
        "--json",
        "--actor",
        "ana",
        store=store_url,
    )
    assert created.returncode == 0, created.stderr
    assert one_json(created) == {"id": odd, "status": "queued"}
    generated = wf("create", "OrderApproval", store=store_url)
    assert generated.returncode == 0 and uuid.UUID(generated.stdout.strip())

    before = position(store_url)
    for args, code in (
        (("create", "OrderApproval", "--id", odd), "instance_exists"),
        (("create", "OrderApproval", "--params", '{"a": NaN}'), "invalid_params"),
        (("create", "OrderApproval", "--params", "null"), "invalid_params"),
        (("create", "OrderApproval", "--id", ""), "invalid_request"),
        (("create", "Nowhere"), "not_found"),
        (("status", "OrderApproval", "nope"), "unknown_instance"),
        (("send", "OrderApproval", "nope", "--type", "approval"), "unknown_instance"),
        (("send", "OrderApproval", odd, "--type", ""), "invalid_request"),
        (("send", "OrderApproval", odd, "--type", "t", "--payload", "[1]"), "invalid_params"),
        (("terminate", "OrderApproval", "nope"), "unknown_instance"),
    ):
        refused = wf(*args, "--json", store=store_url)
        assert refused.returncode == 1, (args, refused.stderr)
        assert one_json(refused)["error"]["code"] == code, args
    assert position(store_url) == before
    human = wf("status", "OrderApproval", "nope", store=store_url)
    assert human.returncode == 1 and "unknown_instance" in human.stderr and human.stdout == ""

    status_json = wf("status", "OrderApproval", odd, "--json", store=store_url)
    assert status_json.returncode == 0 and one_json(status_json) == {"status": "queued"}
    sent = wf(
        "send",
        "OrderApproval",
        odd,
        "--type",
        "approval",
        "--json",
        "--payload",
        '{"approved": true}',
        store=store_url,
    )
    assert sent.returncode == 0, sent.stderr
    assert one_json(sent) == {"id": odd, "type": "approval", "sequence": 1}
    assert "event 2" in wf("send", "OrderApproval", odd, "--type", "note", store=store_url).stdout

    stopped = wf("terminate", "OrderApproval", odd, "--json", store=store_url)
    assert stopped.returncode == 0 and one_json(stopped) == {"id": odd, "status": "terminated"}
    assert wf("status", "OrderApproval", odd, store=store_url).stdout.strip() == "terminated"
    late = wf("send", "OrderApproval", odd, "--type", "approval", "--json", store=store_url)
    assert late.returncode == 1 and one_json(late)["error"]["code"] == "instance_terminal"

    with EventStore(store_url) as journal:
        events = journal.read_stream(instance_stream("OrderApproval", odd))
    actors_seen = [event.context["actor"] for event in events]
    assert actors_seen[0] == {"id": "ana", "kind": "cli"}
    assert actors_seen[1:] == [{"id": "ops", "kind": "cli"}] * (len(events) - 1)


def test_wf_cli_status_of_complete_and_errored_instances(
    app: Application, clock: FakeClock, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-INST-4 / DW-INST-5 on the CLI: ``wf status`` exits 0 with exactly the status()
    shape, for an errored run too; the example workflow runs end to end."""
    monkeypatch.syspath_prepend(str(ROOT))  # the example app, as the CLI imports it
    approvals = app.register_workflow(importlib.import_module("examples.shop").OrderApproval)

    async def run_two() -> None:
        ok = await approvals.create(id="ok", params={"order": "A-1", "amount": 42})
        await approvals.create(id="bad", params={"amount": 1})
        await app.work_until_idle()
        clock.advance(5)  # the cooling-off period
        await app.work_until_idle()
        assert await ok.status() == {"status": "waiting"}
        await ok.send_event(type="approval", payload={"approved": True, "by": "ana"})
        await app.work_until_idle()

    asyncio.run(run_two())
    done = wf("status", "OrderApproval", "ok", "--json", store=store_url)
    assert done.returncode == 0, done.stderr
    assert one_json(done) == {
        "status": "complete",
        "output": {
            "order": "A-1",
            "approved": True,
            "by": "ana",
            "charged": 42,
            "currency": "EUR",
        },
    }
    errored = wf("status", "OrderApproval", "bad", "--json", store=store_url)
    assert errored.returncode == 0
    assert one_json(errored) == {
        "status": "errored",
        "error": {"reason": "run_threw", "message": "KeyError: 'order'"},
    }
    human = wf("status", "OrderApproval", "bad", store=store_url).stdout
    assert human.splitlines() == ["errored", "error   run_threw: KeyError: 'order'"]
    terminated = wf("terminate", "OrderApproval", "ok", "--json", store=store_url)
    assert one_json(terminated) == {"id": "ok", "status": "complete"}  # had ended (P41)


@pytest.mark.parametrize(
    "args",
    [
        ["wf"],
        ["wf", "nope"],
        ["wf", "status", "OrderApproval"],
        ["wf", "send", "OrderApproval", "o-1"],
        ["wf", "terminate", "OrderApproval", "o-1", "--timeout", "0"],
    ],
)
def test_wf_usage_errors_exit_two(args: list[str]) -> None:
    done = subprocess.run([*BLACKOPS, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2


# -- blackops serve ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(check: Any, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@contextlib.contextmanager
def serving(
    app: str, store: str, tmp_path: Path, pythonpath: Path = ROOT
) -> Iterator[tuple[httpx.Client, list[str]]]:
    """``blackops serve --app APP`` on a free port; yields a client with the token and,
    once the server has stopped, its output in the list."""
    port = _free_port()
    env = {
        **os.environ,
        "BLACKOPS_HOME": str(tmp_path / "home"),
        "BLACKOPS_DEV_TOKEN": TOKEN,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(pythonpath)]),
    }
    command = [*BLACKOPS, "serve", "--app", app, "--port", str(port), "--store", store]
    server = subprocess.Popen(
        command, cwd=pythonpath, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=env,
    )  # fmt: skip
    output: list[str] = []
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{base}/openapi.json", timeout=1).status_code == 200
        except httpx.HTTPError:
            return server.poll() is not None  # exited: stop waiting

    try:
        assert _until(up) and server.poll() is None
        with httpx.Client(base_url=base, headers=AUTH, timeout=90) as http:
            yield http, output
    finally:
        server.terminate()
        output.append(server.communicate(timeout=30)[0])


def test_serve_runs_the_example_workflow_end_to_end(tmp_path: Path, store_url: str) -> None:
    """What ``make run`` users do (docs/getting-started.md): on uvicorn with its in-process
    worker, an instance with an odd id sleeps, waits, takes its event and completes."""
    with serving("examples.shop:app", store_url, tmp_path) as (http, output):
        odd = "order 1/ü %41"
        params = {"order": "A-1", "amount": 42, "cool_off_seconds": 1}
        created = http.post(
            "/v1/spaces/default/workflows/OrderApproval/instances",
            json={"id": odd, "params": params},
        )
        assert created.status_code == 201, created.text
        location = created.headers["location"]
        assert location.endswith("/instances/order%201%2F%C3%BC%20%2541")

        def current() -> str:
            return str(http.get(location).json()["status"])

        assert _until(lambda: current() == "waiting")
        event = http.post(
            f"{location}/events",
            json={"type": "approval", "payload": {"approved": True, "by": "bo"}},
        )
        assert event.status_code == 202 and event.json()["sequence"] == 1
        assert _until(lambda: current() == "complete")
        assert http.get(location).json()["output"]["by"] == "bo"
        stopped = http.post(f"{location}/terminate")
        assert stopped.json() == {"id": odd, "status": "complete"}
    assert "workflows OrderApproval" in output[0]


STUCK_APP = """
import os, pathlib, time
from blackops import Application

app = Application()


class Stuck:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        await step.do("forever", self.forever)

    @staticmethod
    def forever():
        pathlib.Path("effect.pid").write_text(str(os.getpid()))
        time.sleep(3600)


app.register_workflow(Stuck, space="acme")
"""


def test_dw_term_1_terminate_over_http_answers_after_the_code_stopped(
    tmp_path: Path, store_url: str
) -> None:
    """DW-TERM-1: with an effect running for ever in the served worker, the terminate
    route answers 200 ``terminated`` only once the process running it is gone."""
    (tmp_path / "stuck.py").write_text(STUCK_APP)
    with serving("stuck:app", store_url, tmp_path, pythonpath=tmp_path) as (http, _):
        created = http.post(f"{instances('Stuck')}", json={"id": "s-1"})
        assert created.status_code == 201, created.text
        marker = tmp_path / "effect.pid"
        assert _until(marker.exists)
        pid = int(_until(marker.read_text))
        assert http.get(at("s-1", "Stuck")).json() == {"status": "running"}
        stopped = http.post(at("s-1", "Stuck", "terminate"))
        assert stopped.status_code == 200
        assert stopped.json() == {"id": "s-1", "status": "terminated"}
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped before the answer
        assert http.get(at("s-1", "Stuck")).json() == {"status": "terminated"}


def test_a_503_names_no_host_port_or_driver_text() -> None:
    """DW-TERM-2: backend_unavailable, without the database's address in the answer."""
    from fastapi.testclient import TestClient as Client

    from blackops.http.app import create_http_app

    unreachable = Application("postgresql://postgres@127.0.0.1:1/x?connect_timeout=1")
    unreachable.register_workflow(Hidden, space="acme")
    with Client(create_http_app(unreachable, "t")) as client:
        answer = client.get(
            "/v1/spaces/acme/workflows/Hidden/instances/i",
            headers={"Authorization": "Bearer t"},
        )
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "backend_unavailable"
    assert "127.0.0.1" not in answer.text and "port" not in answer.text
