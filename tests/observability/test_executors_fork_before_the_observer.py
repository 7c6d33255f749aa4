"""`blackops worker` forks its executors before it attaches the observer, so they never load
what the observer imports (prometheus_client, OpenTelemetry and what they pull in: 4 MB of
every executor's 26 MB, found measuring issue 17's memory row, stop 36), and the observer
still hears the workflow runner's signals (an executor replaced after its context)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from cli_processes import ROOT, free_port
from scrape import METRICS_TOKEN, metrics_worker, scrape, value

from blackops import Application

APP = """
import sys
from blackops import Application

OBSERVER_MODULES = ("prometheus_client", "opentelemetry", "wsgiref")


def loaded():
    return {"modules": sorted(m for m in sys.modules if m.split(".")[0] in OBSERVER_MODULES)}


class Probe:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        return await step.do("loaded", loaded)


app = Application()
app.register_workflow(Probe)
"""


def test_executors_load_nothing_of_the_observer_and_it_hears_them(
    store_url: str, tmp_path: Path
) -> None:
    (tmp_path / "probe_app.py").write_text(APP)
    port = free_port()
    log_path = tmp_path / "worker.log"
    worker = metrics_worker(tmp_path, "probe_app:app", store_url, port, log_path,
                            "--workflow-processes", "1", "--contexts-per-process", "1")  # fmt: skip
    try:
        sys.path.insert(0, str(tmp_path))
        try:
            from probe_app import Probe  # type: ignore[import-not-found]
        finally:
            sys.path.remove(str(tmp_path))
        with Application(store_url) as app:
            app.register_workflow(Probe)
            instance = asyncio.run(app.workflow("Probe").create(id="probe"))
            deadline = time.monotonic() + 60
            while (status := asyncio.run(instance.status()))["status"] in ("queued", "running"):
                assert worker.poll() is None, log_path.read_text()[-2000:]
                assert time.monotonic() < deadline, f"never complete: {status}"
                time.sleep(0.1)
        assert status["status"] == "complete", status
        assert status["output"] == {"modules": []}, status  # the executor loaded none of them
        url = f"http://127.0.0.1:{port}/metrics"
        while True:  # the runner replaced its executor after the context: the observer heard
            try:
                code, _, samples = scrape(url, METRICS_TOKEN)
            except httpx.HTTPError:
                code, samples = 0, {}
            if (
                code == 200
                and value(samples, "blackops_executor_restarts_total", reason="recycled") >= 1
            ):
                break
            assert time.monotonic() < deadline, "no executor restart counted"
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def test_a_metrics_port_taken_is_refused_before_anything_opens(
    tmp_path: Path,
) -> None:
    """A port that is taken is refused before anything opens: no journal, no executor (it
    was bound after the store opened and the executors forked: found by review, stop 36)."""
    import json
    import socket

    (tmp_path / "probe_app.py").write_text(APP)
    store = f"sqlite:///{tmp_path}/j.sqlite3"
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "BLACKOPS_METRICS_TOKEN": "metrics-secret",
        "BLACKOPS_HOME": str(tmp_path / "home"),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "blackops", "worker", "--app", "probe_app:app", "--store",
             store, "--metrics-port", str(taken.getsockname()[1]), "--json"],
            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
    finally:
        taken.close()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "invalid_request"
    assert sorted(os.listdir(tmp_path)) == ["probe_app.py"]  # no journal, no state: P16
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if store.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(pid)
        except OSError:
            continue
    assert left == []
