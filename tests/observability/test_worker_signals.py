"""A real in-process worker tells its observer what never reaches the journal: lease
renewals while a handler runs, and executor processes it replaces (SQLite and
PostgreSQL, the wall clock)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from blackops import Application
from blackops.observability.hub import observe


class Two:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        found: dict[str, Any] = await step.do("only", lambda: {"n": 1})
        return found


def test_renewals_and_executor_restarts_are_counted(store_url: str) -> None:
    with Application(store_url) as app:

        @app.operation("t.slow")
        def slow(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
            time.sleep(1.5)  # three heartbeats of a 1 s lease (every 1/3 s)
            return {}

        app.register_workflow(Two, uid="two")
        metrics = observe(app.runtime).metrics
        assert metrics is not None
        worker = app.worker(
            lease_seconds=1, poll_seconds=0.05, workflow_processes=1, contexts_per_process=1
        ).start()
        try:
            op = app.submit("t.slow", {}, actor="t", tenant="acme")

            async def instances() -> list[Any]:
                return [await app.workflow("two").create(id=f"i-{n}") for n in range(2)]

            made = asyncio.run(instances())
            deadline = time.monotonic() + 60
            while app.status(op)["status"] != "completed" or any(
                asyncio.run(i.status())["status"] != "complete" for i in made
            ):
                assert time.monotonic() < deadline, "the worker never finished"
                time.sleep(0.1)
        finally:
            worker.stop(5)
        renewed = metrics.registry.get_sample_value(
            "blackops_lease_renewals_total", {"kind": "operation"}
        )
        assert renewed is not None and renewed >= 1
        recycled = metrics.registry.get_sample_value(
            "blackops_executor_restarts_total", {"reason": "recycled"}
        )
        assert recycled is not None and recycled >= 2  # one fresh process per context
        started = metrics.registry.get_sample_value(
            "blackops_workflow_contexts_started_total", {"workflow": "two"}
        )
        assert started == 2
        assert metrics.registry.get_sample_value(
            "blackops_lease_abandonments_total", {"kind": "operation", "reason": "not_renewed"}
        ) in (None, 0.0)
