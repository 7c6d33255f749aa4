"""The commit queue: concurrent appends of one process join one transaction.

Every :meth:`EventStore.append` of a database store goes through one :class:`CommitQueue`.
A caller that finds no commit in flight leads: it takes every waiting member (its own append
first) and commits them in one transaction; callers arriving meanwhile wait, and when the
transaction ends the first of them leads the next one with all who came. Under load a
transaction therefore carries everyone who arrived during the previous one (the events-table
lock is taken once per group, not once per caller); alone, a caller commits at once. When the
previous group had company, a leader waits at most ``linger`` seconds (1 ms) for more, and no
longer than until as many callers wait as that group held (decisions F32).

What each caller sees is what it would see alone:

* it returns only after the transaction holding its events has committed, with its own
  positions (the group's positions are one gapless run, in member order: members are
  ordered by arrival, and each member's events stay together in its order);
* two members touching one stream never share a transaction (the later waits for the next
  group), so a member never fails because of another's version;
* a group refused by the journal (a lost race, a gap, any refusal) is committed again member
  by member, so each gets its own verdict and the others are committed without the one that
  fails (the store's reconciliation names a lost race exactly when it is alone);
* ``backend_unavailable`` (the store cannot be reached, or failed) is every member's answer
  for that transaction: nothing of it was committed, and each caller retries as it would
  alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from domain.errors import BackendUnavailable
from journal.appends import Append

log = logging.getLogger("blackops.journal")

#: Told of every committed transaction: its appends, how many callers shared it, and how
#: long the commit took in seconds (the hook blackops' metrics register; decisions M2).
CommitObserver = Callable[[Sequence[Append], int, float], None]

#: A group holds at most this many events (one INSERT of a few hundred rows stays quick).
MAX_GROUP_EVENTS = 2000
LINGER_SECONDS = 0.001


@dataclass(eq=False, slots=True)
class _Member:
    appends: Sequence[Append]
    streams: frozenset[str]
    events: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[list[int]] | None = None
    error: BaseException | None = None
    handed: bool = False  # it leads (or is to lead) the next group


class CommitQueue:
    """Joins concurrent ``commit(appends)`` calls of this process into one call.

    ``commit`` appends in one transaction and returns each append's positions (it raises
    ``FencingError``, ``Conflict``, ``BackendUnavailable``, ... as ``EventStore`` does);
    ``after`` runs once per committed group, before its members are answered;
    ``observe(appends, members, seconds)`` too (metrics: the group's size and how long its
    transaction took), when given.
    """

    def __init__(
        self,
        commit: Callable[[Sequence[Append]], list[list[int]]],
        after: Callable[[Sequence[Append]], None] | None = None,
        linger: float = LINGER_SECONDS,
        max_events: int = MAX_GROUP_EVENTS,
        observe: CommitObserver | None = None,
    ) -> None:
        self._commit = commit
        self._after = after
        self.observe = observe
        self.linger = linger
        self.max_events = max_events
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # a member queued (a leader lingers)
        self._waiting: list[_Member] = []
        self._leading = False
        self._leader: int | None = None
        self._had_company = False
        self._last_size = 0  # members of the last group: the company a leader waits for
        #: Sizes of the groups committed so far (members per transaction), for benchmarks.
        self.groups = 0
        self.members = 0

    @property
    def waiting(self) -> int:
        """Members queued and not yet taken into a transaction."""
        with self._lock:
            return len(self._waiting)

    def append(self, appends: Sequence[Append]) -> list[list[int]]:
        """Commit ``appends`` in a transaction shared with whoever else is waiting; return
        their positions once it has committed (or raise this caller's own refusal)."""
        member = _Member(
            appends,
            frozenset(a.stream for a in appends),
            sum(len(a.events) for a in appends),
        )
        if self._leader == threading.get_ident():
            # Appending from inside a commit of this queue (a listener): committed on its
            # own at once; waiting for the queue would wait for ourselves.
            self._one(member)
            if member.error is not None:
                raise member.error
            assert member.result is not None
            return member.result
        with self._lock:
            self._waiting.append(member)
            member.handed, self._leading = not self._leading, True
            self._arrived.notify()
        try:
            if not member.handed:
                member.done.wait()  # answered, or handed the lead (no answer yet)
                member.done.clear()
            if member.handed and member.result is None and member.error is None:
                self._lead(member)  # the first waiting member is always in its group
        except BaseException:  # KeyboardInterrupt, a signal handler's exception
            self._leave(member)
            raise
        if member.error is not None:
            raise member.error
        assert member.result is not None
        return member.result

    def _leave(self, member: _Member) -> None:
        """``member``'s caller stopped (an interrupt) before its group was taken: it leaves
        the queue, uncommitted, and a lead it had been handed passes on. Left waiting, a
        member handed the lead led nobody, and every later append of the process waited for
        ever (found by a defect hunt). Already taken into a group, it is committed or refused
        with that group, as an interrupted commit is."""
        with self._lock:
            if member in self._waiting:
                self._waiting.remove(member)
                if member.handed:
                    self._hand_on()

    def _hand_on(self) -> None:
        """The lead passes to the first waiting member (woken without an answer: it leads),
        or nobody leads. Called with the lock held."""
        if self._waiting:
            self._waiting[0].handed = True
            self._waiting[0].done.set()
        else:
            self._leading = False

    def _lead(self, member: _Member) -> None:
        """Commit one group (``member``, this thread's, first), then hand the lead on."""
        self._leader = threading.get_ident()
        try:
            if self._had_company and self.linger > 0:
                self._linger()
            group = self._take()
            self._had_company = len(group) > 1
            self._last_size = len(group)
            self._run(group)
        finally:
            self._leader = None
            with self._lock:
                if member in self._waiting:  # interrupted before its group was taken
                    self._waiting.remove(member)
                self._hand_on()

    def _linger(self) -> None:
        """Wait for company: until as many members wait as the last group held (they are
        probably the same callers, back with their next append), at most ``linger``."""
        deadline = time.monotonic() + self.linger
        with self._lock:
            while len(self._waiting) < self._last_size:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._arrived.wait(left)

    def _take(self) -> list[_Member]:
        with self._lock:
            group: list[_Member] = []
            streams: set[str] = set()
            events = 0
            for member in self._waiting:
                if member.streams & streams:
                    continue  # the same stream twice: next group
                if group and events + member.events > self.max_events:
                    break
                group.append(member)
                streams |= member.streams
                events += member.events
            taken = set(map(id, group))
            self._waiting = [m for m in self._waiting if id(m) not in taken]
        return group

    def _run(self, group: list[_Member]) -> None:
        try:
            if len(group) == 1:
                self._one(group[0])
                return
            appends = [a for m in group for a in m.appends]
            started = time.perf_counter()
            try:
                positions = self._commit(appends)
            except BackendUnavailable as error:
                for member in group:
                    member.error = error
                return
            except Exception:  # a refusal: each member on its own, each its own verdict
                for member in group:
                    self._one(member)
                return
            self.groups += 1
            self.members += len(group)
            start = 0
            for member in group:
                member.result = positions[start : start + len(member.appends)]
                start += len(member.appends)
            self._notify(appends, len(group), time.perf_counter() - started)
        finally:
            for member in group:
                if member.result is None and member.error is None:
                    member.error = BackendUnavailable("the commit queue lost this append")
                member.done.set()

    def _one(self, member: _Member) -> None:
        started = time.perf_counter()
        try:
            member.result = self._commit(member.appends)
        except BaseException as error:  # the caller's own verdict, raised in its thread
            member.error = error
            return
        self.groups += 1
        self.members += 1
        self._notify(member.appends, 1, time.perf_counter() - started)

    def _notify(self, appends: Sequence[Append], members: int, seconds: float) -> None:
        # Committed is committed: neither an observer nor a listener can undo it.
        if self.observe is not None:
            try:
                self.observe(appends, members, seconds)
            except Exception:
                log.exception("a commit observer failed")
        if self._after is not None:
            try:
                self._after(appends)
            except Exception:
                log.exception("an append listener failed")
