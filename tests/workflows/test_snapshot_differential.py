"""Every snapshot the engine writes equals the full fold of the stored events
up to its version (retries, waits with timeouts, events queued while running, sleeps)."""

from __future__ import annotations

from typing import Any

import pytest
from workflow_cases import create, send, status, sync, work

from blackops import Application
from blackops.testing import FakeClock
from domain.workflow import fold
from journal import instance_snapshots
from journal.snapshot_sql import StoredSnapshot

_calls: dict[str, int] = {}


def flaky(key: str) -> dict[str, Any]:
    _calls[key] = _calls.get(key, 0) + 1
    if _calls[key] % 2:
        raise RuntimeError(f"odd call {key}")
    return {"k": key, "f": 0.5}


class Mixed:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        got = []
        for i in range(3):
            await step.do(
                f"r{i}",
                lambda i=i: flaky(f"{event.instance_id}-{i}"),
                retry_policy={"maxAttempts": 3, "initialDelaySeconds": 5},
            )
            got.append(await step.wait_for_event(f"w{i}", type="go", timeout_seconds=30))
            await step.sleep(f"z{i}", 7)
        try:
            await step.wait_for_event("late", type="never", timeout_seconds=10)
        except Exception as error:  # a wait timeout
            got.append(type(error).__name__)
        return {"got": got}


@pytest.mark.parametrize("every", [1])
def test_each_written_snapshot_is_the_full_fold(
    app: Application, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    monkeypatch.setattr(instance_snapshots, "SNAPSHOT_EVERY", every)
    written: list[tuple[str, int]] = []
    real = instance_snapshots.write

    def checked(store: Any, state: Any) -> None:
        events = store.read_stream(state.stream)
        full = fold(state.stream, [e for e in events if e.version <= state.version])
        assert state == full  # the engine's own state (dict order may differ)
        decoded = instance_snapshots.decode(
            state.stream,
            StoredSnapshot(state.version, 0, *instance_snapshots.encode(state)),
        )
        assert repr(decoded) == repr(full)
        written.append((state.stream, state.version))
        real(store, state)

    monkeypatch.setattr(instance_snapshots, "write", checked)
    app.register_workflow(Mixed)
    binding = app.workflow("Mixed")
    instances = [create(binding, f"m{n}") for n in range(4)]
    for _ in range(40):
        work(app)
        if _ == 9:
            sync(instances[3].terminate())  # mid-run: snapshots before it stay bound
        for n, instance in enumerate(instances):
            if (n != 1 or _ % 3 == 0) and status(instance)["status"] not in (
                "complete",
                "terminated",
            ):
                send(instance, "go", {"n": _})  # queued while waiting, sleeping or retrying
        clock.advance(6)
    work(app)
    clock.advance(100)
    work(app)
    assert written
    assert [status(i)["status"] for i in instances] == ["complete"] * 3 + ["terminated"]
