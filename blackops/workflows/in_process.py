"""Workflow contexts run in the calling thread (``work_until_idle``), for tests and tools.

Effects run here, so they cannot be killed: while a context runs its lease is renewed (no
other worker takes it over), and ``terminate`` stops it at its next step (a terminate in
this process waits for that, see ``local_contexts``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from blackops.workflows.code import NotLoaded
from blackops.workflows.context import ContextEnd, run_context
from blackops.workflows.engine import HeldContext, WorkflowEngine
from blackops.workflows.local_contexts import running_here
from domain.errors import BlackOpsError


def run_due_contexts(engine: WorkflowEngine) -> int:
    """Run every due context in this thread; returns how many rows were acted on."""
    total = 0
    while True:
        helds, acted = engine.claim(50)
        total += acted
        if not acted:
            return total
        for held in helds:
            with _renewed(engine, held):
                host = _InlineHost(engine, held)
                try:
                    code = held.code
                    if code.cls is NotLoaded:
                        code = engine.provider.load(code.workflow, code.version)
                except Exception as error:  # the Version's code could not be loaded
                    end = ContextEnd("stopped", "fenced", f"load failed: {type(error).__name__}")
                else:
                    end = run_context(held.plan, code.cls, code.env, host)
            engine.finish([(held, end)])


@contextlib.contextmanager
def _renewed(engine: WorkflowEngine, held: HeldContext) -> Iterator[None]:
    """While a context runs in this thread: its lease is renewed, and it is known to run
    here (``running_inline``)."""
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(engine.lease_seconds / 3):
            with contextlib.suppress(BlackOpsError):
                engine.renew([held])

    beat = threading.Thread(target=heartbeat, name="blackops-inline-lease", daemon=True)
    with running_here(held.state.stream):
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()


class _InlineHost:
    def __init__(self, engine: WorkflowEngine, held: HeldContext) -> None:
        self.engine, self.held = engine, held

    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        return self.engine.request([(self.held, message)])[0]
