"""In-memory recorder (``memory://``): eventsourcing's POPO one, plus stream positions,
a gap check and the due-work index as a dict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from eventsourcing.persistence import IntegrityError, Notification, StoredEvent
from eventsourcing.popo import POPOApplicationRecorder

from journal import retention_index, work_index
from journal.backend_common import StoredRow, new_streams, predecessors
from journal.leaves import event_leaf
from journal.retention_index import RetentionRow
from journal.work_index import RowChange, WorkRow


class BlackOpsMemoryRecorder(POPOApplicationRecorder):
    """Private to one process; for tests and demos, never durable."""

    def __init__(self) -> None:
        super().__init__()
        self._work: dict[str, WorkRow] = {}
        self._leaves: dict[int, bytes] = {}
        self._work_position = 0
        self._marks: dict[str, int] = {}
        self._retention: dict[str, RetentionRow] = {}

    def _assert_uniqueness(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        super()._assert_uniqueness(stored_events, **kwargs)
        for stream, version in predecessors(stored_events):  # called under the lock
            if version not in self._stored_events_index.get(stream, {}):
                raise IntegrityError(f"stream {stream!r} has no version {version}")
        for stream in new_streams(stored_events):
            if self._stored_events_index.get(stream):
                raise IntegrityError(f"stream {stream!r} has a history: it cannot start again")

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        with self._database_lock:  # reentrant: the base insert takes it again
            positions = super().insert_events(stored_events, **kwargs)
            if positions:
                triples = [(str(s.originator_id), s.topic, s.state) for s in stored_events]
                self._apply(work_index.changes(triples), max(positions))
                for key, change in retention_index.changes(triples).items():
                    row = self._retention.setdefault(key, RetentionRow(key))
                    for name, value in change.items():
                        setattr(row, name, value)
                for p, s in zip(positions, stored_events, strict=True):
                    self._leaves[p] = event_leaf(
                        p, str(s.originator_id), s.originator_version, s.topic, s.state
                    )
            return positions

    def delete_stream_events(self, stream: str, upto_version: int) -> int:
        """Positions are list offsets here, so deleted events leave a hole (None)."""
        with self._database_lock:
            index = self._stored_events_index.get(stream, {})
            doomed = [v for v in index if v <= upto_version]
            for version in doomed:
                self._stored_events[index.pop(version)] = None  # type: ignore[call-overload]
            return len(doomed)

    def select_after(self, after: int, limit: int) -> list[StoredRow]:
        found = self.select_notifications(after, limit, inclusive_of_start=False)
        return [
            StoredRow(n.id, str(n.originator_id), n.originator_version, n.topic, n.state)
            for n in found
        ]

    def select_after_within(self, after: int, limit: int, max_bytes: int) -> list[StoredRow]:
        rows, size = [], 0
        for row in self.select_after(after, limit):
            if size >= max_bytes:
                break
            rows.append(row)
            size += len(row.state)
        return rows

    def select_before_start(self, limit: int) -> list[StoredRow]:
        return []  # positions are this process's own, from 1: nothing writes behind it

    def select_topics(self, topics: Sequence[str], after: int, limit: int) -> list[Notification]:
        """A scan (a memory journal is small): the SQL backends read a topic index."""
        return list(
            self.select_notifications(after, limit, topics=topics, inclusive_of_start=False)
        )

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        with self._database_lock:
            first = 1 if start is None else (start if inclusive_of_start else start + 1)
            found: list[Notification] = []
            for offset in range(max(first, 1) - 1, len(self._stored_events)):
                stored = self._stored_events[offset]
                if stop is not None and offset + 1 > stop:
                    break
                if stored is None or (topics and stored.topic not in topics):
                    continue
                found.append(
                    Notification(
                        id=offset + 1,
                        originator_id=stored.originator_id,
                        originator_version=stored.originator_version,
                        topic=stored.topic,
                        state=stored.state,
                    )
                )
                if len(found) >= limit:
                    break
            return found

    def select_leaves(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        with self._database_lock:
            found = sorted(p for p in self._leaves if p > after)[:limit]
            return [(p, self._leaves[p]) for p in found]

    def _apply(self, changes: Sequence[RowChange], position: int) -> None:
        for change in changes:
            if change.delete:
                self._work.pop(change.operation_id, None)
                continue
            assert change.due_at is not None
            if change.create is not None:
                self._work[change.operation_id] = WorkRow(
                    change.operation_id, *change.create, change.due_at, 0, change.worker
                )
            row = self._work.get(change.operation_id)
            if row is None:
                continue
            row.due_at = change.due_at
            if change.fencing_token is not None:
                row.fencing_token = change.fencing_token
            if change.set_worker:
                row.worker = change.worker
        self._work_position = position

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]:
        return self.select_streams([stream], after_version)

    def select_streams(self, streams: Sequence[str], after_version: int = 0) -> list[Notification]:
        with self._database_lock:
            found = []
            for stream in sorted(set(streams)):
                # .get, not [...]: the index is a defaultdict and reads must not grow it.
                index = self._stored_events_index.get(stream, {})
                for version in sorted(v for v in index if v > after_version):
                    offset = index[version]
                    stored = self._stored_events[offset]
                    found.append(
                        Notification(
                            id=offset + 1,
                            originator_id=stored.originator_id,
                            originator_version=stored.originator_version,
                            topic=stored.topic,
                            state=stored.state,
                        )
                    )
            return found

    def create_table(self) -> None:
        """Memory holds no tables: there is nothing to create."""

    # -- due-work index --------------------------------------------------------------------

    def reserve_due(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> list[str]:
        with self._database_lock:
            due = sorted(
                (r for r in self._work.values() if r.due_at <= now and r.operation_type in types),
                key=lambda r: r.due_at,
            )[:limit]
            for row in due:
                row.due_at, row.worker = hold_until, worker
            return [r.operation_id for r in due]

    def renew_leases(
        self, leases: Sequence[tuple[str, int]], worker: str, now: int, until: int
    ) -> list[str]:
        with self._database_lock:
            renewed = []
            for operation_id, token in leases:
                row = self._work.get(operation_id)
                if row and row.fencing_token == token and row.worker == worker and row.due_at > now:
                    row.due_at = until
                    renewed.append(operation_id)
            return renewed

    def held_leases(self, leases: Sequence[tuple[str, int]], worker: str) -> list[str]:
        with self._database_lock:
            return [
                operation_id
                for operation_id, token in leases
                if (row := self._work.get(operation_id)) is not None
                and row.fencing_token == token
                and row.worker == worker
            ]

    def next_due(self, types: Sequence[str]) -> int | None:
        with self._database_lock:
            return min(
                (r.due_at for r in self._work.values() if r.operation_type in types), default=None
            )

    def work_rows(self) -> list[WorkRow]:
        with self._database_lock:
            return [WorkRow(**vars_of(r)) for _, r in sorted(self._work.items())]

    def work_rows_of(self, row_type: str, due_by: int | None = None) -> list[WorkRow]:
        return [
            r
            for r in self.work_rows()
            if r.operation_type == row_type and (due_by is None or r.due_at <= due_by)
        ]

    def due_work_rows(self, prefix: str, due_by: int) -> list[WorkRow]:
        return [
            r
            for r in self.work_rows()
            if r.operation_type.startswith(prefix) and r.due_at <= due_by
        ]

    def due_work_summary(self, due_by: int) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        for row in self.work_rows():
            if row.due_at <= due_by:
                kind = "workflow" if row.operation_type.startswith("workflow:") else "operation"
                count, earliest = found.get(kind, (0, row.due_at))
                found[kind] = (count + 1, min(earliest, row.due_at))
        return found

    def work_position(self) -> int:
        return self._work_position

    def rebuild_work(self, page: int = 5000) -> int:
        with self._database_lock:
            self._work.clear()
            self._work_position = 0
            triples = [(str(s.originator_id), s.topic, s.state) for s in self._stored_events if s]
            if triples:
                self._apply(work_index.changes(triples), len(self._stored_events))
            return self._work_position

    # -- retention index (journal/retention_index.py): a dict, scanned ----------------------

    def ensure_retention(self) -> None:
        """Memory journals start empty: the index is always built."""

    def retention_types(self) -> list[str]:
        with self._database_lock:
            return sorted({r.operation_type for r in self._retention.values() if not r.purged})

    def retention_due(
        self, operation_type: str, journal_before: int | None, outcome_before: int | None
    ) -> list[RetentionRow]:
        def due(at: str | None, before: int | None) -> bool:
            return at is not None and before is not None and work_index.micros(at) <= before

        with self._database_lock:
            return [
                replace(r)
                for r in self._retention.values()
                if r.operation_type == operation_type
                and (
                    (not r.purged and due(r.terminal_at, journal_before))
                    or (r.outcome and due(r.completed_at, outcome_before))
                )
            ]

    def retention_pending(self) -> list[RetentionRow]:
        with self._database_lock:
            return [replace(r) for r in self._retention.values() if r.pending]

    def retention_rows(self) -> list[RetentionRow]:
        with self._database_lock:
            return [replace(r) for _, r in sorted(self._retention.items())]

    def settle_retention(self, operation_id: str) -> None:
        with self._database_lock:
            row = self._retention.get(operation_id)
            if row is not None and row.purged:
                del self._retention[operation_id]
            elif row is not None:
                row.pending = False

    def read_mark(self, name: str) -> int:
        return self._marks.get(name, 0)

    def advance_mark(self, name: str, position: int) -> None:
        with self._database_lock:
            self._marks[name] = max(self._marks.get(name, 0), position)

    def rebuild_retention(self, page: int = 5000) -> int:
        with self._database_lock:
            fold = retention_index.Rebuild()
            fold.add((str(s.originator_id), s.topic, s.state) for s in self._stored_events if s)
            self._retention = {r.operation_id: r for r in fold.result()}
            return len(self._stored_events)


def vars_of(row: WorkRow) -> dict[str, Any]:
    return {name: getattr(row, name) for name in WorkRow.__slots__}
