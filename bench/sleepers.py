"""The memory scenario's application (`bench/workflows.py`): what a user's module holds,
its workflow and its ``Application``, and nothing of the bench harness (argparse, pickle,
statistics, the stores' helpers), which ``blackops worker`` would otherwise load into the
worker and, through the fork, into every executor it measures."""

from __future__ import annotations

from typing import Any

from blackops import Application
from blackops.workflows.api import WorkflowEvent
from blackops.workflows.context import Step

DAY = 86_400


class Sleeper:
    """Sleeps for a day at its first step."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: WorkflowEvent, step: Step) -> dict[str, Any]:
        await step.sleep("nap", DAY)
        return {}


#: What `blackops worker --app sleepers:WORKER_APP` runs (on its --store).
WORKER_APP = Application(None)
WORKER_APP.register_workflow(Sleeper)
