"""The control plane of one application (``app.control``): Workers, Versions, Deployments
and Workflow resources, one module per kind (``workers``, ``versions``, ``deployments``,
``workflows``, each building on the one before), over the shared acceptance of ``base``.

Mutations answer the control-plane Operation (``{"operationId", "status", "location"}``);
a worker runs it. :meth:`ControlPlane.work` runs them in this process instead, as the CLI
does.
"""

from __future__ import annotations

import os
import time

from blackops.control.workflows import WorkflowControl
from blackops.operations.deferred import DeferredEngine
from domain.errors import BackendUnavailable
from domain.lifecycle import TERMINAL


class ControlPlane(WorkflowControl):
    """Checks, acceptance and reads of every control-plane resource kind."""

    def work(self, operation_ids: list[str], timeout: float = 60.0) -> None:
        """Run control-plane operations in this process until ``operation_ids`` have all
        finished (or ``timeout`` seconds pass: ``backend_unavailable``). Only the built-in
        ``blackops.*`` types are claimed, so a CLI can do its own control-plane work while
        any running worker may take the same operations too (claims are exclusive)."""
        handlers = self.runtime.handlers.builtin()
        engine = DeferredEngine(
            self.store, handlers, self.runtime.clock, f"cli-{os.getpid()}", 30.0
        )
        journal = self.runtime.journal()
        deadline = time.monotonic() + timeout
        while True:
            states = journal.load_many(operation_ids)
            if all(op.state in TERMINAL or op.purged for op in states.values()):
                return
            attempts = engine.claim(10)
            for attempt in attempts:
                engine.commit([engine.execute(attempt)])
            if time.monotonic() > deadline:
                raise BackendUnavailable("the control-plane operations did not finish in time")
            if not attempts:
                time.sleep(0.05)
