"""The public testing kit (python-contract §6): a clock you move by hand, and one object
to test operations and workflows with, in the way Temporal's ``WorkflowEnvironment`` is.

```python
from blackops.testing import TestEnvironment

async def test_invoice() -> None:
    async with TestEnvironment(app) as env:      # your Application, on memory://
        operation_id = env.app.submit("invoice.issue", {"amount": 3}, actor="t", tenant="acme")
        await env.work_until_idle()
        assert env.app.outcome(operation_id) == {...}
        assert env.event_types(operation_id)[-1] == "operation.completed"
```
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blackops.application import Application
    from blackops.workflows.replay_check import History, ReplayReport

__all__ = ["FakeClock", "TestEnvironment", "recorded_histories", "replay_histories"]


class FakeClock:
    """A clock that stands still until told to move.

    ``advance(seconds)`` moves it forward; ``sleep(seconds)`` (used by the engine,
    e.g. between Inline retries) advances it instead of waiting, so a 5-minute
    backoff takes no real time.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime.now(UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def __repr__(self) -> str:
        return f"FakeClock({self.now().isoformat()})"


class TestEnvironment:
    """An application on a private ``memory://`` journal with a :class:`FakeClock`.

    ``TestEnvironment()`` makes a fresh ``Application``; ``TestEnvironment(app)`` takes
    yours (the one your handlers and workflows are registered on) before it has opened a
    store, and points it at memory and the fake clock. Nothing runs in the background:
    :meth:`work_until_idle` runs what is due now, :meth:`advance` moves time and runs what
    became due. The helpers read what happened, as the journal says it.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, app: Application | None = None, *, start: datetime | None = None) -> None:
        from blackops.application import Application

        self.clock = FakeClock(start)
        if app is None:
            app = Application("memory://", clock=self.clock)
        else:
            if app.runtime.store_opened:
                raise ValueError("give the TestEnvironment an application that has not run yet")
            app.runtime.clock = self.clock
            app.use_store("memory://")
        self.app = app

    # -- running ---------------------------------------------------------------------------

    async def work_until_idle(self) -> None:
        """Every Deferred attempt and workflow context due now, run in this process."""
        await self.app.work_until_idle()

    async def advance(self, seconds: float) -> None:
        """Move the clock forward, then run everything that became due (timers, retries,
        sleeps, wait timeouts)."""
        self.clock.advance(seconds)
        await self.app.work_until_idle()

    # -- reading what happened -------------------------------------------------------------

    def events(self, operation_id: str) -> list[dict[str, Any]]:
        """An operation's lifecycle events, shaped like Observed JSONL lines."""
        return self.app.events(operation_id)

    def event_types(self, operation_id: str) -> list[str]:
        return [event["type"] for event in self.app.events(operation_id)]

    def history(self, workflow: str, instance_id: str) -> list[dict[str, Any]]:
        """A workflow instance's events in order (its step records, sleeps, events
        consumed, contexts), shaped like Observed JSONL lines."""
        from journal.instances import instance_stream

        resource = self.app.workflow(workflow).resource
        stream = instance_stream(resource.uid, instance_id)
        return [event.to_observed() for event in self.app.store.read_stream(stream)]

    def journal(self, after: int = 0) -> list[dict[str, Any]]:
        """Every event after ``after``, in position order."""
        return [event.to_observed() for event in self.app.store.iter_after(after)]

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        self.app.close()

    def __enter__(self) -> TestEnvironment:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> TestEnvironment:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()


# -- replay checks (decisions C1-C8) ---------------------------------------------------------


def replay_histories(
    candidate: Any,
    histories: Any,
    *,
    env: dict[str, Any] | None = None,
    app: Application | None = None,
) -> ReplayReport:
    """Run recorded histories through candidate code; nothing runs, nothing is appended.

    ``candidate`` is a workflow class (constructed with ``env``) or a Version id (its
    bundle loaded in isolation from ``app``'s journal, the class each history's Workflow
    names). ``histories`` is the path of an Observed JSONL file, what
    :func:`recorded_histories` answers, or an iterable of events / Observed lines.

    ```python
    report = replay_histories(OrderFlowV2, "tests/histories/order-42.jsonl")
    assert report.compatible, report.human()
    ```
    """
    from blackops.workflows.replay_check import (
        as_histories,
        check_histories,
        code_for,
        read_jsonl,
    )

    if isinstance(histories, str) or hasattr(histories, "__fspath__"):
        found = read_jsonl(str(histories))
    else:
        found = as_histories(histories)
    if isinstance(candidate, str):
        if app is None:
            raise ValueError("a Version id needs the app whose journal holds it")
        from blackops.control.replay_gate import version_candidate

        pick = version_candidate(app.runtime.store, candidate)
        return pick.check(found, candidate=candidate)  # in a child process (decisions C13)
    return check_histories(code_for(candidate, env), found)


def recorded_histories(
    app: Application,
    workflow: str,
    *,
    instances: list[str] | None = None,
    status: str | None = None,
    limit: int | None = None,
) -> list[History]:
    """Histories of a workflow's instances from the journal: ``instances`` by id, else
    every instance (of ``status``), newest first, at most ``limit``."""
    from blackops.workflows.replay_check import History, newest_instance_ids
    from domain.errors import NotFound
    from domain.resources import RESOURCE_UID
    from domain.workflow import UnknownInstance
    from journal.instances import instance_stream

    # A Workflow resource must exist; a registered workflow's uid is its instances' key,
    # so its histories are read without the application that registers it.
    registered = {r.uid: r.space for r in app.workflows()}
    space: str | None
    if RESOURCE_UID.fullmatch(workflow):
        resource = app.workflow(workflow).resource
        uid, space = resource.uid, resource.space  # its Space: the listing's index seeks it
    else:
        uid, space = workflow, registered.get(workflow)  # a registration's own Space (W15)
    ids = instances
    if ids is None:
        ids = newest_instance_ids(app.projections, uid, status=status, limit=limit, space=space)
        unknown = not ids and uid not in registered and not RESOURCE_UID.fullmatch(uid)
        if unknown and not newest_instance_ids(app.projections, uid, limit=1):
            raise NotFound(f"no workflow {workflow!r} has instances in this journal")
    found = []
    for instance_id in ids:
        stream = instance_stream(uid, instance_id)
        events = app.store.read_stream(stream)
        if not events or (space is not None and events[0].context.get("tenant") != space):
            raise UnknownInstance(instance_id)
        found.append(History(stream, events))
    return found
