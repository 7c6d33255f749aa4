"""``blackops.testing.TestEnvironment``: the one object users test with (python-contract §6)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from blackops import Application, Retryable, Supervision
from blackops.testing import FakeClock, TestEnvironment

START = datetime(2026, 1, 1, tzinfo=UTC)


def _shop() -> Application:
    shop = Application()

    @shop.operation("t.flaky", supervision=Supervision(max_attempts=2, initial_delay_seconds=60))
    def flaky(ctx: object, params: dict[str, object]) -> dict[str, object]:
        if getattr(ctx, "attempt") == 1:  # noqa: B009
            raise Retryable("not yet")
        return {"ok": True}

    return shop


def test_it_takes_an_unopened_application_onto_memory_and_a_fake_clock() -> None:
    shop = _shop()
    with TestEnvironment(shop, start=START) as env:
        assert isinstance(env.clock, FakeClock) and env.app is shop
        assert shop.store_display == "memory://"
        operation_id = shop.submit("t.flaky", {}, actor="t", tenant="acme")
        asyncio.run(env.work_until_idle())
        assert shop.status(operation_id)["status"] == "retry_scheduled"
        asyncio.run(env.advance(59))
        assert shop.status(operation_id)["status"] == "retry_scheduled"
        asyncio.run(env.advance(1))
        assert shop.outcome(operation_id) == {"ok": True}
        assert env.event_types(operation_id)[-1] == "operation.completed"
        assert env.events(operation_id)[0]["at"] == "2026-01-01T00:00:00.000000Z"
        assert [e["stream"] for e in env.journal()].count(operation_id) == len(
            env.events(operation_id)
        )


def test_it_refuses_an_application_that_already_ran(tmp_path: object) -> None:
    shop = _shop()
    shop.use_store("memory://")
    shop.submit("t.flaky", {}, actor="t", tenant="acme")
    with pytest.raises(ValueError, match="has not run yet"):
        TestEnvironment(shop)


def test_a_fresh_environment_runs_workflows_and_reads_their_history() -> None:
    class Nap:
        def __init__(self, env: object) -> None:
            self.env = env

        async def run(self, event: object, step: object) -> dict[str, object]:
            await step.sleep("nap", 10)  # type: ignore[attr-defined]
            return {"woke": True}

    async def check() -> None:
        async with TestEnvironment(start=START) as env:
            binding = env.app.register_workflow(Nap)
            instance = await binding.create(id="n-1")
            await env.work_until_idle()
            assert await instance.status() == {"status": "sleeping"}
            await env.advance(10)
            assert await instance.status() == {"status": "complete", "output": {"woke": True}}
            kinds = [e["type"] for e in env.history("Nap", "n-1")]
            assert kinds[0] == "workflow.created" and kinds[-1] == "workflow.completed"
            assert "workflow.step_suspended" in kinds

    asyncio.run(check())
