"""Operation projections: status by id (list, filter, page) and counts by status.

``operation_status`` holds one row per operation: tenant, type, mode, public status,
attempt, created/updated time. ``operation_counts`` counts operations per (tenant,
type, status); it moves a count at each status change, so applying an event twice
would show, which is why the framework applies each exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from domain.events import RecordedEvent
from projections.framework import SQL

#: The public status an event leaves its operation in (OL-2: no Finalizing/Supervising).
PURGED = "operation.purged"
STATUS_AFTER = {
    "operation.received": "received",
    "operation.accepted": "accepted",
    "attempt.started": "running",
    "attempt.retry_scheduled": "retry_scheduled",
    "operation.completed": "completed",
    "operation.rejected": "rejected",
    "operation.failed": "failed",
    "operation.dead_lettered": "dead_letter",
}


#: (index name, its filter columns): the listing's filters, alone and with the tenant.
_LISTING_INDEXES = (
    ("time", ""),
    ("tenant", "tenant, "),
    ("tenant_status", "tenant, status, "),
    ("tenant_type", "tenant, type, "),
    ("status", "status, "),
    ("type", "type, "),
)


class OperationStatus:
    name = "operation_status"

    def tables(self, prefix: str) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {prefix}blackops_operation_status ("
            "operation_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, type TEXT NOT NULL, "
            "mode TEXT NOT NULL, status TEXT NOT NULL, attempt BIGINT NOT NULL, "
            "created_at TEXT NOT NULL, updated_at TEXT NOT NULL)",
            # One index per filter a listing takes, each in the listing's order, so the
            # first page and every later one are index range scans whatever the size.
            *(
                f"CREATE INDEX IF NOT EXISTS blackops_operation_status_by_{name} "
                f"ON {prefix}blackops_operation_status ({columns}created_at, operation_id)"
                for name, columns in _LISTING_INDEXES
            ),
            # Its first index, before there was one per filter (the tenant one is the same).
            f"DROP INDEX IF EXISTS {prefix}blackops_operation_status_listing",
        ]

    def apply(self, sql: SQL, events: Sequence[RecordedEvent]) -> None:
        rows: dict[str, dict[str, Any]] = {}
        for event in events:
            if event.type == "operation.received":
                rows[event.stream] = {
                    "operation_id": event.stream,
                    "tenant": event.data["tenant"],
                    "type": event.data["operation_type"],
                    "mode": event.data["mode"],
                    "status": "received",
                    "attempt": 0,
                    "created_at": event.at,
                    "updated_at": event.at,
                    "new": True,
                }
                continue
            if event.type == "operation.purged":
                # Retention forgot it: so does every read model (a rebuild never sees it).
                rows.pop(event.stream, None)
                sql.execute(
                    "DELETE FROM {p}blackops_operation_status WHERE operation_id = %s",
                    (event.stream,),
                )
                continue
            if not event.type.startswith(("operation.", "attempt.")):
                continue
            row = rows.get(event.stream)
            if row is None:
                found = sql.execute(
                    "SELECT operation_id, tenant, type, mode, status, attempt, created_at, "
                    "updated_at FROM {p}blackops_operation_status WHERE operation_id = %s",
                    (event.stream,),
                )
                if not found:
                    continue  # its beginning was purged before this projection saw it
                keys = ("operation_id", "tenant", "type", "mode", "status", "attempt",
                        "created_at", "updated_at")  # fmt: skip
                row = rows[event.stream] = {**dict(zip(keys, found[0], strict=True)), "new": False}
            row["status"] = STATUS_AFTER.get(event.type, row["status"])
            if event.type == "attempt.started":
                row["attempt"] = event.data["attempt"]
            row["updated_at"] = event.at
        sql.executemany(
            "INSERT INTO {p}blackops_operation_status (operation_id, tenant, type, mode, status, "
            "attempt, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (operation_id) DO UPDATE SET status = excluded.status, "
            "attempt = excluded.attempt, updated_at = excluded.updated_at",
            [
                (
                    r["operation_id"],
                    r["tenant"],
                    r["type"],
                    r["mode"],
                    r["status"],
                    r["attempt"],
                    r["created_at"],
                    r["updated_at"],
                )
                for r in rows.values()
            ],
        )


class OperationCounts:
    name = "operation_counts"

    def tables(self, prefix: str) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {prefix}blackops_operation_counts ("
            "tenant TEXT NOT NULL, type TEXT NOT NULL, status TEXT NOT NULL, "
            "count BIGINT NOT NULL, PRIMARY KEY (tenant, type, status))",
            f"CREATE TABLE IF NOT EXISTS {prefix}blackops_operation_counts_seen ("
            "operation_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, type TEXT NOT NULL, "
            "status TEXT NOT NULL)",
        ]

    def apply(self, sql: SQL, events: Sequence[RecordedEvent]) -> None:
        """Net count changes of the whole batch, then three statements (not per event)."""
        relevant = {e.stream for e in events if e.type in STATUS_AFTER or e.type == PURGED}
        seen = _load_seen(sql, relevant)
        deltas: dict[tuple[str, str, str], int] = {}
        changed: dict[str, tuple[str, str, str]] = {}
        forgotten: set[str] = set()
        for event in events:
            if event.type == PURGED:
                if event.stream in seen:
                    tenant, kind, before = seen.pop(event.stream)
                    deltas[(tenant, kind, before)] = deltas.get((tenant, kind, before), 0) - 1
                changed.pop(event.stream, None)
                forgotten.add(event.stream)
                continue
            status = STATUS_AFTER.get(event.type)
            if status is None:
                continue
            if event.type == "operation.received":
                tenant, kind = event.data["tenant"], event.data["operation_type"]
            elif event.stream in seen:
                tenant, kind, before = seen[event.stream]
                if before == status:
                    continue
                deltas[(tenant, kind, before)] = deltas.get((tenant, kind, before), 0) - 1
            else:
                continue  # its beginning was purged before this projection saw it
            deltas[(tenant, kind, status)] = deltas.get((tenant, kind, status), 0) + 1
            seen[event.stream] = changed[event.stream] = (tenant, kind, status)
        sql.executemany(
            "INSERT INTO {p}blackops_operation_counts AS c (tenant, type, status, count) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant, type, status) "
            "DO UPDATE SET count = c.count + excluded.count",
            [(*key, delta) for key, delta in sorted(deltas.items()) if delta],
        )
        sql.executemany(
            "INSERT INTO {p}blackops_operation_counts_seen (operation_id, tenant, type, status) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (operation_id) "
            "DO UPDATE SET status = excluded.status",
            [(stream, *row) for stream, row in sorted(changed.items())],
        )
        sql.executemany(
            "DELETE FROM {p}blackops_operation_counts_seen WHERE operation_id = %s",
            [(stream,) for stream in sorted(forgotten)],
        )
        # A count back at zero is no count: live and rebuilt tables stay row-for-row equal.
        sql.execute("DELETE FROM {p}blackops_operation_counts WHERE count = 0")


def _load_seen(sql: SQL, streams: set[str]) -> dict[str, tuple[str, str, str]]:
    found: dict[str, tuple[str, str, str]] = {}
    ordered = sorted(streams)
    for start in range(0, len(ordered), 500):
        chunk = ordered[start : start + 500]
        params: tuple[Any, ...]
        if sql.sqlite:
            marks, params = ",".join(["%s"] * len(chunk)), tuple(chunk)
            where = f"operation_id IN ({marks})"
        else:
            where, params = "operation_id = ANY(%s)", (chunk,)
        for operation_id, tenant, kind, status in sql.execute(
            "SELECT operation_id, tenant, type, status FROM {p}blackops_operation_counts_seen "
            f"WHERE {where}",
            params,
        ):
            found[operation_id] = (tenant, kind, status)
    return found
