"""DW-ABI-1 verification of a Version bundle, in a fresh interpreter.

DW-ABI-1: every weighted Version's main module has a constructible named export
``className`` whose prototype ``run`` is callable. Bundle code is untrusted and
importing it runs its top level, so :func:`verify_abi` runs ``python -m
blackops.control.abi_check`` as a child process (fork + exec of a new interpreter) with a
minimal environment, a temporary working directory and resource limits, sends the
bundle as JSON on stdin and reads one JSON verdict from stdout. The verdict is read as
it comes, at most :data:`MAX_VERDICT_BYTES` of it (:func:`child_output`): the bundle's
code runs in the child and can write to that pipe, and a verdict that floods it is the
bundle's (``loaded: False``, "the verifier's answer was larger than 1 MiB"), never
read into the host's memory.

The child imports the main module (and what it imports) and nothing else runs: no
class is instantiated and no ``run`` is called. A top-level class of the main module
is ``ok`` when all of these hold, judged from signatures only:

* it is not abstract (``inspect.isabstract``);
* ``cls(env)`` binds: ``inspect.signature(cls).bind(object())`` succeeds;
* ``run``, found in the class's MRO without invoking descriptors, is callable the way
  ``instance.run(event, step)`` would call it: a function (or any callable with
  ``__get__``) must bind ``(self, event, step)``; a classmethod's function must bind
  ``(cls, event, step)``; a staticmethod's function and a plain callable object (no
  ``__get__``) must bind ``(event, step)``. Anything else (``None``, a property, a
  number) is not callable.

The verdict of a bundle that means harm cannot be trusted (its code runs in the
verifier before the checks); the isolation protects the host, not the verdict.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blackops
from blackops.control.bundles import load_version
from domain.errors import InvalidRequest

#: DW-SPEC-2 class names: what a ``className`` may be.
CLASS_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]{0,63}")
MAX_ERROR_CHARS = 500
#: The most of the child's stdout :func:`verify_abi` reads: a verdict is journaled as a
#: document (``domain.documents.MAX_BYTES``), so an honest one is never larger.
MAX_VERDICT_BYTES = 1_048_576
#: Said of a verdict over :data:`MAX_VERDICT_BYTES` (the bundle's fault: a verdict, not
#: verifier trouble, so it does not start with "verifier").
TOO_LARGE = "the verifier's answer was larger than 1 MiB"
#: How :func:`verify_abi`'s errors about the verifier itself begin: a crash, a timeout,
#: no or an unreadable answer may be the machine's (decisions R9: retried). A verdict
#: over :data:`MAX_VERDICT_BYTES` is not among them: only the bundle's code writes that.
VERIFIER_TROUBLE = (
    "verifier exited with status ",
    "verifier output was unreadable",
    "verifier gave no result",
    "verification timed out after ",
)
_CHUNK = 65_536
_ADDRESS_SPACE = 2 * 1024**3
_OPEN_FILES = 256
_MISSING = object()


#: The child's entry: ``blackops.control.abi_check.main`` without running ``blackops/__init__``
#: (the whole product: 0.3 s of imports the verifier does not need).
_CHILD = (
    "import sys, types, os\n"
    "package = types.ModuleType('blackops')\n"
    "package.__path__ = [os.path.join(os.environ['PYTHONPATH'], 'blackops')]\n"
    "sys.modules['blackops'] = package\n"
    "from blackops.control.abi_check import main\n"
    "main()\n"
)


def verify_abi(
    key: str, modules: dict[str, str], main: str, *, timeout: float = 30.0
) -> dict[str, Any]:
    """``{"loaded", "error", "classes": {name: {"ok", "reason"}}}`` for one bundle.

    Never raises for what the bundle does (an import error, a crash, a timeout, an
    answer over :data:`MAX_VERDICT_BYTES` are ``loaded: False`` with an ``error``);
    raises InvalidRequest only when the bundle cannot even be sent (not JSON-encodable).
    """
    request = {"key": key, "modules": modules, "main": main, "cpu_seconds": math.ceil(timeout) + 1}
    try:
        payload = json.dumps(request).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise InvalidRequest(f"the bundle is not JSON-encodable: {error}") from None
    env = {
        "PYTHONPATH": str(Path(blackops.__file__).resolve().parent.parent),
        "PYTHONUTF8": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": os.defpath,
    }
    with tempfile.TemporaryDirectory(prefix="blackops-abi-") as cwd:
        process = subprocess.Popen(
            [sys.executable, "-P", "-s", "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # bundle noise; unbounded output must not pile up here
            cwd=cwd,
            env=env,
            start_new_session=True,  # one process group: a timeout kills what it spawned too
        )
        deadline = time.monotonic() + timeout
        out = b""
        failure: str | None = None
        try:
            out = b"".join(
                child_output(process, payload, deadline=deadline, limit=MAX_VERDICT_BYTES)
            )
            process.wait(max(deadline - time.monotonic(), 0.0))  # EOF: it is exiting
        except (ChildTimedOut, subprocess.TimeoutExpired):
            failure = f"verification timed out after {timeout:g} s"
        except AnswerTooLarge:
            failure = TOO_LARGE
        finally:
            if process.returncode is None:  # timed out, flooded, or the host failed
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            close_pipes(process)
            process.wait()
    if failure is not None:
        return _failed(failure)
    if process.returncode != 0:
        return _failed(f"verifier exited with status {process.returncode}")
    try:
        result = json.loads(out)
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        result = None
    if not _is_verdict(result):
        return _failed("verifier output was unreadable" if out else "verifier gave no result")
    return dict(result)


class ChildTimedOut(Exception):
    """:func:`child_output` reached its deadline."""


class AnswerTooLarge(Exception):
    """:func:`child_output`'s child wrote more than its limit."""


def child_output(
    process: subprocess.Popen[bytes], payload: bytes, *, deadline: float, limit: int
) -> Iterator[bytes]:
    """The child's stdout, chunk by chunk as it comes, while ``payload`` is written to
    its stdin (then closed); ends at end of file. Never more than ``limit`` bytes in all:
    it reads at most one byte past it and raises AnswerTooLarge; raises ChildTimedOut at
    ``deadline`` (``time.monotonic()``). Stops the child from neither: the caller kills
    its process group."""
    assert process.stdin is not None and process.stdout is not None
    out = process.stdout.fileno()
    pending = memoryview(payload)
    total = 0
    with selectors.DefaultSelector() as selector:
        selector.register(out, selectors.EVENT_READ)
        if pending:
            os.set_blocking(process.stdin.fileno(), False)
            selector.register(process.stdin.fileno(), selectors.EVENT_WRITE)
        else:
            process.stdin.close()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildTimedOut
            for key, _ in selector.select(left):
                if key.fd == out:
                    data = os.read(out, min(_CHUNK, limit + 1 - total))
                    if not data:
                        return
                    total += len(data)
                    if total > limit:
                        raise AnswerTooLarge
                    yield data
                    continue
                try:
                    pending = pending[os.write(key.fd, pending[:_CHUNK]) :]
                except BlockingIOError:
                    continue
                except BrokenPipeError:  # it stopped reading: its answer will say why
                    pending = pending[:0]
                if not pending:
                    selector.unregister(key.fd)
                    with contextlib.suppress(OSError):
                        process.stdin.close()


def close_pipes(process: subprocess.Popen[bytes]) -> None:
    """The host's ends of the child's stdin and stdout, closed (not waiting for EOF)."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def check_classes(module: Any) -> dict[str, dict[str, Any]]:
    """DW-ABI-1 for every top-level class of ``module`` whose name is a class name."""
    classes: dict[str, dict[str, Any]] = {}
    for name, value in list(vars(module).items()):
        if isinstance(name, str) and CLASS_NAME.fullmatch(name) and isinstance(value, type):
            try:
                reason = _refusal(value)
            except Exception as error:  # a metaclass may do anything
                reason = f"cannot be inspected: {_describe(error)}"
            classes[name] = {"ok": reason is None, "reason": reason}
    return classes


def _refusal(cls: type) -> str | None:
    """Why ``cls`` fails DW-ABI-1, or None."""
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        return f"abstract class (not implemented: {missing})"
    try:
        inspect.signature(cls).bind(object())
    except TypeError as error:
        return f"cannot be constructed with one argument (env): {error}"
    except ValueError as error:
        return f"constructor signature cannot be inspected: {error}"
    run = next((vars(base)["run"] for base in cls.__mro__ if "run" in vars(base)), _MISSING)
    if run is _MISSING:
        return "has no run method"
    if isinstance(run, staticmethod):
        target, args = run.__func__, 2  # (event, step)
    elif isinstance(run, classmethod):
        target, args = run.__func__, 3  # (cls, event, step)
    elif callable(run):
        target, args = run, 3 if hasattr(run, "__get__") else 2  # (self, event, step)
    else:
        return f"run is not callable ({type(run).__name__})"
    try:
        inspect.signature(target).bind(*([None] * args))
    except TypeError as error:
        return f"run cannot be called as run(event, step): {error}"
    except ValueError as error:
        return f"run signature cannot be inspected: {error}"
    return None


def _failed(error: str) -> dict[str, Any]:
    return {"loaded": False, "error": error[:MAX_ERROR_CHARS], "classes": {}}


def _is_verdict(value: object) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"loaded", "error", "classes"}
        and isinstance(value["loaded"], bool)
        and (value["error"] is None or isinstance(value["error"], str))
        and isinstance(value["classes"], dict)
        and all(
            isinstance(entry, dict)
            and isinstance(entry.get("ok"), bool)
            and (entry.get("reason") is None or isinstance(entry.get("reason"), str))
            for entry in value["classes"].values()
        )
    )


def _describe(error: BaseException) -> str:
    """``"ExceptionType: message"``, short, without a traceback."""
    try:
        message = str(error)
    except Exception:
        message = "<unprintable>"
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text[:MAX_ERROR_CHARS]


def _limit_resources(cpu_seconds: int) -> None:
    """Modest limits for untrusted code (the CPU limit backs up the parent's timeout)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    limits = {
        resource.RLIMIT_AS: _ADDRESS_SPACE,
        resource.RLIMIT_NOFILE: _OPEN_FILES,
        resource.RLIMIT_CPU: cpu_seconds,
        resource.RLIMIT_CORE: 0,
    }
    for which, value in limits.items():
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, hard))


def main() -> None:
    """The child: read a bundle on stdin, load it, write the verdict on the original stdout."""
    request = json.load(sys.stdin)
    _limit_resources(int(request.get("cpu_seconds", 31)))
    # Whatever the bundle prints (print, os.write(1), subprocesses) goes to stderr; the
    # verdict goes to a private, non-inheritable copy of the original stdout.
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        loaded = load_version(request["key"], request["modules"], request["main"])
        verdict: dict[str, Any] = {
            "loaded": True,
            "error": None,
            "classes": check_classes(loaded.main),
        }
    except BaseException as error:  # SystemExit and KeyboardInterrupt from bundles too
        verdict = _failed(_describe(error))
    data = json.dumps(verdict).encode("utf-8")
    while data:
        data = data[os.write(result_fd, data) :]
    # Skip atexit handlers and non-daemon threads the bundle may have left behind.
    os._exit(0)


if __name__ == "__main__":
    main()
