"""A real ``blackops serve`` for the console's browser tests, seeded over the API: two
Spaces (``default`` with an admin and a reader, ``globex`` with an admin), operations
(inline, a Deferred one that retried, one in globex), an OrderApproval instance that slept,
waited for and consumed an event, and was charged; a signing key the test knows out of band
(as an auditor would) and a checkpoint covering all of it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_processes import BLACKOPS, ROOT
from served import Served, blackops_serve

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = os.environ.get("BLACKOPS_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = ROOT / "artifacts" / "screenshots"


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


def need_browser() -> None:
    """Skip without a browser; under CI=true a missing browser fails the test instead."""
    missing = browser_missing()
    if missing is None:
        return
    if IN_CI:
        pytest.fail(f"CI=true requires the browser tests to run: {missing}")
    pytest.skip(missing)


@dataclass
class World:
    served: Served
    url: str
    system: str  # the system token
    admin: str  # admin of Space default
    reader: str  # reader in Space default
    globex: str  # admin of Space globex
    key: str  # the log's verifier key, known out of band
    retried: str  # a Deferred inventory.reserve that failed once, then completed
    invoice: str  # an inline invoice.issue
    foreign: str  # an operation of Space globex
    instance: str  # an OrderApproval instance, complete

    def api(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )


def until(what: str, check: Callable[[], Any], seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@contextlib.contextmanager
def console_world(base: Path) -> Iterator[World]:
    key_file = base / "log.key"
    generated = subprocess.run(
        [*BLACKOPS, "keys", "generate", "--name", "console.test/log", "--output",
         str(key_file), "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    import json

    verifier = json.loads(generated.stdout)["verifierKey"]
    store = f"sqlite:///{base}/journal.sqlite3"
    extra = ("--signing-key", str(key_file), "--checkpoint-seconds", "0.3")
    with blackops_serve(store, base / "home", heartbeat_seconds=1.0, extra=extra) as served:
        yield _seed(served, verifier)


def _seed(served: Served, verifier: str) -> World:
    url = served.url
    system = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {served.system_token}"}, timeout=30
    )
    admin = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {served.admin_token}"}, timeout=30
    )

    def ok(response: httpx.Response) -> dict[str, Any]:
        assert response.status_code < 300, response.text
        found: dict[str, Any] = response.json()
        return found

    def token_for(space: str, principal: str, role: str) -> str:
        ok(system.put(f"/v1/spaces/{space}/principals/{principal}", json={"role": role}))
        issued = ok(system.post(f"/v1/spaces/{space}/principals/{principal}/tokens", json={}))
        return str(issued["token"])

    ok(system.post("/v1/spaces", json={"name": "globex"}))
    globex = token_for("globex", "globex-admin", "admin")
    reader = token_for("default", "auditor", "reader")
    ops = "/v1/spaces/default/operations"
    invoice = ok(admin.post(f"{ops}/invoice.issue", json={"customer": "ana", "amount": 42}))
    ok(admin.post(f"{ops}/greeting.say", json={"name": "bob"}))
    deferred = {"Prefer": "respond-async"}
    reserve = admin.post(f"{ops}/inventory.reserve", json={"sku": "B-7"}, headers=deferred)
    retried = ok(reserve)["operationId"]
    foreign = ok(system.post("/v1/spaces/globex/operations/greeting.say", json={}))
    instances = "/v1/spaces/default/workflows/OrderApproval/instances"
    params = {"order": "A-1", "amount": 42, "cool_off_seconds": 0}
    ok(admin.post(instances, json={"id": "order-1", "params": params}))
    until(
        "the instance to wait",
        lambda: admin.get(f"{instances}/order-1").json()["status"] == "waiting",
    )
    approval = {"type": "approval", "payload": {"approved": True, "by": "maria"}}
    ok(admin.post(f"{instances}/order-1/events", json=approval))
    until(
        "the instance to complete",
        lambda: admin.get(f"{instances}/order-1").json()["status"] == "complete",
    )
    until(
        "the Deferred operation to complete",
        lambda: admin.get(f"/v1/operations/{retried}").json()["status"] == "completed",
    )
    until(
        "a checkpoint covering the receipt",
        lambda: admin.get(f"/v1/operations/{retried}/receipt").status_code == 200,
    )
    until(
        "a checkpoint covering the instance's receipt",
        lambda: admin.get(f"{instances}/order-1/receipt").status_code == 200,
    )
    return World(
        served, url, served.system_token, served.admin_token, reader, globex, verifier,
        retried, invoice["operationId"], foreign["operationId"], "order-1",
    )  # fmt: skip
