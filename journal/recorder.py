"""The recorder seam: what ``EventStore`` needs of a backend (eventsourcing's application
recorder plus our stream reads, the due-work index and the Merkle leaves). One module per
backend implements it: ``backend_memory``, ``backend_sqlite``, ``backend_postgres``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from eventsourcing.persistence import Notification, StoredEvent

from journal.backend_common import StoredRow
from journal.retention_index import RetentionRow
from journal.work_index import WorkRow


class Recorder(Protocol):
    def insert_events(self, stored_events: Sequence[StoredEvent]) -> Sequence[int] | None: ...

    def select_stream(self, stream: str, after_version: int = 0) -> list[Notification]: ...

    def select_streams(
        self, streams: Sequence[str], after_version: int = 0
    ) -> list[Notification]: ...

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]: ...

    def select_after(self, after: int, limit: int) -> list[StoredRow]:
        """Up to ``limit`` events after position ``after``, by position, undecoded."""
        ...

    def select_after_within(self, after: int, limit: int, max_bytes: int) -> list[StoredRow]:
        """`select_after`, ending with the row whose state reaches ``max_bytes`` in all (the
        first row always comes): the rows past it are never read into this process."""
        ...

    def select_before_start(self, limit: int) -> list[StoredRow]:
        """Up to ``limit`` events at positions below 1, undecoded: the journal never gives
        one, so any is a row written behind its back (verify names it)."""
        ...

    def select_topics(self, topics: Sequence[str], after: int, limit: int) -> list[Notification]:
        """Events of ``topics`` after position ``after``, by position (journal/topic_sql.py)."""
        ...

    def max_notification_id(self) -> int | None: ...

    def create_table(self) -> None: ...

    def reserve_due(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> list[str]: ...

    def renew_leases(
        self, leases: Sequence[tuple[str, int]], worker: str, now: int, until: int
    ) -> list[str]: ...

    def held_leases(self, leases: Sequence[tuple[str, int]], worker: str) -> list[str]: ...

    def next_due(self, types: Sequence[str]) -> int | None: ...

    def work_rows(self) -> list[WorkRow]: ...

    def work_rows_of(self, row_type: str, due_by: int | None = None) -> list[WorkRow]: ...

    def due_work_rows(self, prefix: str, due_by: int) -> list[WorkRow]: ...

    def due_work_summary(self, due_by: int) -> dict[str, tuple[int, int]]: ...

    def work_position(self) -> int: ...

    def select_leaves(self, after: int, limit: int) -> list[tuple[int, bytes]]: ...

    def delete_stream_events(self, stream: str, upto_version: int) -> int: ...

    def rebuild_work(self, page: int = 5000) -> int: ...

    def ensure_retention(self) -> None: ...

    def rebuild_retention(self, page: int = 5000) -> int: ...

    def retention_types(self) -> list[str]: ...

    def retention_due(
        self, operation_type: str, journal_before: int | None, outcome_before: int | None
    ) -> list[RetentionRow]: ...

    def retention_pending(self) -> list[RetentionRow]: ...

    def retention_rows(self) -> list[RetentionRow]: ...

    def settle_retention(self, operation_id: str) -> None: ...

    def read_mark(self, name: str) -> int: ...

    def advance_mark(self, name: str, position: int) -> None: ...
