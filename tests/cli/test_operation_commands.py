"""The ``blackops`` CLI as a user runs it: real processes, both stores, exit codes, --json."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from cli_processes import BLACKOPS, ROOT, free_port, run


def op_run(params: str, store: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``blackops op run invoice.issue`` on the example app, with --json."""
    return run(
        "op", "run", "invoice.issue", "--app", "examples.shop:app", "--json",
        "--params", params, *extra, store=store,
    )  # fmt: skip


def test_op_run_prints_the_completion_json_and_exits_zero(store_url: str) -> None:
    """OL-9: Inline returns the outcome in the completion JSON of the CLI with --json."""
    done = op_run('{"customer": "ana", "amount": 42}', store_url, "--actor", "ana")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)  # exactly one JSON document
    assert body["status"] == "completed"
    assert body["outcome"]["customer"] == "ana" and body["outcome"]["issued_by"] == "ana"

    status = run("op", "status", body["operationId"], "--json", store=store_url)
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "completed"
    events = run("op", "events", body["operationId"], "--json", store=store_url)
    assert [e["type"] for e in json.loads(events.stdout)["events"]][-1] == "operation.completed"
    human = run("op", "events", body["operationId"], store=store_url)
    assert "operation.completed" in human.stdout


def test_op_run_exit_codes_say_what_happened(store_url: str) -> None:
    """OL-6 on the CLI: a rejection keeps its code and exits 3; invalid params exit 1."""
    rejected = op_run('{"customer": "ana", "amount": 0}', store_url)
    assert rejected.returncode == 3
    assert json.loads(rejected.stdout)["rejection"]["code"] == "amount_not_positive"

    invalid = op_run('{"amount": NaN}', store_url)
    assert invalid.returncode == 1
    error = json.loads(invalid.stdout)["error"]
    assert error["code"] == "invalid_params" and "NaN is not JSON" in error["message"]
    huge = op_run('{"amount": ' + "9" * 5000 + "}", store_url)
    assert huge.returncode == 1
    assert json.loads(huge.stdout)["error"]["code"] == "invalid_params"
    unknown = run("op", "status", "0190f6c1-0000-7000-8000-000000000000", store=store_url)
    assert unknown.returncode == 1 and "not_found" in unknown.stderr


def test_op_run_failure_exits_four(tmp_path: Path, store_url: str) -> None:
    """OL-8 on the CLI: an ordinary exception is a failure (exit 4), never a rejection."""
    module = tmp_path / "crashy.py"
    module.write_text(
        "from blackops import Application\n"
        "app = Application()\n"
        "@app.operation('job.crash')\n"
        "def crash(ctx, params):\n"
        "    raise RuntimeError('disk on fire')\n"
    )
    done = subprocess.run(
        [*BLACKOPS, "op", "run", "job.crash", "--app", "crashy:app", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "BLACKOPS_STORE": store_url},
    )
    assert done.returncode == 4, done.stderr
    body = json.loads(done.stdout)
    assert body["failure"]["message"] == "RuntimeError: disk on fire"
    assert body["status"] == "failed" and "rejection" not in body
    # BLACKOPS_STORE chose the store: the operation is readable there.
    status = run("op", "status", body["operationId"], "--json", store=store_url)
    assert json.loads(status.stdout)["status"] == "failed"


def test_serve_prints_how_to_try_it_and_answers(tmp_path: Path, store_url: str) -> None:
    """What ``make run`` does: serve the example app, token required, on either store."""
    port = free_port()
    env = {**os.environ, "BLACKOPS_HOME": str(tmp_path / "home"), "BLACKOPS_DEV_TOKEN": ""}
    server = subprocess.Popen(
        [
            *BLACKOPS,
            "serve",
            "--app",
            "examples.shop:app",
            "--port",
            str(port),
            "--store",
            f"sqlite:///{tmp_path}/serve.db",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.get(f"{base}/openapi.json", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        token = (tmp_path / "home" / "dev-token").read_text().strip()
        assert (
            httpx.post(f"{base}/v1/spaces/default/operations/greeting.say", json={}).status_code
            == 401
        )
        answer = httpx.post(
            f"{base}/v1/spaces/default/operations/invoice.issue",
            json={"customer": "ana", "amount": 42},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert answer.status_code == 200 and answer.json()["outcome"]["amount"] == 42
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=30)
    assert token in output and f"{base}" in output and "curl" in output


@pytest.mark.parametrize("args", [["op"], ["op", "run"], ["nope"]])
def test_usage_errors_exit_two(args: list[str]) -> None:
    done = subprocess.run([*BLACKOPS, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""  # without --json: argparse's words, on stderr only


@pytest.mark.parametrize(
    ("args", "words"),
    [(["hold", "abc", "--json"], "--reason"), (["op", "run", "t.ok", "--json", "--bogus"],
     "--bogus"), (["op", "status", "--json"], "operation_id")],
)  # fmt: skip
def test_a_usage_error_with_json_is_one_document_too(args: list[str], words: str) -> None:
    """python-contract §5 and P16: --json prints exactly one document, errors included; a
    usage error printed none (found by a spec review, stop 36). Still exit 2."""
    done = subprocess.run([*BLACKOPS, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]  # exactly one document
    assert error["code"] == "invalid_request" and words in error["message"]
    assert words in done.stderr  # the usage lines stay where a person reads them
