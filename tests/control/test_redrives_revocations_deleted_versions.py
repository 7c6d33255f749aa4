"""Defect hunt 7, on SQLite and PostgreSQL: a redriven Deployment update is pending again
(DW-SPEC-7), a revocation during a token lookup is not cached over, and a deleted
Version's content is refused on upload. Every test fails on the code before the fix."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
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
    op_status,
    upload,
    work,
)

import blackops.control.handlers as handlers
from blackops import Application
from blackops.cli.main import main
from blackops.control.access import AccessService
from blackops.control.base import DEPLOYMENT_UPDATE, WORKFLOW_CREATE
from blackops.http.app import create_http_app
from blackops.testing import FakeClock
from domain.access import Role
from domain.errors import Unauthorized
from domain.resources import Topic
from domain.supervision import Retryable, Supervision
from journal.resources import deployment_stream
from journal.store import EventStore

SYSTEM = "hunt-7-system-token"
#: A Version whose main module has a class, but no ``Flow`` (DW-ABI-1 mismatch for it).
NO_FLOW = {
    "modules": {"flows": "class Other:\n    def __init__(self, env):\n        pass\n"},
    "main": "flows",
}


def _broken(*args: Any) -> Any:
    raise Retryable("store busy")


def _dead_letter_updates(app: Application, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``blackops.deployment.update`` dead-letters at its first attempt until
    ``monkeypatch.undo()``."""
    specs = app.runtime.handlers.specs
    short = Supervision(max_attempts=1, exhausted="dead_letter")
    spec = dataclasses.replace(specs[DEPLOYMENT_UPDATE], supervision=short)
    monkeypatch.setitem(specs, DEPLOYMENT_UPDATE, spec)
    monkeypatch.setattr(handlers, "load_deployment", _broken)


def _pending(app: Application, worker: str) -> list[str]:
    return [p["operationId"] for p in app.control.deployment(SPACE, worker)["pending"]]


# -- 1. DW-SPEC-7: a redrive makes the dead update's allocation pending again -------------------


def test_dw_spec_7_a_redriven_update_is_pending_for_create_and_version_delete(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = deployed_worker(app)
    bad = upload(app, code.worker, NO_FLOW)
    work(app)
    _dead_letter_updates(app, monkeypatch)
    update = deploy(app, code.worker, [(bad, 100)], run=False)
    work(app)
    monkeypatch.undo()
    assert op_status(app, update) == "dead_letter"
    assert _pending(app, code.worker) == []  # dead and not redriven: settled

    again = app.redrive(update, actor=ACTOR)
    assert op_status(app, again) == "accepted"
    # The redrive will apply the entry keyed by the dead operation: it is pending.
    assert _pending(app, code.worker) == [update]
    before = app.store.last_position()
    assert error_code(lambda: create_workflow(app, code.worker, "late")) == "dependency_conflict"
    assert error_code(lambda: app.control.delete_version(SPACE, bad, ACTOR)) == (
        "dependency_conflict"
    )
    assert app.store.last_position() == before  # refused before any side effect

    work(app)
    assert op_status(app, again) == "completed"
    assert app.control.deployment(SPACE, code.worker)["allocation"] == [
        {"version": bad, "weight": 100}
    ]
    assert _pending(app, code.worker) == []


def test_dw_spec_7_the_newest_redrive_of_a_chain_decides(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redrive that dead-letters too settles the entry again; redriving that redrive
    makes it pending once more."""
    code = deployed_worker(app)
    bad = upload(app, code.worker, NO_FLOW)
    work(app)
    _dead_letter_updates(app, monkeypatch)
    update = deploy(app, code.worker, [(bad, 100)], run=False)
    work(app)
    first = app.redrive(update, actor=ACTOR)
    assert _pending(app, code.worker) == [update]
    work(app)
    monkeypatch.undo()
    assert op_status(app, first) == "dead_letter"
    assert _pending(app, code.worker) == []

    second = app.redrive(first, actor=ACTOR)
    assert _pending(app, code.worker) == [update]
    assert error_code(lambda: create_workflow(app, code.worker, "late")) == "dependency_conflict"
    work(app)
    assert op_status(app, second) == "completed"
    assert _pending(app, code.worker) == []
    assert app.control.deployment(SPACE, code.worker)["allocation"] == [
        {"version": bad, "weight": 100}
    ]


def test_a_later_update_applies_an_earlier_one_whose_redrive_is_live_in_order(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Updates apply in acceptance order: a later update that runs before the redrive of
    an earlier, dead-lettered one applies that one first instead of refusing it as
    ended (its redrive is live: it is not finished)."""
    code = deployed_worker(app)
    two = upload(app, code.worker, bundle("two"))
    work(app)
    generation = app.control.deployment(SPACE, code.worker)["generation"]
    _dead_letter_updates(app, monkeypatch)
    update = deploy(app, code.worker, [(two, 100)], run=False)
    work(app)
    monkeypatch.undo()
    later = deploy(app, code.worker, [(two, 50), (code.version, 50)], run=False)
    clock.advance(1)
    again = app.redrive(update, actor=ACTOR)  # due after ``later``: runs after it
    work(app)
    assert op_status(app, later) == "completed" and op_status(app, again) == "completed"

    events = app.store.read_stream(deployment_stream(code.worker))
    applied = [(e.type, e.data["operation"]) for e in events if "operation" in e.data]
    assert (Topic.DEPLOYMENT_UPDATE_REFUSED, update) not in applied
    assert applied[-2:] == [
        (Topic.DEPLOYMENT_ALLOCATED, update),
        (Topic.DEPLOYMENT_ALLOCATED, later),
    ]
    shown = app.control.deployment(SPACE, code.worker)
    assert shown["generation"] == generation + 2 and shown["pending"] == []
    assert shown["allocation"] == [
        {"version": two, "weight": 50},
        {"version": code.version, "weight": 50},
    ]


def test_r16_delete_while_a_redriven_create_has_not_reconciled_is_busy(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rule in the Workflow DELETE check (R16): a create whose redrive is live
    has not finished, so DELETE answers resource_busy instead of closing the resource
    under it (which made the redrive fail as ``deleted``)."""
    code = deployed_worker(app)
    specs = app.runtime.handlers.specs
    short = Supervision(max_attempts=1, exhausted="dead_letter")
    monkeypatch.setitem(
        specs, WORKFLOW_CREATE, dataclasses.replace(specs[WORKFLOW_CREATE], supervision=short)
    )
    monkeypatch.setattr(handlers, "load_workflow", _broken)
    view = create_workflow(app, code.worker)
    uid = view["resource"]["uid"]
    work(app)
    monkeypatch.undo()
    assert op_status(app, view["operationId"]) == "dead_letter"

    again = app.redrive(view["operationId"], actor=ACTOR)
    assert error_code(lambda: app.control.delete_workflow(SPACE, uid, ACTOR)) == "resource_busy"
    work(app)
    assert op_status(app, again) == "completed"
    assert app.control.get_workflow(SPACE, uid)["observed"]["ready"] is True


# -- 2. a change during a token lookup is never cached over -------------------------------------


class _ChangeDuringLookup:
    """The store, except that the first read of ``stream`` runs ``change`` right after it
    (between the lookup's reads and its cache write), as another thread could."""

    def __init__(self, store: EventStore, stream: str, change: Any) -> None:
        self._store, self._stream, self._change = store, stream, change
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def read_stream(self, stream: str, *args: Any, **kwargs: Any) -> Any:
        events = self._store.read_stream(stream, *args, **kwargs)
        if stream == self._stream and not self.fired:
            self.fired = True
            self._change()
        return events


CTX: dict[str, Any] = {"operation_id": "op-1", "actor": {"id": "root", "kind": "system"}}


@pytest.mark.parametrize("change", ["revoke_token", "revoke_role"])
def test_r3_a_change_during_a_lookup_is_seen_at_once_by_the_next_one(
    app: Application, clock: FakeClock, change: str
) -> None:
    access = AccessService(app.store, clock, cache_ttl=2.0)
    access.create_space("acme", CTX)
    access.create_principal("bob", CTX)
    access.grant("bob", "acme", Role.ADMIN, CTX)
    token, record = access.issue_token("bob", CTX)

    def revoke() -> None:
        if change == "revoke_token":
            access.revoke_token("bob", record["tokenId"], CTX)
        else:
            access.revoke("bob", "acme", CTX)

    wrapper = _ChangeDuringLookup(app.store, "principal-bob", revoke)
    access.store = wrapper  # type: ignore[assignment]
    in_flight = access.authenticate(token)  # read before the change: answered as read
    assert wrapper.fired and in_flight.role_in("acme") is Role.ADMIN
    # ... but not cached: the next lookup in this process sees the change at once.
    if change == "revoke_token":
        with pytest.raises(Unauthorized):
            access.authenticate(token)
    else:
        assert access.authenticate(token).role_in("acme") is None
        assert access.cached_principal(token) is not None  # a lookup after it is cached


# -- 3. a deleted Version's content is refused on upload ----------------------------------------


def _deleted_version(app: Application) -> tuple[str, str]:
    """A Worker's Version (``bundle("one")``), deleted; (worker, version)."""
    code = deployed_worker(app)
    two = upload(app, code.worker, bundle("two"))
    work(app)
    deploy(app, code.worker, [(two, 100)])
    deleted = app.control.delete_version(SPACE, code.version, ACTOR)
    work(app)
    assert op_status(app, deleted["operationId"]) == "completed"
    return code.worker, code.version


def test_uploading_a_deleted_versions_content_again_is_a_conflict(app: Application) -> None:
    worker, version = _deleted_version(app)
    before = app.store.last_position()
    assert error_code(lambda: app.control.upload_version(SPACE, worker, bundle("one"), ACTOR)) == (
        "conflict"
    )
    assert app.store.last_position() == before
    assert app.control.version_in(SPACE, version).deleted

    with TestClient(create_http_app(app, SYSTEM)) as client:
        system = {"Authorization": f"Bearer {SYSTEM}"}
        assert client.post("/v1/spaces", json={"name": SPACE}, headers=system).status_code == 201
        before = app.store.last_position()
        response = client.post(
            f"/v1/spaces/{SPACE}/workers/{worker}/versions", json=bundle("one"), headers=system
        )
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["code"] == "conflict" and "was deleted" in error["message"]
        assert app.store.last_position() == before
        # Other content is a new Version, as ever.
        response = client.post(
            f"/v1/spaces/{SPACE}/workers/{worker}/versions", json=bundle("three"), headers=system
        )
        assert response.status_code == 202, response.text


def test_the_cli_refuses_a_deleted_versions_content_too(
    store_url: str, clock: FakeClock, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "code"
    folder.mkdir()
    for name, text in bundle("one")["modules"].items():
        (folder / f"{name}.py").write_text(text)
    upload_args = ["version", "upload", str(folder), "--space", SPACE, "--worker", "w1"]
    assert main(["space", "create", SPACE, "--store", store_url]) == 0
    assert main(["worker", "create", "w1", "--space", SPACE, "--store", store_url]) == 0
    capsys.readouterr()
    assert main([*upload_args, "--main", "flows", "--json", "--store", store_url]) == 0
    version = json.loads(capsys.readouterr().out)["version"]
    app = Application(store_url, clock=clock)
    try:
        assert app.control.delete_version(SPACE, version, ACTOR)["status"] == "accepted"
        work(app)
    finally:
        app.close()
    assert main([*upload_args, "--main", "flows", "--json", "--store", store_url]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "conflict" and version in error["message"]
