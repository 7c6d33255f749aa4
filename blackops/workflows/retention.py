"""Retention of workflow instances (DW-RET-1, DW-DEL-2): tombstones, then deletion.

A terminal instance is purged once its retention period has passed (its due-work row,
the purge timer, is due); an instance of a deleted Workflow resource left behind by a
creator that died is stopped and purged too. Every purge appends a tombstone first
(``workflow.purged``, listing the positions it accounts for), so what remains still
verifies; a purge cut short between the two is finished by the next run.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from blackops.workflows.stamping import event_context
from domain.clock import Clock
from domain.context import Actor
from domain.errors import BackendUnavailable
from domain.events import NewEvent, RecordedEvent
from domain.workflow import InstanceState, Topic, micros_instant, to_micros
from domain.workflow_rules import RETENTION_MICROS
from journal.instances import load_instance, refresh
from journal.resources import catalog
from journal.store import Append, EventStore

log = logging.getLogger("blackops.workflows")
#: The mark of `finish_purges` (journal/marks.py).
FINISHED = "instance_purges_finished"


def purge_instance(
    store: EventStore,
    clock: Clock,
    state: InstanceState,
    positions: list[int],
    *,
    actor: dict[str, str] | None = None,
    reason: str = "retention",
    by: str = "purge",
) -> bool:
    """Purge a terminal instance: a tombstone, then the history is deleted; ``get`` then
    answers ``unknown_instance``. Returns False when someone else acted on it first."""
    stream_events = store.read_stream(state.stream)
    earlier = [e for e in stream_events if e.type == Topic.PURGED]
    listed = sorted({*positions, *(p for e in earlier for p in e.data.get("positions", []))})
    data = {
        "instance_id": state.instance_id,
        "workflow": state.workflow,
        "status": state.status,
        "terminal_at": micros_instant(state.terminal_at or 0),
        "reason": reason,
        "versions": state.version,
        "positions": listed,
    }
    at = micros_instant(to_micros(clock.now()))
    ctx = {**event_context(state), "actor": actor or {"id": by, "kind": "system"}}
    if reason == "workflow_deleted":
        # DW-DEL-2 purges every instance ID of the UID: the tombstone that keeps the
        # journal verifiable names the instance only by digest.
        digest = (
            "sha256:"
            + hashlib.sha256(state.instance_id.encode("utf-8", "surrogatepass")).hexdigest()
        )
        data["instance_id"] = ctx["instance_id"] = digest
    try:
        store.append(Append(state.stream, state.version, [NewEvent(Topic.PURGED, at, ctx, data)]))
    except BackendUnavailable:
        raise
    except Exception as refused:  # someone else purged or acted first
        log.info("purge of %s skipped: %s", state.stream, refused)
        return False
    store.delete_stream_events(state.stream, state.version)
    return True


def finish_purges(store: EventStore) -> None:
    """A purge cut short between its tombstone and the deletion (a crash) left history
    that no index row points at any more: delete what each newest tombstone lists.

    Only tombstones after the mark of the last finished run are read (the topic index),
    so the cost follows what was purged since, not every purge ever."""
    horizon = store.last_position()  # every tombstone up to here is read below
    _finish(store, store.read_topics([Topic.PURGED], after=store.mark(FINISHED)))
    store.advance_mark(FINISHED, horizon)


def finish_purges_of(store: EventStore, workflow: str, after: int) -> None:
    """`finish_purges` for the instances of ``workflow`` whose tombstones come after
    ``after`` (a Workflow DELETE's: after its operation was received). The batch run's
    mark is left alone: workers purge on their own without moving it, so the tombstones
    since that mark may be every one ever; these are the DELETE's own (decisions R22)."""
    tombstones = store.read_topics([Topic.PURGED], after=after)
    _finish(store, [t for t in tombstones if t.data.get("workflow") == workflow])


def _finish(store: EventStore, tombstones: Iterable[RecordedEvent]) -> None:
    """Delete the history left below each stream's newest tombstone of ``tombstones``."""
    newest: dict[str, int] = {}
    for tombstone in tombstones:
        newest[tombstone.stream] = max(newest.get(tombstone.stream, 0), tombstone.version)
    for stream, version in sorted(newest.items()):
        first = store.read_stream(stream)[:1]
        if first and first[0].version < version:
            store.delete_stream_events(stream, version - 1)


def stream_positions(store: EventStore, stream: str) -> list[int]:
    return [e.position for e in store.read_stream(stream)]


class Terminations(Protocol):
    """What the batch purge needs of the instance service (blackops/workflows/instances.py):
    one step towards an orphan's proven stop."""

    def advance_termination(self, state: InstanceState, actor: Actor, how: str = "") -> bool: ...


@dataclass(frozen=True, slots=True)
class InstanceRetention:
    """The batch path of instance retention (``purge``); workers purge on their own too."""

    store: EventStore
    clock: Clock
    instances: Terminations

    def purge(self, actor: Actor, reason: str, *, dry_run: bool) -> list[dict[str, str]]:
        """Terminal instances whose retention ended, and orphans of deleted Workflows:
        what was (or, with ``dry_run``, would be) purged."""
        now = to_micros(self.clock.now())
        if not dry_run:
            finish_purges(self.store)
        deleted = self._deleted_resources()
        report: list[dict[str, str]] = []
        rows = {r.operation_id: r for r in self.store.due_work_rows("workflow:", now)}
        for uid in deleted:  # every instance of a deleted Workflow, due or not
            rows.update((r.operation_id, r) for r in self.store.work_rows_of(f"workflow:{uid}"))
        for _, row in sorted(rows.items()):
            if row.operation_type.removeprefix("workflow:") in deleted:
                found = self._purge_orphan(actor, row.operation_id, now, dry_run=dry_run)
                if found is not None:
                    report.append(found)
                continue
            if not row.operation_type.startswith("workflow:") or row.due_at > now:
                continue
            state = load_instance(self.store, row.operation_id)
            if not state.is_terminal or state.terminal_at is None:
                continue
            due = state.terminal_at + RETENTION_MICROS
            if due > now:
                continue
            if not dry_run and not self._purge(state, actor.to_dict(), reason):
                continue
            report.append(
                {
                    "workflow": state.workflow,
                    "id": state.instance_id,
                    "status": state.status,
                    "since": micros_instant(state.terminal_at),
                    "dueAt": micros_instant(due),
                }
            )
        return report

    def _deleted_resources(self) -> set[str]:
        # The catalog's own stream (not a journal-wide topic read): its size is the
        # number of Workflow resources ever added or removed.
        return {uid for change, uid in catalog(self.store)[1] if change == "removed"}

    def _purge(self, state: InstanceState, actor: dict[str, Any], reason: str) -> bool:
        positions = stream_positions(self.store, state.stream)
        return purge_instance(self.store, self.clock, state, positions, actor=actor, reason=reason)

    def _purge_orphan(
        self, actor: Actor, stream: str, now: int, *, dry_run: bool
    ) -> dict[str, str] | None:
        """An instance of a Workflow resource whose DELETE was accepted (DW-DEL-2), left
        by a create whose caller died between its append and its own check: never
        claimed (off the catalog), so it is stopped at once and purged like the DELETE
        would have."""
        state = load_instance(self.store, stream)
        if state.purged or state.context_open:
            return None  # a context is held: the DELETE operation proves its stop
        if not dry_run:
            if not self.instances.advance_termination(state, actor, "workflow_deleted"):
                return None
            refresh(self.store, state)
            if not self._purge(state, actor.to_dict(), "workflow_deleted"):
                return None
        return {
            "workflow": state.workflow,
            "id": state.instance_id,
            "status": "deleted",
            "since": micros_instant(now),
            "dueAt": micros_instant(now),
        }
