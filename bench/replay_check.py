"""The replay checker's speed: histories checked per second, beside the issue's goals.

Records one complete instance of a 10-step workflow and one of a 1,000-step workflow
(``do`` steps, on ``memory://``), copies the 10-step history under ``--histories``
stream and instance names, then checks them against the same code (every history
compatible, so every replay runs to the end: two replays per history, the second under a
shifted clock and another seed). Each figure is the median of REPEATS runs, in this
process's CPU time (``time.process_time``: the machine is shared); the bundle's figure
adds its child process's CPU time (its second replays run there). The goals
(issue 16): at least 1,000 ten-step histories per second, a 1,000-step history in under
50 ms. Printed, never asserted.

Usage: .venv/bin/python bench/replay_check.py [--histories N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script

from blackops import Application
from blackops.testing import recorded_histories
from blackops.workflows.replay_check import History, check_histories, code_for

REPEATS = 5


FLOW_SOURCE = """
class Flow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        total = 0
        for n in range(STEPS):
            got = await step.do(f"s{n}", lambda n=n: {"n": n})
            total += got["n"]
        return {"total": total}
"""


def bundled(steps: int) -> Any:
    """The same workflow as a bundle (a Version's code): its second replays run in a
    child process under another hash seed."""
    from blackops.control.replay_gate import bundle_candidate

    source = FLOW_SOURCE.replace("STEPS", str(steps))
    _, candidate = bundle_candidate(None, {"flows": source}, "flows")
    return candidate


def flow(steps: int) -> type:
    class Flow:
        def __init__(self, env: Any) -> None:
            self.env = env

        async def run(self, event: Any, step: Any) -> Any:
            total = 0
            for n in range(steps):
                got = await step.do(f"s{n}", lambda n=n: {"n": n})
                total += got["n"]
            return {"total": total}

    Flow.__name__ = Flow.__qualname__ = f"Flow{steps}"
    return Flow


def record(steps: int) -> tuple[type, History]:
    cls = flow(steps)
    app = Application("memory://")
    try:
        binding = app.register_workflow(cls, uid=f"flow{steps}")
        asyncio.run(binding.create(id="one"))
        asyncio.run(app.work_until_idle())
        (history,) = recorded_histories(app, f"flow{steps}")
    finally:
        app.close()
    assert history.events[-1].type == "workflow.completed"
    return cls, history


def copies(history: History, count: int) -> list[History]:
    made = []
    for n in range(count):
        stream = f"wf-{n:040x}"
        events = []
        for event in history.events:
            data = event.data
            if event.type == "workflow.created":
                data = {**data, "instance_id": f"i-{n}"}
            events.append(replace(event, stream=stream, data=data))
        made.append(History(stream, events))
    return made


def median_seconds(run: Any) -> float:
    runs = []
    for _ in range(REPEATS):
        start = time.process_time()
        run()
        runs.append(time.process_time() - start)
    return statistics.median(runs)


def _cpu_with_children() -> float:
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def median_with_children(run: Any) -> float:
    """CPU time of this process and its (finished) child processes."""
    runs = []
    for _ in range(REPEATS):
        start = _cpu_with_children()
        run()
        runs.append(_cpu_with_children() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    small_cls, small = record(10)
    many = copies(small, args.histories)
    small_code = code_for(small_cls)
    assert check_histories(small_code, many).compatible
    small_seconds = median_seconds(lambda: check_histories(small_code, many))
    per_second = args.histories / small_seconds
    bundle = bundled(10)
    child = check_histories(bundle, many, sources=bundle.source)
    assert child.compatible and child.hash_seed_varied
    child_seconds = median_with_children(
        lambda: check_histories(bundle, many, sources=bundle.source)
    )
    child_per_second = args.histories / child_seconds

    large_cls, large = record(1000)
    large_code = code_for(large_cls)
    assert check_histories(large_code, [large]).compatible
    large_ms = median_seconds(lambda: check_histories(large_code, [large])) * 1000

    figures = {
        "tenStepHistoriesPerSecond": round(per_second),
        "tenStepHistoriesPerSecondWithHashSeedChild": round(child_per_second),
        "tenStepGoalPerSecond": 1000,
        "thousandStepMilliseconds": round(large_ms, 2),
        "thousandStepGoalMilliseconds": 50,
        "eventsPerTenStepHistory": len(small.events),
        "eventsPerThousandStepHistory": len(large.events),
        "histories": args.histories,
        "repeats": REPEATS,
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"10-step histories ({len(small.events)} events each), {args.histories} per run:")
    print(f"  {per_second:>10,.0f} histories/s   goal >= 1,000/s   ratio {per_second / 1000:.2f}")
    print(
        f"  {child_per_second:>10,.0f} histories/s   (a bundle: second replays in a child "
        "process under another hash seed; CPU time with the child's)"
    )
    print(f"1,000-step history ({len(large.events)} events):")
    print(f"  {large_ms:>10.2f} ms           goal <  50 ms      ratio {large_ms / 50:.2f}")


if __name__ == "__main__":
    main()
