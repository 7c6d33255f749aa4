"""Workflow contexts in a worker: killable executor processes, one coordinator thread.

Each context runs in an **executor process**, forked from the worker after the
application's code is loaded, one context at a time. Only plain data crosses: the
context's plan goes in, step requests come out, replies go back. The coordinator
thread of the worker does every journal write: each turn it commits the step
requests of all executors in one transaction (group commit) and only then replies,
so every step result is committed before its context goes on (DW-DO-3), and many
instances share each commit.

Why processes: an effect may run for ever (decisions D15) and a thread cannot be
stopped. To stop a context for certain (``terminate()``, a lost lease, the lifetime
limit) the coordinator SIGKILLs its executor's process group (the executor leads one:
every process an effect started is in it) and waits for the executor and the group to
exit; only then is ``terminated`` (or the other end) published (DW-TERM-1, DW-FENCE-1).
Executors take their group down when the worker dies (``PR_SET_PDEATHSIG`` kills the
executor, the group's reaper the rest; the watchdog), so a worker killed with SIGKILL leaves
no context running: after its lease ends, the stop
is proven by that.

A worker built before its store opens forks its first executors at once
(:class:`EarlyExecutors`): they do not carry the store's client library (psycopg, its
bundled libpq and OpenSSL: ~8 MB that RSS counts again in every executor; decisions F80).
The thread that forks them then runs the coordinator's loop, as if the loop had forked them.

An executor holds the workflows registered in the worker's process when it was forked: the
code provider counts registrations (its generation), and a context of a workflow registered
(or registered again) after an executor's fork goes to a fresh fork instead (F150).

One module, one thing: the coordinator's loop (:class:`WorkflowRunner`) and the handle of
each executor it supervises; the executor's own side is ``executor_process.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from blackops.observability.signals import NO_SIGNALS, Signals
from blackops.workflows.code import CodeProvider
from blackops.workflows.context import ContextEnd
from blackops.workflows.engine import HeldContext, WorkflowEngine
from blackops.workflows.executor_process import executor_main, group_members
from domain.errors import BlackOpsError
from domain.workflow import REASONS, to_micros

log = logging.getLogger("blackops.workflows")
#: After a ``stop`` reply the code has this long to unwind before it is killed.
STOP_GRACE_SECONDS = 5.0


@dataclass(eq=False)
class Executor:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    #: Monotonic time after which the executor exits by itself (0: no context held).
    deadline: Any = None
    held: HeldContext | None = None
    contexts: int = 0
    stop_sent_at: float | None = None
    stop_reply: tuple[Any, ...] | None = None
    #: (workflow, version) whose code this executor has been sent or has loaded.
    versions: set[tuple[str, str]] = field(default_factory=set)
    #: The provider's registration generation when it was forked (what its image holds).
    generation: int = 0
    #: Killed and waited for: its pid (and group id) may belong to another process now.
    killed: bool = False

    def kill(self) -> None:
        """SIGKILL it and its process group, wait for its exit and for every process of the
        group to exit: afterwards the context's code, and what its effects started, has
        stopped (DW-TERM-1). Every stop of an executor comes here; a second call does
        nothing (a runner stopping kills the executors it replaced while stopping again)."""
        if self.killed:
            return
        self.killed = True
        pid = self.process.pid
        if pid is not None:
            # The pid first: from then on it starts nothing, and whatever it started after
            # leading its group (the first thing it does) is in that group.
            if self.process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            # Its group's id is its pid, taken while it is unreaped or any member lives.
            # Never the worker's group: an executor that could not lead one has no group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self.process.join()
        self.conn.close()
        if pid is not None:
            wait_group_stopped(pid)


#: Where /proc is missing, how long a killed group is waited for (zombies cannot be
#: told from the living there; their new parent normally reaps them at once).
GROUP_WAIT_WITHOUT_PROC = 5.0
#: How long a killed group's survivors are waited for at most (a SIGKILLed process ends in
#: milliseconds unless it cannot: see `wait_group_stopped`).
GROUP_WAIT_LIMIT = 10.0


def _live_members(pgid: int) -> bool | None:
    """Whether a process of group ``pgid`` still runs; None if /proc cannot tell."""
    members = group_members(pgid)
    return None if members is None else bool(members)


def wait_group_stopped(pgid: int) -> None:
    """Return once no process of the (SIGKILLed) group ``pgid`` runs any more, or after
    `GROUP_WAIT_LIMIT` seconds.

    The processes an effect started are not the worker's children: nothing can wait
    for them, so the group is watched until it is empty or only zombies are left. A
    SIGKILLed process lingers only in an uninterruptible wait (a hung NFS server, say), and
    one that changed its user was never signalled: neither ends by waiting longer, and this
    runs on the thread that renews every lease of the worker, so after the limit it is
    logged as an error and counted as escaped, like a process that left the group."""
    began = time.monotonic()
    pause = 0.001
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return  # the group is gone
        except PermissionError:
            pass  # a member we may not signal (it changed its user): still a member
        live = _live_members(pgid)
        waited = time.monotonic() - began
        if live is False or (live is None and waited > GROUP_WAIT_WITHOUT_PROC):
            return
        if waited > GROUP_WAIT_LIMIT:
            log.error(
                "processes of killed executor group %d still run after %.0f s (one we may "
                "not signal, or in an uninterruptible wait): counted as escaped",
                pgid, waited,
            )  # fmt: skip
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def spawn_executor(provider: CodeProvider) -> Executor:
    """Fork one executor process of ``provider``'s code (from the calling thread)."""
    generation = provider.generation()  # before the fork: it holds at least these
    mp = multiprocessing.get_context("fork")
    parent, child = mp.Pipe()
    deadline = mp.Value("d", 0.0, lock=False)
    process = mp.Process(target=executor_main, args=(child, provider, deadline), daemon=True)
    process.start()
    child.close()
    return Executor(process, parent, deadline, generation=generation)


def _trim_heap() -> None:
    """Give the C heap's free pages back (glibc ``malloc_trim``): what is resident when an
    executor is forked counts in its RSS too, once per executor."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class EarlyExecutors:
    """The first executors, forked before the worker's store opens, and their thread.

    The thread forks ``processes`` executors at once, then waits to be handed the runner's
    loop and runs it: ``PR_SET_PDEATHSIG`` ties an executor to the thread that forked it,
    so they die when that loop ends, exactly as the ones it forks itself later. If a fork
    fails, none are kept and the runner forks its executors itself, as without this. A
    workflow registered after them is not in them: the runner forks afresh for its contexts.
    """

    def __init__(self, provider: CodeProvider, processes: int) -> None:
        self.executors: list[Executor] = []
        self._loop: Callable[[], None] | None = None
        self._handed = threading.Event()
        forked = threading.Event()

        def main() -> None:
            _trim_heap()
            try:
                for _ in range(processes):
                    self.executors.append(spawn_executor(provider))
            except Exception:
                log.exception("executors could not be forked early; forking them later")
                for executor in self.executors:
                    executor.kill()
                self.executors = []
            finally:
                forked.set()
            self._handed.wait()
            if self._loop is not None:
                self._loop()

        self.thread = threading.Thread(target=main, name="blackops-workflows", daemon=True)
        self.thread.start()
        forked.wait()

    def hand(self, loop: Callable[[], None]) -> None:
        """Run ``loop`` (the runner's) on the thread that forked the executors."""
        self._loop = loop
        self._handed.set()

    def close(self) -> None:
        """Never handed a loop (the worker was not started, or not even built): kill the
        executors and end their thread."""
        for executor in self.executors:
            executor.kill()
        self._handed.set()


def _end_of_stop(reply: tuple[Any, ...] | None, held: HeldContext) -> ContextEnd | None:
    """How a context killed for ignoring the host's stop ended: what the stop said."""
    reason = reply[1] if reply else "fenced"
    if reason == "suspend" and held.suspension is not None:
        return ContextEnd("stopped", "suspend")
    if reason in REASONS:
        return ContextEnd("errored", reason, reply[2] if reply and len(reply) > 2 else "")
    return None


class WorkflowRunner:
    """Runs due workflow contexts of one application in ``processes`` executors."""

    def __init__(
        self,
        engine: WorkflowEngine,
        *,
        processes: int = 4,
        heartbeat_seconds: float = 10.0,
        poll_seconds: float = 0.02,
        fence_check_seconds: float = 0.05,
        contexts_per_process: int | None = None,
        signals: Signals = NO_SIGNALS,
        early: EarlyExecutors | None = None,
    ) -> None:
        self.engine = engine
        self.signals = signals
        #: Replace an executor after this many contexts (1: every context starts in a
        #: freshly forked process, so no module state of an earlier context survives).
        self.contexts_per_process = contexts_per_process
        self.processes = processes
        self.heartbeat_seconds = heartbeat_seconds
        self.poll_seconds = poll_seconds
        self.fence_check_seconds = fence_check_seconds
        #: Forked before the store opened (their thread runs the loop), or None.
        self._early = early
        self._executors: list[Executor] = list(early.executors) if early else []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_renewal = time.monotonic()
        self._next_heartbeat = 0.0
        self._next_fence_check = 0.0
        self._next_due: int | None = None
        self._next_look = 0.0
        self._woken = True
        self._backlog = False
        self._grace = 10.0
        self.steps_committed = 0
        self.contexts_ended = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> WorkflowRunner:
        if self._early is not None:
            self._thread = self._early.thread
            self._early.hand(self._main)
            return self
        self._thread = threading.Thread(target=self._main, name="blackops-workflows", daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        fd = self._wake_w
        if fd < 0:  # stopped: its pipe is closed
            return
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(fd, b"x")

    def request_stop(self, grace_seconds: float = 10.0) -> None:
        """Claim nothing more and let running contexts end for ``grace_seconds`` (from the
        loop's next turn), without waiting (safe from a signal handler: a worker's stop
        begins both drains at once, so a context is not claimed while its attempts drain)."""
        if self._stop.is_set():
            # Asked already: the loop knows, and once stopped its wake-up pipe is closed, so
            # a write could land in whatever file took the descriptor since (found by review).
            return
        self._grace = grace_seconds
        self._stop.set()
        self.wake()

    def stop(self, grace_seconds: float = 10.0) -> None:
        self.request_stop(grace_seconds)
        if self._thread is not None:
            self._stopped.wait()
        elif self._early is not None:  # never started: its early executors end here
            self._early.close()
        fds, (self._wake_r, self._wake_w) = (self._wake_r, self._wake_w), (-1, -1)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def running(self) -> int:
        return sum(1 for e in self._executors if e.held is not None)

    def _spawn(self) -> Executor:
        return spawn_executor(self.engine.provider)

    def _extend(self, executors: list[Executor], since: float) -> None:
        """A renewal succeeded at ``since``: the executors may run until 0.8 x lease."""
        for executor in executors:
            if executor.held is not None and executor.deadline is not None:
                executor.deadline.value = since + 0.8 * self.engine.lease_seconds

    # -- the coordinator -------------------------------------------------------------------

    def _main(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._executors and self.engine.types:
                    # Only once there is a workflow to run (Workflow resources can appear
                    # at any time). Forked from this thread: PR_SET_PDEATHSIG also fires
                    # if it ends.
                    self._executors = [self._spawn() for _ in range(self.processes)]
                self._turn()
            self._drain(self._grace)
        except Exception:
            log.exception("workflow runner stopped by an unexpected error")
        finally:
            for executor in self._executors:
                executor.kill()
            self._stopped.set()

    def _turn(self) -> None:
        """Wait for messages, then commit every step request, every context end and the
        claims that fill the free executors in one transaction (``engine.cycle``)."""
        busy = [e for e in self._executors if e.held is not None]
        idle = len(self._executors) - len(busy)
        timeout = 0.0 if idle and self._look_wanted() else self._timeout(busy)
        ready = wait([e.conn for e in busy] + [self._wake_r], timeout)
        if self._wake_r in ready:
            self._woken = True
            with contextlib.suppress(BlockingIOError, OSError):
                os.read(self._wake_r, 4096)
        requests, ends = self._collect(ready, busy)
        freed = [(self._free(e, end, lingering), end) for e, end, lingering in ends]
        idle = sum(1 for e in self._executors if e.held is None)
        # Stopping: claim nothing more. The turn a stop wakes still commits what the busy
        # executors asked and ended, but it claimed too (a context created just after the
        # stop was started: seen in CI, stop 36).
        looking = idle and not self._stop.is_set() and self._should_look()
        limit = idle if looking and self._anything_due() else 0
        if requests or freed or limit:
            self._cycle(requests, freed, limit)
        self._supervise([e for e in self._executors if e.held is not None])

    def _collect(
        self, ready: list[Any], busy: list[Executor]
    ) -> tuple[
        list[tuple[Executor, tuple[Any, ...]]], list[tuple[Executor, ContextEnd | None, bool]]
    ]:
        by_conn = {id(e.conn): e for e in busy}
        requests: list[tuple[Executor, tuple[Any, ...]]] = []
        ends: list[tuple[Executor, ContextEnd | None, bool]] = []
        for conn in ready:
            found = by_conn.get(id(conn))
            if found is None:
                continue
            try:
                message = found.conn.recv()
            except (EOFError, OSError):
                if found.stop_reply is not None and found.held is not None:
                    # It died after the host's stop: what the stop decided (a sleep's
                    # deadline, a failed attempt's retry) stands, as when the host kills a
                    # context that ignores its stop. It was dropped, and the next context
                    # decided again: a later deadline, one more attempt (DW-SLEEP-1,
                    # DW-DO-2; found by a spec hunt, stop 38).
                    end = _end_of_stop(found.stop_reply, found.held)
                    self._stop_context(found, end, "exited")
                else:
                    ends.append((found, None, False))  # it died under the context
                continue
            if message[0] == "step":
                requests.append((found, message[1]))
            else:
                ends.append((found, message[1], message[2]))
        return requests, ends

    def _free(self, executor: Executor, end: ContextEnd | None, lingering: bool) -> HeldContext:
        """The executor's context has ended: it takes the next one, or is replaced."""
        held = executor.held
        assert held is not None
        executor.contexts += 1
        if executor.deadline is not None:
            executor.deadline.value = 0.0
        # Replaced: the process is gone (proven stopped), threads an effect started still
        # run (killed before the end is published), or it has run its share of contexts
        # (a fresh process: fresh module state, DW-REPLAY-1).
        if (
            end is None
            or lingering
            or (self.contexts_per_process and executor.contexts >= self.contexts_per_process)
        ):
            self._replace(
                executor, "exited" if end is None else "lingering" if lingering else "recycled"
            )
        else:
            executor.held = None
        return held

    def _cycle(
        self,
        requests: list[tuple[Executor, tuple[Any, ...]]],
        ends: list[tuple[HeldContext, ContextEnd | None]],
        limit: int,
    ) -> None:
        items = [(e.held, m) for e, m in requests if e.held is not None]
        # Before the claims' leases are computed: a hand-off is timed from here (`_assign`).
        began = time.monotonic()
        try:
            replies, helds, acted = self.engine.cycle(items, ends, limit)
            self.contexts_ended += len(ends)
        except BlackOpsError as error:
            # Nothing was acknowledged: stop these contexts; their leases bring them back.
            log.warning("workflow journal write failed: %s", error)
            replies, helds, acted = [("stop", "fenced", "")] * len(items), [], 0
            if limit:
                self._stop.wait(min(1.0, self.poll_seconds * 10))
        for (executor, _), reply in zip(requests, replies, strict=True):
            if reply[0] == "stop":
                executor.stop_sent_at, executor.stop_reply = time.monotonic(), reply
            else:
                self.steps_committed += 1
            with contextlib.suppress(OSError, ValueError):
                executor.conn.send(reply)  # if it died, the next wait() sees EOF
        if limit:
            # A full claim may have left more due work: look again when room frees up.
            self._backlog = acted >= limit
            idle = [e for e in self._executors if e.held is None]
            for executor, held in zip(idle, helds, strict=False):
                self._assign(executor, held, began)
        # A context whose process died is proven stopped: due again at once, here or
        # elsewhere, instead of after its lease.
        self._release([held for held, end in ends if end is None])

    def _assign(self, executor: Executor, held: HeldContext, claimed_at: float) -> None:
        """Hand ``held`` (claimed by the cycle that began at ``claimed_at``, monotonic) to
        ``executor``. Its watchdog's deadline counts from the claim, not from now: a worker
        stalled between the claim's commit and here (SIGSTOP, a slow commit) handed a context
        over with 0.8 x lease still to run after the lease had ended, so another worker's
        context ran beside it, or code started after ``terminate()`` returned (found by a
        defect hunt, stop 34). A claim too old to leave the executor any time is not handed
        over at all: it is released, due again at once."""
        deadline = claimed_at + 0.8 * self.engine.lease_seconds
        if time.monotonic() >= deadline:
            log.warning("context of %s claimed too long ago to start; released", held.lease[0])
            self._finish([(held, None)])
            self._release([held])
            return
        try:
            key = (held.plan.workflow, held.plan.version)
            if executor.generation < self.engine.provider.registered_at(key[0]):
                # Forked before this workflow's code was registered (or registered again)
                # here: only a fresh fork holds it (decisions F150).
                executor = self._replace(executor, "registered")
            executor.held, executor.stop_sent_at, executor.stop_reply = held, None, None
            if executor.deadline is not None:
                executor.deadline.value = deadline
            source = None
            if key not in executor.versions:
                source = self.engine.provider.source(*key)
                executor.versions.add(key)
            executor.conn.send(("run", held.plan, source))
        except (OSError, ValueError, LookupError, BlackOpsError):
            self._replace(executor, "unreachable")  # it never started: due again at once
            self._finish([(held, None)])
            self._release([held])

    def _release(self, helds: list[HeldContext]) -> None:
        if not helds:
            return
        with contextlib.suppress(BlackOpsError):
            now = to_micros(self.engine.clock.now())
            self.engine.store.renew_leases(
                [h.lease for h in helds], self.engine.worker_id, now, now
            )

    def _finish(self, items: list[tuple[HeldContext, ContextEnd | None]]) -> None:
        try:
            self.engine.finish(items)
            self.contexts_ended += len(items)
        except BlackOpsError as error:
            log.warning(
                "workflow context end not recorded (the lease will bring it back): %s", error
            )

    def _replace(self, executor: Executor, why: str) -> Executor:
        """Kill ``executor`` (if alive), wait for it, and start a fresh one in its place
        (returned; while stopping, none: the killed one stays, and is returned)."""
        if not self._stop.is_set():
            self.signals.executor_restarted(why)
        executor.kill()
        executor.held = None
        index = self._executors.index(executor)
        if not self._stop.is_set():
            self._executors[index] = self._spawn()
        return self._executors[index]

    def _stop_context(
        self, executor: Executor, end: ContextEnd | None, why: str = "context_stopped"
    ) -> None:
        held = executor.held
        self._replace(executor, why)
        if held is not None:
            held.abandoned = True
            self._finish([(held, end)])

    # -- leases, fences, lifetimes ---------------------------------------------------------

    def _supervise(self, busy: list[Executor]) -> None:
        busy = [e for e in busy if e.held is not None]
        if not busy:
            self._last_renewal = time.monotonic()
            return
        now = time.monotonic()
        clock_now = to_micros(self.engine.clock.now())
        for executor in busy:
            held = executor.held
            assert held is not None
            if clock_now >= held.state.lifetime_ends_at:
                self._stop_context(executor, None)  # recorded as lifetime_exceeded
            elif (
                executor.stop_sent_at is not None
                and now - executor.stop_sent_at > STOP_GRACE_SECONDS
            ):
                log.warning("context of %s ignored its stop; killing it", held.state.stream)
                self._stop_context(executor, _end_of_stop(executor.stop_reply, held))
        busy = [e for e in busy if e.held is not None]
        helds = [e.held for e in busy if e.held is not None]
        lost: list[HeldContext] = []
        why = "not_renewed"
        try:
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + self.heartbeat_seconds
                lost = self.engine.renew(helds)
                self.signals.leases_renewed("workflow", len(helds) - len(lost))
                self._last_renewal = now
                self._extend([e for e in busy if e.held not in lost], now)
            elif now >= self._next_fence_check:
                self._next_fence_check = now + self.fence_check_seconds
                lost, why = self.engine.fenced(helds), "fenced"
        except BlackOpsError as error:
            log.warning("workflow lease check failed: %s", error)
            self._next_heartbeat = now + min(1.0, self.heartbeat_seconds)
        if now - self._last_renewal >= 0.8 * self.engine.lease_seconds:
            lost, why = helds, "renewal_failing"  # stop before the lease can end
        for held in lost:
            self.signals.lease_lost(
                "workflow", held.state.stream, held.owner.token, self.engine.worker_id, why
            )
            for executor in busy:
                if executor.held is held:
                    self._stop_context(executor, None)

    def _look_wanted(self) -> bool:
        due = self._next_due
        return (
            self._woken
            or self._backlog
            or time.monotonic() >= self._next_look
            or (due is not None and due <= to_micros(self.engine.clock.now()))
        )

    def _should_look(self) -> bool:
        """Read the index only when something may have become due: a wake-up (an append
        here, a NOTIFY), a full claim last time, the known next due time, or the polling
        interval (other processes on SQLite). Not after every step."""
        if self._look_wanted():
            # A look answers the backlog too: a claim that fills up sets it again, and a
            # look finding nothing due must not be repeated every turn (it was: one
            # next_due query per turn, ~10 per sequential instance, while idle).
            self._woken = self._backlog = False
            self._next_look = time.monotonic() + self.poll_seconds
            return True
        return False

    def _anything_due(self) -> bool:
        types = self.engine.types
        try:
            due = self.engine.store.next_due(types)
        except BlackOpsError:
            return False
        self._next_due = due
        return due is not None and due <= to_micros(self.engine.clock.now())

    def _timeout(self, busy: list[Executor]) -> float:
        timeout = self.poll_seconds
        if busy:
            timeout = min(timeout, self.fence_check_seconds)
        due = self._next_due
        if due is not None:
            now = to_micros(self.engine.clock.now())
            timeout = min(timeout, max(0.0, (due - now) / 1_000_000))
        return max(timeout, 0.001)

    def _drain(self, grace: float) -> None:
        """Let running contexts reach their end for ``grace`` seconds, then kill them.

        A killed context's lease is released at once (its code is proven stopped),
        so another worker takes it over without waiting out the lease.
        """
        deadline = time.monotonic() + grace
        while any(e.held is not None for e in self._executors) and time.monotonic() < deadline:
            busy = [e for e in self._executors if e.held is not None]
            ready = wait([e.conn for e in busy], min(0.1, max(0.0, deadline - time.monotonic())))
            requests, ends = self._collect(ready, busy)
            freed = [(self._free(e, end, lingering), end) for e, end, lingering in ends]
            if requests or freed:
                self._cycle(requests, freed, 0)  # no new claims while draining
            # Heartbeats, fences and lifetimes go on: a lease must not end under running code.
            self._supervise([e for e in self._executors if e.held is not None])
        self._stop.set()
        leftovers = [e for e in self._executors if e.held is not None]
        released = []
        for executor in leftovers:
            held = executor.held
            executor.kill()
            executor.held = None
            if held is not None:
                released.append(held)
                self._finish([(held, None)])
        self._release(released)
