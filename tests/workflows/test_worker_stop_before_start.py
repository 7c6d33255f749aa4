"""A stop asked before the worker starts (a SIGTERM or Ctrl-C while `blackops worker` was
still building it and its observer) is kept: the started worker claims nothing, neither an
operation nor a workflow context, and ends. The stop reached only the Deferred side; the
workflow runner started anyway and ran a context to its end (found by review, stop 36)."""

from __future__ import annotations

import asyncio
from typing import Any

from blackops import Application, ExecutionContext
from blackops.workflows.api import WorkflowEvent
from blackops.workflows.context import Step
from journal.store import EventStore


class Once:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Step) -> dict[str, Any] | None:
        return await step.do("once", lambda: {"ran": True})


def test_a_stop_asked_before_start_claims_nothing(store_url: str) -> None:
    app = Application(store_url)
    app.register_workflow(Once)

    @app.operation("stop.probe")
    def probe(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    try:
        asyncio.run(app.workflow("Once").create(id="one"))
        app.submit("stop.probe", {}, actor="t", tenant="acme")
        worker = app.worker(workflow_processes=1, grace_seconds=5)
        worker.request_stop()  # as `blackops worker`'s signal handler, before start()
        worker.start()
        assert worker.join(60), "the worker did not stop"
    finally:
        app.close()
    with EventStore(store_url, create=False) as store:
        types = [event.type for event in store.iter_after(0)]
    assert "workflow.context_started" not in types, types
    assert "attempt.started" not in types, types
