"""Applications that ``blackops worker`` subprocesses run in the worker fault tests
(tests/faults/test_worker_kills_and_stalls.py).

The store comes from the worker's ``--store``; behaviour comes from environment
variables, so each worker process of one test can behave differently:

- ``FAULT_LABEL``: a name for this worker process (``A``, ``B``...), put in outcomes
  and marker files so a test can tell which process ran what.
- ``FAULT_MARKER_DIR``: if set, every handler run writes ``<op>.<attempt>.<label>.start``
  when it begins and ``<op>.<attempt>.<label>.done`` just before it returns.
- ``FAULT_SLEEP_SECONDS``: overrides the ``sleep`` param of ``fault.sleep``.
- ``FAULT_FAIL_RATE``: the share of ``fault.flaky`` attempts that raise Retryable,
  chosen by :func:`fails` from (operation id, attempt), so a test can predict it.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from blackops import Application, ExecutionContext, Retryable, Supervision

#: fault.flaky gives up after this many attempts (then dead_letter).
FLAKY_MAX_ATTEMPTS = 4


def fails(operation_id: str, attempt: int, rate: float) -> bool:
    """Deterministic pseudo-random choice: does this attempt of this operation fail?"""
    digest = hashlib.sha256(f"{operation_id}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def _label() -> str:
    return os.environ.get("FAULT_LABEL", "?")


def _mark(ctx: ExecutionContext, stage: str) -> None:
    folder = os.environ.get("FAULT_MARKER_DIR")
    if folder:
        name = f"{ctx.operation_id}.{ctx.attempt}.{_label()}.{stage}"
        (Path(folder) / name).write_text(f"{ctx.fencing_token} {ctx.worker}\n")


def build_app(store: str | None = None) -> Application:
    """An Application with the fault operation types (the tests' and the workers')."""
    application = Application(store)
    application.operation("fault.sleep")(run_sleep)
    application.operation(
        "fault.flaky",
        supervision=Supervision(
            max_attempts=FLAKY_MAX_ATTEMPTS,
            backoff="constant",
            initial_delay_seconds=0,
            exhausted="dead_letter",
        ),
    )(run_flaky)
    return application


def run_sleep(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
    """Sleeps ``params["sleep"]`` seconds (or ``$FAULT_SLEEP_SECONDS``), then succeeds."""
    _mark(ctx, "start")
    override = os.environ.get("FAULT_SLEEP_SECONDS")
    time.sleep(float(override) if override else float(params.get("sleep", 0)))
    _mark(ctx, "done")
    return {"label": _label(), "attempt": ctx.attempt, "fencing_token": ctx.fencing_token}


def run_flaky(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
    """Fails retryably for a ``$FAULT_FAIL_RATE`` share of (operation, attempt) pairs."""
    if fails(ctx.operation_id, ctx.attempt, float(os.environ.get("FAULT_FAIL_RATE", "0"))):
        raise Retryable(f"injected failure of attempt {ctx.attempt}")
    return {"n": params.get("n"), "attempt": ctx.attempt}


app = build_app()  # what ``blackops worker --app fault_apps:app --store URL`` runs
