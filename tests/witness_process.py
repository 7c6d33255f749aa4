"""A real ``blackops witness serve`` process on a free port: started, waited for, killed."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from cli_processes import BLACKOPS, ROOT, free_port


@dataclass
class WitnessProcess:
    url: str
    verifier_key: str
    process: subprocess.Popen[str]
    log: Path

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


@contextlib.contextmanager
def witness_serve(
    key: Path, logs: list[str], state: Path, port: int | None = None
) -> Iterator[WitnessProcess]:
    port = port or free_port()
    log = state.parent / f"witness-{port}.log"
    handle = open(log, "w")  # noqa: SIM115 (closed below)
    args = [*BLACKOPS, "witness", "serve", "--key", str(key), "--state", str(state),
            "--port", str(port), "--json"]  # fmt: skip
    for verifier in logs:
        args += ["--log", verifier]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=handle, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        if not first:
            handle.flush()
            raise RuntimeError(f"witness did not start: {log.read_text()[-2000:]}")
        info = json.loads(first)
        url = info["url"]
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{url}/", timeout=1)
                break
            if time.monotonic() > deadline:
                raise RuntimeError("witness did not answer")
            time.sleep(0.05)
        yield WitnessProcess(url, info["verifierKey"], process, log)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        handle.close()
