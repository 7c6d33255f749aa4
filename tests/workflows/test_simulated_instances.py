"""1,000 instances of a workflow with do (and retries), sleep and wait_for_event, driven by
the fake clock with random event timing; every instance must end as the spec predicts.

Each instance draws: how many times its effect fails (0-3, with maxAttempts 3 and
exponential backoff from 1 s), how long it sleeps (0-5 s), its wait timeout (1-6 s),
when (if ever) its ``go`` event arrives, whether a second ``go`` and a ``noise`` event
arrive. The model below computes, from the spec alone, when each step happens and how
the instance ends; the journal must agree, and must never show an event consumed twice
or a step result committed twice.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from blackops import Application, BlackOpsError, WaitTimeout
from blackops.testing import FakeClock

N = 1000
HORIZON = 40  # seconds of fake time; every instance ends well before
EXECUTIONS: Counter[str] = Counter()


class Mixed:
    """do (may fail), sleep, wait (timeout caught), then complete."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        plan = event.params
        key = event.instance_id

        def flaky() -> dict[str, Any]:
            EXECUTIONS[key] += 1
            if EXECUTIONS[key] <= plan["fails"]:
                raise RuntimeError(f"failure {EXECUTIONS[key]}")
            return {"runs": EXECUTIONS[key]}

        policy = {"maxAttempts": 3, "initialDelaySeconds": 1, "backoff": "exponential"}
        done = await step.do("flaky", flaky, retry_policy=policy)
        await step.sleep("nap", plan["sleep"])
        try:
            got = await step.wait_for_event("go", type="go", timeout_seconds=plan["timeout"])
        except WaitTimeout:
            got = None
        return {"runs": done["runs"], "got": got}


@dataclass
class Case:
    id: str
    fails: int
    sleep: int
    timeout: int
    go_at: int | None
    second_go: bool
    noise_at: int | None

    def params(self) -> dict[str, Any]:
        return {"fails": self.fails, "sleep": self.sleep, "timeout": self.timeout}

    def predicted(self) -> dict[str, Any]:
        """Status, output and discarded-event count, from the spec's rules alone."""
        if self.fails >= 3:  # DW-DO-4: the final failure is step_failed, uncaught
            status: dict[str, Any] = {"status": "errored"}
            return {"view": status, "reason": "step_failed", "discarded": self._sent_by(3)}
        # DW-DO-2: exponential from 1 s: retries at +1, then +2 (attempt 3 at t=3).
        done_at = [0, 1, 3][self.fails]
        wait_start = done_at + self.sleep  # DW-SLEEP-1: deadline fixed at the first call
        deadline = wait_start + self.timeout
        # DW-WAIT-4 / D11: accepted at or before the deadline wins; after it, the timeout.
        go_at = self.go_at
        got = go_at is not None and go_at <= deadline
        ended_at = max(wait_start, go_at) if go_at is not None and got else deadline + 1
        output = {"runs": self.fails + 1, "got": {"n": 1} if got else None}
        return {
            "view": {"status": "complete", "output": output},
            "discarded": self._sent_by(ended_at) - (1 if got else 0),
        }

    def _sent_by(self, t: int) -> int:
        """Events accepted at or before tick ``t`` (sent before that tick's work)."""
        sent = 0
        if self.go_at is not None and self.go_at <= t:
            sent += 1 + (1 if self.second_go else 0)
        if self.noise_at is not None and self.noise_at <= t:
            sent += 1
        return sent


def cases(seed: int) -> list[Case]:
    rng = random.Random(seed)
    made = []
    for n in range(N):
        go_at = rng.choice([None, *range(0, 16)])
        made.append(
            Case(
                id=f"sim-{n}",
                fails=rng.choice([0, 0, 1, 2, 3]),
                sleep=rng.randint(0, 5),
                timeout=rng.randint(1, 6),
                go_at=go_at,
                second_go=go_at is not None and rng.random() < 0.3,
                noise_at=rng.choice([None, *range(0, 10)]),
            )
        )
    return made


def test_a_thousand_instances_end_as_the_spec_predicts(store_url: str, clock: FakeClock) -> None:
    """DW-DO-2, DW-DO-3, DW-DO-4, DW-SLEEP-1, DW-SLEEP-2, DW-WAIT-2, DW-WAIT-4, DW-EVT-4,
    DW-HERR-2: random timing, every outcome predicted; no event consumed twice, no step
    result committed twice."""
    app = Application(store_url, clock=clock)
    binding = app.register_workflow(Mixed)
    made = cases(seed=20261130)
    EXECUTIONS.clear()

    async def drive() -> None:
        for case in made:
            await binding.create(id=case.id, params=case.params())
        for tick in range(HORIZON):
            for case in made:
                inst = await binding.get(case.id) if _sends_at(case, tick) else None
                if inst is None:
                    continue
                if case.go_at == tick:
                    await _send_if_open(inst, "go", {"n": 1})
                    if case.second_go:
                        await _send_if_open(inst, "go", {"n": 2})
                if case.noise_at == tick:
                    await _send_if_open(inst, "noise", None)
            await app.work_until_idle()
            clock.advance(1)

    try:
        asyncio.run(drive())
        mismatches = []
        for case in made:
            expected = case.predicted()
            state = app.instances.load(binding.resource, case.id)
            view = state.status_view()
            events = app.store.read_stream(state.stream)
            if expected["view"]["status"] == "errored":
                ok = view["status"] == "errored" and view["error"]["reason"] == expected["reason"]
            else:
                ok = view == expected["view"]
            terminal = events[-1]
            if ok and terminal.data["discarded_events"] != expected["discarded"]:
                ok = False
            if not ok:
                mismatches.append((case, view, terminal.data, expected))
            completed = [e.data["name"] for e in events if e.type == "workflow.step_completed"]
            assert len(completed) == len(set(completed)), case  # no result committed twice
            consumed = [
                e.data["event"]
                for e in events
                if e.type == "workflow.step_completed" and "event" in e.data
            ]
            assert len(consumed) == len(set(consumed)), case  # no event consumed twice
            assert EXECUTIONS[case.id] == min(case.fails + 1, 3)  # each attempt ran once
        assert not mismatches, mismatches[:3]
    finally:
        app.close()


def _sends_at(case: Case, tick: int) -> bool:
    return case.go_at == tick or case.noise_at == tick


async def _send_if_open(inst: Any, event_type: str, payload: dict[str, Any] | None) -> None:
    """Send unless the instance already ended (errored early: instance_terminal)."""
    try:
        await inst.send_event(type=event_type, payload=payload)
    except BlackOpsError as error:
        if error.code != "instance_terminal":
            raise
