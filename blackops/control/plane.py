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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackops.control.workflows import WorkflowControl
from blackops.operations.deferred import DeferredEngine
from domain.errors import BackendUnavailable, InvalidRequest
from domain.lifecycle import TERMINAL

if TYPE_CHECKING:
    from blackops.workflows.replay_check import ReplayReport
    from domain.context import Actor


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

    # -- the deploy gate (decisions C7-C9) --------------------------------------------------

    def check_version(
        self,
        space: str,
        vid: str,
        *,
        terminal: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[ReplayReport, dict[str, Any]]:
        """A Version against the recorded histories of every Workflow whose class it
        provides (``blackops/control/replay_gate.py``): its report and what was checked.
        Nothing is appended and no effect runs."""
        from blackops.control.replay_gate import DEFAULT_TERMINAL, check_version

        chosen = DEFAULT_TERMINAL if terminal is None else terminal
        return check_version(self, space, vid, terminal=chosen, progress=progress)

    def record_replay_check(
        self,
        space: str,
        vid: str,
        report: ReplayReport,
        scope: dict[str, Any],
        actor: Actor,
        *,
        purpose: str,
        forced: bool = False,
    ) -> None:
        """Journal a check's verdict on the Version (``version.replay_checked``)."""
        from blackops.control.replay_gate import record_check

        record_check(self, space, vid, report, scope, actor, purpose=purpose, forced=forced)

    def check_deployment(
        self, space: str, worker_uid: str, allocation: object, *, terminal: int | None = None
    ) -> dict[str, Any]:
        """A dry run of an allocation change: every Version the change would weigh,
        checked against the histories; nothing is changed or appended."""
        from domain.resources import check_allocation

        entries = check_allocation(allocation)
        self.worker_in(space, worker_uid)
        checked = []
        for entry in entries:
            version = self.version_in(space, entry["version"])
            if version.worker != worker_uid or version.deleted:
                raise InvalidRequest(
                    f"version {entry['version']} is not a live Version of worker {worker_uid}"
                )
            if entry["weight"] == 0:
                continue
            report, scope = self.check_version(space, entry["version"], terminal=terminal)
            checked.append(
                {
                    "version": entry["version"],
                    "weight": entry["weight"],
                    "scope": scope,
                    "report": report.to_document(),
                }
            )
        return {
            "worker": {"resourceUid": worker_uid},
            "allocation": entries,
            "compatible": all(c["report"]["compatible"] for c in checked),
            "versions": checked,
        }
