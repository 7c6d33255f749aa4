"""Worker: claims due Deferred operations and runs their attempts (OL-4, OL-7, OL-8).

One coordinator thread does every journal write of this worker: each turn commits the
attempts that finished **and** the claims that refill the freed capacity in one
transaction, and renews leases (heartbeats, outside the journal: decisions O4).
Handlers run on a thread pool of ``concurrency`` threads; up to ``prefetch`` more claimed
attempts wait in its queue (their leases are renewed too), so claims and commits come in
groups even when handlers are instant. The coordinator sleeps until a handler finishes,
new work is announced (PostgreSQL LISTEN/NOTIFY, or an in-process signal), the next
known due time, the next heartbeat, or the polling fallback. A busy coordinator's turns
are paced (``wake_delay`` under load, ``gather_seconds`` under a trickle of submits, this
process's or announced) so that claims and ends share transactions (decisions F111, F131,
F164).

A worker that cannot renew a lease abandons that attempt before the lease ends: its
result is never committed, and a new claimant records ``attempt.claim_lost``. A
handler thread cannot be killed; an abandoned one runs to its end and is ignored,
and a commit it could still race is refused by the journal's fencing.

``stop(grace)`` (SIGTERM in ``blackops worker``) stops claiming, lets running
attempts finish for ``grace`` seconds, then records ``attempt.interrupted`` for the
rest and reschedules them at once for other workers.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import queue
import random
import socket
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from blackops.operations.deferred import Attempt, DeferredEngine, Ending
from blackops.runtime import Runtime
from blackops.workflows.engine import WorkflowEngine
from blackops.workflows.executor import EarlyExecutors, WorkflowRunner
from blackops.workflows.in_process import run_due_contexts
from domain.errors import BlackOpsError, InvalidRequest
from domain.lifecycle import EventType
from journal.leases import check_lease_seconds, check_worker_id
from journal.work_index import (
    OPERATION_WAKING_TOPICS,
    WORKFLOW_WAKING_TOPICS,
    announced_types,
    moment_micros,
)

log = logging.getLogger("blackops.worker")
#: Events that make a new operation due at once (a retry, the other waking topic, may be
#: due later).
SUBMIT_TOPICS = frozenset({EventType.ACCEPTED.value})


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """What a worker is built with (``Application.worker(**options)``, ``blackops worker``,
    ``serve``); ``checked()`` refuses what the worker would (decisions P16)."""

    concurrency: int = 4
    lease_seconds: float = 30.0
    heartbeat_seconds: float | None = None  # None: a third of the lease
    poll_seconds: float | None = None  # None: 2 s with announcements, else 0.02 s
    prefetch: int | None = None  # None: as many as ``concurrency``
    grace_seconds: float = 30.0
    worker_id: str | None = None  # None: host:pid:random
    wake_delay: float = 0.005
    gather_seconds: float = 0.02
    workflow_processes: int = 4
    contexts_per_process: int | None = None

    def checked(self) -> CheckedOptions:
        """These options checked (``invalid_request`` for any the worker would refuse),
        before anything is forked, opened or started: `Worker` checks with it first, and
        ``serve`` and ``worker`` call it before they create anything."""
        if type(self.concurrency) is not int or not 1 <= self.concurrency <= 1024:
            raise InvalidRequest("concurrency must be an integer from 1 to 1024")
        if type(self.grace_seconds) not in (int, float) or not 0 <= self.grace_seconds <= 86_400:
            raise InvalidRequest("grace_seconds must be a number of seconds from 0 to 86400")
        for name in ("poll_seconds", "heartbeat_seconds", "wake_delay", "gather_seconds"):
            value = getattr(self, name)
            if value is not None and (type(value) not in (int, float) or not 0 < value <= 86_400):
                raise InvalidRequest(f"{name} must be a positive number of seconds")
        worker_id = check_worker_id(
            default_worker_id() if self.worker_id is None else self.worker_id
        )
        lease = check_lease_seconds(self.lease_seconds)
        heartbeat = self.heartbeat_seconds or lease / 3
        if heartbeat > lease / 2:
            raise InvalidRequest("heartbeat_seconds must be at most half of lease_seconds")
        processes = self.workflow_processes
        if type(processes) is not int or not 1 <= processes <= 256:
            raise InvalidRequest("workflow_processes must be an integer from 1 to 256")
        per_process = self.contexts_per_process
        if per_process is not None and (
            type(per_process) is not int or not 1 <= per_process <= 10**9
        ):
            raise InvalidRequest("contexts_per_process must be a positive integer")
        prefetch = self.concurrency if self.prefetch is None else self.prefetch
        if type(prefetch) is not int or not 0 <= prefetch <= 10_000:
            raise InvalidRequest("prefetch must be an integer from 0 to 10000")
        return CheckedOptions(worker_id, lease, heartbeat, prefetch)


class CheckedOptions(NamedTuple):
    """What ``WorkerOptions.checked`` resolved (a default id, heartbeat and prefetch)."""

    worker_id: str
    lease_seconds: float
    heartbeat_seconds: float
    prefetch: int


class Worker:
    def __init__(self, runtime: Runtime, options: WorkerOptions | None = None) -> None:
        options = options or WorkerOptions()
        checked = options.checked()
        self.id, self.lease_seconds = checked.worker_id, checked.lease_seconds
        self.heartbeat_seconds, self.prefetch = checked.heartbeat_seconds, checked.prefetch
        # Everything is checked: only now may the store open, and just before it does, the
        # executors of the workflows registered here are forked (decisions F80).
        early = _early_executors(runtime, options.workflow_processes)
        try:
            self._build(runtime, options)
            #: Workflow contexts run in executor processes (blackops/workflows/executor.py).
            self.workflows: WorkflowRunner | None = WorkflowRunner(
                workflow_engine(runtime, self.id, self.lease_seconds),
                processes=options.workflow_processes,
                contexts_per_process=options.contexts_per_process,
                heartbeat_seconds=self.heartbeat_seconds,
                poll_seconds=self.poll_seconds,
                early=early,
            )
        except BaseException:
            if early is not None:  # e.g. the store did not open: no executor outlives this
                early.close()
            raise

    def _build(self, runtime: Runtime, options: WorkerOptions) -> None:
        self.runtime = runtime
        self.concurrency = options.concurrency
        self.engine = deferred_engine(runtime, self.id, self.lease_seconds)
        # Without announcements from other processes (SQLite), poll with a cheap read.
        self.poll_seconds = options.poll_seconds or (2.0 if runtime.store.announces_wakes else 0.02)
        self.grace_seconds = options.grace_seconds
        self._running: dict[Attempt, Future[Ending]] = {}
        self._finished: queue.SimpleQueue[Ending] = queue.SimpleQueue()
        self._unsaved: list[Ending] = []
        self._wake = threading.Event()
        self._notified = threading.Event()  # woken by LISTEN/NOTIFY (another process)
        self._next_due: int | None = None
        self.wake_delay = options.wake_delay
        # This process's submits since the last turn began; when the last submit came, here
        # or announced by another process, and how long after the one before it: under a
        # trickle of submits a busy worker's turns are spaced `gather_seconds` apart, not
        # `wake_delay` (decisions F131, F164).
        self.gather_seconds = max(options.gather_seconds, options.wake_delay)
        self._submits = 0
        # (when, gap): one attribute, so that the listener's and the submitters' threads
        # never leave a time beside another submit's gap.
        self._last_submit = (-math.inf, math.inf)
        self._last_claim_full = False
        self._paced = threading.Event()  # a submit or a stop, during a pause
        self._stop_requested = threading.Event()
        self._stopped = threading.Event()
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"blackops-{self.id}")
        self._thread: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._last_renewal = time.monotonic()
        self._next_heartbeat = 0.0
        self.completed = 0  # attempt ends committed by this worker (for reports)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Worker:
        if self._thread is not None:
            raise RuntimeError("this worker was already started")
        # Not for workflow events: the runner has its own loop, and a Deferred look after
        # every instance created or woken was a due-work query (and the GIL) for nothing.
        self.runtime.store.add_wake_listener(self._on_submit, SUBMIT_TOPICS)
        self.runtime.store.add_wake_listener(
            self._wake.set, OPERATION_WAKING_TOPICS - SUBMIT_TOPICS
        )
        if self.workflows is not None:
            # Not for operation submits: an idle runner costs nothing per append.
            self.runtime.store.add_wake_listener(self.workflows.wake, WORKFLOW_WAKING_TOPICS)
            self.runtime.instances.on_terminate.append(self.workflows.wake)
            # The observer attached by now (``blackops worker`` attaches it after the
            # executors forked: they never load what it imports).
            self.workflows.signals = self.runtime.signals
            self.workflows.start()
        self._thread = threading.Thread(target=self._loop, name=f"blackops-{self.id}", daemon=True)
        self._thread.start()
        if self.runtime.store.announces_wakes:
            self._listener = threading.Thread(target=self._listen, daemon=True)
            self._listener.start()
        return self

    def request_stop(self) -> None:
        """Stop claiming and begin the grace period (safe from a signal handler): for the
        attempts and, at the same moment, for the workflow contexts (the runner claimed new
        ones while the attempts drained, so a stop could take twice the grace)."""
        self._stop_requested.set()
        self._paced.set()
        self._wake.set()
        if self.workflows is not None:  # started or not: the runner claims nothing after it
            self.workflows.request_stop(self.grace_seconds)

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stop and wait: running attempts get ``grace_seconds`` to finish."""
        if grace_seconds is not None:
            self.grace_seconds = grace_seconds
        self.request_stop()
        if self._thread is None:  # never started: nothing to drain
            self._pool.shutdown(wait=False)
            if self.workflows is not None:
                self.workflows.stop(0)  # its early executors, if any
            self._stopped.set()
        self.join()

    def join(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    @property
    def running(self) -> int:
        return len(self._running)

    # -- the coordinator -------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._work()
            self._drain()
        except Exception:  # a bug: never die silently with claims held
            log.exception("worker %s stopped by an unexpected error", self.id)
        finally:
            self.runtime.store.remove_wake_listener(self._on_submit)
            self.runtime.store.remove_wake_listener(self._wake.set)
            self._pool.shutdown(wait=False, cancel_futures=True)
            if self.workflows is not None:
                self.runtime.store.remove_wake_listener(self.workflows.wake)
                with contextlib.suppress(ValueError):
                    self.runtime.instances.on_terminate.remove(self.workflows.wake)
                self.workflows.stop(self.grace_seconds)
            self._stopped.set()

    def _work(self) -> None:
        busy = -math.inf  # when the last turn that claimed or committed began
        while not self._stop_requested.is_set():
            self._pace(busy)
            self._wake.clear()
            submits, self._submits = self._submits, 0
            began, completed = time.monotonic(), self.completed
            # A stop during the pause: commit what finished, claim nothing more.
            claim = not self._stop_requested.is_set()
            claimed = self._turn(claim=claim, submitted=submits > 0)
            if claimed or self.completed != completed:
                busy = began
            self._heartbeat()
            # After a claim that took all there was, nothing more is due: wait for a wake
            # (a handler's end, a submit) rather than turn again to read the index. A stop
            # that came during the pause was heard there (its wake is spent): drain now.
            if self._stop_requested.is_set() or not self._finished.empty():
                continue
            if claimed and self._last_claim_full:
                continue
            self._wake.wait(self._idle_timeout())
            if self._notified.is_set() and self._finished.empty():
                # Announced by another process: every worker hears it. A short pause
                # lets a burst of submissions be claimed as one group, and lets the
                # first worker take it while the others then find nothing due; under a
                # trickle of submits, `gather_seconds` gathers them (decisions F164).
                # Ended like the busy pause: by this process's submits filling the room, a
                # stop, or a tenth of the lease (renewals come between turns).
                now = time.monotonic()
                pause = self.gather_seconds if self._trickle(now) else self.wake_delay
                self._hold(now + pause * (1 + random.random()), now)
            self._notified.clear()

    def _pace(self, busy: float) -> None:
        """Wait before the turn after a busy one (``busy``: when it began).

        Under load, turns begin at least ``wake_delay`` apart, so the submits and ends
        arriving meanwhile are claimed and committed as one group, not one transaction
        (and one due-work read) per operation (decisions F111). Under a trickle (submits,
        here or announced, coming at most ``gather_seconds`` apart, the last claim leaving
        room) they begin ``gather_seconds`` apart, or as soon as this process's submits fill
        the room: at one submit at a time the attempts' ends then ride with the next claims
        (F131, F164). An idle worker turns at once. A stop ends the pause; the pause never
        outlasts a tenth of the lease, so renewals come between turns (`_hold`).
        """
        self._hold(busy + self._spacing(time.monotonic()), busy)

    def _hold(self, until: float, since: float) -> None:
        """Wait until ``until``, at most a tenth of the lease; sooner (``since`` +
        `_spacing`) once this process's submits fill the room, at once on a stop."""
        now = time.monotonic()
        until = min(until, now + self.lease_seconds / 10)
        while (left := until - now) > 0 and not self._stop_requested.is_set():
            self._paced.wait(left)
            self._paced.clear()
            now = time.monotonic()
            until = min(until, since + self._spacing(now))

    def _spacing(self, now: float) -> float:
        if self._trickle(now) and self._submits < self._claim_room():
            return self.gather_seconds
        return self.wake_delay

    def _trickle(self, now: float) -> bool:
        """Submits (here or announced) came at most `gather_seconds` apart, the last at
        most that long ago, and the last claim left room: more are likely soon."""
        submitted_at, gap = self._last_submit
        return (
            not self._last_claim_full
            and gap <= self.gather_seconds
            and now - submitted_at <= self.gather_seconds
        )

    def _on_submit(self) -> None:
        """This process committed a submit (a store wake listener)."""
        self._submit_came()
        self._submits += 1
        self._paced.set()
        self._wake.set()

    def _submit_came(self) -> None:
        now = time.monotonic()
        self._last_submit = (now, now - self._last_submit[0])

    def _claim_room(self) -> int:
        """Claim again once the queue in front of the threads has drained."""
        if len(self._running) > self.concurrency or self._lease_in_doubt():
            return 0
        return self.concurrency + self.prefetch - len(self._running)

    def _turn(self, *, claim: bool, submitted: bool = False) -> int:
        """Commit what finished together with new claims; returns how many were claimed.

        ``submitted``: this process committed a submit since the last turn, so there is
        something to claim (unless another worker takes it): no due-work read first.
        """
        while not self._finished.empty():
            ending = self._finished.get()
            self._running.pop(ending.attempt, None)
            self._unsaved.append(ending)
        room = self._claim_room() if claim else 0
        if room and not self._unsaved and not submitted and not self._anything_due():
            return 0  # a read, not a write: idle polling never commits
        if not self._unsaved and not room:
            return 0
        began = moment_micros(self.runtime.clock.now())  # the claim reads its own, later
        try:
            cycle = self.engine.cycle(self._unsaved, room)
        except BlackOpsError as error:
            # Kept: retried on the next turn while the leases are still ours.
            self._pause(f"journal write failed: {error}")
            if self._lease_in_doubt():
                for ending in self._unsaved:
                    ending.attempt.abandoned = True
                self._unsaved.clear()
            return 0
        self.completed += len(cycle.committed)
        self._unsaved.clear()
        self._last_claim_full = room > 0 and cycle.found >= room
        if room and not self._last_claim_full:
            self._forget_passed_due(began)  # this claim took all that was due by then
        for attempt in cycle.attempts:
            future = self._pool.submit(self.engine.execute, attempt, in_pool=True)
            self._running[attempt] = future
            future.add_done_callback(self._on_done)
        return len(cycle.attempts)

    def _on_done(self, future: Future[Ending]) -> None:
        if not future.cancelled():
            self._finished.put(future.result())
        self._wake.set()

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if not self._running:
            self._next_heartbeat = now + self.heartbeat_seconds
            return
        live = [a for a in self._running if not a.abandoned]
        if live and self._lease_in_doubt():
            log.warning("worker %s: leases not renewed in time; abandoning %d", self.id, len(live))
            for attempt in live:
                attempt.abandoned = True
                self._lost(attempt, "renewal_failing")
            return
        if now < self._next_heartbeat:
            return
        self._next_heartbeat = now + self.heartbeat_seconds
        try:
            lost = self.engine.renew(live)
        except BlackOpsError as error:
            log.warning("worker %s could not renew leases: %s", self.id, error)
            self._next_heartbeat = now + min(1.0, self.heartbeat_seconds)  # try again soon
            return
        self._last_renewal = now
        self.runtime.signals.leases_renewed("operation", len(live) - len(lost))
        for attempt in lost:
            log.warning("worker %s lost the lease of %s", self.id, attempt.operation.id)
            self._lost(attempt, "not_renewed")

    def _lost(self, attempt: Attempt, why: str) -> None:
        operation_id, token = attempt.lease
        self.runtime.signals.lease_lost("operation", operation_id, token, self.id, why)

    def _lease_in_doubt(self) -> bool:
        """Renewal has failed for most of a lease: stop before the lease can end."""
        if not self._running:
            self._last_renewal = time.monotonic()
            return False
        return time.monotonic() >= self._doubt_deadline()

    def _doubt_deadline(self) -> float:
        return self._last_renewal + 0.8 * self.lease_seconds

    def _forget_passed_due(self, claimed_by: int) -> None:
        """The earliest due time read last (``_next_due``) is kept across the turns that do
        not read it (a submit's, a commit's): a retry or a sleep due later is then still
        woken for on time. Once a claim begun at ``claimed_by`` has taken everything due,
        a time up to then is spent; a later one stays a hint (if another worker took that
        row meanwhile, waking for it costs one read). Not the time after the commit: a
        row falling due during the claim's round trip was not taken."""
        due = self._next_due
        if due is not None and due <= claimed_by:
            self._next_due = None

    def _anything_due(self) -> bool:
        try:
            self._next_due = self.runtime.store.next_due(self.engine.types)
        except BlackOpsError:
            return True  # let the claim itself report the failure
        due = self._next_due
        return due is not None and due <= moment_micros(self.runtime.clock.now())

    def _idle_timeout(self) -> float:
        timeout = self.poll_seconds
        if self._running:
            now = time.monotonic()
            next_check = min(self._next_heartbeat, self._doubt_deadline())
            timeout = min(timeout, max(0.0, next_check - now))
        due = self._next_due  # the last read's earliest due time (see _forget_passed_due)
        if due is not None and self._claim_room():  # with no room, a handler's end wakes us
            now = moment_micros(self.runtime.clock.now())
            timeout = min(timeout, max(0.0, (due - now) / 1_000_000))
        return max(timeout, 0.005)

    def _pause(self, why: str) -> None:
        log.warning("worker %s: %s", self.id, why)
        self._stop_requested.wait(min(1.0, self.poll_seconds))

    def _drain(self) -> None:
        """Grace period, then hand what is still running back to the queue."""
        deadline = time.monotonic() + self.grace_seconds
        for attempt in [a for a, future in self._running.items() if future.cancel()]:
            # Claimed but never started: hand back at once, no grace needed.
            self._finished.put(Ending(attempt, interrupt="worker_shutdown"))
        while self._running and time.monotonic() < deadline:
            self._wake.clear()
            self._turn(claim=False)
            self._heartbeat()
            if self._running:
                self._wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
        self._turn(claim=False)
        leftovers = [a for a in self._running if not a.abandoned]
        if leftovers:
            try:
                self.engine.commit([Ending(a, interrupt="worker_shutdown") for a in leftovers])
            except BlackOpsError as error:
                log.warning("worker %s could not record interrupts: %s", self.id, error)
        for attempt in self._running:
            attempt.abandoned = True  # whatever they return now is never committed
        self._running.clear()

    # -- PostgreSQL wake-ups ---------------------------------------------------------------

    def _listen(self) -> None:
        """Wake-ups announced by other processes (PostgreSQL LISTEN/NOTIFY)."""
        self.runtime.store.listen_for_wake_topics(self._announced, self._stop_requested)

    def _announced(self, topics: frozenset[str] | None) -> None:
        if topics is not None and topics & SUBMIT_TOPICS:
            # Another process's submits of a type served here: a trickle spaces busy turns.
            accepted = announced_types(topics)
            if accepted is None or not accepted.isdisjoint(self.engine.handlers):
                self._submit_came()
        if topics is None or topics & OPERATION_WAKING_TOPICS:
            self._notified.set()
            self._wake.set()
        if self.workflows is not None and (topics is None or topics & WORKFLOW_WAKING_TOPICS):
            self.workflows.wake()


def _early_executors(runtime: Runtime, processes: int) -> EarlyExecutors | None:
    """Executors forked now, while the store is not open in this process, for the workflows
    registered here; None when the store is open already (its client library would be in
    them anyway) or only Workflow resources may come (they are in the store: executors then
    start once one exists, as before)."""
    provider = runtime.code_provider
    if runtime.store_opened or provider is None or not provider.local_workflows():
        return None
    return EarlyExecutors(provider, processes)


def deferred_engine(runtime: Runtime, worker_id: str, lease_seconds: float) -> DeferredEngine:
    """The claim/run/commit machinery for every operation type of ``runtime``."""
    check_worker_id(worker_id)  # both before the store opens
    check_lease_seconds(lease_seconds)
    return DeferredEngine(
        runtime.store, runtime.handlers.all(), runtime.clock, worker_id, lease_seconds
    )


def workflow_engine(runtime: Runtime, worker_id: str, lease_seconds: float) -> WorkflowEngine:
    """Claims and commits workflow contexts of every workflow ``runtime`` serves."""
    check_worker_id(worker_id)
    check_lease_seconds(lease_seconds)
    return WorkflowEngine(
        runtime.store, runtime.provider(), runtime.clock, worker_id, lease_seconds
    )


def run_until_idle(runtime: Runtime, worker_id: str) -> None:
    """Every Deferred attempt and workflow context due at the clock's current time, run in
    this thread until nothing more is due (``Application.work_until_idle``)."""
    engine = deferred_engine(runtime, worker_id, 30.0)
    workflows = workflow_engine(runtime, worker_id, 30.0)
    while True:
        acted = 0
        while attempts := engine.claim(100):
            acted += len(attempts)
            for index, attempt in enumerate(attempts):
                ending = engine.execute(attempt)
                engine.commit([ending])
                if ending.raised is not None:
                    # Hand the rest back before the interrupt propagates.
                    rest = attempts[index + 1 :]
                    engine.commit([type(ending)(a, interrupt=ending.interrupt) for a in rest])
                    raise ending.raised
        acted += run_due_contexts(workflows)
        if not acted:
            return
