"""What a Version costs: upload (record + accept its verification), ABI verification in
a fresh interpreter, loading it into an isolated module namespace, and a context's
pick on a resource-backed workflow. Prints figures; asserts nothing about speed.

    .venv/bin/python bench/versions.py [--stores sqlite,postgresql] [--modules 1,20,100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script
sys.path.append(str(Path(__file__).resolve().parent))  # benchstores, also when imported as bench.x

from benchstores import Stores

from blackops import Application
from blackops.control.bundles import load_version
from domain.context import Actor

ACTOR = Actor("bench", "cli")
MAIN = """
from helpers_0 import value_0

class Flow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        got = await step.do("one", lambda: {"v": value_0()})
        return got
"""


def bundle(modules: int, salt: str) -> dict[str, Any]:
    sources = {"flows": MAIN}
    for index in range(max(1, modules - 1)):
        body = "\n".join(f"def f_{index}_{n}(x):\n    return x + {n}\n" for n in range(40))
        value = f"def value_{index}():\n    return {index}\n"
        sources[f"helpers_{index}"] = f"# {salt}\n{body}\n{value}"
    return {"modules": sources, "main": "flows"}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def scenario(store: str, modules: int, rounds: int) -> None:
    app = Application(store)
    worker = app.control.create_worker("default", f"bench-{modules}", ACTOR)
    uploads, verifies, loads, sizes = [], [], [], []
    for round_ in range(rounds):
        content = bundle(modules, f"{modules}-{round_}-{time.time_ns()}")
        sizes.append(sum(len(source) for source in content["modules"].values()))
        start = time.perf_counter()
        accepted = app.control.upload_version("default", worker["uid"], content, ACTOR)
        uploads.append(time.perf_counter() - start)
        start = time.perf_counter()
        app.control.work([accepted["operationId"]], timeout=120)
        verifies.append(time.perf_counter() - start)
        state = app.control.version_in("default", accepted["version"])
        start = time.perf_counter()
        load_version(state.id, state.modules, state.main)
        loads.append(time.perf_counter() - start)
    deploy = app.control.update_deployment(
        "default", worker["uid"], [{"version": accepted["version"], "weight": 100}], ACTOR, None
    )
    app.control.work([deploy["operationId"]])
    created = app.control.create_workflow(
        "default",
        {
            "name": f"bench-{modules}",
            "spec": {"worker": {"resourceUid": worker["uid"]}, "className": "Flow"},
        },
        ACTOR,
        None,
    )
    app.control.work([created["operationId"]])
    uid = created["resource"]["uid"]
    provider = app.code_provider
    picks = []
    for _ in range(200):
        provider.refresh()
        start = time.perf_counter()
        provider.pick(uid)
        picks.append(time.perf_counter() - start)
    binding = app.workflow(uid)

    async def run_instances() -> float:
        start = time.perf_counter()
        for n in range(50):
            await binding.create(id=f"i{n}")
        await app.work_until_idle()
        return (time.perf_counter() - start) / 50

    per_instance = asyncio.run(run_instances())
    kind = store.split(":", 1)[0]
    print(
        f"{kind:10} modules={modules:4} source={statistics.median(sizes) / 1024:7.1f} KiB"
        f"  upload {ms(statistics.median(uploads))}"
        f"  verify {ms(statistics.median(verifies))}"
        f"  load {ms(statistics.median(loads))}"
        f"  pick(uncached) {ms(statistics.median(picks))}"
        f"  create+run/instance {ms(per_instance)}"
    )
    app.close()


TEN_STEPS = """
class Ten:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        total = 0
        for n in range(10):
            got = await step.do(f"s{n}", lambda n=n: {"n": n})
            total += got["n"]
        return {"total": total}
"""


class LocalTen:
    """The same 10-step workflow as a local registration (``register_workflow``)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        total = 0
        for n in range(10):
            got = await step.do(f"s{n}", lambda n=n: {"n": n})
            total += got["n"]
        return {"total": total}


def in_flight(store: str, instances: int, processes: int, resource: bool) -> float:
    """Seconds until ``instances`` 10-step instances, created first, all complete in a
    started worker with ``processes`` executors: a local class, or a Version."""
    app = Application(store)
    if resource:
        worker = app.control.create_worker("default", "ten", ACTOR)
        up = app.control.upload_version(
            "default", worker["uid"], {"modules": {"ten": TEN_STEPS}, "main": "ten"}, ACTOR
        )
        app.control.work([up["operationId"]])
        allocation = [{"version": up["version"], "weight": 100}]
        deployed = app.control.update_deployment("default", worker["uid"], allocation, ACTOR, None)
        app.control.work([deployed["operationId"]])
        body = {
            "name": "ten",
            "spec": {"worker": {"resourceUid": worker["uid"]}, "className": "Ten"},
        }
        created = app.control.create_workflow("default", body, ACTOR, None)
        app.control.work([created["operationId"]])
        binding = app.workflow(created["resource"]["uid"])
    else:
        binding = app.register_workflow(LocalTen, uid="ten")

    async def create_all() -> None:
        for n in range(instances):
            await binding.create(id=f"i{n}")

    asyncio.run(create_all())
    runner = app.worker(workflow_processes=processes)
    start = time.perf_counter()
    runner.start()
    try:
        while True:
            counts = app.instance_counts(binding.uid)["instanceCounts"]
            if counts["complete"] == instances:
                break
            time.sleep(0.05)
    finally:
        elapsed = time.perf_counter() - start
        runner.stop()
        app.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--modules", default="1,20,100")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flight-n", type=int, default=500, help="10-step instances in flight")
    parser.add_argument("--processes", type=int, default=4, help="executor processes in flight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stores = Stores(Path(tmp), "versions")
        for kind in args.stores.split(","):
            for modules in (int(m) for m in args.modules.split(",")):
                with stores.fresh(kind) as url:
                    scenario(url, modules, args.rounds)
            for resource in (False, True):
                with stores.fresh(kind) as url:
                    seconds = in_flight(url, args.flight_n, args.processes, resource)
                steps = args.flight_n * 10 / seconds
                what = "Version (resource)" if resource else "local class"
                print(
                    f"{kind:10} in flight {args.flight_n} x 10 steps, P={args.processes}, "
                    f"{what:18}: {seconds:6.2f} s  {steps:7.0f} steps/s"
                )


if __name__ == "__main__":
    main()
