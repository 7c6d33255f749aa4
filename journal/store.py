"""The canonical journal: append-only streams with versions and one global position order.

``EventStore`` is the journal's one door: appends (with fencing and lost-commit
reconciliation), reads, and the thin typed front of what the recorders keep beside the
events in the same transactions (the due-work index, Merkle leaves, wake-ups).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Final, Literal, cast

from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    InterfaceError,
    Notification,
    OperationalError,
    PersistenceError,
    StoredEvent,
)
from eventsourcing.utils import Environment

from domain.errors import BackendUnavailable, Conflict, FencingError, InvalidRequest, NotFound
from domain.events import RecordedEvent
from journal.appends import Append as Append  # re-exported: callers import it from the store
from journal.backend_common import MAX_POSITION as MAX_POSITION  # re-exported
from journal.backend_common import StoredRow
from journal.backend_memory import BlackOpsMemoryRecorder
from journal.codec import decode_state, encode_state
from journal.commit_queue import CommitObserver, CommitQueue
from journal.leaves import SAFE_NAME
from journal.locator import StoreLocation, postgres_connect, resolve_store
from journal.recorder import Recorder
from journal.retention_index import RetentionRow
from journal.setup import named_lock, postgres_setup_lock, sqlite_setup_lock
from journal.snapshot_sql import StoredSnapshot
from journal.use_gate import UseGate
from journal.work_index import WAKING_TOPICS, WorkRow

log = logging.getLogger("blackops.journal")

_RECORDERS = {
    "sqlite": "journal.backend_sqlite:BlackOpsSQLiteRecorder",
    "postgresql": "journal.backend_postgres:BlackOpsPostgresRecorder",
}
PAGE_LIMIT_MAX = 10_000
#: How long closing a store waits for other threads' calls inside it to return.
CLOSE_WAIT_SECONDS: Final = 10.0


def _translated(error: PersistenceError) -> BackendUnavailable:
    """What a store failure other than a conflict (IntegrityError) is to callers."""
    if isinstance(error, OperationalError | InterfaceError):
        return BackendUnavailable("the journal store cannot be reached", str(error))
    return BackendUnavailable("the journal store failed", str(error))


class _Using:
    """`EventStore._using`: a class, not a generator context manager, since it wraps every
    store call (the generator's frames cost more than the gate's count)."""

    __slots__ = ("_gate",)

    def __init__(self, gate: UseGate | None) -> None:
        self._gate = gate  # None: errors translated, nothing counted (opening the store)

    def __enter__(self) -> None:
        if self._gate is not None:
            self._gate.enter()

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> Literal[False]:
        if self._gate is not None:
            self._gate.leave()
        if isinstance(error, PersistenceError) and not isinstance(error, IntegrityError):
            raise _translated(error) from error
        return False


#: The events table's name in each backend (eventsourcing's: journal/backend_sqlite.py, and
#: the PostgreSQL recorder's for the Environment "blackops").
_EVENTS_TABLE = {"sqlite": "stored_events", "postgresql": "blackops_events"}


def _journal_at(location: StoreLocation) -> bool:
    """Is there a journal at ``location``? Looked at before anything else touches the store,
    read only: no file, folder, schema or lock is made, and another program's SQLite
    database is left exactly as it was (no WAL switch, nothing beside it)."""
    if location.kind == "postgresql":
        return _postgres_journal_at(location.settings)
    path = location.sqlite_path
    assert path is not None
    if not path.is_file():
        return False
    # A WAL database without its -wal file holds everything in the file itself: read it as
    # immutable, or SQLite would create -shm and -wal beside another program's database.
    # Its header is read only when there is no -wal file: closing any descriptor of the
    # file drops every POSIX lock this process holds on it, also the locks of this
    # process's open connections (a WAL connection keeps the -wal file), and another
    # process then took itself for the last one and deleted the -wal and -shm under them:
    # their commits went to a deleted file, unseen by other processes (found by review).
    wal = False
    if not path.with_name(path.name + "-wal").exists():
        with path.open("rb") as raw:
            wal = raw.read(20)[18:20] == b"\x02\x02"
    uri = f"{path.resolve().as_uri()}?{'immutable=1' if wal else 'mode=ro'}"
    with _sqlite_errors(location), contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        found = db.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
            (_EVENTS_TABLE["sqlite"],),
        ).fetchone()
    return bool(found and found[0])


def _postgres_journal_at(settings: dict[str, str]) -> bool:
    import psycopg
    from psycopg import sql

    table = sql.SQL("{}.{}").format(
        sql.Identifier(settings["POSTGRES_SCHEMA"]), sql.Identifier(_EVENTS_TABLE["postgresql"])
    )
    try:
        with postgres_connect(settings) as conn:
            row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table.as_string(),))
            found = row.fetchone()
    except psycopg.OperationalError as error:
        raise BackendUnavailable("PostgreSQL cannot be reached", str(error)) from error
    return bool(found and found[0])


@contextlib.contextmanager
def _sqlite_errors(location: StoreLocation) -> Iterator[None]:
    """The SQLite driver's own errors, said in one line: a file that is something else (or
    damaged) is the caller's error; one that cannot be read now (locked) is the store's."""
    try:
        yield
    except sqlite3.OperationalError as error:
        raise BackendUnavailable("the journal store cannot be reached", str(error)) from None
    except sqlite3.DatabaseError as error:
        raise InvalidRequest(f"{location.display} is not a SQLite journal ({error})") from None


@contextlib.contextmanager
def _sqlite_files(location: StoreLocation) -> Iterator[None]:
    """A SQLite journal's folder and files that cannot be made (a parent that is a file, a
    name too long for its ``.setup-lock``, no permission) are the caller's error, said in one
    line: they raised a traceback (found by a defect hunt, stop 35)."""
    if location.kind != "sqlite":
        yield
        return
    path = location.sqlite_path
    assert path is not None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield
    except OSError as error:
        reason = error.strerror or str(error)
        if error.errno in _NAMING_ERRORS:
            raise InvalidRequest(f"cannot make the journal {location.display}: {reason}") from None
        # A lock the file system refuses now, a full or failing disk: the store's, not the
        # caller's (found by review, stop 35).
        raise BackendUnavailable("the journal store cannot be reached", str(error)) from None


#: What is wrong with the place the caller named, not with the store.
_NAMING_ERRORS: Final = frozenset(
    {errno.ENAMETOOLONG, errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM, errno.EISDIR}
)


class EventStore:
    """One journal, on SQLite, PostgreSQL or memory (eventsourcing recorders).

    Every event has a per-stream version (1, 2, ...) and a global position that
    strictly increases in commit order. An append at a stale version is refused
    with :class:`FencingError`, never merged and never retried.
    """

    def __init__(self, location: StoreLocation | str | None = None, *, create: bool = True) -> None:
        """Open the journal at ``location``; with ``create=False`` one that is not there yet is
        ``not_found`` and nothing is created (a reader's typo never becomes an empty journal
        that verifies)."""
        if not isinstance(location, StoreLocation):
            location = resolve_store(location)
        self.location = location
        #: Called after every commit that may have made work due (workers in this process).
        self._wake_listeners: list[tuple[Callable[[], None], frozenset[str]]] = []
        self._append_listeners: list[Callable[[], None]] = []
        #: Told of every commit of this process (blackops' metrics, logs and spans).
        self._commit_observers: list[CommitObserver] = []
        self._factory: InfrastructureFactory[Any] | None = None
        self._queue: CommitQueue | None = None
        self._gate = UseGate()
        self._inside = _Using(self._gate)  # one for every call: it holds no call's state
        if location.kind == "memory":
            # eventsourcing's POPO factory ignores APPLICATION_RECORDER_TOPIC.
            self._recorder: Recorder = BlackOpsMemoryRecorder()
            return
        if not create and not _journal_at(location):
            raise NotFound(f"no journal at {location.sqlite_path or location.display}")
        settings = dict(location.settings)
        settings["APPLICATION_RECORDER_TOPIC"] = _RECORDERS[location.kind]
        settings["CREATE_TABLE"] = "no"  # created below, serialised across processes
        setup_lock = (
            postgres_setup_lock(settings)
            if location.kind == "postgresql"
            else sqlite_setup_lock(settings["SQLITE_DBNAME"])
        )
        with _sqlite_files(location), _Using(None), _sqlite_errors(location), setup_lock:
            # Explicit settings only: the user's shell environment never reconfigures it.
            self._factory = InfrastructureFactory.construct(Environment("blackops", settings))
            self._recorder = cast(Recorder, self._factory.application_recorder())
            self._recorder.create_table()
            # A journal written before the retention index existed gets it now, once.
            self._recorder.ensure_retention()
        self._queue = CommitQueue(self._commit, self._announce, observe=self._observed)

    def close(self) -> None:
        """Close the store once the calls other threads have inside it return (at most
        ``CLOSE_WAIT_SECONDS``); later calls are ``backend_unavailable``."""
        drained = self._gate.close(CLOSE_WAIT_SECONDS)
        if self._factory is None:
            return
        if not drained and self.location.kind == "sqlite":
            # Closing a SQLite connection under a running statement crashes the process:
            # the connections are left to the process's end instead.
            log.warning("journal store closed with calls still inside: connections left open")
            return
        with contextlib.suppress(Exception):
            self._factory.close()

    @property
    def closed(self) -> bool:
        return self._gate.closed

    def _using(self) -> _Using:
        """Around every call into the recorder: counted for ``close``, errors translated."""
        return self._inside

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------

    def append(self, *appends: Append) -> list[list[int]]:
        """Append to one or more streams in one transaction; return each one's positions.

        If any stream moved past its ``expected_version`` nothing is written and
        :class:`FencingError` names it. An append whose events are byte-identical to
        what is stored at those versions is our own earlier commit whose
        acknowledgement was lost (the recorder retries after connection errors): it
        succeeds with the stored positions. On a database store, concurrent appends of
        this process share transactions (journal/commit_queue.py); each returns only
        once its own transaction has committed.
        """
        for append in appends:
            _check_stream(append.stream)
            if type(append.expected_version) is not int or append.expected_version < 0:
                raise InvalidRequest("expected_version must be a non-negative integer")
            for event in append.events:
                _check_topic(event.type)
        if not any(append.events for append in appends):
            return [[] for _ in appends]
        if self._queue is not None:
            return self._queue.append(appends)
        started = time.perf_counter()
        result = self._commit(appends)
        self._observed(appends, 1, time.perf_counter() - started)
        self._announce(appends)
        return result

    def add_commit_observer(self, observer: CommitObserver) -> None:
        """Call ``observer(appends, members, seconds)`` after every transaction this process
        commits: what it held, how many appends shared it, how long the commit took."""
        self._commit_observers.append(observer)

    def remove_commit_observer(self, observer: CommitObserver) -> None:
        with contextlib.suppress(ValueError):
            self._commit_observers.remove(observer)

    def _observed(self, appends: Sequence[Append], members: int, seconds: float) -> None:
        for observer in list(self._commit_observers):
            try:
                observer(appends, members, seconds)
            except Exception:  # committed is committed: an observer cannot undo it
                log.exception("a commit observer failed")

    @property
    def commit_groups(self) -> tuple[int, int]:
        """``(transactions, appends)`` committed through the commit queue so far."""
        if self._queue is None:
            return (0, 0)
        return (self._queue.groups, self._queue.members)

    def _commit(self, appends: Sequence[Append]) -> list[list[int]]:
        """One transaction holding every append (validated), or an error and nothing."""
        stored = [
            StoredEvent(
                originator_id=append.stream,
                originator_version=append.expected_version + offset,
                topic=event.type,
                state=encode_state(event),
            )
            for append in appends
            for offset, event in enumerate(append.events, start=1)
        ]
        try:
            try:
                with self._using():
                    positions = list(self._recorder.insert_events(stored) or ())
            except IntegrityError:
                return self._reconcile(appends, stored)
        except BackendUnavailable:
            # It may have committed (its acknowledgement lost, or a retry's reconciliation
            # that could not read back): its announcement is not heard here (F164), so this
            # process's workers are woken as if it had (a wake for nothing costs one due-work
            # read).
            self._wake(appends)
            raise
        return self._split(appends, positions)

    def _announce(self, appends: Sequence[Append]) -> None:
        """After a commit: wake this process's workers and live readers."""
        self._wake(appends)
        for listener in list(self._append_listeners):
            listener()

    def _wake(self, appends: Sequence[Append]) -> None:
        topics = {event.type for append in appends for event in append.events} & WAKING_TOPICS
        if topics:
            for listener, wanted in list(self._wake_listeners):
                if topics & wanted:
                    listener()

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every commit of this store (live projections)."""
        self._append_listeners.append(listener)

    def remove_append_listener(self, listener: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._append_listeners.remove(listener)

    def exclusive(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Hold the cross-process lock ``name`` of this journal (e.g. ``signer``)."""
        return named_lock(self.location.kind, dict(self.location.settings), name)

    def add_wake_listener(
        self, listener: Callable[[], None], topics: Collection[str] = WAKING_TOPICS
    ) -> None:
        """Call ``listener`` after each commit of this store that may have made work due
        (one holding an event of ``topics``, by default any waking topic)."""
        self._wake_listeners.append((listener, frozenset(topics)))

    def remove_wake_listener(self, listener: Callable[[], None]) -> None:
        self._wake_listeners = [(f, t) for f, t in self._wake_listeners if f != listener]

    @staticmethod
    def _split(appends: Sequence[Append], positions: list[int]) -> list[list[int]]:
        result, start = [], 0
        for append in appends:
            result.append(positions[start : start + len(append.events)])
            start += len(append.events)
        return result

    def _reconcile(self, appends: Sequence[Append], stored: list[StoredEvent]) -> list[list[int]]:
        """After a refused insert: was it our own lost commit, or whom did we collide with?

        Each stream is ``mine`` (identical events stored), ``absent`` (nothing stored
        after the expected version: the refusal came from elsewhere, or a gap) or
        ``other`` (another writer's events). All mine: success. Mine and absent, none
        other: our own earlier commit (its answer lost) refused this one, and the absent
        streams were not in it: they are committed now, on their own (a worker retrying a
        turn after ``backend_unavailable`` adds the attempts that ended since; they were
        refused as lost races, and their handlers ran again: found by review). Else the
        first ``other`` stream is the conflict, or failing that the first ``absent`` one.
        """
        verdicts: list[tuple[str, Append, list[Notification]]] = []
        start = 0
        for append in appends:
            mine = stored[start : start + len(append.events)]
            start += len(append.events)
            with self._using():
                found = self._recorder.select_stream(append.stream, append.expected_version)
            found = found[: len(mine)]
            if [(n.topic, n.state) for n in found] == [(s.topic, s.state) for s in mine]:
                verdicts.append(("mine", append, found))
            else:
                verdicts.append(("other" if found else "absent", append, found))
        kinds = {verdict for verdict, _, _ in verdicts}
        if kinds == {"mine"}:
            return [[n.id for n in found] for _, _, found in verdicts]
        if kinds == {"mine", "absent"}:
            fresh = iter(self._commit([a for v, a, _ in verdicts if v == "absent"]))
            return [
                [n.id for n in found] if verdict == "mine" else next(fresh)
                for verdict, _, found in verdicts
            ]
        losers = [a for v, a, _ in verdicts if v == "other"] or [
            a for v, a, _ in verdicts if v == "absent"
        ]
        raise FencingError(losers[0].stream, losers[0].expected_version)

    # -- reading ---------------------------------------------------------------------------

    def read_stream(self, stream: str, after_version: int = 0) -> list[RecordedEvent]:
        """All events of one stream after ``after_version``, in version order."""
        _check_stream(stream)
        with self._using():
            found = self._recorder.select_stream(stream, after_version)
        return [_decode(n) for n in found]

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Every event of each stream, in version order, read in one round trip."""
        for stream in streams:
            _check_stream(stream)
        found: dict[str, list[RecordedEvent]] = {stream: [] for stream in streams}
        if streams:
            with self._using():
                rows = self._recorder.select_streams(list(dict.fromkeys(streams)))
            for row in rows:
                found[str(row.originator_id)].append(_decode(row))
        return found

    def read_after(self, position: int, limit: int = 1000) -> list[RecordedEvent]:
        """Up to ``limit`` events with positions greater than ``position``, in order."""
        return [_decode(n) for n in self.read_raw_after(position, limit)]

    def read_topics(
        self, topics: Sequence[str], page: int = 1000, after: int = 0
    ) -> list[RecordedEvent]:
        """Every event whose type is one of ``topics`` (after ``after``), in position order:
        a range of the topic index per topic (journal/topic_sql.py), never a journal scan."""
        return [_decode(row) for row in self.read_topics_raw(topics, page, after)]

    def read_topics_raw(
        self, topics: Sequence[str], page: int = 1000, after: int = 0
    ) -> list[Notification]:
        """`read_topics`, undecoded: a verifier decodes each row itself, so that one changed
        behind the journal's back is named, not raised."""
        if not topics:
            return []  # the recorder reads "no topics" as "no filter"
        found: list[Notification] = []
        position = after
        while True:
            with self._using():
                rows = self._recorder.select_topics(list(dict.fromkeys(topics)), position, page)
            if not rows:
                return found
            found.extend(rows)
            position = rows[-1].id

    def read_raw_after(
        self, position: int, limit: int = 1000, max_bytes: int | None = None
    ) -> list[StoredRow]:
        """Like :meth:`read_after`, undecoded: ``state`` holds the stored canonical bytes.
        ``max_bytes``: the page ends with the row whose states reach it in all (at least one
        row), so a reader of large events holds a bounded page, never ``limit`` of them."""
        if type(position) is not int or not 0 <= position <= MAX_POSITION:
            raise InvalidRequest("position must be an integer from 0 to 2**63 - 1")
        if type(limit) is not int or not 1 <= limit <= PAGE_LIMIT_MAX:
            raise InvalidRequest(f"limit must be an integer from 1 to {PAGE_LIMIT_MAX}")
        if max_bytes is not None and (type(max_bytes) is not int or max_bytes < 1):
            raise InvalidRequest("max_bytes must be a positive integer")
        with self._using():
            if max_bytes is None:
                return self._recorder.select_after(position, limit)
            return self._recorder.select_after_within(position, limit, max_bytes)

    def read_raw_before_start(self, limit: int = 1000) -> list[StoredRow]:
        """Up to ``limit`` stored rows at positions below 1, undecoded. The journal gives
        positions from 1, so each is a row written behind its back: `verify` names them."""
        if type(limit) is not int or not 1 <= limit <= PAGE_LIMIT_MAX:
            raise InvalidRequest(f"limit must be an integer from 1 to {PAGE_LIMIT_MAX}")
        with self._using():
            return self._recorder.select_before_start(limit)

    def iter_after(self, position: int = 0, page: int = 1000) -> Iterator[RecordedEvent]:
        """Every event after ``position``, read in pages (a snapshot of 'now' is not taken)."""
        while events := self.read_after(position, page):
            yield from events
            position = events[-1].position

    def last_position(self) -> int:
        with self._using():
            return self._recorder.max_notification_id() or 0

    # -- the due-work index (journal/work_index.py) ----------------------------------------

    def reserve_due(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> list[str]:
        """Ids of up to ``limit`` operations of ``types`` due at ``now`` (microseconds),
        kept off other workers' lists until ``hold_until``."""
        if not types or limit < 1:
            return []
        with self._using():
            return self._recorder.reserve_due(now, hold_until, worker, list(types), limit)

    def reserve_due_streams(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> dict[str, list[RecordedEvent]]:
        """:meth:`reserve_due` and :meth:`read_streams` of what it reserved, in one round
        trip where the backend can (PostgreSQL)."""
        if not types or limit < 1:
            return {}
        reserve_and_read = getattr(self._recorder, "reserve_and_select", None)
        if reserve_and_read is None:
            return self.read_streams(self.reserve_due(now, hold_until, worker, types, limit))
        with self._using():
            rows = reserve_and_read(now, hold_until, worker, list(types), limit)
        found: dict[str, list[RecordedEvent]] = {}
        for row in rows:
            found.setdefault(str(row.originator_id), []).append(_decode(row))
        return found

    def reserve_due_tails(
        self, now: int, hold_until: int, worker: str, types: Sequence[str], limit: int
    ) -> dict[str, tuple[StoredSnapshot | None, list[RecordedEvent]]]:
        """:meth:`reserve_due_streams`, but each stream read from its snapshot's version on
        with that snapshot (unverified: ``journal/instance_snapshots.py`` checks it)."""
        if not types or limit < 1:
            return {}
        reserve_tails = getattr(self._recorder, "reserve_and_select_tails", None)
        select_tails = getattr(self._recorder, "select_tails", None)
        if reserve_tails is None and select_tails is None:  # no snapshots (memory)
            found = self.reserve_due_streams(now, hold_until, worker, types, limit)
            return {stream: (None, events) for stream, events in found.items()}
        with self._using():
            if reserve_tails is not None:
                tails = reserve_tails(now, hold_until, worker, list(types), limit)
            elif ids := self._recorder.reserve_due(now, hold_until, worker, list(types), limit):
                tails = cast(Callable[[list[str]], dict[str, Any]], select_tails)(ids)
            else:
                tails = {}
        return {s: (t.snapshot, [_decode(n) for n in t.events]) for s, t in tails.items()}

    def write_snapshot(self, stream: str, version: int, digest: str, body: bytes) -> None:
        """Keep a snapshot of ``stream`` folded to ``version`` beside the journal (a cache:
        nothing is written if that version is not stored; backends without one skip it)."""
        write = getattr(self._recorder, "write_snapshot", None)
        if write is not None:
            with self._using():
                write(stream, version, digest, body)

    def renew_leases(
        self, leases: Sequence[tuple[str, int]], worker: str, now: int, until: int
    ) -> list[str]:
        """Extend ``(operation_id, fencing_token)`` leases still held by ``worker``."""
        if not leases:
            return []
        with self._using():
            return self._recorder.renew_leases(leases, worker, now, until)

    def held_leases(self, leases: Sequence[tuple[str, int]], worker: str) -> list[str]:
        """The ``(id, token)`` leases whose rows still name ``worker`` and that token."""
        if not leases:
            return []
        with self._using():
            return self._recorder.held_leases(leases, worker)

    def next_due(self, types: Sequence[str]) -> int | None:
        """The earliest due time (microseconds) among ``types``, or None."""
        if not types:
            return None
        with self._using():
            return self._recorder.next_due(list(types))

    def work_rows(self) -> list[WorkRow]:
        with self._using():
            return self._recorder.work_rows()

    def work_rows_of(self, row_type: str, due_by: int | None = None) -> list[WorkRow]:
        """The due-work rows of one type (``workflow:<uid>``: a Workflow's instances),
        only those due by ``due_by`` (microseconds) if given: an index range scan."""
        with self._using():
            return self._recorder.work_rows_of(row_type, due_by)

    def due_work_rows(self, prefix: str, due_by: int) -> list[WorkRow]:
        """The due-work rows due by ``due_by`` whose type starts with ``prefix``."""
        with self._using():
            return self._recorder.due_work_rows(prefix, due_by)

    def due_work_summary(self, due_by: int) -> dict[str, tuple[int, int]]:
        """``{"operation" | "workflow": (rows due by due_by, earliest due_at)}`` of the
        due-work index (one aggregate query; kinds with nothing due are absent)."""
        with self._using():
            return self._recorder.due_work_summary(due_by)

    def work_position(self) -> int:
        """The journal position the due-work index has folded up to."""
        with self._using():
            return self._recorder.work_position()

    def read_leaves(self, after: int, limit: int = 5000) -> list[tuple[int, bytes]]:
        """Merkle leaves recorded at append time, ``(position, leaf)`` after ``after``."""
        with self._using():
            return self._recorder.select_leaves(after, limit)

    def delete_stream_events(self, stream: str, upto_version: int) -> int:
        """Irreversibly delete a stream's events up to a version (retention purge only:
        the caller has already appended the tombstone that accounts for them)."""
        _check_stream(stream)
        try:
            with self._using():
                return self._recorder.delete_stream_events(stream, upto_version)
        except IntegrityError as refused:  # SQLite: the newest row (its rowid is a position)
            raise Conflict(str(refused)) from None

    def rebuild_work_index(self) -> int:
        """Drop the due-work index and rebuild it from position 0; returns its position."""
        with self._using():
            return self._recorder.rebuild_work()

    # -- the retention index (journal/retention_index.py) ----------------------------------

    def retention_types(self) -> list[str]:
        """The operation types with an unpurged operation (one index probe each)."""
        with self._using():
            return self._recorder.retention_types()

    def retention_due(
        self, operation_type: str, journal_before: int | None, outcome_before: int | None
    ) -> list[RetentionRow]:
        """Rows of ``operation_type`` terminal at or before ``journal_before``, or with an
        Outcome Record completed at or before ``outcome_before`` (microseconds; None: not
        asked), held or not: purge applies its rules to them."""
        with self._using():
            return self._recorder.retention_due(operation_type, journal_before, outcome_before)

    def retention_pending(self) -> list[RetentionRow]:
        """Rows whose tombstone's deletion may not have run (a purge cut short)."""
        with self._using():
            return self._recorder.retention_pending()

    def retention_rows(self) -> list[RetentionRow]:
        with self._using():
            return self._recorder.retention_rows()

    def settle_retention(self, operation_id: str) -> None:
        """After a purge deleted what its tombstone accounts for (safe to repeat)."""
        with self._using():
            self._recorder.settle_retention(operation_id)

    def mark(self, name: str) -> int:
        """How far the sweep ``name`` has finished (a position; 0 if never; journal/marks.py)."""
        with self._using():
            return self._recorder.read_mark(name)

    def advance_mark(self, name: str, position: int) -> None:
        """Record that ``name`` has finished everything up to ``position`` (never backwards)."""
        with self._using():
            self._recorder.advance_mark(name, position)

    def rebuild_retention_index(self) -> int:
        """Drop the retention index and fold the whole journal again; returns the position."""
        with self._using():
            return self._recorder.rebuild_retention()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A cursor in one write transaction on the journal's database (projections).

        Committed when the block ends, rolled back if it raises. Not for memory stores.
        """
        if self._factory is None:
            raise InvalidRequest("memory stores have no database transactions")
        datastore = self._recorder.datastore  # type: ignore[attr-defined]
        with self._using(), datastore.transaction(commit=True) as cursor:
            yield cursor

    @property
    def announces_wakes(self) -> bool:
        """Whether other processes' appends are announced (:meth:`listen_for_wakes`);
        without it (SQLite, memory) only this process's appends wake listeners, and
        workers poll for the rest."""
        return self.location.kind == "postgresql"

    def listen_for_wakes(self, on_wake: Callable[[], None], stopped: threading.Event) -> None:
        """Block until ``stopped``, calling ``on_wake`` whenever an append of another store
        (another process, mostly) may have made work due (PostgreSQL LISTEN/NOTIFY).
        Returns at once on a backend that has no such announcement; this store's own
        appends wake the listeners of :meth:`add_wake_listener` instead, on every backend."""
        self.listen_for_wake_topics(lambda _topics: on_wake(), stopped)

    def listen_for_wake_topics(
        self, on_wake: Callable[[frozenset[str] | None], None], stopped: threading.Event
    ) -> None:
        """:meth:`listen_for_wakes`, telling ``on_wake`` the waking topics each append
        committed and, as ``=type`` names, the operation types it accepted when they fit
        (`journal.work_index.announced_types`); ``None``: not known, as after a reconnect
        (assume anything)."""
        if not self.announces_wakes:
            return
        from journal.backend_postgres import listen_for_wakes

        channel: str = self._recorder.work_channel  # type: ignore[attr-defined]
        announcer: str = self._recorder.announcer  # type: ignore[attr-defined]
        listen_for_wakes(dict(self.location.settings), channel, on_wake, stopped, announcer)

    @property
    def settings(self) -> dict[str, str]:
        return dict(self.location.settings)


def _check_stream(stream: Any) -> None:
    if not isinstance(stream, str) or not SAFE_NAME.fullmatch(stream):
        raise InvalidRequest(
            "stream ids are 1-200 printable ASCII characters, without quotes or backslashes"
        )


def _check_topic(topic: Any) -> None:
    if not isinstance(topic, str) or not SAFE_NAME.fullmatch(topic):
        raise InvalidRequest("event types are 1-200 printable ASCII characters")


def _decode(notification: Notification | StoredRow) -> RecordedEvent:
    at, context, data = decode_state(notification.state)
    return RecordedEvent(
        position=notification.id,
        stream=str(notification.originator_id),
        version=notification.originator_version,
        type=notification.topic,
        at=at,
        context=context,
        data=data,
    )
