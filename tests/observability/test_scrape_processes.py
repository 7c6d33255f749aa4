"""``/metrics`` scraped from a real ``blackops serve`` process and from a worker's
``--metrics-port`` after running operations, on SQLite and PostgreSQL: the figures move as
they should (a failed attempt raises the failed counter, a completed operation moves the
status gauge), a scrape without a valid token is 401 with no figures, and the JSON log
lines name claims and attempt ends without the params' secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from cli_processes import free_port
from scrape import METRICS_TOKEN, Samples, metrics_worker, scrape, value
from served import blackops_serve

from blackops import Application

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-never-in-a-log"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def eventually(url: str, token: str, done: Callable[[Samples], bool], what: str) -> Samples:
    deadline = time.monotonic() + 60
    while True:
        status, _, samples = scrape(url, token)
        assert status == 200
        if done(samples):
            return samples
        assert time.monotonic() < deadline, f"{what} never showed in {url}"
        time.sleep(0.2)


def test_serve_metrics(store_url: str, tmp_path: Path) -> None:
    with blackops_serve(store_url, tmp_path / "home") as served:
        url = f"{served.url}/metrics"
        for token in (None, "garbage"):
            status, text, _ = scrape(url, token)
            assert status == 401 and "blackops_" not in text
        status, text, _ = scrape(url, served.admin_token)  # a Space's admin: not every Space
        assert status == 403 and "blackops_" not in text
        _, _, before = scrape(url, served.system_token)
        assert value(before, "blackops_attempts_failed_total", type="inventory.reserve") == 0
        assert (
            value(before, "blackops_operations", type="inventory.reserve", status="completed") == 0
        )
        answer = httpx.post(
            f"{served.url}/v1/spaces/default/operations/inventory.reserve",
            json={"sku": SECRET},
            headers={
                "Authorization": f"Bearer {served.admin_token}",
                "Prefer": "respond-async",
                "traceparent": TRACEPARENT,
            },
            timeout=30,
        )
        assert answer.status_code == 202, answer.text
        operation_id = answer.json()["operationId"]
        after = eventually(
            url, served.system_token,
            lambda s: value(s, "blackops_operations", type="inventory.reserve",
                            status="completed") == 1,
            "the completed operation",
        )  # fmt: skip
        # The shop's inventory.reserve fails its first attempt (retryable), then completes.
        assert value(after, "blackops_attempts_failed_total", type="inventory.reserve") == 1
        assert value(after, "blackops_attempts_retried_total", type="inventory.reserve") == 1
        assert value(after, "blackops_attempts_started_total", type="inventory.reserve") == 2
        assert value(after, "blackops_commit_seconds_count") > value(
            before, "blackops_commit_seconds_count"
        )
        route = "/v1/spaces/{space}/operations/{type}"
        assert value(after, "blackops_http_request_duration_seconds_count",
                     route=route, method="POST", status="202") == 1  # fmt: skip
        assert not [k for k in after if k[0].startswith("blackops_http") and
                    any(operation_id in v for _, v in k[1])]  # fmt: skip
        head = value(after, "blackops_journal_head_position")
        assert head > 0
        assert value(after, "blackops_projection_position", projection="operation_counts") <= head
        assert value(after, "blackops_due_work_backlog", kind="operation") == 0
        log = next((tmp_path).glob("serve-*.log")).read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    mine = [line for line in lines if line.get("operation_id") == operation_id]
    events = [line["event"] for line in mine]
    assert events.count("attempt.started") == 2, events
    assert "attempt.failed" in events and "retry.scheduled" in events
    assert "operation.completed" in events
    claim = next(line for line in mine if line["event"] == "attempt.started")
    assert claim["attempt"] == 1 and claim["fencing_token"] == 1
    assert claim["type"] == "inventory.reserve" and claim["tenant"] == "default"
    assert claim["trace_id"] == TRACEPARENT.split("-")[1]
    assert claim["worker"] and claim["level"] == "info" and claim["ts"].endswith("Z")
    assert SECRET not in log


def test_worker_metrics_port(store_url: str, tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "worker.log"
    worker = metrics_worker(tmp_path, "observed_app:app", store_url, port, log_path,
                            "--workflow-processes", "1", "--log-format", "json")  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60
        while True:
            try:
                status, text, _ = scrape(url, None)
                break
            except httpx.HTTPError:
                assert worker.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the metrics port never answered"
                time.sleep(0.1)
        assert status == 401 and "blackops_" not in text
        assert scrape(url, "wrong")[0] == 401
        assert scrape(url.replace("/metrics", "/other"), METRICS_TOKEN)[0] == 404
        with Application(store_url) as app:
            for kind in ("obs.flaky", "obs.broken"):
                app.operation(kind)(lambda ctx, params: params)  # the worker runs them
            flaky = app.submit("obs.flaky", {"secret": SECRET}, actor="t", tenant="acme")
            broken = app.submit("obs.broken", {"secret": SECRET}, actor="t", tenant="acme")
            after = eventually(
                url, METRICS_TOKEN,
                lambda s: value(s, "blackops_operations", type="obs.flaky",
                                status="completed") == 1
                and value(s, "blackops_operations", type="obs.broken", status="failed") == 1,
                "both operations' ends",
            )  # fmt: skip
            assert app.status(flaky)["status"] == "completed"
            assert app.status(broken)["status"] == "failed"
        assert value(after, "blackops_attempts_failed_total", type="obs.flaky") == 1
        assert value(after, "blackops_attempts_failed_total", type="obs.broken") == 1
        assert value(after, "blackops_attempts_started_total", type="obs.flaky") == 2
        assert value(after, "blackops_attempts_retried_total", type="obs.flaky") == 1
        assert value(after, "blackops_operations", type="obs.broken", status="completed") == 0
        assert value(after, "blackops_commit_group_size_count") >= 4
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    text = log_path.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    ends = [line for line in lines if line.get("operation_id") == broken]
    assert [line["event"] for line in ends] == ["attempt.started", "attempt.failed",
                                                "operation.failed"]  # fmt: skip
    assert ends[1]["level"] == "warning" and ends[1]["error_type"]
    assert SECRET not in text


def test_worker_metrics_options_are_checked_before_anything_opens(tmp_path: Path) -> None:
    store = tmp_path / "never.sqlite3"
    base = {**os.environ, "BLACKOPS_DEV_TOKEN": "", "BLACKOPS_METRICS_TOKEN": "",
            "BLACKOPS_HOME": str(tmp_path / "home")}  # fmt: skip
    cases = [
        (["--metrics-port", "0"], {}, "--metrics-port needs --metrics-token"),
        (["--metrics-port", "70000", "--metrics-token", "t"], {}, "from 0 to 65535"),
        ([], {"BLACKOPS_LOG_FORMAT": "xml"}, "log format must be one of"),
    ]
    for extra, env, message in cases:
        done = subprocess.run(
            [sys.executable, "-m", "blackops", "worker", "--store", f"sqlite:///{store}", *extra],
            cwd=tmp_path, capture_output=True, text=True, env={**base, **env}, timeout=60,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert "invalid_request" in done.stderr and message in done.stderr
        assert not store.exists()
