"""Two ways a control-plane Operation must not give up (on SQLite and PostgreSQL).

DW-SPEC-7: verifier trouble (decisions R9: a crash, a timeout, no readable answer) is
never a verdict about the code, however often it recurs; the Version stays unverified
(creates are ``resource_busy``, never ``dependency_conflict``) until a real verdict.

DW-DEL-3/5: while stop cannot be proven, the same DELETE Operation keeps reconciling,
however long the owner's lease; the original Idempotency-Key answers that Operation.

Each test fails on the code before the fix (which recorded the third verifier failure as
the verdict, and let ``StopNotProven`` spend the DELETE's attempt budget).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
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
    sync,
    work,
)

import blackops.control.handlers as handlers
from blackops import Application, BlackOpsError
from blackops.control.abi_check import verify_abi
from blackops.control.base import WORKFLOW_DELETE
from blackops.operations.attempts import record_failure
from blackops.testing import FakeClock
from domain.errors import BackendUnavailable
from journal.resources import load_version, load_workflow

#: What a verifier killed by the machine answers (``abi_check.VERIFIER_TROUBLE``).
KILLED = {"loaded": False, "error": "verifier exited with status -9", "classes": {}}
#: More verifier failures than the three the code before the fix allowed.
TROUBLES = 6


@pytest.fixture(autouse=True)
def short_catalog_ttl(app: Application) -> None:
    """The DELETE waits out workers' catalog cache (1.5 x ttl of real time) before its
    last scan; no other process caches it here, so keep that short."""
    app.code_provider.ttl = 0.02


def _flaky_verifier(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[str]:
    """The verifier is killed ``failures`` times, then works (the real one)."""
    calls: list[str] = []

    def verifier(vid: str, modules: Any, main: str, **kw: Any) -> dict[str, Any]:
        calls.append(vid)
        if len(calls) <= failures:
            return dict(KILLED)
        return verify_abi(vid, modules, main, **kw)

    monkeypatch.setattr(handlers, "verify_abi", verifier)
    return calls


def _refusal(app: Application, worker: str) -> BlackOpsError:
    with pytest.raises(BlackOpsError) as caught:
        create_workflow(app, worker)
    return caught.value


def _small_budget(
    app: Application, monkeypatch: pytest.MonkeyPatch, type_name: str, attempts: int
) -> None:
    """``type_name``'s own policy with a budget of ``attempts`` (a fast test: the real
    budget is 1,000 attempts, ~4 hours of backoff)."""
    specs = app.runtime.handlers.specs
    policy = dataclasses.replace(specs[type_name].supervision, max_attempts=attempts)
    monkeypatch.setitem(specs, type_name, dataclasses.replace(specs[type_name], supervision=policy))


# -- DW-SPEC-7: verifier trouble is never a verdict ------------------------------------------


def test_dw_spec_7_verifier_trouble_past_the_old_budget_leaves_the_version_unverified(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7 (R9): the verifier killed six times is retried every time; meanwhile the
    Version is unverified: a create is ``resource_busy`` naming the trouble, never
    ``dependency_conflict``, and uploading the same content answers the same
    verification. Once the verifier works the real verdict is recorded and the create
    is accepted and reconciled."""
    calls = _flaky_verifier(monkeypatch, TROUBLES)
    worker = new_worker(app)
    view = app.control.upload_version(SPACE, worker, bundle(), ACTOR)
    operation, vid = view["operationId"], view["version"]
    deploy(app, worker, [(vid, 100)], run=False)
    for attempt in range(1, TROUBLES + 1):
        work(app)
        assert len(calls) == attempt
        assert op_status(app, operation) == "retry_scheduled", attempt
        assert app.control.version_in(SPACE, vid).verification is None, attempt
        refused = _refusal(app, worker)
        assert refused.code == "resource_busy", (attempt, refused)
        assert "verifier exited with status -9" in str(refused)
        again = app.control.upload_version(SPACE, worker, bundle(), ACTOR)
        assert again["operationId"] == operation
        clock.advance(300)  # the backoff's cap
    work(app)
    assert len(calls) == TROUBLES + 1
    assert op_status(app, operation) == "completed"
    verification = app.control.version_in(SPACE, vid).verification
    assert verification is not None and verification["loaded"] is True
    assert verification["classes"]["Flow"]["ok"] is True
    created = create_workflow(app, worker)
    work(app)
    assert op_status(app, created["operationId"]) == "completed"
    uid = created["resource"]["uid"]
    assert app.control.get_workflow(SPACE, uid)["observed"]["ready"] is True
    failed = [e for e in app.events(operation) if e["type"] == "attempt.failed"]
    assert len(failed) == TROUBLES  # each recorded as trouble, none as a verdict
    assert all(e["data"]["error"]["type"].endswith("VerifierTrouble") for e in failed)


def test_dw_spec_7_a_dead_lettered_verification_is_asked_again_by_the_same_upload(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7: store failures exhaust the verification (dead letter) without a
    verdict; the Version stays unverified (``resource_busy`` saying how to ask again),
    and uploading the same content redrives that verification, which records the
    verdict: the create is then accepted."""
    worker = new_worker(app)

    def unreachable(*_: Any) -> Any:
        raise BackendUnavailable("the journal store cannot be reached")

    monkeypatch.setattr(handlers, "load_version", unreachable)
    view = app.control.upload_version(SPACE, worker, bundle(), ACTOR)
    operation, vid = view["operationId"], view["version"]
    for _ in range(3):
        work(app)
        clock.advance(300)
    monkeypatch.undo()
    assert op_status(app, operation) == "dead_letter"
    assert load_version(app.store, vid).verification is None
    deploy(app, worker, [(vid, 100)])
    refused = _refusal(app, worker)
    assert refused.code == "resource_busy"
    assert "upload the same content again" in str(refused)

    again = app.control.upload_version(SPACE, worker, bundle(), ACTOR)
    assert again["operationId"] != operation  # a redrive of it (P22)
    assert app.status(again["operationId"])["redriveOf"] == operation
    assert (
        app.control.upload_version(SPACE, worker, bundle(), ACTOR)["operationId"]
        == (again["operationId"])
    )
    work(app)
    assert op_status(app, again["operationId"]) == "completed"
    assert app.control.version_in(SPACE, vid).abi("Flow") is True
    assert create_workflow(app, worker)["status"] == "accepted"


def test_dw_spec_7_deleting_an_unverified_version_ends_its_retries(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-SPEC-7: a Version deleted while its verifier keeps failing gets no verdict and
    its verification ends (rejected ``version_deleted``) instead of retrying for ever."""
    calls = _flaky_verifier(monkeypatch, 1000)
    worker = new_worker(app)
    view = app.control.upload_version(SPACE, worker, bundle(), ACTOR)
    operation, vid = view["operationId"], view["version"]
    work(app)
    assert op_status(app, operation) == "retry_scheduled"
    deleted = app.control.delete_version(SPACE, vid, ACTOR, None)
    for _ in range(3):
        clock.advance(300)
        work(app)
    assert op_status(app, deleted["operationId"]) == "completed"
    assert op_status(app, operation) == "rejected"
    assert app.status(operation)["rejection"]["code"] == "version_deleted"
    assert len(calls) == 1
    assert load_version(app.store, vid).verification is None


# -- DW-DEL-3/5: an unproven stop never exhausts the DELETE ------------------------------------


def _held_workflow(app: Application, lease_seconds: float) -> str:
    """A Ready Workflow with one instance whose context a worker claimed and then died
    (its lease of ``lease_seconds`` runs on): its UID."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    sync(app.workflow(uid).create(id="held", params={"mode": "do"}))
    owner = app.workflow_engine("dead-worker", lease_seconds=lease_seconds)
    held, _ = owner.claim(10)
    assert len(held) == 1
    return uid


def test_dw_del_3_a_lease_longer_than_the_budget_keeps_the_same_delete_reconciling(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-3/5: the owner's lease outlasts the DELETE's attempt budget (three here);
    the Operation is never dead-lettered: it retries (at most 15 s apart) in the same
    Operation, which the original Idempotency-Key answers throughout, and completes
    once the lease has run out."""
    lease = 300
    uid = _held_workflow(app, lease)
    _small_budget(app, monkeypatch, WORKFLOW_DELETE, 3)
    operation = app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")["operationId"]
    start = clock.now()
    while op_status(app, operation) != "completed":
        assert (clock.now() - start).total_seconds() <= 2 * lease, "never completed"
        work(app)
        assert op_status(app, operation) in ("retry_scheduled", "completed")
        replay = app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")
        assert replay["operationId"] == operation
        clock.advance(15)
    assert (clock.now() - start).total_seconds() >= lease
    failed = [e for e in app.events(operation) if e["type"] == "attempt.failed"]
    assert len(failed) > 3 * 5  # well past the budget, all of them StopNotProven
    assert {e["data"]["error"]["type"] for e in failed} == {
        "blackops.control.handlers.StopNotProven"
    }
    assert load_workflow(app.store, uid).deleted
    assert error_code(lambda: app.control.get_workflow(SPACE, uid)) == "not_found"
    assert app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")["operationId"] == operation


def test_dw_del_3_other_failures_keep_their_budget_after_a_long_unproven_stop(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DW-DEL-3: unproven stops spend nothing, so after many of them a store failure is
    retried (its own first); store failures alone still exhaust the budget (three
    here): dead letter, as before."""
    uid = _held_workflow(app, 86_400)
    _small_budget(app, monkeypatch, WORKFLOW_DELETE, 3)
    operation = app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")["operationId"]
    for _ in range(8):
        work(app)
        assert op_status(app, operation) == "retry_scheduled"
        clock.advance(15)

    def unreachable(*_: Any) -> Any:
        raise BackendUnavailable("the journal store cannot be reached")

    monkeypatch.setattr(handlers, "load_workflow", unreachable)
    for _ in range(2):
        work(app)
        assert op_status(app, operation) == "retry_scheduled"
        clock.advance(15)
    work(app)
    assert op_status(app, operation) == "dead_letter"
    errors = [e["data"]["error"]["type"] for e in app.events(operation) if "error" in e["data"]]
    assert errors.count("domain.errors.BackendUnavailable") >= 3


def test_dw_del_3_the_registered_delete_policy_is_never_exhausted_by_unproven_stops(
    app: Application,
) -> None:
    """DW-DEL-3 with the real policy: after 5,000 failed attempts (far past its 1,000)
    an unproven stop is still retried, 15 s later, while a store failure with its
    budget spent is dead-lettered."""
    code = deployed_worker(app)
    uid = ready_workflow(app, code.worker)
    app.control.delete_workflow(SPACE, uid, ACTOR, "del-key")
    policy = app.runtime.handlers.specs[WORKFLOW_DELETE].supervision
    [attempt] = app.engine("probe").claim(10)
    operation, now = attempt.operation, app.runtime.clock.now()
    operation.failures = 5_000
    stop = handlers.StopNotProven("1 instance(s) have not stopped yet")
    decision = record_failure(operation, attempt.ctx, now, policy, stop)
    assert decision.retry_in == 15
    assert operation.public_status == "retry_scheduled"

    # The unproven stop was not counted; a store failure is, and its 1,000th is the last.
    assert (operation.failures, operation.spared_failures) == (5_000, 1)
    spent = BackendUnavailable("the journal store cannot be reached")
    assert policy.is_retryable(spent) and not policy.spares(spent)
    assert policy.may_retry(999) and not policy.may_retry(1_000)
