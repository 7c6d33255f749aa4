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
``{"error": ...}``. The child opens no store: nothing can be appended. Its answer is read
as it comes, up to :func:`answer_limit` bytes in all (a longer one, or a line that
never ends, is an InvalidRequest, the child killed), within the timeout.
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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blackops
from blackops.control.abi_check import AnswerTooLarge, ChildTimedOut, child_output, close_pipes
from blackops.control.bundle_source import BundleSource
from blackops.workflows.replay_check import History, ReplayReport
from domain.errors import InvalidRequest

#: Seconds a check may take: a base, plus this much per history.
BASE_TIMEOUT = 60.0
PER_HISTORY_TIMEOUT = 0.1
MAX_ERROR_CHARS = 500
#: What the child's answer may take in the caller's memory (:func:`answer_limit`):
#: candidate code runs in the child and can write to the answer's pipe.
BASE_ANSWER_BYTES = 16 * 1024 * 1024
ANSWER_BYTES_PER_REQUEST_BYTE = 4

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
    cannot be checked (it does not load, the child crashes or runs out of time, or its
    answer is unreadable or longer than :func:`answer_limit`)."""
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
    limit = answer_limit(len(payload))
    answer: Any = None
    failure: str | None = None
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
        deadline = time.monotonic() + timeout
        lines = _Lines()
        try:
            for chunk in child_output(process, payload, deadline=deadline, limit=limit):
                answer = lines.feed(chunk, progress)
                if answer is not _MORE:
                    break
            else:
                answer = lines.feed(None, progress)  # end of file: a last unended line
        except ChildTimedOut:
            failure = f"the replay check of {candidate} timed out after {timeout:g} s"
        except AnswerTooLarge:
            failure = (
                f"{candidate} cannot be checked: the replay child's answer was larger "
                f"than {limit / 2**20:.1f} MiB"
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            close_pipes(process)
            process.wait()
    if failure is not None:
        raise InvalidRequest(failure)
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        raise InvalidRequest(f"{candidate} cannot be checked: {answer['error'][:MAX_ERROR_CHARS]}")
    report = ReplayReport.from_document(answer.get("report") if isinstance(answer, dict) else None)
    if report is None or len(report.instances) != len(histories):
        raise InvalidRequest(
            f"the replay check of {candidate} gave no readable report "
            f"(child status {process.returncode})"
        )
    return report


def answer_limit(request_bytes: int) -> int:
    """The most :func:`check_in_child` reads of a child's answer (its progress lines and
    its report, each line included): :data:`BASE_ANSWER_BYTES` and
    :data:`ANSWER_BYTES_PER_REQUEST_BYTE` per byte of the request. An honest report is
    smaller than the histories it is about (which the request holds, each recorded
    output included), so only a candidate's flood reaches it."""
    return BASE_ANSWER_BYTES + ANSWER_BYTES_PER_REQUEST_BYTE * request_bytes


class _More:
    pass


#: :meth:`_Lines.feed`'s "no answer yet" (None is an answer: an unreadable one).
_MORE: Any = _More()


class _Lines:
    """The child's lines as they come: progress is reported, the first other line (or
    one that is not JSON) is the answer."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, chunk: bytes | None, progress: Callable[[int], None] | None) -> Any:
        """The answer, or :data:`_MORE`; ``chunk`` None: the end of the output."""
        start = len(self.buffer)
        if chunk is None:
            if not self.buffer:
                return None  # no answer at all
            self.buffer += b"\n"
        else:
            self.buffer += chunk
        while (end := self.buffer.find(b"\n", start)) >= 0:
            line = bytes(self.buffer[:end])
            del self.buffer[: end + 1]
            start = 0
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: nested too deep
                return None
            if isinstance(message, dict) and type(message.get("done")) is int:
                if progress is not None:
                    progress(message["done"])
                continue
            return message
        return _MORE


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
