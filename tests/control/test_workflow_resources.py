"""Workflow resources through the Python API (durable-workflow.md §1, DW-ABI-1,
DW-REPLAY-2) on SQLite and PostgreSQL.

Workers, Versions, Deployments and Workflow resources are driven through
``app.control``; their Deferred operations (ABI verification, allocation updates,
reconciling, deletion) and every workflow context run in this process with
``work_until_idle`` on the fake clock. The journal is read back to check what a
request appended (``app.store.last_position()`` before/after a refusal), what a
context recorded and what a delete purged.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

import pytest
from resource_helpers import (
    ACTOR,
    SPACE,
    STATUSES,
    bundle,
    context_versions,
    counts,
    create_workflow,
    deploy,
    deployed_worker,
    error_code,
    instance_rows,
    new_worker,
    observed,
    op_status,
    ready_workflow,
    spec,
    sync,
    upload,
    work,
)

from blackops import Application, BlackOpsError
from blackops.control.base import VERSION_VERIFY, WORKFLOW_CREATE
from blackops.testing import FakeClock
from blackops.workflows.binding import WorkflowBinding
from blackops.workflows.context import ContextEnd
from blackops.workflows.engine import HeldContext, WorkflowEngine
from domain.resources import RESOURCE_UID
from domain.workflow import RetryPolicy
from journal.instances import instance_stream
from journal.resources import workflow_stream

POLICY = RetryPolicy.from_spec(None).to_document()

# -- DW-CRUD-1, DW-OBS-1 -------------------------------------------------------------------


def test_dw_crud_1_create_reserves_a_uid_and_an_empty_instance_id_space(app: Application) -> None:
    """DW-CRUD-1: the create answers with its Operation and a minted UID; the resource
    has no instances; GET returns the management record."""
    code = deployed_worker(app)
    view = create_workflow(app, code.worker, "reports", key="create-1")
    uid = view["resource"]["uid"]
    assert RESOURCE_UID.fullmatch(uid) and uid.startswith("wf-")
    assert view["resource"]["name"] == "reports"
    assert view["status"] == "accepted"
    assert view["location"] == f"/v1/operations/{view['operationId']}"
    record = app.control.get_workflow(SPACE, uid)
    assert record["uid"] == uid and record["name"] == "reports" and record["space"] == SPACE
    assert record["spec"] == spec(code.worker)
    assert record["generation"] == 1 and record["deleting"] is False
    assert record["operations"] == [view["operationId"]]
    assert record["createdAt"] == "2026-11-30T09:00:00.000000Z"
    assert [w["uid"] for w in app.control.list_workflows(SPACE)] == [uid]
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    assert counts(app, uid) == dict.fromkeys(STATUSES, 0)
    binding = app.workflow(uid)
    assert error_code(lambda: binding.get("anything")) == "unknown_instance"
    assert app.projections.list_instances(uid)["items"] == []


def test_dw_crud_1_the_same_idempotency_key_is_the_same_operation_and_uid(
    app: Application,
) -> None:
    """DW-CRUD-1 / DW-DEL-5: a retried create never reserves a second UID."""
    code = deployed_worker(app)
    first = create_workflow(app, code.worker, "reports", key="k-1")
    before = app.store.last_position()
    again = create_workflow(app, code.worker, "reports", key="k-1")
    assert again["operationId"] == first["operationId"]
    assert again["resource"] == first["resource"]
    assert app.store.last_position() == before
    assert error_code(lambda: create_workflow(app, code.worker, "reports", key="k-2")) == "conflict"
    # The same key with a different request is a conflict, not a second Operation.
    assert error_code(lambda: create_workflow(app, code.worker, "other", key="k-1")) == "conflict"
    assert app.store.last_position() == before


def test_dw_obs_1_observed_is_empty_until_reconciled_then_counts_follow_instances(
    app: Application, clock: FakeClock
) -> None:
    """DW-OBS-1: ``observed`` is {} before the first reconcile; then ``ready``,
    ``instanceCounts`` of all seven statuses and ``observedAt``; ``output`` is {}."""
    code = deployed_worker(app)
    view = create_workflow(app, code.worker)
    uid = view["resource"]["uid"]
    record = app.control.get_workflow(SPACE, uid)
    assert record["observed"] == {} and record["output"] == {}
    assert record["observedGeneration"] == 0
    work(app)
    record = app.control.get_workflow(SPACE, uid)
    seen = record["observed"]
    assert {"ready", "instanceCounts", "observedAt"} <= set(seen)
    assert seen["ready"] is True and type(seen["ready"]) is bool
    assert seen["instanceCounts"] == dict.fromkeys(STATUSES, 0)
    assert seen["observedAt"] == "2026-11-30T09:00:00.000000Z"
    assert record["output"] == {} and record["observedGeneration"] == 1

    binding = app.workflow(uid)
    modes = {"q": "do", "s": "sleep", "w": "wait", "e": "throw", "t": "wait"}
    for instance_id, mode in modes.items():
        sync(binding.create(id=instance_id, params={"mode": mode}))
    assert counts(app, uid) == {**dict.fromkeys(STATUSES, 0), "queued": 5}
    work(app)
    sync(sync(binding.get("t")).terminate())
    assert counts(app, uid) == {
        **dict.fromkeys(STATUSES, 0),
        "complete": 1,
        "sleeping": 1,
        "waiting": 1,
        "errored": 1,
        "terminated": 1,
    }
    clock.advance(101)
    work(app)
    assert counts(app, uid)["sleeping"] == 0 and counts(app, uid)["complete"] == 2
    # As of observedAt: an instant between the creation and now (same RFC 3339 form).
    assert observed(app, uid)["observedAt"] >= "2026-11-30T09:00:00.000000Z"
    assert observed(app, uid)["observedAt"] <= "2026-11-30T09:01:41.000000Z"
    # A held context is "running" (the engine of another worker holds it).
    sync(binding.create(id="r", params={"mode": "do"}))
    helds, _ = app.workflow_engine("other").claim(10)
    assert len(helds) == 1
    assert counts(app, uid)["running"] == 1
    assert app.control.get_workflow(SPACE, uid)["output"] == {}


# -- DW-SPEC-1..3 (the shape of a spec) -------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"name": "wf1"},
        {"name": "wf1", "spec": None},
        {"name": "wf1", "spec": {"className": "Flow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}}},
        {"name": "wf1", "spec": {"worker": None, "className": "Flow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": None}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": None}, "className": "Flow"}},
        {"name": "wf1", "spec": {"worker": {}, "className": "Flow"}},
        {"name": "wf1", "spec": {"worker": "WK", "className": "Flow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK", "name": "w1"}, "className": "F"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "F", "env": {}}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "F", "x": None}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "1Flow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "Fl-ow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": ""}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "F" * 65}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "Flow\n"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "Flöw"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": 7}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": 7}, "className": "Flow"}},
        {"name": "wf1", "spec": {"worker": {"resourceUid": "WK"}, "className": "Flow"}, "x": 1},
        {"spec": {"worker": {"resourceUid": "WK"}, "className": "Flow"}},
        [],
    ],
)
def test_dw_spec_1_2_3_malformed_specs_are_invalid_requests_before_side_effects(
    app: Application, body: Any
) -> None:
    """DW-SPEC-1 (exactly worker+className), DW-SPEC-2 (className pattern), DW-SPEC-3
    (no unknown keys, no nulls, no extra keys in the worker reference): refused with
    ``invalid_request`` and nothing appended."""
    worker = new_worker(app)

    def fill(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return worker if value == "WK" else value

    before = app.store.last_position()
    code = error_code(lambda: app.control.create_workflow(SPACE, fill(body), ACTOR, "key"))
    assert code == "invalid_request"
    assert app.store.last_position() == before
    assert app.control.list_workflows(SPACE) == []


@pytest.mark.parametrize("class_name", ["$", "_", "$Flow_9", "F" * 64, "a$b"])
def test_dw_spec_2_class_names_of_the_pattern_are_accepted(
    app: Application, class_name: str
) -> None:
    """DW-SPEC-2: ``^[A-Za-z_$][A-Za-z0-9_$]{0,63}$`` — with no Deployment yet
    (DW-SPEC-5) the create is accepted whatever class it names."""
    worker = new_worker(app)
    view = create_workflow(app, worker, class_name=class_name)
    assert view["status"] == "accepted"
    assert app.control.get_workflow(SPACE, view["resource"]["uid"])["spec"]["className"] == (
        class_name
    )


# -- DW-SPEC-4, DW-SPEC-6 (the reference) ------------------------------------------------------


def test_dw_spec_4_the_worker_must_exist_in_the_same_space(app: Application) -> None:
    """DW-SPEC-4: another Space's Worker, or a UID no Worker has, is refused before any
    side effect."""
    code = deployed_worker(app)
    other = deployed_worker(app, "w1", space="other")
    before = app.store.last_position()
    assert error_code(lambda: create_workflow(app, other.worker)) == "invalid_request"
    missing = "wk-" + "0" * 32
    assert error_code(lambda: create_workflow(app, missing)) == "invalid_request"
    assert app.store.last_position() == before
    # The same Worker from its own Space is fine.
    assert create_workflow(app, other.worker, space="other")["status"] == "accepted"
    assert create_workflow(app, code.worker)["status"] == "accepted"


def test_dw_spec_6_a_name_or_latest_is_never_resolved_to_a_uid(app: Application) -> None:
    """DW-SPEC-6: ``resourceUid`` is a UID; the Worker's name (or "latest") is refused."""
    code = deployed_worker(app, name="w1")
    before = app.store.last_position()
    for reference in ("w1", "latest", code.worker.upper(), " " + code.worker):
        assert error_code(partial(create_workflow, app, reference)) == "invalid_request"
    assert app.store.last_position() == before
    uid = ready_workflow(app, code.worker)
    assert app.control.get_workflow(SPACE, uid)["spec"]["worker"] == {"resourceUid": code.worker}


# -- DW-SPEC-5, DW-SPEC-7 (the code behind it) -----------------------------------------------


def test_dw_spec_7_an_established_mismatch_is_dependency_conflict_and_changes_nothing(
    app: Application,
) -> None:
    """DW-SPEC-7 / DW-ABI-1: a weighted Version without the class (or whose class fails
    the ABI) answers ``dependency_conflict`` before side effects; the Deployment and its
    allocation are unchanged."""
    code = deployed_worker(app)
    deployment = app.control.deployment(SPACE, code.worker)
    before = app.store.last_position()
    for class_name in ("Missing", "NoRun", "helpers"):
        refused = error_code(partial(create_workflow, app, code.worker, class_name=class_name))
        assert refused == "dependency_conflict"
    assert app.store.last_position() == before
    assert app.control.deployment(SPACE, code.worker) == deployment
    assert app.control.list_workflows(SPACE) == []


def test_dw_spec_7_a_version_that_does_not_load_is_an_established_mismatch(
    app: Application,
) -> None:
    """DW-SPEC-7 / DW-ABI-1: a main module that raises at import has no class at all."""
    worker = new_worker(app)
    broken = upload(app, worker, {"modules": {"flows": "raise ValueError('x')\n"}, "main": "flows"})
    work(app)
    verification = app.control.version_in(SPACE, broken).verification
    assert verification is not None and verification["loaded"] is False
    deploy(app, worker, [(broken, 100)])
    assert error_code(lambda: create_workflow(app, worker)) == "dependency_conflict"


def test_dw_spec_7_pending_updates_are_examined_too(app: Application) -> None:
    """DW-SPEC-7: an accepted, unfinished allocation update is examined as well as the
    active allocation: a pending Version without the class is ``dependency_conflict``
    (the pending update stays as it is); once it is applied or replaced the check
    follows the allocation."""
    code = deployed_worker(app)
    bare = upload(app, code.worker, {"modules": {"flows": "X = 1\n"}, "main": "flows"})
    work(app)  # verified: it has no class Flow
    pending = deploy(app, code.worker, [(code.version, 50), (bare, 50)], run=False)
    deployment = app.control.deployment(SPACE, code.worker)
    assert [p["operationId"] for p in deployment["pending"]] == [pending]
    before = app.store.last_position()
    assert error_code(lambda: create_workflow(app, code.worker)) == "dependency_conflict"
    assert app.store.last_position() == before
    assert app.control.deployment(SPACE, code.worker) == deployment
    assert op_status(app, pending) == "accepted"
    work(app)  # applied: now the active allocation has it
    assert app.control.deployment(SPACE, code.worker)["pending"] == []
    assert error_code(lambda: create_workflow(app, code.worker)) == "dependency_conflict"
    assert app.store.last_position() > before
    # Weight 0 is not weighted: a Version without the class may sit there.
    deploy(app, code.worker, [(code.version, 100), (bare, 0)])
    assert create_workflow(app, code.worker)["status"] == "accepted"


def test_deployment_updates_take_effect_in_acceptance_order(app: Application) -> None:
    """DW-SPEC-7 (pending updates are *scheduled* effects): when two accepted updates
    finish in the opposite order, the one accepted last is the allocation."""
    code = deployed_worker(app)
    two = upload(app, code.worker, bundle("two"))
    work(app)
    older = deploy(app, code.worker, [(code.version, 50), (two, 50)], run=False)
    newer = deploy(app, code.worker, [(two, 100)], run=False)
    engine = app.engine("out-of-order")
    attempts = {a.ctx.operation_id: a for a in engine.claim(10)}
    assert set(attempts) == {older, newer}
    for operation in (newer, older):  # the older one's worker was slower
        engine.commit([engine.execute(attempts[operation])])
    assert app.control.deployment(SPACE, code.worker)["allocation"] == [
        {"version": two, "weight": 100}
    ]


def test_dw_spec_7_an_update_accepted_while_a_create_is_checked_is_examined(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7: a create accepted after an allocation update was accepted must have
    examined that update: a racing update without the class cannot slip past."""
    code = deployed_worker(app)
    bare = upload(app, code.worker, {"modules": {"flows": "X = 1\n"}, "main": "flows"})
    work(app)
    original = app.control.accept
    raced: list[str] = []

    def racing(type_name: str, params: dict[str, Any], **options: Any) -> str:
        if type_name == WORKFLOW_CREATE and not raced:  # another request, in between
            raced.append(deploy(app, code.worker, [(bare, 100)], run=False))
        return original(type_name, params, **options)

    monkeypatch.setattr(app.control, "accept", racing)
    outcome = "accepted"
    try:
        create_workflow(app, code.worker)
    except BlackOpsError as error:
        outcome = error.code
    assert raced and op_status(app, raced[0]) == "accepted"  # the update came first
    assert outcome in ("dependency_conflict", "resource_busy")


def test_dw_spec_7_unfinished_verification_is_resource_busy_never_a_mismatch(
    app: Application,
) -> None:
    """DW-SPEC-7: while a concerned Version's verification has not finished, a create
    answers ``resource_busy`` and is not accepted; once verified it is accepted."""
    worker = new_worker(app)
    version = upload(app, worker, bundle())
    pending = deploy(app, worker, [(version, 100)], run=False)
    assert app.control.version_in(SPACE, version).verification is None
    before = app.store.last_position()
    assert error_code(lambda: create_workflow(app, worker, key="k")) == "resource_busy"
    assert error_code(lambda: create_workflow(app, worker, class_name="Missing")) == (
        "resource_busy"
    )
    assert app.store.last_position() == before
    assert app.control.list_workflows(SPACE) == []
    work(app)
    assert op_status(app, pending) == "completed"
    view = create_workflow(app, worker, key="k")
    assert view["status"] == "accepted"


def test_dw_spec_7_unverified_version_in_the_active_allocation_is_resource_busy(
    app: Application,
) -> None:
    """DW-SPEC-7: an active allocation whose Version is still being verified (its
    verification claimed by a worker that has not finished) answers ``resource_busy``."""
    worker = new_worker(app)
    version = upload(app, worker, bundle())
    verifier = app.engine("slow-verifier")
    attempts = verifier.claim(10)
    assert len(attempts) == 1  # the verification, held by that worker
    deploy(app, worker, [(version, 100)])  # applied; the verification is not done
    assert app.control.deployment(SPACE, worker)["allocation"] == [
        {"version": version, "weight": 100}
    ]
    assert app.control.version_in(SPACE, version).verification is None
    assert error_code(lambda: create_workflow(app, worker)) == "resource_busy"
    verifier.commit([verifier.execute(attempts[0])])
    assert app.control.version_in(SPACE, version).abi("Flow") is True
    assert create_workflow(app, worker)["status"] == "accepted"


def test_dw_spec_5_without_a_deployment_the_create_is_accepted_but_not_ready(
    app: Application,
) -> None:
    """DW-SPEC-5 / DW-SPEC-7: no active Deployment and none pending: the create is
    accepted, reconciles, and is not Ready (instance creates are refused) until a
    Version with the class is selected."""
    worker = new_worker(app)
    view = create_workflow(app, worker)
    uid = view["resource"]["uid"]
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    seen = observed(app, uid)
    assert seen["ready"] is False
    assert seen["instanceCounts"] == dict.fromkeys(STATUSES, 0)
    binding = app.workflow(uid)
    assert error_code(lambda: binding.create(id="early")) == "resource_busy"

    # A Version without the class is selected: still not Ready.
    bare = upload(app, worker, {"modules": {"flows": "X = 1\n"}, "main": "flows"})
    good = upload(app, worker, bundle())
    work(app)
    deploy(app, worker, [(bare, 100)])
    assert observed(app, uid)["ready"] is False
    deploy(app, worker, [(good, 50), (bare, 50)])
    assert observed(app, uid)["ready"] is False
    assert error_code(lambda: binding.create(id="early")) == "resource_busy"
    deploy(app, worker, [(good, 100)])
    assert observed(app, uid)["ready"] is True
    sync(binding.create(id="now"))
    work(app)
    assert sync(sync(binding.get("now")).status())["status"] == "complete"


def test_dw_spec_7_an_accepted_create_is_never_turned_into_a_pre_rejection(
    app: Application,
) -> None:
    """DW-SPEC-7 (last rule) / DW-DEL-5: after the Deployment went bad, the same
    Idempotency-Key still returns the same Operation; a new key is refused."""
    code = deployed_worker(app)
    first = create_workflow(app, code.worker, key="create-1")
    work(app)
    bare = upload(app, code.worker, {"modules": {"flows": "X = 1\n"}, "main": "flows"})
    work(app)
    deploy(app, code.worker, [(bare, 100)])
    before = app.store.last_position()
    again = create_workflow(app, code.worker, key="create-1")
    assert again["operationId"] == first["operationId"]
    assert again["resource"]["uid"] == first["resource"]["uid"]
    assert again["status"] == "completed"
    assert app.store.last_position() == before
    refused = error_code(lambda: create_workflow(app, code.worker, "other", key="create-2"))
    assert refused == "dependency_conflict"
    # Also while the bad update is merely pending.
    deploy(app, code.worker, [(code.version, 100)])
    deploy(app, code.worker, [(bare, 100)], run=False)
    assert create_workflow(app, code.worker, key="create-1")["operationId"] == first["operationId"]


# -- DW-ABI-1 -----------------------------------------------------------------------------


def test_dw_abi_1_the_verification_result_per_class_is_recorded_on_the_version(
    app: Application,
) -> None:
    """DW-ABI-1: verification runs as an Operation; its result, per class, is recorded on
    the Version (None before it finished)."""
    worker = new_worker(app)
    view = app.control.upload_version(SPACE, worker, bundle(), ACTOR)
    version = view["version"]
    assert view["status"] == "accepted"
    assert app.control.version_in(SPACE, version).verification is None
    assert app.control.version_in(SPACE, version).abi("Flow") is None
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    state = app.control.version_in(SPACE, version)
    assert state.verification is not None
    assert state.verification["loaded"] is True and state.verification["error"] is None
    classes = state.verification["classes"]
    assert set(classes) == {"Flow", "Parent", "NoRun"}
    assert classes["Flow"] == {"ok": True, "reason": None}
    assert classes["Parent"] == {"ok": True, "reason": None}
    assert classes["NoRun"]["ok"] is False and "run" in classes["NoRun"]["reason"]
    assert state.abi("Flow") is True and state.abi("NoRun") is False
    assert state.abi("Missing") is False
    assert state.view()["verification"] == state.verification
    outcome = app.outcome(view["operationId"])
    assert outcome is not None
    assert outcome["classes"] == {"Flow": True, "Parent": True, "NoRun": False}
    # The same content again is the same Version and the same verification.
    again = app.control.upload_version(SPACE, worker, bundle(), ACTOR)
    assert again["version"] == version and again["operationId"] == view["operationId"]


# -- DW-CRUD-2 ----------------------------------------------------------------------------


def test_dw_crud_2_put_is_full_replacement_with_the_same_worker_and_class_only(
    app: Application,
) -> None:
    """DW-CRUD-2: a PUT that changes ``worker`` or ``className`` (or the name, or adds
    keys) is ``invalid_request`` with nothing appended."""
    code = deployed_worker(app)
    other = new_worker(app, "w2")
    uid = ready_workflow(app, code.worker)
    before = app.store.last_position()
    for body in (
        {"spec": spec(other)},
        {"spec": spec(code.worker, "Parent")},
        {"spec": spec(code.worker), "name": "renamed"},
        {"spec": spec(code.worker), "extra": 1},
        {"spec": {**spec(code.worker), "worker": {"resourceUid": code.worker, "x": 1}}},
        {"spec": {"worker": {"resourceUid": code.worker}}},
        {"name": "wf1"},
    ):
        code_of = error_code(partial(app.control.replace_workflow, SPACE, uid, body, ACTOR, "p"))
        assert code_of == "invalid_request", body
    assert app.store.last_position() == before
    assert app.control.get_workflow(SPACE, uid)["generation"] == 1


def test_dw_crud_2_the_same_spec_under_a_new_key_is_a_new_generation_history_unchanged(
    app: Application,
) -> None:
    """DW-CRUD-2: the same spec under a new key makes a new Operation and generation and
    reconciles again; the same key is the same Operation; existing history is never
    rewritten."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    binding = app.workflow(uid)
    sync(binding.create(id="old"))
    work(app)
    stream = instance_stream(uid, "old")
    history = [(e.version, e.type, e.data) for e in app.store.read_stream(stream)]

    first = app.control.replace_workflow(SPACE, uid, {"spec": spec(code.worker)}, ACTOR, "put-1")
    record = app.control.get_workflow(SPACE, uid)
    assert record["generation"] == 2 and record["observedGeneration"] == 1
    again = app.control.replace_workflow(SPACE, uid, {"spec": spec(code.worker)}, ACTOR, "put-1")
    assert again["operationId"] == first["operationId"]
    work(app)
    assert op_status(app, first["operationId"]) == "completed"
    second = app.control.replace_workflow(
        SPACE, uid, {"spec": spec(code.worker), "name": "wf1"}, ACTOR, "put-2"
    )
    assert second["operationId"] != first["operationId"]
    work(app)
    record = app.control.get_workflow(SPACE, uid)
    assert record["generation"] == 3 and record["observedGeneration"] == 3
    assert record["operations"][1:] == [first["operationId"], second["operationId"]]
    assert record["observed"]["ready"] is True
    assert [(e.version, e.type, e.data) for e in app.store.read_stream(stream)] == history
    assert sync(sync(binding.get("old")).status())["status"] == "complete"


# -- DW-DEL-1 -----------------------------------------------------------------------------


def test_dw_del_1_delete_is_refused_exactly_while_a_live_version_binds_it(
    app: Application,
) -> None:
    """DW-DEL-1: a non-deleted Version's workflowBindings naming the Workflow makes
    DELETE ``dependency_conflict`` (weighted or not), before side effects; after that
    Version is deleted, DELETE is accepted."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    caller = new_worker(app, "caller")
    binds: dict[str, Any] = {
        "env": {"GREETING": "hi"},
        "workflowBindings": [{"name": "CHILD", "resource": {"resourceUid": uid}}],
    }
    weighted = upload(app, caller, bundle(**binds))
    unweighted = upload(app, caller, bundle("two", **binds))
    work(app)
    deploy(app, caller, [(weighted, 100), (unweighted, 0)])
    assert set(app.control.binding_versions(uid)) == {weighted, unweighted}
    before = app.store.last_position()
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, "d")) == (
        "dependency_conflict"
    )
    assert app.store.last_position() == before
    assert app.control.get_workflow(SPACE, uid)["deleting"] is False

    # The weight-0 one leaves the allocation and is deleted: the weighted one still binds.
    deploy(app, caller, [(weighted, 100)])
    app.control.delete_version(SPACE, unweighted, ACTOR, None)
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, "d")) == (
        "dependency_conflict"
    )
    # A Version in an allocation cannot be deleted; leave the allocation first.
    assert error_code(lambda: app.control.delete_version(SPACE, weighted, ACTOR, None)) == (
        "dependency_conflict"
    )
    deploy(app, caller, [])
    app.control.delete_version(SPACE, weighted, ACTOR, None)
    work(app)
    assert app.control.binding_versions(uid) == []
    view = app.control.delete_workflow(SPACE, uid, ACTOR, "d")
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    assert error_code(lambda: app.control.get_workflow(SPACE, uid)) == "not_found"


def test_dw_del_1_an_unweighted_binding_version_alone_blocks_delete(app: Application) -> None:
    """DW-DEL-1: a Version never deployed (no Deployment at all) still binds."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    caller = new_worker(app, "caller")
    binder = upload(
        app,
        caller,
        bundle(workflowBindings=[{"name": "CHILD", "resource": {"resourceUid": uid}}]),
    )
    assert app.control.version_in(SPACE, binder).verification is None  # not even verified
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, None)) == (
        "dependency_conflict"
    )
    app.control.delete_version(SPACE, binder, ACTOR, None)
    assert app.control.delete_workflow(SPACE, uid, ACTOR, None)["status"] == "accepted"


def test_dw_del_1_a_binding_uploaded_while_the_delete_is_accepted_cannot_survive_it(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-1: DELETE is refused exactly while a live Version binds the Workflow, so
    an upload and a DELETE racing cannot both be accepted."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    original = app.control.accept
    raced: list[str] = []

    def racing(type_name: str, params: dict[str, Any], **options: Any) -> str:
        if type_name == VERSION_VERIFY and not raced:  # another request, in between
            raced.append(app.control.delete_workflow(SPACE, uid, ACTOR, "d")["operationId"])
        return original(type_name, params, **options)

    monkeypatch.setattr(app.control, "accept", racing)
    binds = [{"name": "CHILD", "resource": {"resourceUid": uid}}]
    uploaded = True
    try:
        upload(app, new_worker(app, "caller"), bundle(workflowBindings=binds))
    except BlackOpsError:
        uploaded = False
    monkeypatch.undo()
    work(app)
    deleted = op_status(app, raced[0]) == "completed"
    assert not (uploaded and deleted), "a live Version binds a deleted Workflow"


# -- DW-DEL-2 -----------------------------------------------------------------------------


def test_dw_del_2_delete_purges_every_instance_step_history_and_unmatched_event(
    app: Application, clock: FakeClock
) -> None:
    """DW-DEL-2: with queued, sleeping, waiting and finished instances (and an unmatched
    event), an explicit DELETE closes create/event/wake at once, then purges every
    instance, its step history and its events; no per-instance terminate is needed."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    binding = app.workflow(uid)
    for instance_id, mode in (("s", "sleep"), ("w", "wait"), ("c", "do")):
        sync(binding.create(id=instance_id, params={"mode": mode}))
    work(app)
    sync(sync(binding.get("w")).send_event(type="other", payload={"n": 1}))  # unmatched
    sync(binding.create(id="q", params={"mode": "do"}))  # stays queued
    assert counts(app, uid) == {
        **dict.fromkeys(STATUSES, 0),
        "queued": 1,
        "sleeping": 1,
        "waiting": 1,
        "complete": 1,
    }
    streams = {i: instance_stream(uid, i) for i in ("s", "w", "c", "q")}
    assert sorted(instance_rows(app, uid)) == sorted(streams.values())

    view = app.control.delete_workflow(SPACE, uid, ACTOR, "del-1")
    assert view["status"] == "accepted"
    assert app.control.get_workflow(SPACE, uid)["deleting"] is True
    # Closed at once: no create, no event, no wake.
    assert error_code(lambda: binding.create(id="late")) == "not_found"
    assert error_code(lambda: sync(binding.get("w")).send_event(type="go")) == "not_found"
    clock.advance(200)  # the sleeper is due
    helds, _ = app.workflow_engine("waker").claim(10)
    assert helds == []
    assert app.store.read_stream(streams["s"])[-1].type != "workflow.context_started"

    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    assert error_code(lambda: app.control.get_workflow(SPACE, uid)) == "not_found"
    assert error_code(lambda: app.workflow(uid)) == "not_found"
    for instance_id, stream in streams.items():
        left = app.store.read_stream(stream)
        assert [e.type for e in left] == ["workflow.purged"], instance_id
        assert error_code(partial(binding.get, instance_id)) == "unknown_instance"
    assert instance_rows(app, uid) == []
    assert [r for r in app.store.work_rows() if uid in r.operation_type] == []
    assert app.projections.list_instances(uid)["items"] == []
    assert app.control.list_workflows(SPACE) == []
    assert uid not in app.code_provider.workflows()
    outcome = app.outcome(view["operationId"])
    assert outcome is not None and outcome["purgedInstances"] == 4


def test_dw_del_2_a_create_racing_the_delete_leaves_no_instance_behind(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-2: every instance ID of the UID is purged: a create that was in flight when
    the DELETE was accepted is either refused or purged with the rest."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    binding = app.workflow(uid)
    service = app.instances
    gate = service.gate
    assert gate is not None
    deleted: list[str] = []

    def racing(resource: Any, action: str) -> None:
        gate(resource, action)  # passes: the Workflow is open
        if action == "create" and not deleted:  # meanwhile another request deletes it
            deleted.append(app.control.delete_workflow(SPACE, uid, ACTOR, None)["operationId"])
            work(app)

    monkeypatch.setattr(service, "gate", racing)
    created = True
    try:
        sync(binding.create(id="in-flight"))
    except BlackOpsError:
        created = False
    monkeypatch.undo()
    assert op_status(app, deleted[0]) == "completed"
    left = [e.type for e in app.store.read_stream(instance_stream(uid, "in-flight"))]
    assert not created or left in ([], ["workflow.purged"]), left
    assert instance_rows(app, uid) == []


def test_dw_del_2_delete_of_a_workflow_without_instances(app: Application) -> None:
    """DW-DEL-2: nothing to stop: the delete completes and the UID is gone."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    view = app.control.delete_workflow(SPACE, uid, ACTOR, None)
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    assert error_code(lambda: app.control.get_workflow(SPACE, uid)) == "not_found"
    assert app.store.read_stream(workflow_stream(uid))[-1].type == "workflow_resource.deleted"


# -- DW-DEL-3 -----------------------------------------------------------------------------


def test_dw_del_3_delete_is_not_a_success_until_a_live_owners_stop_is_proven(
    app: Application, clock: FakeClock
) -> None:
    """DW-DEL-3: with a context held by a live owner (another worker's engine), the
    delete keeps reconciling (not complete); once the owner's lease has run out the same
    Operation completes, and the old owner can never commit afterwards."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    binding = app.workflow(uid)
    sync(binding.create(id="held", params={"mode": "do"}))
    owner = app.workflow_engine("w1", lease_seconds=30)
    helds, _ = owner.claim(10)
    (held,) = helds
    stream = instance_stream(uid, "held")

    view = app.control.delete_workflow(SPACE, uid, ACTOR, "del")
    work(app)
    assert op_status(app, view["operationId"]) in ("retry_scheduled", "running")
    assert [e.type for e in app.store.read_stream(stream)][-1] == "workflow.termination_requested"
    clock.advance(10)  # retried, still within the owner's lease
    work(app)
    assert op_status(app, view["operationId"]) in ("retry_scheduled", "running")
    assert app.control.get_workflow(SPACE, uid)["deleting"] is True

    clock.advance(31)
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    assert error_code(lambda: app.control.get_workflow(SPACE, uid)) == "not_found"
    after = app.store.read_stream(stream)
    assert [e.type for e in after] == ["workflow.purged"]
    position = app.store.last_position()

    # The old owner's commit is refused: nothing new in its stream, nothing appended.
    with contextlib.suppress(Exception):  # refusing by raising is acceptable here
        owner.finish([(held, ContextEnd("complete", output={"late": True}))])
    with contextlib.suppress(Exception):
        owner.request([(held, ("do", "a", 1, True, {"x": 1}, POLICY))])
    assert app.store.read_stream(stream) == after
    assert app.store.last_position() == position


def _owner_outlived_by_a_delete(
    app: Application, clock: FakeClock
) -> tuple[WorkflowEngine, HeldContext, str]:
    """An instance whose context ``owner`` still holds after a DELETE purged it."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    sync(app.workflow(uid).create(id="held", params={"mode": "do"}))
    owner = app.workflow_engine("w1", lease_seconds=30)
    (held,), _ = owner.claim(10)
    view = app.control.delete_workflow(SPACE, uid, ACTOR, None)
    work(app)
    clock.advance(31)
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    return owner, held, instance_stream(uid, "held")


def test_dw_del_3_an_old_owner_after_the_purge_is_told_to_stop(
    app: Application, clock: FakeClock
) -> None:
    """DW-DEL-3: the old owner's step request is answered ``stop`` (it is fenced), not
    crashed; nothing is appended."""
    owner, held, stream = _owner_outlived_by_a_delete(app, clock)
    after = app.store.read_stream(stream)
    reply = owner.request([(held, ("do", "a", 1, True, {"x": 1}, POLICY))])
    assert reply[0][0] == "stop"
    assert app.store.read_stream(stream) == after


def test_dw_del_3_an_old_owners_end_after_the_purge_is_dropped_quietly(
    app: Application, clock: FakeClock
) -> None:
    """DW-DEL-3: recording the old owner's end appends nothing and does not raise."""
    owner, held, stream = _owner_outlived_by_a_delete(app, clock)
    after = app.store.read_stream(stream)
    owner.finish([(held, ContextEnd("complete", output={"late": True}))])
    assert app.store.read_stream(stream) == after


# -- DW-DEL-4 -----------------------------------------------------------------------------


def test_dw_del_4_no_cascade_and_a_recreated_name_is_a_new_uid_with_empty_history(
    app: Application,
) -> None:
    """DW-DEL-4: the Worker, its Versions, its Deployment and other Workflows are
    untouched; re-creating the name gives a new UID and an empty history."""
    code = deployed_worker(app)
    doomed = ready_workflow(app, code.worker, "reports")
    kept = ready_workflow(app, code.worker, "billing")
    for uid in (doomed, kept):
        sync(app.workflow(uid).create(id="same-id"))
    work(app)
    kept_history = app.store.read_stream(instance_stream(kept, "same-id"))
    worker_view = app.control.worker_in(SPACE, code.worker)
    versions = app.control.versions(SPACE, code.worker)
    deployment = app.control.deployment(SPACE, code.worker)

    view = app.control.delete_workflow(SPACE, doomed, ACTOR, None)
    work(app)
    assert op_status(app, view["operationId"]) == "completed"
    assert app.control.worker_in(SPACE, code.worker) == worker_view
    assert app.control.versions(SPACE, code.worker) == versions
    assert app.control.deployment(SPACE, code.worker) == deployment
    assert app.store.read_stream(instance_stream(kept, "same-id")) == kept_history
    assert observed(app, kept)["ready"] is True
    assert [w["uid"] for w in app.control.list_workflows(SPACE)] == [kept]

    again = create_workflow(app, code.worker, "reports", key="recreate")
    new_uid = again["resource"]["uid"]
    assert new_uid != doomed
    work(app)
    assert counts(app, new_uid) == dict.fromkeys(STATUSES, 0)
    assert error_code(lambda: app.workflow(new_uid).get("same-id")) == "unknown_instance"
    sync(app.workflow(new_uid).create(id="same-id"))  # the old id is free in the new space
    work(app)
    assert sync(sync(app.workflow(new_uid).get("same-id")).status())["status"] == "complete"


# -- DW-DEL-5 -----------------------------------------------------------------------------


def test_dw_del_5_the_original_key_reconciles_the_same_delete_operation(
    app: Application, clock: FakeClock
) -> None:
    """DW-DEL-5: retrying DELETE with the original key returns the same Operation, while
    it runs and after it finished; a new key meanwhile is ``resource_busy``."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    first = app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")
    before = app.store.last_position()
    again = app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")
    assert again["operationId"] == first["operationId"]
    assert app.store.last_position() == before
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, "other")) == (
        "resource_busy"
    )
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, None)) == (
        "resource_busy"
    )
    assert app.store.last_position() == before
    work(app)
    finished = app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")
    assert finished["operationId"] == first["operationId"]
    assert finished["status"] == "completed"
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, "new")) == (
        "not_found"
    )
    # A DELETE while the create has not reconciled yet is busy too.
    pending = create_workflow(app, code.worker, "fresh")
    fresh = pending["resource"]["uid"]
    assert error_code(lambda: app.control.delete_workflow(SPACE, fresh, ACTOR, None)) == (
        "resource_busy"
    )


def test_dw_del_5_a_delete_key_reused_for_another_workflow_is_a_conflict(
    app: Application,
) -> None:
    """DW-DEL-5 / decisions P21: the original key reconciles *its* Operation; the same
    key with a different request (another UID) is ``conflict``, never a false 202."""
    code = deployed_worker(app)
    first = ready_workflow(app, code.worker, "first")
    second = ready_workflow(app, code.worker, "second")
    app.control.delete_workflow(SPACE, first, ACTOR, "shared-key")
    outcome = "accepted"
    try:
        app.control.delete_workflow(SPACE, second, ACTOR, "shared-key")
    except BlackOpsError as error:
        outcome = error.code
    work(app)
    assert outcome == "conflict" or app.control.get_workflow(SPACE, second)["deleting"]


ERASER = {"id": "root", "kind": "admin"}


def test_dw_del_5_the_original_key_reconciles_its_delete_after_a_purge(
    app: Application,
) -> None:
    """DW-DEL-5 after retention forgot the Operation: its first event is the tombstone, so
    the replay is compared with the params digest the tombstone keeps (it was refused as a
    request "for another request"; found by a defect hunt, stop 40)."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker, "first")
    other = ready_workflow(app, code.worker, "second")
    deleted = app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")["operationId"]
    work(app)
    app.purge_operation(deleted, actor=ERASER, reason="erasure")
    assert app.status(deleted)["purged"] is not None
    before = app.store.last_position()
    again = app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")
    assert again["operationId"] == deleted and again["status"] == "completed"
    assert error_code(lambda: app.control.delete_workflow(SPACE, other, ACTOR, "del-key")) == (
        "conflict"
    )
    assert app.store.last_position() == before


def test_dw_spec_7_a_replayed_key_answers_its_update_after_a_purge(app: Application) -> None:
    """A control-plane Operation purged by retention: the same request under its key is
    that Operation, another request ``conflict``; nothing is appended (the replay read the
    tombstone's missing params and answered ``invalid_params``: defect hunt, stop 40)."""
    code = deployed_worker(app)
    second = upload(app, code.worker, bundle("two"))
    work(app)
    update = deploy(app, code.worker, [(second, 100)], key="deploy-key")
    app.purge_operation(update, actor=ERASER, reason="erasure")
    before = app.store.last_position()
    same = [{"version": second, "weight": 100}]
    replayed = app.control.update_deployment(SPACE, code.worker, same, ACTOR, "deploy-key")
    assert replayed["operationId"] == update
    another = [{"version": code.version, "weight": 100}]
    assert error_code(
        lambda: app.control.update_deployment(SPACE, code.worker, another, ACTOR, "deploy-key")
    ) == ("conflict")
    assert app.store.last_position() == before


def test_dw_del_5_a_delete_while_a_put_is_pending_is_resource_busy(app: Application) -> None:
    """DW-DEL-5: a short concurrent change (an accepted, unreconciled PUT) answers
    ``resource_busy``; once it reconciled the DELETE is accepted."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    put = app.control.replace_workflow(SPACE, uid, {"spec": spec(code.worker)}, ACTOR, "p")
    before = app.store.last_position()
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, "d")) == (
        "resource_busy"
    )
    assert app.store.last_position() == before
    work(app)
    assert op_status(app, put["operationId"]) == "completed"
    view = app.control.delete_workflow(SPACE, uid, ACTOR, "d")
    assert view["status"] == "accepted"
    # A PUT while the delete is pending is busy too.
    assert error_code(
        lambda: app.control.replace_workflow(SPACE, uid, {"spec": spec(code.worker)}, ACTOR, "p2")
    ) == ("resource_busy")


def test_dw_del_5_a_surviving_binding_is_dependency_conflict_not_busy(app: Application) -> None:
    """DW-DEL-5: a surviving Binding answers ``dependency_conflict`` even while a PUT is
    pending (the two are told apart)."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    binds = [{"name": "ME", "resource": {"resourceUid": uid}}]
    upload(app, code.worker, bundle(workflowBindings=binds))
    app.control.replace_workflow(SPACE, uid, {"spec": spec(code.worker)}, ACTOR, "p")
    before = app.store.last_position()
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR, "d")) == (
        "dependency_conflict"
    )
    assert app.store.last_position() == before


def test_dw_del_5_a_create_retried_after_the_delete_never_makes_another_uid(
    app: Application,
) -> None:
    """DW-DEL-5: the create's original key, after the Workflow was deleted, still names
    the same Operation and UID (it is not created again)."""
    code = deployed_worker(app)
    first = create_workflow(app, code.worker, key="create")
    uid = first["resource"]["uid"]
    work(app)
    app.control.delete_workflow(SPACE, uid, ACTOR, None)
    work(app)
    again = create_workflow(app, code.worker, key="create")
    assert again["operationId"] == first["operationId"] and again["resource"]["uid"] == uid
    assert error_code(lambda: app.control.get_workflow(SPACE, uid)) == "not_found"
    assert app.control.list_workflows(SPACE) == []


# -- DW-REPLAY-2, env, bindings ------------------------------------------------------------


def test_dw_replay_2_each_context_picks_a_weighted_version_and_keeps_it(
    app: Application,
) -> None:
    """DW-REPLAY-2: at 50/50 contexts pick both Versions; each context records the
    Version it picked in ``workflow.context_started`` and runs that Version's code for
    all its steps (two Versions of the same module names side by side in one process);
    at 100/0 only the weighted one is picked."""
    worker = new_worker(app)
    one = upload(app, worker, bundle("one"))
    two = upload(app, worker, bundle("two"))
    work(app)
    deploy(app, worker, [(one, 50), (two, 50)])
    uid = ready_workflow(app, worker)
    binding = app.workflow(uid)
    marks = {one: "one", two: "two"}
    for n in range(24):
        sync(binding.create(id=f"i{n}"))
    work(app)
    picked: list[str] = []
    for n in range(24):
        events = app.store.read_stream(instance_stream(uid, f"i{n}"))
        (version,) = context_versions(events)
        output = sync(sync(binding.get(f"i{n}")).status())["output"]
        assert output == {"a": marks[version], "b": marks[version], "mark": marks[version]}
        picked.append(version)
    assert set(picked) == {one, two}

    deploy(app, worker, [(one, 0), (two, 100)])
    app.code_provider.refresh()  # the provider caches an allocation for up to 0.5 s
    for n in range(8):
        sync(binding.create(id=f"j{n}"))
    work(app)
    for n in range(8):
        events = app.store.read_stream(instance_stream(uid, f"j{n}"))
        assert context_versions(events) == [two]
        assert sync(sync(binding.get(f"j{n}")).status())["output"]["mark"] == "two"


def test_dw_replay_2_a_later_context_of_one_instance_records_its_own_pick(
    app: Application, clock: FakeClock
) -> None:
    """DW-REPLAY-2: a wake starts a new context, which picks from the allocation as it
    is then (and records that); the history of the first context is not rewritten."""
    worker = new_worker(app)
    one = upload(app, worker, bundle("one"))
    two = upload(app, worker, bundle("two"))
    work(app)
    deploy(app, worker, [(one, 100)])
    uid = ready_workflow(app, worker)
    binding = app.workflow(uid)
    sync(binding.create(id="sleeper", params={"mode": "sleep"}))
    work(app)
    stream = instance_stream(uid, "sleeper")
    first = app.store.read_stream(stream)
    assert context_versions(first) == [one]
    deploy(app, worker, [(one, 0), (two, 100)])
    app.code_provider.refresh()
    clock.advance(101)
    work(app)
    events = app.store.read_stream(stream)
    assert events[: len(first)] == first
    assert context_versions(events) == [one, two]
    assert sync(sync(binding.get("sleeper")).status())["output"]["mark"] == "two"


def test_env_carries_declared_values_and_bindings_create_children(app: Application) -> None:
    """DW-ABI-2 / §2: ``self.env.NAME`` of a Version is a WorkflowBinding to the bound
    Workflow (the parent creates a child instance through it) and env carries the
    declared values; nothing else of the management plane."""
    code = deployed_worker(app)
    child_uid = ready_workflow(app, code.worker, "child")
    parent_worker = new_worker(app, "parents")
    parent_version = upload(
        app,
        parent_worker,
        bundle(
            env={"GREETING": "hello"},
            workflowBindings=[{"name": "CHILD", "resource": {"resourceUid": child_uid}}],
        ),
    )
    work(app)
    deploy(app, parent_worker, [(parent_version, 100)])
    parent_uid = ready_workflow(app, parent_worker, "parent", "Parent")
    parent = app.workflow(parent_uid)
    sync(parent.create(id="p1"))
    work(app)
    result = sync(sync(parent.get("p1")).status())
    assert result == {
        "status": "complete",
        "output": {
            "child": "child-of-p1",
            "greeting": "hello",
            "binding": WorkflowBinding.__name__,
            "bound": child_uid,
        },
    }
    child = sync(app.workflow(child_uid).get("child-of-p1"))
    assert sync(child.status()) == {
        "status": "complete",
        "output": {"a": "one", "b": "one", "mark": "one"},
    }
    assert counts(app, child_uid)["complete"] == 1
    version = app.control.version_in(SPACE, parent_version)
    assert version.env == {"GREETING": "hello"}
    assert version.bindings == [{"name": "CHILD", "resource": {"resourceUid": child_uid}}]
