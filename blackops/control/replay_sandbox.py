"""A replay check of untrusted candidate code (a Version, a bundle folder), in a fresh
interpreter (decisions C13).

A Version is uploaded by a Space's deployer: its top-level code and its ``run`` are not
the operator's and must never execute in the API server, the CLI or the deploy gate,
whose memory holds the log signing key, the system token and store credentials. So
:func:`check_in_child` runs the whole check (loading the bundle, both replays) in a new
interpreter started by fork + exec (``subprocess``: it inherits no Python object of
the caller), with the environment the ABI verifier gives its child (no ``BLACKOPS_*``
variable, no store URL: only ``PYTHONPATH``, ``PATH`` and two interpreter flags), a
temporary working directory, the ABI verifier's resource limits and a timeout. The
histories are sent on its stdin (pickled: the parent trusts its own data); the child
answers on stdout in JSON only (the caller never unpickles what candidate code could
write), one ``{"done": n}`` line per history checked and then ``{"report": ...}`` or
``{"error": ...}``. The child opens no store: nothing can be appended.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blackops
from blackops.control.bundle_source import BundleSource
from blackops.workflows.replay_check import History, ReplayReport
from domain.errors import InvalidRequest

#: Seconds a check may take: a base, plus this much per history.
BASE_TIMEOUT = 60.0
PER_HISTORY_TIMEOUT = 0.1
MAX_ERROR_CHARS = 500

_CHILD = "from blackops.control.replay_sandbox import child_main\nchild_main()\n"


def child_environment() -> dict[str, str]:
    """All the child gets of the caller's environment: where blackops is, nothing else."""
    return {
        "PYTHONPATH": str(Path(blackops.__file__).resolve().parent.parent),
        "PYTHONUTF8": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": os.defpath,
    }


def check_in_child(
    candidate: str,
    sources: dict[str, BundleSource],
    histories: list[History],
    *,
    progress: Callable[[int], None] | None = None,
    timeout: float | None = None,
) -> ReplayReport:
    """``histories`` replayed in a fresh, stripped-down interpreter through the bundle
    classes ``sources`` names per workflow uid. Raises InvalidRequest when the candidate
    cannot be checked (it does not load, the child crashes or runs out of time)."""
    if timeout is None:
        timeout = BASE_TIMEOUT + PER_HISTORY_TIMEOUT * len(histories)
    payload = pickle.dumps(
        {
            "candidate": candidate,
            "sources": sources,
            "histories": histories,
            "cpu_seconds": math.ceil(timeout) + 1,
        }
    )
    with tempfile.TemporaryDirectory(prefix="blackops-replay-") as cwd:
        process = subprocess.Popen(
            [sys.executable, "-P", "-s", "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # candidate noise
            cwd=cwd,
            env=child_environment(),
            start_new_session=True,  # one process group: a timeout kills what it spawned
        )
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        answer: Any = None
        try:
            assert process.stdin is not None and process.stdout is not None
            with contextlib.suppress(BrokenPipeError):
                process.stdin.write(payload)
                process.stdin.close()
            for line in process.stdout:
                try:
                    message = json.loads(line)
                except ValueError:
                    break
                if isinstance(message, dict) and type(message.get("done")) is int:
                    if progress is not None:
                        progress(message["done"])
                    continue
                answer = message
                break
        finally:
            timer.cancel()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if expired.is_set():
        raise InvalidRequest(f"the replay check of {candidate} timed out after {timeout:g} s")
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        raise InvalidRequest(f"{candidate} cannot be checked: {answer['error'][:MAX_ERROR_CHARS]}")
    report = ReplayReport.from_document(answer.get("report") if isinstance(answer, dict) else None)
    if report is None or len(report.instances) != len(histories):
        raise InvalidRequest(
            f"the replay check of {candidate} gave no readable report "
            f"(child status {process.returncode})"
        )
    return report


def child_main() -> None:
    """The child: limits first, then the bundle loaded and every history checked."""
    from blackops.control.abi_check import _describe, _limit_resources
    from blackops.workflows.replay_check import check_histories

    request: dict[str, Any] = pickle.load(sys.stdin.buffer)
    _limit_resources(int(request["cpu_seconds"]))
    result_fd = os.dup(1)
    os.dup2(2, 1)  # what the candidate prints must not reach the answer
    sys.stdout = sys.stderr

    def say(message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode("utf-8")
        while data:
            data = data[os.write(result_fd, data) :]

    sources: dict[str, BundleSource] = request["sources"]
    try:
        loaded = {workflow: source.load(workflow) for workflow, source in sources.items()}
        report = check_histories(
            lambda workflow: loaded[workflow],
            request["histories"],
            candidate=request["candidate"],
            progress=lambda done: say({"done": done}),
            sources=sources.get,
        )
        answer: dict[str, Any] = {"report": report.to_document()}
    except BaseException as error:  # SystemExit from candidate code too
        answer = {"error": _describe(error)}
    say(answer)
    os._exit(0)  # skip what the candidate left behind (atexit, threads)
