"""Deferred operations through every surface: HTTP 202, CLI submit/outcome/redrive,
``blackops worker`` and ``blackops serve`` processes, the in-process Worker."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_processes import BLACKOPS, ROOT, free_port, run
from conftest import spaces
from fastapi.testclient import TestClient

from blackops import Application, ExecutionContext, Retryable, Supervision
from blackops.http.app import create_http_app
from blackops.testing import FakeClock

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def wait_for(check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what or check}")


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    @app.operation("greeting.say")
    def say(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"hello": params.get("name", "world"), "by": ctx.actor.id}

    @app.operation("job.dead", supervision=Supervision(exhausted="dead_letter"))
    def dead(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("downstream is down")

    spaces(app, "acme", "default")
    with TestClient(create_http_app(app, TOKEN)) as test_client:
        yield test_client


def post(client: TestClient, path: str, body: bytes = b"{}", **headers: str) -> Any:
    return client.post(
        path, content=body, headers={**AUTH, "content-type": "application/json", **headers}
    )


def test_prefer_respond_async_answers_202_with_location(
    client: TestClient, app: Application
) -> None:
    """python-contract §4: Deferred answers 202 with the id; GET follows it; the
    Outcome Record (OL-9) is 404 until the operation completed, then served."""
    response = post(
        client, "/v1/spaces/acme/operations/greeting.say", b'{"name": "ana"}',
        prefer="respond-async",
    )  # fmt: skip
    assert response.status_code == 202
    body = response.json()
    operation_id = body["operationId"]
    assert response.headers["location"] == f"/v1/operations/{operation_id}"
    assert response.headers["preference-applied"] == "respond-async"
    assert body["status"] == "accepted"
    status = client.get(response.headers["location"], headers=AUTH).json()
    assert status["status"] == "accepted" and status["mode"] == "deferred"
    outcome = client.get(f"/v1/operations/{operation_id}/outcome", headers=AUTH)
    assert outcome.status_code == 404 and outcome.json()["error"]["code"] == "not_found"
    import asyncio

    asyncio.run(app.work_until_idle())
    outcome = client.get(f"/v1/operations/{operation_id}/outcome", headers=AUTH)
    assert outcome.status_code == 200
    assert outcome.json()["outcome"] == {"hello": "ana", "by": "dev"}
    assert outcome.json()["schemaVersion"] == 1


def test_idempotency_key_header(client: TestClient, app: Application) -> None:
    path = "/v1/spaces/acme/operations/greeting.say"
    first = post(
        client, path, b'{"name": "x"}', prefer="respond-async", **{"idempotency-key": "k1"}
    )
    again = post(
        client, path, b'{"name": "x"}', prefer="respond-async", **{"idempotency-key": "k1"}
    )
    assert first.status_code == again.status_code == 202
    assert first.json()["operationId"] == again.json()["operationId"]
    position = app.store.last_position()
    other = post(
        client, path, b'{"name": "y"}', prefer="respond-async", **{"idempotency-key": "k1"}
    )
    assert other.status_code == 409 and other.json()["error"]["code"] == "conflict"
    inline = post(client, path, b"{}", **{"idempotency-key": "k2"})
    assert inline.status_code == 400 and inline.json()["error"]["code"] == "invalid_request"
    bad = post(client, path, b"{}", prefer="respond-async", **{"idempotency-key": "a b"})
    assert bad.status_code == 400
    assert app.store.last_position() == position


@pytest.mark.parametrize(
    ("prefer", "deferred"),
    [("respond-async", True), ("wait=5, respond-async", True), ("RESPOND-ASYNC", True),
     ("return=minimal", False), ("respond-asynchronously", False)],
)  # fmt: skip
def test_prefer_header_is_parsed_as_rfc_7240(
    client: TestClient, prefer: str, deferred: bool
) -> None:
    response = post(client, "/v1/spaces/acme/operations/greeting.say", prefer=prefer)
    assert response.status_code == (202 if deferred else 200)


def test_redrive_route(client: TestClient, app: Application) -> None:
    import asyncio

    dead = post(client, "/v1/spaces/acme/operations/job.dead", prefer="respond-async")
    dead_id = dead.json()["operationId"]
    asyncio.run(app.work_until_idle())
    assert client.get(f"/v1/operations/{dead_id}", headers=AUTH).json()["status"] == "dead_letter"
    response = client.post(f"/v1/operations/{dead_id}/redrive", headers=AUTH)
    assert response.status_code == 202
    new_id = response.json()["operationId"]
    assert response.headers["location"] == f"/v1/operations/{new_id}"
    assert app.events(new_id)[0]["data"]["redrive_of"] == dead_id
    accepted = client.post(f"/v1/operations/{new_id}/redrive", headers=AUTH)
    assert accepted.status_code == 409 and accepted.json()["error"]["code"] == "conflict"
    assert client.post("/v1/operations/nope/redrive", headers=AUTH).status_code == 404


def test_cli_submit_worker_outcome(store_url: str, tmp_path: Path) -> None:
    """``op submit`` prints the id (exit 0); a ``blackops worker`` process in another
    process runs it (OL-4); ``op outcome --json`` prints the Outcome Record."""
    submitted = run(
        "op", "submit", "invoice.issue", "--app", "examples.shop:app", "--json",
        "--params", '{"customer": "ana", "amount": 7}', "--idempotency-key", "inv-7",
        store=store_url,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    body = json.loads(submitted.stdout)
    operation_id = body["operationId"]
    assert body["status"] == "accepted"
    again = run(
        "op", "submit", "invoice.issue", "--app", "examples.shop:app",
        "--params", '{"customer": "ana", "amount": 7}', "--idempotency-key", "inv-7",
        store=store_url,
    )  # fmt: skip
    assert again.stdout.strip() == operation_id
    missing = run("op", "outcome", operation_id, "--json", store=store_url)
    assert missing.returncode == 1 and json.loads(missing.stdout)["error"]["code"] == "not_found"
    worker = subprocess.Popen(
        [*BLACKOPS, "worker", "--app", "examples.shop:app", "--store", store_url,
         "--concurrency", "2", "--poll-seconds", "0.1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        app = Application(store_url)
        wait_for(lambda: app.status(operation_id)["status"] == "completed", what="completion")
        worker_id = app.events(operation_id)[2]["data"]["worker"]
        assert f":{worker.pid}:" in worker_id  # claimed by the worker process (OL-4)
        app.close()
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    assert "stopped" in output
    outcome = run("op", "outcome", operation_id, "--json", store=store_url)
    assert outcome.returncode == 0, outcome.stderr
    record = json.loads(outcome.stdout)
    assert record["outcome"]["amount"] == 7 and record["type"] == "examples.shop.Invoice"


def test_cli_redrive(store_url: str) -> None:
    app = Application(store_url, clock=FakeClock())

    @app.operation("t.dead", supervision=Supervision(exhausted="dead_letter"))
    def dead(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("no")

    import asyncio

    dead_id = app.submit("t.dead", {}, actor="a", tenant="t")
    asyncio.run(app.work_until_idle())
    app.close()
    done = run("op", "redrive", dead_id, "--json", "--actor", "ops", store=store_url)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["redriveOf"] == dead_id
    reopened = Application(store_url)
    try:
        received = reopened.events(body["operationId"])[0]
        assert received["data"]["redrive_of"] == dead_id
        assert received["context"]["actor"] == {"id": "ops", "kind": "cli"}
    finally:
        reopened.close()


def test_serve_runs_an_in_process_worker(tmp_path: Path, store_url: str) -> None:
    """``blackops serve`` = HTTP + in-process worker: a 202 operation completes."""
    port = free_port()
    env = {**os.environ, "BLACKOPS_HOME": str(tmp_path / "home"), "BLACKOPS_DEV_TOKEN": ""}
    server = subprocess.Popen(
        [*BLACKOPS, "serve", "--app", "examples.shop:app", "--port", str(port),
         "--store", store_url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{base}/openapi.json", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, what="the server")
        token = (tmp_path / "home" / "dev-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Prefer": "respond-async"}
        answer = httpx.post(
            f"{base}/v1/spaces/default/operations/invoice.issue",
            json={"customer": "ana", "amount": 42},
            headers=headers,
        )
        assert answer.status_code == 202
        location = base + answer.headers["location"]
        auth = {"Authorization": f"Bearer {token}"}
        wait_for(
            lambda: httpx.get(location, headers=auth).json()["status"] == "completed",
            what="the in-process worker",
        )
        outcome = httpx.get(location + "/outcome", headers=auth).json()
        assert outcome["outcome"]["amount"] == 42
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=30)
    assert "worker" in output


def test_in_process_worker_threads_on_the_real_clock(store_url: str) -> None:
    """The Python API that starts a worker: many operations, concurrency 4, retries."""
    app = Application(store_url)
    seen: dict[str, int] = {}

    @app.operation("t.flaky", supervision=Supervision(max_attempts=3))
    def flaky(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, int]:
        seen[ctx.operation_id] = seen.get(ctx.operation_id, 0) + 1
        if params["n"] % 3 == 0 and ctx.attempt == 1:
            raise Retryable("first try fails")
        return {"n": params["n"]}

    worker = app.worker(concurrency=4, poll_seconds=0.2).start()
    try:
        ids = [app.submit("t.flaky", {"n": n}, actor="a", tenant="t") for n in range(60)]
        wait_for(
            lambda: all(app.status(i)["status"] == "completed" for i in ids),
            what="60 operations",
        )
    finally:
        worker.stop(5)
        app.close()
    assert sorted(seen.values()).count(2) == 20  # n % 3 == 0 ran twice
    assert worker.running == 0


@pytest.mark.parametrize(
    "flags",
    [["--concurrency", "0"], ["--lease-seconds", "0"], ["--grace-seconds", "-1"],
     ["--poll-seconds", "0"], ["--lease-seconds", "nan"]],
)  # fmt: skip
def test_bad_worker_flags_are_refused_with_a_code(tmp_path: Path, flags: list[str]) -> None:
    done = run(
        "worker", "--app", "examples.shop:app", "--json", *flags,
        store=f"sqlite:///{tmp_path}/w.db",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "invalid_request"


def test_hostile_deferred_requests_change_nothing(client: TestClient, app: Application) -> None:
    before = app.store.last_position()  # the Spaces the fixture created
    path = "/v1/spaces/acme/operations/greeting.say"
    cases = [
        (b"{}", {"idempotency-key": "k" * 256}, 400),
        (b"[1, 2]", {}, 400),
        (b'{"a": 1, "a": 2}', {}, 400),
        (b'{"n": NaN}', {}, 400),
    ]
    for body, headers, status in cases:
        response = post(client, path, body, prefer="respond-async", **headers)
        assert response.status_code == status, (body, headers, response.text)
        assert "code" in response.json()["error"]
    latin = client.post(
        path,
        content=b"{}",
        headers={**AUTH, "prefer": "respond-async", "idempotency-key": "caf\xe9".encode("latin-1")},
    )
    assert latin.status_code == 400
    assert (
        client.post(
            "/v1/spaces/bad space/operations/greeting.say",
            headers={**AUTH, "prefer": "respond-async"},
        ).status_code
        == 400
    )
    for path_ in ("/v1/operations/nope/outcome", "/v1/operations/outcome:x/outcome"):
        assert client.get(path_, headers=AUTH).status_code == 404
    assert app.store.last_position() == before


def test_a_replayed_key_answers_the_current_status(client: TestClient, app: Application) -> None:
    import asyncio

    path = "/v1/spaces/acme/operations/greeting.say"
    first = post(client, path, b"{}", prefer="respond-async", **{"idempotency-key": "r-1"})
    asyncio.run(app.work_until_idle())
    again = post(client, path, b"{}", prefer="respond-async", **{"idempotency-key": "r-1"})
    assert again.status_code == 202 and again.json()["status"] == "completed"
    assert again.json()["operationId"] == first.json()["operationId"]
    twice = client.post(
        path,
        content=b"{}",
        headers=[
            ("authorization", f"Bearer {TOKEN}"),
            ("prefer", "respond-async"),
            ("idempotency-key", "a"),
            ("idempotency-key", "b"),
        ],
    )
    assert twice.status_code == 400 and twice.json()["error"]["code"] == "invalid_request"


def test_worker_json_prints_exactly_one_document(tmp_path: Path) -> None:
    """python-contract §5: --json prints exactly one JSON document on stdout."""
    store = f"sqlite:///{tmp_path}/w.db"
    worker = subprocess.Popen(
        [*BLACKOPS, "worker", "--app", "examples.shop:app", "--store", store, "--json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        started = json.loads(worker.stdout.readline())
        assert "invoice.issue" in started["types"]
        assert started["worker"].split(":")[1] == str(worker.pid)
    finally:
        worker.terminate()
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0
    assert out.strip() == ""  # nothing after the one document
    assert "stopped" in err


def test_a_worker_that_cannot_renew_abandons_before_the_lease_ends(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OL-8: with every renewal failing, the attempt is abandoned before 0.8 x lease
    (and its end is never committed); fencing would refuse it anyway."""
    from domain.errors import BackendUnavailable

    app = Application(store_url)
    release = {"go": False}

    @app.operation("t.slow")
    def slow(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, bool]:
        while not release["go"]:
            time.sleep(0.01)
        return {"done": True}

    worker = app.worker(concurrency=1, lease_seconds=10, poll_seconds=0.05)

    def failing_renew(attempts: Any) -> Any:
        raise BackendUnavailable("injected: renewals fail")

    monkeypatch.setattr(worker.engine, "renew", failing_renew)
    operation_id = app.submit("t.slow", {}, actor="a", tenant="t")
    worker.start()
    try:
        wait_for(lambda: worker.running == 1, what="the claim")
        claimed_at = time.monotonic()
        [attempt] = list(worker._running)
        wait_for(lambda: attempt.abandoned, timeout=10, what="abandonment")
        abandoned_after = time.monotonic() - claimed_at
        # 0.8 x lease (8 s) as the worker sees it; the test sees it later on a loaded
        # machine. 9 s: well before the lease ends, with a second for the machine.
        assert abandoned_after < 9, abandoned_after
        release["go"] = True
        wait_for(lambda: worker.running == 0, what="the handler to return")
        assert app.status(operation_id)["status"] == "running"  # never committed
    finally:
        release["go"] = True
        worker.stop(1)
        app.close()


def test_a_busy_in_process_worker_claims_a_burst_of_submits_together(store_url: str) -> None:
    """Under load the coordinator's turns begin at least ``wake_delay`` apart: submits
    arriving right after a turn that claimed are claimed by one later transaction, not
    one each (each submit still wakes the worker, and an idle worker claims at once)."""
    app = Application(store_url)
    app.operation("t.noop")(lambda ctx, params: None)
    claims: list[int] = []  # attempt.started events per committed transaction

    def observe(appends: Any, members: int, seconds: float) -> None:
        started = sum(e.type == "attempt.started" for a in appends for e in a.events)
        if started:
            claims.append(started)

    app.runtime.add_commit_observer(observe)
    # wake_delay 1.5 s: the burst's ten submits, slowed by a loaded machine, still land
    # within a pause or two.
    worker = app.worker(concurrency=8, wake_delay=1.5, poll_seconds=5).start()
    try:
        first = app.submit("t.noop", {}, actor="a", tenant="t")
        wait_for(lambda: bool(claims), what="the first claim")  # idle: claimed at once
        burst = [app.submit("t.noop", {"n": n}, actor="a", tenant="t") for n in range(10)]
        wait_for(
            lambda: all(app.status(i)["status"] == "completed" for i in [first, *burst]),
            what="11 operations",
        )
    finally:
        worker.stop(5)
        app.close()
    assert claims[0] == 1
    assert sum(claims[1:]) == 10
    assert len(claims[1:]) <= 3, claims  # one transaction per submit without the pacing
