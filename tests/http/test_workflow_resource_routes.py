"""Workflow resources through HTTP (durable-workflow.md §1) on SQLite and PostgreSQL.

The same behaviours as tests/control/test_workflow_resources.py, through the routes of
blackops/http_resources.py with a TestClient: status codes (202/400/403/404/409),
error bodies ``{"error": {"code", "message"}}``, ``Location`` headers, and each
mutation followed through ``GET /v1/operations/{id}`` until ``completed``. Deferred
work runs in this process (``work_until_idle``) between requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from resource_helpers import STATUSES, bundle, work

from blackops import Application
from blackops.http.app import create_http_app
from blackops.testing import FakeClock
from journal.instances import instance_stream

TOKEN = "resource-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
S = "/v1/spaces/acme"


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    with TestClient(create_http_app(app, TOKEN)) as test_client:
        for space in ("acme", "other", "elsewhere"):
            response = send(test_client, "POST", "/v1/spaces", {"name": space})
            assert response.status_code == 201, response.text
        yield test_client


def send(
    client: TestClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    key: str | None = None,
    token: str = TOKEN,
    raw: bytes | None = None,
) -> Response:
    headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    content = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    response: Response = client.request(method, path, content=content, headers=headers)
    return response


def refused(response: Response, status: int, code: str) -> None:
    """An error answer: exactly ``{"error": {"code", "message"}}``."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def accepted(response: Response) -> dict[str, Any]:
    """A 202 with its Operation and a Location naming it."""
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    assert body["location"] == f"/v1/operations/{body['operationId']}"
    assert response.headers["Location"] == body["location"]
    assert body["status"] in ("accepted", "completed")
    return body


def completes(client: TestClient, app: Application, operation_id: str) -> dict[str, Any]:
    """Run the deferred work; the Operation, as ``GET /v1/operations/{id}`` shows it."""
    work(app)
    response = client.get(f"/v1/operations/{operation_id}", headers=AUTH)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    assert body["status"] == "completed", body
    return body


def spec(worker: str, class_name: str = "Flow") -> dict[str, Any]:
    return {"worker": {"resourceUid": worker}, "className": class_name}


def make_worker(client: TestClient, name: str = "w1", space: str = S) -> str:
    response = send(client, "POST", f"{space}/workers", {"name": name})
    assert response.status_code == 201, response.text
    return str(response.json()["uid"])


def make_version(
    client: TestClient, app: Application, worker: str, body: dict[str, Any], space: str = S
) -> str:
    """Upload and verify a Version; its id."""
    view = accepted(send(client, "POST", f"{space}/workers/{worker}/versions", body))
    completes(client, app, view["operationId"])
    return str(view["version"])


def allocate(
    client: TestClient,
    app: Application,
    worker: str,
    allocation: list[tuple[str, int]],
    *,
    run: bool = True,
    space: str = S,
) -> str:
    entries = [{"version": v, "weight": w} for v, w in allocation]
    view = accepted(
        send(client, "PUT", f"{space}/workers/{worker}/deployment", {"allocation": entries})
    )
    if run:
        completes(client, app, view["operationId"])
    return str(view["operationId"])


def deployed(client: TestClient, app: Application, name: str = "w1", space: str = S) -> str:
    """A Worker with a verified Version deployed at 100 %; its UID."""
    worker = make_worker(client, name, space)
    version = make_version(client, app, worker, bundle(), space)
    allocate(client, app, worker, [(version, 100)], space=space)
    return worker


def ready(client: TestClient, app: Application, worker: str, name: str = "wf1") -> str:
    view = accepted(
        send(client, "POST", f"{S}/workflows", {"name": name, "spec": spec(worker)}, key=name)
    )
    completes(client, app, view["operationId"])
    uid = str(view["resource"]["uid"])
    assert send(client, "GET", f"{S}/workflows/{uid}").json()["observed"]["ready"] is True
    return uid


# -- the everyday sequence ------------------------------------------------------------------


def test_dw_crud_1_dw_obs_1_dw_crud_2_dw_del_2_the_lifecycle_over_http(
    client: TestClient, app: Application
) -> None:
    """DW-CRUD-1 (202 + Location, GET returns the record), DW-OBS-1 (observed {} then
    ready/instanceCounts/observedAt, output {}), DW-CRUD-2 (PUT: a new generation),
    DW-DEL-2 (DELETE: gone, instances purged); each Operation is followed to completed."""
    worker = deployed(client, app)
    version_list = send(client, "GET", f"{S}/workers/{worker}/versions").json()["items"]
    (version,) = version_list
    assert version["verification"]["classes"]["Flow"] == {"ok": True, "reason": None}

    created = accepted(
        send(client, "POST", f"{S}/workflows", {"name": "wf1", "spec": spec(worker)}, key="c")
    )
    uid = created["resource"]["uid"]
    assert created["resource"]["name"] == "wf1"
    record = send(client, "GET", f"{S}/workflows/{uid}")
    assert record.status_code == 200
    body = record.json()
    assert body["uid"] == uid and body["spec"] == spec(worker) and body["generation"] == 1
    assert body["observed"] == {} and body["output"] == {}
    operation = send(client, "GET", f"/v1/operations/{created['operationId']}").json()
    assert operation["status"] == "accepted" and operation["type"] == "blackops.workflow.create"
    completes(client, app, created["operationId"])
    body = send(client, "GET", f"{S}/workflows/{uid}").json()
    assert body["observed"]["ready"] is True
    assert body["observed"]["instanceCounts"] == dict.fromkeys(STATUSES, 0)
    assert body["observed"]["observedAt"] == "2026-11-30T09:00:00.000000Z"
    assert body["output"] == {}
    assert [w["uid"] for w in send(client, "GET", f"{S}/workflows").json()["items"]] == [uid]

    made = send(client, "POST", f"{S}/workflows/{uid}/instances", {"id": "i1"})
    assert made.status_code == 201 and made.json() == {"id": "i1", "status": "queued"}
    work(app)
    status = send(client, "GET", f"{S}/workflows/{uid}/instances/i1").json()
    assert status == {"status": "complete", "output": {"a": "one", "b": "one", "mark": "one"}}
    counts = send(client, "GET", f"{S}/workflows/{uid}").json()["observed"]["instanceCounts"]
    assert counts == {**dict.fromkeys(STATUSES, 0), "complete": 1}

    put = accepted(send(client, "PUT", f"{S}/workflows/{uid}", {"spec": spec(worker)}, key="p"))
    assert put["resource"]["uid"] == uid
    assert send(client, "GET", f"{S}/workflows/{uid}").json()["generation"] == 2
    completes(client, app, put["operationId"])
    assert send(client, "GET", f"{S}/workflows/{uid}").json()["observedGeneration"] == 2
    status = send(client, "GET", f"{S}/workflows/{uid}/instances/i1").json()
    assert status["status"] == "complete"  # the PUT rewrote no history

    deleted = accepted(send(client, "DELETE", f"{S}/workflows/{uid}", key="d"))
    assert send(client, "GET", f"{S}/workflows/{uid}").json()["deleting"] is True
    refused(send(client, "POST", f"{S}/workflows/{uid}/instances", {"id": "i2"}), 404, "not_found")
    completes(client, app, deleted["operationId"])
    refused(send(client, "GET", f"{S}/workflows/{uid}"), 404, "not_found")
    refused(send(client, "GET", f"{S}/workflows/{uid}/instances/i1"), 404, "not_found")
    assert [e.type for e in app.store.read_stream(instance_stream(uid, "i1"))] == [
        "workflow.purged"
    ]
    assert send(client, "GET", f"{S}/workflows").json()["items"] == []
    # DW-DEL-4: the Worker and its Version are still there.
    assert send(client, "GET", f"{S}/workers/{worker}").status_code == 200
    assert send(client, "GET", f"{S}/versions/{version['version']}").json()["deleted"] is False


# -- DW-SPEC-1..3: shapes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "Flow", "x": 1}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "Flow"}, "x": 1},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": None}},
        {"name": "wf1", "spec": {"worker": None, "className": "Flow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": None}, "className": "Flow"}},
        {"name": "wf1", "spec": None},
        {"name": None, "spec": {"worker": {"resourceUid": "WK"}, "className": "Flow"}},
        {
            "name": "wf1",
            "spec": {"worker": {"resourceUid": "WK", "version": "x"}, "className": "F"},
        },
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK", "name": None}, "className": "F"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}}},
        {"name": "wf1", "spec": {"className": "Flow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "9Flow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "Flow.Sub"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "A" * 65}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": ["Flow"]}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "Flow"}, "spec2": 1},
    ],
)
def test_dw_spec_1_2_3_malformed_bodies_are_400_before_side_effects(
    client: TestClient, app: Application, body: dict[str, Any]
) -> None:
    """DW-SPEC-1, DW-SPEC-2, DW-SPEC-3: unknown keys, nulls, extra keys in spec.worker,
    a bad className: 400 invalid_request, nothing appended."""
    worker = make_worker(client)
    text = json.dumps(body).replace('"WK"', json.dumps(worker))
    before = app.store.last_position()
    refused(
        send(client, "POST", f"{S}/workflows", raw=text.encode(), key="k"), 400, "invalid_request"
    )
    assert app.store.last_position() == before


@pytest.mark.parametrize(
    "raw", [b"[]", b"not json", b'{"name": "wf1", "name": "wf2", "spec": {}}', b"null", b'"x"']
)
def test_dw_spec_3_bodies_that_are_not_one_object_are_400(
    client: TestClient, app: Application, raw: bytes
) -> None:
    """DW-SPEC-3: the body itself must be one JSON object (no duplicate keys)."""
    before = app.store.last_position()
    refused(send(client, "POST", f"{S}/workflows", raw=raw), 400, "invalid_request")
    assert app.store.last_position() == before


# -- DW-SPEC-4, DW-SPEC-6: the reference and the caller --------------------------------------


def test_dw_spec_4_dw_spec_6_the_worker_reference_is_a_uid_of_this_space(
    client: TestClient, app: Application
) -> None:
    """DW-SPEC-4: another Space's Worker or an unknown UID is refused (400) before side
    effects; DW-SPEC-6: the Worker's name is never resolved to its UID."""
    worker = make_worker(client, "w1")
    elsewhere = make_worker(client, "w1", space="/v1/spaces/other")
    before = app.store.last_position()
    for reference in (elsewhere, "wk-" + "f" * 32, "w1", "latest", worker + " "):
        body = {"name": "wf1", "spec": spec(reference)}
        refused(send(client, "POST", f"{S}/workflows", body), 400, "invalid_request")
    body = {"name": "wf1", "spec": spec(worker)}
    refused(send(client, "POST", "/v1/spaces/nowhere/workflows", body), 404, "not_found")
    assert app.store.last_position() == before
    assert accepted(send(client, "POST", f"{S}/workflows", body))


def test_dw_spec_4_the_caller_must_be_allowed_to_use_the_worker(
    client: TestClient, app: Application
) -> None:
    """DW-SPEC-4: a caller with no role in the Space gets 404 (as if it did not
    exist), a reader 403; a deployer may create. Nothing is appended when refused."""
    worker = make_worker(client)
    tokens = {}
    for principal, role in (("rita", "reader"), ("dora", "deployer")):
        granted = send(client, "PUT", f"{S}/principals/{principal}", {"role": role})
        assert granted.status_code == 200, granted.text
        issued = send(client, "POST", f"{S}/principals/{principal}/tokens", {})
        assert issued.status_code == 201
        tokens[principal] = issued.json()["token"]
    outsider_space = "/v1/spaces/elsewhere"
    send(client, "PUT", f"{outsider_space}/principals/olga", {"role": "admin"})
    olga = send(client, "POST", f"{outsider_space}/principals/olga/tokens", {}).json()["token"]
    body = {"name": "wf1", "spec": spec(worker)}
    before = app.store.last_position()
    refused(send(client, "POST", f"{S}/workflows", body, token=olga), 404, "not_found")
    refused(send(client, "POST", f"{S}/workflows", body, token=tokens["rita"]), 403, "forbidden")
    assert app.store.last_position() == before
    assert send(client, "GET", f"{S}/workflows", token=tokens["rita"]).status_code == 200
    view = accepted(send(client, "POST", f"{S}/workflows", body, token=tokens["dora"]))
    refused(
        send(client, "DELETE", f"{S}/workflows/{view['resource']['uid']}", token=tokens["rita"]),
        403,
        "forbidden",
    )


# -- DW-SPEC-5, DW-SPEC-7 -------------------------------------------------------------------


def test_dw_spec_7_mismatch_is_409_dependency_conflict_and_the_deployment_is_unchanged(
    client: TestClient, app: Application
) -> None:
    """DW-SPEC-7: a weighted Version without the class: 409 dependency_conflict, nothing
    appended, the Deployment (allocation and pending) as it was."""
    worker = deployed(client, app)
    deployment = send(client, "GET", f"{S}/workers/{worker}/deployment").json()
    before = app.store.last_position()
    for class_name in ("Missing", "NoRun"):
        body = {"name": "wf1", "spec": spec(worker, class_name)}
        refused(send(client, "POST", f"{S}/workflows", body, key="k"), 409, "dependency_conflict")
    assert app.store.last_position() == before
    assert send(client, "GET", f"{S}/workers/{worker}/deployment").json() == deployment


def test_dw_spec_7_pending_update_unverified_is_409_resource_busy_then_accepted(
    client: TestClient, app: Application
) -> None:
    """DW-SPEC-7: a pending update whose Version is still being verified: 409
    resource_busy (not accepted, not called a mismatch); once verified: 202."""
    worker = make_worker(client)
    upload = accepted(send(client, "POST", f"{S}/workers/{worker}/versions", bundle()))
    update = allocate(client, app, worker, [(upload["version"], 100)], run=False)
    pending = send(client, "GET", f"{S}/workers/{worker}/deployment").json()["pending"]
    assert [p["operationId"] for p in pending] == [update]
    body = {"name": "wf1", "spec": spec(worker)}
    before = app.store.last_position()
    refused(send(client, "POST", f"{S}/workflows", body, key="k"), 409, "resource_busy")
    assert app.store.last_position() == before
    refused(send(client, "GET", f"{S}/workflows/wf-{'0' * 32}"), 404, "not_found")
    completes(client, app, upload["operationId"])
    completes(client, app, update)
    view = accepted(send(client, "POST", f"{S}/workflows", body, key="k"))
    completes(client, app, view["operationId"])


def test_dw_spec_5_no_deployment_accepted_but_not_ready_until_a_version_is_selected(
    client: TestClient, app: Application
) -> None:
    """DW-SPEC-5: with no Deployment the create is accepted (202); the resource is
    observed not Ready and an instance create is 409 resource_busy until a Version
    with the class is selected."""
    worker = make_worker(client)
    view = accepted(send(client, "POST", f"{S}/workflows", {"name": "wf1", "spec": spec(worker)}))
    uid = view["resource"]["uid"]
    completes(client, app, view["operationId"])
    assert send(client, "GET", f"{S}/workflows/{uid}").json()["observed"]["ready"] is False
    refused(
        send(client, "POST", f"{S}/workflows/{uid}/instances", {"id": "a"}), 409, "resource_busy"
    )
    version = make_version(client, app, worker, bundle())
    allocate(client, app, worker, [(version, 100)])
    assert send(client, "GET", f"{S}/workflows/{uid}").json()["observed"]["ready"] is True
    assert send(client, "POST", f"{S}/workflows/{uid}/instances", {"id": "a"}).status_code == 201


def test_dw_spec_7_the_original_key_after_the_deployment_went_bad_is_the_same_operation(
    client: TestClient, app: Application
) -> None:
    """DW-SPEC-7 (last rule): the accepted create is never replaced by a pre-rejection:
    the same Idempotency-Key answers 202 with the same Operation; a new key is 409."""
    worker = deployed(client, app)
    body = {"name": "wf1", "spec": spec(worker)}
    first = accepted(send(client, "POST", f"{S}/workflows", body, key="orig"))
    completes(client, app, first["operationId"])
    bare = make_version(client, app, worker, {"modules": {"flows": "X = 1\n"}, "main": "flows"})
    allocate(client, app, worker, [(bare, 100)])
    again = accepted(send(client, "POST", f"{S}/workflows", body, key="orig"))
    assert again["operationId"] == first["operationId"]
    assert again["resource"] == first["resource"] and again["status"] == "completed"
    other = {"name": "wf2", "spec": spec(worker)}
    refused(send(client, "POST", f"{S}/workflows", other, key="new"), 409, "dependency_conflict")
    # The same key with a different body is a conflict.
    refused(send(client, "POST", f"{S}/workflows", other, key="orig"), 409, "conflict")


# -- DW-CRUD-2 --------------------------------------------------------------------------------


def test_dw_crud_2_put_changing_worker_or_class_is_400_with_nothing_appended(
    client: TestClient, app: Application
) -> None:
    """DW-CRUD-2: PUT may not change worker or className (or the name); unknown keys
    and nulls are 400 too; an unknown UID is 404."""
    worker = deployed(client, app)
    other = make_worker(client, "w2")
    uid = ready(client, app, worker)
    before = app.store.last_position()
    for body in (
        {"spec": spec(other)},
        {"spec": spec(worker, "Parent")},
        {"spec": spec(worker), "name": "wf2"},
        {"spec": {**spec(worker), "className": None}},
        {"spec": {"worker": {"resourceUid": worker, "x": 1}, "className": "Flow"}},
        {"spec": spec(worker), "extra": True},
        {},
    ):
        refused(send(client, "PUT", f"{S}/workflows/{uid}", body, key="p"), 400, "invalid_request")
    assert app.store.last_position() == before
    refused(
        send(client, "PUT", f"{S}/workflows/wf-{'1' * 32}", {"spec": spec(worker)}),
        404,
        "not_found",
    )
    refused(
        send(client, "PUT", f"/v1/spaces/other/workflows/{uid}", {"spec": spec(worker)}),
        404,
        "not_found",
    )
    same = accepted(send(client, "PUT", f"{S}/workflows/{uid}", {"spec": spec(worker)}, key="p"))
    again = accepted(send(client, "PUT", f"{S}/workflows/{uid}", {"spec": spec(worker)}, key="p"))
    assert again["operationId"] == same["operationId"]
    newer = accepted(send(client, "PUT", f"{S}/workflows/{uid}", {"spec": spec(worker)}, key="q"))
    assert newer["operationId"] != same["operationId"]
    completes(client, app, newer["operationId"])
    completes(client, app, same["operationId"])
    record = send(client, "GET", f"{S}/workflows/{uid}").json()
    assert record["generation"] == 3 and record["observedGeneration"] == 3


# -- DW-DEL-1, DW-DEL-5 -----------------------------------------------------------------------


def test_dw_del_1_a_binding_version_makes_delete_409_until_it_is_deleted(
    client: TestClient, app: Application
) -> None:
    """DW-DEL-1: DELETE is 409 dependency_conflict while a live (here: never weighted)
    Version binds the Workflow; after ``DELETE /versions/{vid}`` it is 202."""
    worker = deployed(client, app)
    uid = ready(client, app, worker)
    caller = make_worker(client, "caller")
    binds = [{"name": "CHILD", "resource": {"resourceUid": uid}}]
    upload = accepted(
        send(client, "POST", f"{S}/workers/{caller}/versions", bundle(workflowBindings=binds))
    )
    before = app.store.last_position()
    refused(send(client, "DELETE", f"{S}/workflows/{uid}", key="d"), 409, "dependency_conflict")
    assert app.store.last_position() == before
    gone = accepted(send(client, "DELETE", f"{S}/versions/{upload['version']}"))
    completes(client, app, gone["operationId"])
    assert send(client, "GET", f"{S}/versions/{upload['version']}").json()["deleted"] is True
    deleted = accepted(send(client, "DELETE", f"{S}/workflows/{uid}", key="d"))
    completes(client, app, deleted["operationId"])


def test_dw_del_5_retry_with_the_key_busy_while_a_put_is_pending(
    client: TestClient, app: Application
) -> None:
    """DW-DEL-5: a DELETE while a PUT is pending is 409 resource_busy; the original
    Idempotency-Key answers the same Operation before and after it completed; after
    the delete a new DELETE is 404."""
    worker = deployed(client, app)
    uid = ready(client, app, worker)
    put = accepted(send(client, "PUT", f"{S}/workflows/{uid}", {"spec": spec(worker)}))
    refused(send(client, "DELETE", f"{S}/workflows/{uid}", key="d"), 409, "resource_busy")
    completes(client, app, put["operationId"])
    first = accepted(send(client, "DELETE", f"{S}/workflows/{uid}", key="d"))
    again = accepted(send(client, "DELETE", f"{S}/workflows/{uid}", key="d"))
    assert again["operationId"] == first["operationId"]
    refused(send(client, "DELETE", f"{S}/workflows/{uid}", key="other"), 409, "resource_busy")
    completes(client, app, first["operationId"])
    after = accepted(send(client, "DELETE", f"{S}/workflows/{uid}", key="d"))
    assert after["operationId"] == first["operationId"] and after["status"] == "completed"
    refused(send(client, "DELETE", f"{S}/workflows/{uid}", key="new"), 404, "not_found")
    # DW-DEL-4: the name can be used again, for a new UID.
    recreated = accepted(
        send(client, "POST", f"{S}/workflows", {"name": "wf1", "spec": spec(worker)}, key="r")
    )
    assert recreated["resource"]["uid"] != uid


def test_idempotency_key_header_twice_is_400(client: TestClient, app: Application) -> None:
    """DW-DEL-5 needs one key: two Idempotency-Key headers are refused."""
    worker = make_worker(client)
    headers = [
        ("Authorization", f"Bearer {TOKEN}"),
        ("content-type", "application/json"),
        ("Idempotency-Key", "a"),
        ("Idempotency-Key", "b"),
    ]
    body = json.dumps({"name": "wf1", "spec": spec(worker)}).encode()
    response = client.request("POST", f"{S}/workflows", content=body, headers=headers)
    refused(response, 400, "invalid_request")


# -- DW-ABI-1, DW-DEL-2, DW-DEL-3 -------------------------------------------------------------


def test_dw_abi_1_the_version_shows_its_verification_per_class(
    client: TestClient, app: Application
) -> None:
    """DW-ABI-1: ``GET /versions/{vid}`` shows no verdict until the verification
    Operation completed, then the result per class."""
    worker = make_worker(client)
    upload = accepted(send(client, "POST", f"{S}/workers/{worker}/versions", bundle()))
    assert upload["version"].startswith("sha256:")
    view = send(client, "GET", f"{S}/versions/{upload['version']}").json()
    assert view["verification"] is None and view["sources"] == bundle()["modules"]
    operation = completes(client, app, upload["operationId"])
    assert operation["type"] == "blackops.version.verify"
    classes = send(client, "GET", f"{S}/versions/{upload['version']}").json()["verification"][
        "classes"
    ]
    assert {name: c["ok"] for name, c in classes.items()} == {
        "Flow": True,
        "Parent": True,
        "NoRun": False,
    }
    refused(send(client, "GET", f"/v1/spaces/other/versions/{upload['version']}"), 404, "not_found")


def test_dw_del_2_dw_del_3_delete_closes_at_once_and_completes_once_stop_is_proven(
    client: TestClient, app: Application, clock: FakeClock
) -> None:
    """DW-DEL-2: DELETE (202) closes create and events at once (404) and later purges the
    sleeping, waiting (with an unmatched event) and held instances and their index rows;
    DW-DEL-3: while a live owner holds a context the Operation is not completed."""
    worker = deployed(client, app)
    uid = ready(client, app, worker)
    base = f"{S}/workflows/{uid}/instances"
    for instance_id, mode in (("s", "sleep"), ("w", "wait")):
        made = send(client, "POST", base, {"id": instance_id, "params": {"mode": mode}})
        assert made.status_code == 201
    work(app)
    assert send(client, "POST", f"{base}/w/events", {"type": "other"}).status_code == 202
    assert send(client, "POST", base, {"id": "h"}).status_code == 201
    helds, _ = app.workflow_engine("owner", lease_seconds=30).claim(10)
    assert len(helds) == 1
    record = send(client, "GET", f"{S}/workflows/{uid}").json()
    assert record["observed"]["instanceCounts"] == {
        **dict.fromkeys(STATUSES, 0),
        "running": 1,
        "sleeping": 1,
        "waiting": 1,
    }

    view = accepted(send(client, "DELETE", f"{S}/workflows/{uid}", key="del"))
    refused(send(client, "POST", base, {"id": "late"}), 404, "not_found")
    refused(send(client, "POST", f"{base}/w/events", {"type": "go"}), 404, "not_found")
    work(app)
    operation = send(client, "GET", f"/v1/operations/{view['operationId']}").json()
    assert operation["status"] in ("retry_scheduled", "running")
    assert send(client, "GET", f"{S}/workflows/{uid}").json()["deleting"] is True
    clock.advance(31)
    completes(client, app, view["operationId"])
    refused(send(client, "GET", f"{S}/workflows/{uid}"), 404, "not_found")
    for instance_id in ("s", "w", "h"):
        events = app.store.read_stream(instance_stream(uid, instance_id))
        assert [e.type for e in events] == ["workflow.purged"]
    assert [r for r in app.store.work_rows() if uid in r.operation_type] == []
