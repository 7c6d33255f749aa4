"""Workers (DurableWorkflow §1): named code units of a Space; created Inline, read by UID."""

from __future__ import annotations

from typing import Any

from blackops.control.base import WORKER_CREATE, ControlBase
from blackops.operations.inline import InlineRunner
from domain.context import Actor
from domain.documents import canonical_document
from domain.errors import BackendUnavailable, Conflict, InvalidRequest, NotFound
from domain.resources import Topic, check_name, is_uid
from journal.resources import load_name, load_worker, name_stream


class WorkerControl(ControlBase):
    def create_worker(self, space: str, name: str, actor: Actor) -> dict[str, Any]:
        """A Worker (a named code unit) in ``space``; an Inline operation."""
        check_name(name, "worker")
        if load_name(self.store, name_stream(space, "worker", name)).holder is not None:
            raise Conflict(f"a worker named {name!r} already exists in space {space!r}")
        # Inline, through the runner itself: ``app.run`` refuses the built-in types.
        params = canonical_document({"space": space, "name": name})
        ctx = self._context(WORKER_CREATE, actor, space)
        runner = InlineRunner(self.runtime.journal(), self.runtime.clock)
        result = runner.run(self.runtime.handlers.get(WORKER_CREATE), params, ctx)
        if result.rejection is not None:
            raise Conflict(result.rejection.message or "the worker was not created")
        if result.failure is not None:
            raise BackendUnavailable(result.failure.message)
        assert result.outcome is not None
        return {**result.outcome, "operationId": result.operation_id}

    def worker_in(self, space: str, uid: str) -> dict[str, Any]:
        """DW-SPEC-4: a Worker of this Space, by UID only (never by name, DW-SPEC-6)."""
        if not is_uid(uid, "wk"):
            raise NotFound(f"no worker {str(uid)[:128]!r} in space {space!r}")
        worker = load_worker(self.store, uid)
        if not worker.exists or worker.space != space:
            raise NotFound(f"no worker {uid!r} in space {space!r}")
        return worker.view()

    def worker_uid(self, space: str, worker: str) -> str:
        """A Worker UID of ``space``, or the UID of the Worker named ``worker`` there (for
        a client resolving a name; what a spec holds is the UID only, DW-SPEC-4, -6)."""
        if is_uid(worker, "wk"):
            return str(self.worker_in(space, worker)["uid"])
        try:
            check_name(worker, "worker")
        except InvalidRequest:
            raise NotFound(f"no worker {worker[:128]!r} in space {space!r}") from None
        holder = load_name(self.store, name_stream(space, "worker", worker)).holder
        if holder is None:
            raise NotFound(f"no worker {worker!r} in space {space!r}")
        return holder

    def workers(self, space: str) -> list[dict[str, Any]]:
        found = []
        for event in self.store.read_topics([Topic.WORKER_CREATED]):
            if event.data["space"] == space:
                found.append(load_worker(self.store, event.data["uid"]).view())
        return found
