"""Workflow instance projections: status by instance, and ``instanceCounts`` per resource.

``instance_status`` holds one row per instance (workflow uid, Space, instance id,
status, created/updated time). The id is kept as its JSON string literal
(:func:`stored_id`): an id may hold any scalar value, U+0000 included, which a
PostgreSQL text column refuses. ``instance_counts`` counts instances per (Space, workflow,
status) for the seven statuses of DW-INST-4 / DW-OBS-1; it moves a count at each
status change, which is why the framework applies each event exactly once. A
purged instance (``workflow.purged``) leaves both, as retention says (DW-RET-1).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from domain.events import RecordedEvent
from domain.workflow import STATUSES, Topic
from projections.framework import SQL


def stored_id(instance_id: str) -> str:
    """How ``instance_id`` is stored: its JSON string literal (``\\u0000`` for U+0000)."""
    return json.dumps(instance_id, ensure_ascii=False)


def read_id(stored: str) -> str:
    instance_id: str = json.loads(stored)
    return instance_id


_FIXED = {
    Topic.CREATED: "queued",
    Topic.CONTEXT_STARTED: "running",
    Topic.STEP_RETRY_SCHEDULED: "running",  # decisions D1
    Topic.COMPLETED: "complete",
    Topic.ERRORED: "errored",
    Topic.TERMINATED: "terminated",
}


def status_after(event: RecordedEvent) -> str | None:
    """The status an instance event leaves its instance in (None: unchanged)."""
    if event.type == Topic.STEP_SUSPENDED:
        return "sleeping" if event.data["kind"] == "sleep" else "waiting"
    return _FIXED.get(event.type)


class InstanceStatus:
    name = "instance_status"

    def tables(self, prefix: str) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {prefix}blackops_instance_status ("
            "stream TEXT PRIMARY KEY, workflow TEXT NOT NULL, space TEXT NOT NULL, "
            "instance_id_json TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL, "
            "updated_at TEXT NOT NULL)",
            # A listing names the Space too (a code-registered uid may be several Spaces'
            # workflow, W15): with the Space in the index, a page is a range scan of that
            # Space's rows, where it filtered every other Space's of the uid row by row
            # (found by a defect hunt, stop 40: 8 ms a page beside 60,000 others).
            f"CREATE INDEX IF NOT EXISTS blackops_instance_status_by_space "
            f"ON {prefix}blackops_instance_status (workflow, space, created_at, stream)",
            f"CREATE INDEX IF NOT EXISTS blackops_instance_status_by_space_status "
            f"ON {prefix}blackops_instance_status (workflow, space, status, created_at, stream)",
            # The indexes before the Space was in them.
            f"DROP INDEX IF EXISTS {prefix}blackops_instance_status_listing",
            f"DROP INDEX IF EXISTS {prefix}blackops_instance_status_by_status",
        ]

    def apply(self, sql: SQL, events: Sequence[RecordedEvent]) -> None:
        rows: dict[str, list[Any]] = {}
        gone: set[str] = set()
        for event in events:
            if event.type == Topic.PURGED:
                rows.pop(event.stream, None)
                gone.add(event.stream)
                continue
            status = status_after(event)
            if status is None:
                continue
            if event.type == Topic.CREATED:
                gone.discard(event.stream)
                rows[event.stream] = [
                    event.stream,
                    event.data["workflow"],
                    event.context["tenant"],
                    stored_id(event.data["instance_id"]),
                    status,
                    event.at,
                    event.at,
                ]
                continue
            row = rows.get(event.stream) or _load_row(sql, event.stream)
            if row is None:
                continue  # its beginning was purged before this projection saw it
            row[4], row[6] = status, event.at
            rows[event.stream] = row
        sql.executemany(
            "DELETE FROM {p}blackops_instance_status WHERE stream = %s",
            [(stream,) for stream in sorted(gone)],
        )
        sql.executemany(
            "INSERT INTO {p}blackops_instance_status (stream, workflow, space, instance_id_json, "
            "status, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            # Every column: a purged id created again (W2) may be another Space's now.
            "ON CONFLICT (stream) DO UPDATE SET workflow = excluded.workflow, "
            "space = excluded.space, status = excluded.status, "
            "created_at = excluded.created_at, instance_id_json = excluded.instance_id_json, "
            "updated_at = excluded.updated_at",
            list(rows.values()),
        )


def _load_row(sql: SQL, stream: str) -> list[Any] | None:
    found = sql.execute(
        "SELECT stream, workflow, space, instance_id_json, status, created_at, updated_at "
        "FROM {p}blackops_instance_status WHERE stream = %s",
        (stream,),
    )
    return list(found[0]) if found else None


class InstanceCounts:
    """Counts per (Space, workflow uid, status). The Space is the created event's tenant: a
    uid registered in two Spaces of one store (code registrations name their own uids)
    counts each Space's instances apart (found by a defect hunt: a Space read another's).
    Its tables are new (``..._by_space``): a store written before is counted afresh."""

    name = "instance_counts_by_space"

    def tables(self, prefix: str) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {prefix}blackops_instance_counts_by_space ("
            "space TEXT NOT NULL, workflow TEXT NOT NULL, status TEXT NOT NULL, "
            "count BIGINT NOT NULL, PRIMARY KEY (workflow, space, status))",
            f"CREATE TABLE IF NOT EXISTS {prefix}blackops_instance_counts_by_space_seen ("
            "stream TEXT PRIMARY KEY, space TEXT NOT NULL, workflow TEXT NOT NULL, "
            "status TEXT NOT NULL)",
        ]

    def apply(self, sql: SQL, events: Sequence[RecordedEvent]) -> None:
        """Net count changes of the whole batch, then a few statements (not per event)."""
        relevant = sorted({e.stream for e in events if e.type.startswith("workflow.")})
        seen: dict[str, tuple[str, str, str] | None] = dict.fromkeys(relevant)
        for stream, space, workflow, status in sql.select_in(
            "SELECT stream, space, workflow, status FROM {p}blackops_instance_counts_by_space_seen"
            " WHERE",
            "stream",
            relevant,
        ):
            seen[str(stream)] = (str(space), str(workflow), str(status))
        deltas: dict[tuple[str, str, str], int] = {}

        def move(key: tuple[str, str, str], by: int) -> None:
            deltas[key] = deltas.get(key, 0) + by

        for event in events:
            if event.type == Topic.PURGED:
                before = seen.get(event.stream)
                if before is not None:
                    move(before, -1)
                seen[event.stream] = None
                continue
            status = status_after(event)
            if status is None:
                continue
            before = None if event.type == Topic.CREATED else seen.get(event.stream)
            if event.type == Topic.CREATED:
                space, workflow = str(event.context["tenant"]), str(event.data["workflow"])
            elif before is None:
                continue  # its beginning was purged before this projection saw it
            else:
                space, workflow = before[0], before[1]
                if before[2] == status:
                    continue
                move(before, -1)
            move((space, workflow, status), 1)
            seen[event.stream] = (space, workflow, status)
        sql.executemany(
            "INSERT INTO {p}blackops_instance_counts_by_space AS c "
            "(space, workflow, status, count) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (workflow, space, status) DO UPDATE SET count = c.count + excluded.count",
            [(*key, delta) for key, delta in sorted(deltas.items()) if delta],
        )
        sql.executemany(
            "DELETE FROM {p}blackops_instance_counts_by_space_seen WHERE stream = %s",
            [(stream,) for stream, value in sorted(seen.items()) if value is None],
        )
        sql.executemany(
            "INSERT INTO {p}blackops_instance_counts_by_space_seen "
            "(stream, space, workflow, status) VALUES (%s, %s, %s, %s) ON CONFLICT (stream) "
            "DO UPDATE SET status = excluded.status, workflow = excluded.workflow, "
            "space = excluded.space",
            [(stream, *value) for stream, value in sorted(seen.items()) if value is not None],
        )
        # A count back at zero is no count: live and rebuilt tables stay row-for-row equal.
        sql.execute("DELETE FROM {p}blackops_instance_counts_by_space WHERE count = 0")


def empty_counts() -> dict[str, int]:
    """``instanceCounts`` with all seven statuses (DW-OBS-1)."""
    return dict.fromkeys(STATUSES, 0)
