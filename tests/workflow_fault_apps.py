"""Workflows that ``blackops worker`` subprocesses run in tests/faults/test_workflow_kills.py.

Behaviour comes from the environment, so each process of one test can differ:

- ``WF_MARKER_DIR``: the effect of step ``slow`` writes ``<instance>.<pid>.start`` there
  when it begins (the pid is the executor process running it);
- while the file ``$WF_MARKER_DIR/hold`` exists the effect keeps waiting, so a test
  can kill the worker in the middle of it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from blackops import Application


def _slow(instance_id: str) -> dict[str, Any]:
    folder = Path(os.environ.get("WF_MARKER_DIR", "."))
    (folder / f"{instance_id}.{os.getpid()}.start").write_text(str(os.getpid()))
    while (folder / "hold").exists():
        time.sleep(0.02)
    return {"pid": os.getpid()}


class Blocking:
    """Three steps; the middle one can be held open by the test."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        await step.do("first", lambda: {"ok": 1})
        slow = await step.do("slow", lambda: _slow(event.instance_id))
        await step.do("after", lambda: {"ok": 2})
        return {"slow_pid": slow["pid"]}


class Steady:
    """Three steps of 0.1 s each: a run spans a database outage."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        total = 0
        for name in ("one", "two", "three"):
            got = await step.do(name, lambda: _pause(0.1))
            total += got["n"]
        return {"total": total}


def _pause(seconds: float) -> dict[str, Any]:
    time.sleep(seconds)
    return {"n": 1}


def build_app(store: str | None = None) -> Application:
    application = Application(store)
    application.register_workflow(Blocking)
    application.register_workflow(Steady)
    application.operation("wf.noop")(_noop)
    return application


def _noop(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
    return {}


app = build_app()  # what ``blackops worker --app workflow_fault_apps:app --store URL`` runs
