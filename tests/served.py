"""A real ``blackops serve`` process for client and stream tests: uvicorn on a free port,
the example shop app, its own state dir (tokens) and store; killed when the block ends."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from cli_processes import BLACKOPS, ROOT, free_port


@dataclass(frozen=True)
class Served:
    url: str
    system_token: str  # the dev token: the system principal (whole journal)
    admin_token: str  # admin of Space ``default``
    store: str
    process: subprocess.Popen[str]


@contextlib.contextmanager
def blackops_serve(
    store: str,
    home: Path,
    *,
    heartbeat_seconds: float = 15.0,
    app: str = "examples.shop:app",
    extra: Sequence[str] = (),
) -> Iterator[Served]:
    """``extra``: more ``serve`` options (a signing key, a checkpoint cadence)."""
    port = free_port()
    env = {**os.environ, "BLACKOPS_HOME": str(home), "BLACKOPS_DEV_TOKEN": ""}
    log = open(home.parent / f"serve-{port}.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [*BLACKOPS, "serve", "--app", app, "--port", str(port), "--store", store,
         "--heartbeat-seconds", str(heartbeat_seconds), "--workflow-processes", "1", *extra],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                output = (home.parent / f"serve-{port}.log").read_text()
                raise RuntimeError(f"blackops serve did not start:\n{output[-3000:]}")
            time.sleep(0.1)
        system = (home / "dev-token").read_text().strip()
        admin = (home / "admin-token").read_text().strip()
        yield Served(url, system, admin, store, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
