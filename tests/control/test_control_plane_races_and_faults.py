"""Regression tests of the control-plane review (D1-D13), on SQLite and PostgreSQL.

Each test turns one reviewer's proof script into a fast, deterministic check on the
fake clock: a racing request is forced by wrapping the call the reviewer wrapped, a
store or verifier fault by monkeypatching the module global the built-in handler
reads (``blackops.control.handlers.*``). Every test fails on the code before the fix.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from resource_helpers import (
    ACTOR,
    SPACE,
    bundle,
    create_workflow,
    deploy,
    deployed_worker,
    error_code,
    new_worker,
    op_status,
    ready_workflow,
    spec,
    sync,
    upload,
    work,
)

import blackops.control.handlers as handlers
import blackops.control.provider as resource_provider
import blackops.control.versions as control_versions
from blackops import Application, BlackOpsError
from blackops.control.base import (
    DEPLOYMENT_UPDATE,
    VERSION_DELETE,
    VERSION_VERIFY,
    WORKER_CREATE,
    WORKFLOW_CREATE,
    WORKFLOW_DELETE,
    WORKFLOW_REPLACE,
)
from blackops.control.plane import ControlPlane
from blackops.http.app import create_http_app
from blackops.testing import FakeClock
from domain.errors import BackendUnavailable, NotFound
from domain.supervision import Retryable, Supervision
from journal.instances import instance_stream
from journal.resources import load_deployment, load_workflow

SYSTEM = "review-fixes-system-token"
BUILTIN_TYPES = (
    WORKER_CREATE,
    VERSION_VERIFY,
    VERSION_DELETE,
    DEPLOYMENT_UPDATE,
    WORKFLOW_CREATE,
    WORKFLOW_REPLACE,
    WORKFLOW_DELETE,
)
#: A Version whose main module has no workflow class at all (DW-ABI-1 mismatch).
BARE = {"modules": {"flows": "X = 1\n"}, "main": "flows"}


@pytest.fixture(autouse=True)
def short_catalog_ttl(request: pytest.FixtureRequest) -> None:
    """The DELETE waits out workers' catalog cache (1.5 x ttl of real time) before its
    last scan; the tests run no other process that caches it, so keep that short."""
    if "app" in request.fixturenames:
        request.getfixturevalue("app").code_provider.ttl = 0.02


def _once(error: BaseException, original: Any) -> Any:
    """``original``, except that its first call raises ``error``."""
    calls: list[int] = []

    def flaky(*args: Any) -> Any:
        if not calls:
            calls.append(1)
            raise error
        return original(*args)

    return flaky


def _failing(error: BaseException) -> Any:
    def broken(*args: Any) -> Any:
        raise error

    return broken


def _allocation(app: Application, worker: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = app.control.deployment(SPACE, worker)["allocation"]
    return result


# -- D1: built-in types only through the control plane ----------------------------------------


@pytest.fixture
def two_spaces(app: Application) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """Spaces ``spacea`` and ``spaceb``; mallory is an operator of ``spacea`` only."""
    with TestClient(create_http_app(app, SYSTEM)) as client:
        system = {"Authorization": f"Bearer {SYSTEM}"}
        for space in ("spacea", "spaceb"):
            assert (
                client.post("/v1/spaces", json={"name": space}, headers=system).status_code == 201
            )
        path = "/v1/spaces/spacea/principals/mallory"
        assert client.put(path, json={"role": "operator"}, headers=system).status_code == 200
        token = client.post(f"{path}/tokens", json={}, headers=system).json()["token"]
        yield client, {"Authorization": f"Bearer {token}"}


def test_space_isolation_builtin_types_are_not_operations_callers_may_run(
    app: Application, two_spaces: tuple[TestClient, dict[str, str]]
) -> None:
    """DW-DEL-1, DW-SPEC-4 and Space isolation: ``POST /v1/spaces/A/operations/<type>``
    of any ``blackops.*`` type (Inline or ``Prefer: respond-async``) is 404 not_found and
    appends nothing, so an operator of Space A cannot delete Space B's Workflow or make
    a Worker there; ``app.run`` / ``app.submit`` refuse them the same way."""
    client, mallory = two_spaces
    code = deployed_worker(app, space="spaceb")
    uid = ready_workflow(app, code.worker, space="spaceb")
    sync(app.workflow(uid).create(id="victim", params={}))
    work(app)
    workers = app.control.workers("spaceb")
    params = {"space": "spaceb", "uid": uid, "name": "planted", "worker": code.worker}
    for type_name in BUILTIN_TYPES:
        for prefer in ({}, {"Prefer": "respond-async"}):
            before = app.store.last_position()
            response = client.post(
                f"/v1/spaces/spacea/operations/{type_name}",
                json=params,
                headers={**mallory, **prefer},
            )
            assert response.status_code == 404, (type_name, prefer, response.text)
            assert response.json()["error"]["code"] == "not_found"
            assert app.store.last_position() == before, (type_name, prefer)
        for call in (app.run, app.submit):
            with pytest.raises(NotFound):
                call(type_name, params, actor=ACTOR, tenant="spaceb")
    work(app)
    view = app.control.get_workflow("spaceb", uid)
    assert view["deleting"] is False and view["observed"]["instanceCounts"]["complete"] == 1
    assert sync(sync(app.workflow(uid).get("victim")).status())["status"] == "complete"
    assert app.control.workers("spaceb") == workers


# -- D2: DW-SPEC-7 inside the accepting transaction --------------------------------------------


def test_dw_spec_7_an_update_accepted_right_after_the_check_is_not_missed(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7: an allocation update accepted after a create's dependency check but
    before its commit (a Version without the class) is examined: dependency_conflict."""
    code = deployed_worker(app)
    bare = upload(app, code.worker, BARE)
    work(app)
    original = ControlPlane.check_dependencies
    raced: list[str] = []

    def racing(self: ControlPlane, space: str, body: dict[str, Any]) -> Any:
        result = original(self, space, body)
        if not raced:  # another request, right after the check passed
            raced.append(deploy(app, code.worker, [(bare, 100)], run=False))
        return result

    monkeypatch.setattr(ControlPlane, "check_dependencies", racing)
    assert error_code(lambda: create_workflow(app, code.worker)) == "dependency_conflict"
    assert op_status(app, raced[0]) == "accepted"
    assert app.control.list_workflows(SPACE) == []


# -- D3: DW-DEL-1 inside the accepting transaction ---------------------------------------------


def test_dw_del_1_a_binding_uploaded_after_the_delete_check_refuses_the_delete(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-1: a Version binding the Workflow, uploaded after the DELETE checked for
    binders but before it was accepted, makes the DELETE dependency_conflict (it is
    never accepted while a live Version binds the Workflow)."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    original = ControlPlane.accept
    made: list[str] = []

    def racing(self: ControlPlane, type_name: str, params: dict[str, Any], **kw: Any) -> str:
        if type_name == WORKFLOW_DELETE and not made:
            binds = [{"name": "CHILD", "resource": {"resourceUid": uid}}]
            made.append(upload(app, code.worker, bundle("binder", workflowBindings=binds)))
        return original(self, type_name, params, **kw)

    monkeypatch.setattr(ControlPlane, "accept", racing)
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, None)) == (
        "dependency_conflict"
    )
    monkeypatch.undo()
    work(app)
    assert app.control.get_workflow(SPACE, uid)["deleting"] is False
    assert app.control.binding_versions(uid) == made


# -- D4 / D11: a failed or transient handler error blocks nothing for ever ---------------------


def test_dw_spec_7_a_failed_deployment_update_does_not_pin_its_versions(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7 (pending means accepted and *unfinished*): a Deployment update whose
    operation failed no longer counts as pending, so its Versions can be deleted."""
    code = deployed_worker(app)
    two = upload(app, code.worker, bundle("two"))
    work(app)
    monkeypatch.setattr(handlers, "load_version", _failing(RuntimeError("disk on fire")))
    update = deploy(app, code.worker, [(code.version, 50), (two, 50)], run=False)
    work(app)
    monkeypatch.undo()
    assert op_status(app, update) == "failed"
    assert app.control.deployment(SPACE, code.worker)["pending"] == []

    view = app.control.delete_version(SPACE, two, ACTOR, None)
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    assert app.control.version_in(SPACE, two).deleted
    assert _allocation(app, code.worker) == [{"version": code.version, "weight": 100}]


def test_dw_spec_7_a_transient_store_error_in_a_deployment_update_is_retried(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7: a transient ``backend_unavailable`` inside a control-plane handler is
    retried (``retry_scheduled``), never the operation's failure; the retry applies it."""
    code = deployed_worker(app)
    two = upload(app, code.worker, bundle("two"))
    work(app)
    unavailable = BackendUnavailable("the journal store cannot be reached")
    monkeypatch.setattr(handlers, "load_deployment", _once(unavailable, load_deployment))
    update = deploy(app, code.worker, [(two, 100)], run=False)
    work(app)
    assert op_status(app, update) == "retry_scheduled"
    clock.advance(1)
    work(app)
    assert op_status(app, update) == "completed"
    assert _allocation(app, code.worker) == [{"version": two, "weight": 100}]


def test_dw_del_5_a_transient_store_error_while_reconciling_is_retried(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-5 (the concurrent change is short): one ``backend_unavailable`` while a
    create reconciles is retried, the Workflow becomes Ready, and DELETE is accepted."""
    code = deployed_worker(app)
    unavailable = BackendUnavailable("the journal store cannot be reached")
    monkeypatch.setattr(handlers, "load_workflow", _once(unavailable, load_workflow))
    view = create_workflow(app, code.worker)
    uid = view["resource"]["uid"]
    work(app)
    assert op_status(app, view["operationId"]) == "retry_scheduled"
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, None)) == (
        "resource_busy"
    )
    clock.advance(1)
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    assert app.control.get_workflow(SPACE, uid)["observed"]["ready"] is True
    assert app.control.delete_workflow(SPACE, uid, ACTOR, None)["status"] == "accepted"


def test_dw_del_5_a_create_that_failed_does_not_make_delete_busy_for_ever(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-5: a create whose reconcile failed (a non-retryable error) is no change in
    progress: DELETE is accepted (not resource_busy for ever) and completes."""
    code = deployed_worker(app)
    monkeypatch.setattr(handlers, "load_workflow", _failing(RuntimeError("disk on fire")))
    view = create_workflow(app, code.worker)
    uid = view["resource"]["uid"]
    work(app)
    monkeypatch.undo()
    assert op_status(app, view["operationId"]) == "failed"
    assert app.control.get_workflow(SPACE, uid)["observed"] == {}
    clock.advance(3600)
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, None)
    work(app)
    assert op_status(app, deleted["operationId"]) == "completed"
    assert error_code(lambda: app.control.get_workflow(SPACE, uid)) == "not_found"


# -- D5: a redrive continues the original operation --------------------------------------------


def _dead_letter(
    app: Application, monkeypatch: pytest.MonkeyPatch, type_name: str, name: str
) -> None:
    """``type_name`` dead-letters at its first Retryable (the handler's ``name`` global
    raises Retryable until ``monkeypatch.undo()``)."""
    specs = app.runtime.handlers.specs
    short = Supervision(max_attempts=1, exhausted="dead_letter")
    monkeypatch.setitem(specs, type_name, dataclasses.replace(specs[type_name], supervision=short))
    monkeypatch.setattr(handlers, name, _failing(Retryable("store busy")))


def test_dw_spec_7_a_redriven_deployment_update_applies_its_allocation(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7: redrive of a dead-lettered ``blackops.deployment.update`` applies the
    allocation that was accepted (not 'applied before' as a no-op)."""
    code = deployed_worker(app)
    two = upload(app, code.worker, bundle("two"))
    work(app)
    _dead_letter(app, monkeypatch, DEPLOYMENT_UPDATE, "load_deployment")
    update = deploy(app, code.worker, [(two, 100)], run=False)
    work(app)
    monkeypatch.undo()
    assert op_status(app, update) == "dead_letter"
    assert _allocation(app, code.worker) == [{"version": code.version, "weight": 100}]

    again = app.redrive(update, actor=ACTOR)
    work(app)
    assert op_status(app, again) == "completed"
    assert _allocation(app, code.worker) == [{"version": two, "weight": 100}]
    assert app.control.deployment(SPACE, code.worker)["pending"] == []


def test_dw_obs_1_a_redriven_create_reconciles_the_accepted_workflow(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-OBS-1: redrive of a dead-lettered ``blackops.workflow.create`` reconciles the
    Workflow that was accepted (its UID derives from the original operation)."""
    code = deployed_worker(app)
    _dead_letter(app, monkeypatch, WORKFLOW_CREATE, "load_workflow")
    view = create_workflow(app, code.worker)
    uid = view["resource"]["uid"]
    work(app)
    monkeypatch.undo()
    assert op_status(app, view["operationId"]) == "dead_letter"

    again = app.redrive(view["operationId"], actor=ACTOR)
    work(app)
    assert op_status(app, again) == "completed"
    assert app.control.get_workflow(SPACE, uid)["observed"]["ready"] is True


# -- D6: a verifier timeout or crash is retried and never recorded as a verdict ----------------


@pytest.mark.parametrize(
    "trouble", ["verification timed out after 30 s", "verifier exited with status 3"]
)
def test_dw_abi_1_verifier_trouble_is_retried_and_never_becomes_the_verdict(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, trouble: str
) -> None:
    """DW-ABI-1, DW-SPEC-7 (decisions R9): a verifier timeout or crash is not the code's
    verdict: the verification is retried, past the three attempts it once had, and
    nothing is recorded (creates are resource_busy); the verifier's first real answer
    is the verdict."""
    calls: list[str] = []

    def verifier(vid: str, modules: Any, main: str, **_: Any) -> dict[str, Any]:
        calls.append(vid)
        if len(calls) <= 4:
            return {"loaded": False, "error": trouble, "classes": {}}
        return {"loaded": True, "error": None, "classes": {}}  # no class: a mismatch

    monkeypatch.setattr(handlers, "verify_abi", verifier)
    worker = new_worker(app)
    view = app.control.upload_version(SPACE, worker, bundle(), ACTOR)
    operation, vid = view["operationId"], view["version"]
    deploy(app, worker, [(vid, 100)], run=False)
    for attempt in (1, 2, 3, 4):
        work(app)
        assert len(calls) == attempt
        assert op_status(app, operation) == "retry_scheduled", attempt
        assert app.control.version_in(SPACE, vid).verification is None, attempt
        assert error_code(lambda: create_workflow(app, worker)) == "resource_busy"
        clock.advance(300)
    work(app)
    assert len(calls) == 5
    assert op_status(app, operation) == "completed"
    assert app.control.version_in(SPACE, vid).verification == {
        "loaded": True,
        "error": None,
        "classes": {},
    }
    # A verdict: the Version is an established mismatch now, not 'still verifying'.
    assert error_code(lambda: create_workflow(app, worker)) == "dependency_conflict"


# -- D7: a create racing the DELETE leaves a claimed instance to the DELETE --------------------


def test_dw_del_3_a_raced_create_claimed_by_a_worker_is_fenced_before_it_is_purged(
    app: Application, store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-2/DW-DEL-3: a create that raced the DELETE's acceptance does not purge its
    instance once another worker has claimed it; the DELETE fences it, is not a
    success while that owner's stop is unproven, then purges it."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    other = Application(store_url, clock=clock)  # another worker process, same journal
    try:
        other.code_provider.workflows()  # its caches list the Workflow (warm, as a
        other.code_provider.pick(uid)  # busy worker's are) and stay so for this test
        other.code_provider.ttl = 3600.0
        owner = other.workflow_engine("worker-2", lease_seconds=30)
        service = app.instances
        gate = service.gate
        assert gate is not None
        box: dict[str, Any] = {}

        def racing(resource: Any, action: str) -> None:
            if action == "create":
                gate(resource, action)
                box["delete"] = app.control.delete_workflow(SPACE, uid, ACTOR, None)
                return
            if action == "created" and "helds" not in box:
                box["helds"], _ = owner.claim(10)  # claims the brand-new instance
            gate(resource, action)

        monkeypatch.setattr(service, "gate", racing)
        resource = app.workflow(uid).resource
        assert error_code(lambda: service.create(resource, "x1", None, ACTOR)) == "not_found"
        monkeypatch.undo()
        assert [h.state.instance_id for h in box["helds"]] == ["x1"]
        stream = instance_stream(uid, "x1")
        assert app.store.read_stream(stream)[-1].type != "workflow.purged"

        operation = box["delete"]["operationId"]
        work(app)
        assert op_status(app, operation) in ("retry_scheduled", "running")
        assert app.control.get_workflow(SPACE, uid)["deleting"] is True
        types = [e.type for e in app.store.read_stream(stream)]
        assert "workflow.purged" not in types and types[-1] == "workflow.termination_requested"

        clock.advance(31)  # the owner's lease runs out: its stop is proven
        work(app)
        assert op_status(app, operation) == "completed"
        assert [e.type for e in app.store.read_stream(stream)] == ["workflow.purged"]
    finally:
        other.close()


# -- D8: the catalog read survives a store outage ----------------------------------------------


def test_dw_del_2_the_catalog_read_keeps_the_last_known_set_while_the_store_is_away(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-2 (workers learn of closed Workflows from the catalog): a catalog read that
    meets ``backend_unavailable`` answers the last known set instead of raising (which
    ended a worker's workflow runner for good)."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    provider = app.code_provider
    provider.refresh()
    known = provider.workflows()
    assert uid in known
    unavailable = BackendUnavailable("the journal store cannot be reached")
    monkeypatch.setattr(resource_provider, "catalog", _failing(unavailable))
    provider.refresh()
    assert provider.workflows() == known


# -- D9: a Version delete and an update naming it cannot both take effect ----------------------


def test_dw_spec_7_a_version_delete_and_an_update_naming_it_cannot_both_succeed(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7 / R16: an update moving the allocation to a Version, accepted and
    applied while that Version's delete is being accepted, makes the delete
    dependency_conflict; the active allocation never weighs a deleted Version."""
    code = deployed_worker(app)
    two = upload(app, code.worker, bundle("two"))
    work(app)
    original = load_deployment
    state = {"armed": True}
    raced: list[str] = []

    def racing(store: Any, worker: str) -> Any:
        found = original(store, worker)
        if state["armed"]:
            state["armed"] = False
            raced.append(deploy(app, code.worker, [(two, 100)], run=False))
            app.control.work(raced, 30)
        return found

    monkeypatch.setattr(control_versions, "load_deployment", racing)
    outcome = "accepted"
    try:
        app.control.delete_version(SPACE, two, ACTOR, None)
    except BlackOpsError as error:
        outcome = error.code
    monkeypatch.undo()
    work(app)
    assert raced and op_status(app, raced[0]) == "completed"
    assert outcome == "dependency_conflict"
    assert not app.control.version_in(SPACE, two).deleted
    assert _allocation(app, code.worker) == [{"version": two, "weight": 100}]


# -- D10: a memory journal is the process's own ------------------------------------------------


def test_memory_store_a_forked_executor_keeps_the_journal(clock: FakeClock) -> None:
    """DW-REPLAY-2 (an executor loads the resource's Version): with a ``memory://``
    journal a forked executor keeps the process's journal instead of opening a new,
    empty one where no Workflow resource exists."""
    memory = Application("memory://", clock=clock)
    try:
        worker = new_worker(memory)
        child = os.fork()
        if child == 0:  # pragma: no cover - the forked executor
            status = 1
            try:
                status = 0 if memory.control.worker_in(SPACE, worker)["uid"] == worker else 2
            except BaseException:  # the parent reads the exit status
                status = 3
            finally:
                os._exit(status)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        memory.close()


# -- D12: a replayed key is never pre-rejected -------------------------------------------------


def test_dw_spec_7_a_replayed_update_key_after_its_version_was_deleted_is_the_same_op(
    app: Application,
) -> None:
    """DW-SPEC-7 (last rule: an accepted Operation is never turned into a pre-rejection):
    update_deployment retried with its key after the Version it named was deleted
    answers the same Operation, not invalid_request."""
    code = deployed_worker(app)
    two = upload(app, code.worker, bundle("two"))
    work(app)
    first = deploy(app, code.worker, [(two, 100)], key="K1")
    deploy(app, code.worker, [(code.version, 100)], key="K2")
    app.control.delete_version(SPACE, two, ACTOR, None)
    work(app)
    assert app.control.version_in(SPACE, two).deleted
    before = app.store.last_position()
    entries = [{"version": two, "weight": 100}]
    again = app.control.update_deployment(SPACE, code.worker, entries, ACTOR, "K1")
    assert again["operationId"] == first and again["status"] == "completed"
    assert app.store.last_position() == before


def test_dw_del_5_a_replayed_put_key_after_the_workflow_was_deleted_is_the_same_op(
    app: Application,
) -> None:
    """DW-DEL-5 / DW-CRUD-2: replace_workflow retried with its key after the Workflow
    was deleted answers the same Operation, not not_found."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    body = {"spec": spec(code.worker)}
    first = app.control.replace_workflow(SPACE, uid, body, ACTOR, "P1")
    work(app)
    assert op_status(app, first["operationId"]) == "completed"
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, None)
    work(app)
    assert op_status(app, deleted["operationId"]) == "completed"
    before = app.store.last_position()
    again = app.control.replace_workflow(SPACE, uid, body, ACTOR, "P1")
    assert again["operationId"] == first["operationId"] and again["status"] == "completed"
    assert app.store.last_position() == before


# -- D13: a DELETE key used for another Workflow is a conflict ---------------------------------


def test_dw_del_5_a_delete_key_used_for_another_workflow_is_409_conflict(
    app: Application,
) -> None:
    """DW-DEL-5: the original key reconciles the same DELETE only for the same
    Workflow; ``DELETE`` of another Workflow with it is 409 conflict and that Workflow
    is untouched."""
    with TestClient(create_http_app(app, SYSTEM)) as client:
        system = {"Authorization": f"Bearer {SYSTEM}"}
        assert client.post("/v1/spaces", json={"name": SPACE}, headers=system).status_code == 201
        code = deployed_worker(app)
        a = ready_workflow(app, code.worker, "wfa")
        b = ready_workflow(app, code.worker, "wfb")
        headers = {**system, "Idempotency-Key": "K"}
        first = client.delete(f"/v1/spaces/{SPACE}/workflows/{a}", headers=headers)
        assert first.status_code == 202, first.text
        work(app)
        before = app.store.last_position()
        second = client.delete(f"/v1/spaces/{SPACE}/workflows/{b}", headers=headers)
        assert second.status_code == 409, second.text
        assert second.json()["error"]["code"] == "conflict"
        assert app.store.last_position() == before
        replayed = client.delete(f"/v1/spaces/{SPACE}/workflows/{a}", headers=headers)
        assert replayed.status_code == 202
        assert replayed.json()["operationId"] == first.json()["operationId"]
    work(app)
    view = app.control.get_workflow(SPACE, b)
    assert view["deleting"] is False and view["observed"]["ready"] is True
    assert error_code(lambda: app.control.get_workflow(SPACE, a)) == "not_found"
