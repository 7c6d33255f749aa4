"""``POST /v1/spaces/{space}/workers/{worker}/deployment/check`` (issue 16, decisions C9)
on SQLite and PostgreSQL: the dry run of an allocation change answers each weighed
Version's replay report against the recorded histories, and appends nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from resource_helpers import (
    ACTOR,
    SPACE,
    bundle,
    create_workflow,
    deployed_worker,
    sync,
    upload,
    work,
)

from blackops import Application
from blackops.http.app import create_http_app

TOKEN = "check-route-token"


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    with TestClient(create_http_app(app, TOKEN)) as test_client:
        yield test_client


def post(client: TestClient, path: str, body: Any) -> Any:
    headers = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    return client.post(path, content=json.dumps(body).encode(), headers=headers)


@dataclass(frozen=True)
class Deployment:
    """A Worker with its Version deployed at 100 % and a reconciled Workflow on it."""

    worker: str
    version: str
    uid: str  # the Workflow's
    path: str  # the dry run's route

    def run(self, app: Application, instance_id: str, params: Any = None) -> Any:
        """An instance created and worked until it completes or waits; its handle."""
        instance = sync(app.workflow(self.uid).create(id=instance_id, params=params))
        work(app)
        return instance

    def candidate(self, app: Application, change: Callable[[str], str]) -> str:
        """A Version whose ``flows`` module is ``change(flows)``, verified; its id."""
        modules = bundle()["modules"]
        flows = change(modules["flows"])
        version = upload(app, self.worker, {**bundle(), "modules": {**modules, "flows": flows}})
        work(app)
        return version


@pytest.fixture
def deployment(app: Application) -> Deployment:
    app.access.create_space(SPACE, app.access_context(ACTOR, SPACE))
    deployed = deployed_worker(app)
    view = create_workflow(app, deployed.worker)
    work(app)
    path = f"/v1/spaces/{SPACE}/workers/{deployed.worker}/deployment/check"
    return Deployment(deployed.worker, deployed.version, view["resource"]["uid"], path)


def test_the_dry_run_answers_the_report_and_appends_nothing(
    app: Application, client: TestClient, deployment: Deployment
) -> None:
    uid, path = deployment.uid, deployment.path
    instance = deployment.run(app, "i-1")
    assert sync(instance.status())["status"] == "complete"
    renamed = deployment.candidate(app, lambda flows: flows.replace('step.do("b"', 'step.do("b2"'))
    before = app.store.last_position()

    bad = post(client, path, {"allocation": [{"version": renamed, "weight": 100}]})
    assert bad.status_code == 200, bad.text
    doc = bad.json()
    assert doc["compatible"] is False
    (checked,) = doc["versions"]
    assert checked["version"] == renamed and checked["scope"]["workflows"] == {
        uid: {"inFlight": 0, "terminal": 1}
    }
    (finding,) = checked["report"]["instances"][0]["findings"]
    assert (finding["kind"], finding["step"], finding["stepKind"]) == (
        "new_step_inside_history", "b2", "do"
    )  # fmt: skip
    good = post(client, path, {"allocation": [{"version": deployment.version, "weight": 100}],
                               "terminalHistories": 0})  # fmt: skip
    assert good.status_code == 200 and good.json()["compatible"] is True
    assert good.json()["versions"][0]["report"]["checked"] == 0  # no terminal one asked for
    refused = post(client, path, {"allocation": [{"version": renamed, "weight": 60}]})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    assert app.store.last_position() == before


#: Top-level code of a Version that hunts for the host's secrets wherever it runs: the
#: signing keys in the process's memory, the BLACKOPS_* variables and store URLs of its
#: environment (the reviewer's x1.py).
THIEF = """\
import gc as _gc, json as _json, os as _os
_found = sorted({type(_o).__name__ for _o in _gc.get_objects()
                 if type(_o).__name__ in ("SigningKey", "Application", "CheckpointService")})
with open(LOOT, "a") as _loot:
    _loot.write(_json.dumps({"pid": _os.getpid(), "found": _found,
                             "keys": [_o.encode() for _o in _gc.get_objects()
                                      if type(_o).__name__ == "SigningKey"],
                             "env": dict(_os.environ)}) + "\\n")
"""


def test_a_version_checked_over_http_reaches_no_secret_of_the_server(
    app: Application,
    deployment: Deployment,
    store_url: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decisions C13: the Version's code runs only in a fresh interpreter, with no
    BLACKOPS_* variable, no store URL and none of the server's objects."""
    import os

    from blackops.audit.checkpoints import CheckpointService
    from replay.notes import SigningKey

    key = SigningKey.generate("example.com/log")
    monkeypatch.setenv("BLACKOPS_SIGNING_KEY", key.encode())
    monkeypatch.setenv("BLACKOPS_SYSTEM_TOKEN", TOKEN)
    monkeypatch.setenv("BLACKOPS_STORE", store_url)
    loot = tmp_path / "loot.jsonl"
    deployment.run(app, "i-1", {"mode": "wait"})
    vid = deployment.candidate(app, lambda flows: THIEF.replace("LOOT", repr(str(loot))) + flows)
    loot.unlink(missing_ok=True)  # what the ABI verifier's child saw is not the point here
    api = create_http_app(app, TOKEN, checkpoints=CheckpointService(app.store, key, app.clock))
    before = app.store.last_position()
    with TestClient(api) as client:
        answer = post(client, deployment.path, {"allocation": [{"version": vid, "weight": 100}]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["versions"][0]["report"]["checked"] == 1
    runs = [json.loads(line) for line in loot.read_text().splitlines()]
    assert runs, "the candidate's code ran nowhere: the test proves nothing"
    secrets = (key.encode(), TOKEN, store_url)
    for run in runs:
        assert run["pid"] != os.getpid()
        assert run["found"] == [] and run["keys"] == []
        assert not [name for name in run["env"] if name.startswith("BLACKOPS")]
        assert not [v for v in run["env"].values() if any(s in v for s in secrets)]
    assert app.store.last_position() == before


def test_the_dry_run_of_a_version_that_drops_a_live_class_says_incompatible(
    app: Application, client: TestClient, deployment: Deployment
) -> None:
    """Decisions C12 over HTTP: the renamed class is ``class_missing``, not "no histories"."""
    uid = deployment.uid
    deployment.run(app, "i-2", {"mode": "wait"})
    renamed = deployment.candidate(app, lambda flows: flows.replace("class Flow:", "class Flow2:"))
    before = app.store.last_position()
    answer = post(client, deployment.path, {"allocation": [{"version": renamed, "weight": 100}]})
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["compatible"] is False
    (checked,) = doc["versions"]
    assert checked["scope"]["workflows"] == {
        uid: {"inFlight": 1, "terminal": 0, "classMissing": "Flow"}
    }
    (instance,) = checked["report"]["instances"]
    (finding,) = instance["findings"]
    assert instance["instanceId"] == "i-2" and finding["kind"] == "class_missing"
    assert checked["report"]["counts"]["class_missing"] == 1
    assert app.store.last_position() == before
