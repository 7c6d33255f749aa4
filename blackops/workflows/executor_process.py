"""The executor process's own side: run one context at a time, for as long as it is asked.

Forked from the worker after the application's code is loaded. Only plain data crosses
its pipe: the context's plan (and, the first time, a Version's code) comes in, step
requests go out, replies come back.

It leads a session of its own (so a process group: the worker's ``Executor.kill`` SIGKILLs
the whole group), and whenever it ends by itself it takes that group down with it: every
process an effect started (``subprocess``, ``sh -c ...``) stops with the context
(DW-TERM-1, DW-DEL-2). When its worker dies the kernel SIGKILLs it (``PR_SET_PDEATHSIG``:
no Python code has to run, so an effect holding the GIL cannot delay it), and a reaper in
its group (a ``sh`` reading a pipe only the executor holds) kills the group once the
executor is gone, however it ended. It also ends the group itself once the coordinator's
last lease renewal is too old (the watchdog), so a frozen worker leaves nothing running when
its lease ends, and when its pipe closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from blackops.workflows.code import CodeProvider
from blackops.workflows.context import ContextEnd, ContextPlan, run_context

_PR_SET_PDEATHSIG = 1
#: The watchdog's exit status when it stopped the executor (if it outlives its group kill).
WATCHDOG_EXIT = 70


def _lead_own_group() -> None:
    """A new session, so a process group led by this pid: what the effects start joins it,
    and the worker kills all of it at once. A session rather than only a group: no job
    control of the worker's terminal applies to it (no SIGTTOU for its output; Ctrl-C and
    Ctrl-Z reach only the worker, whose stop kills its executors, and a stopped worker's
    executors stop at the watchdog's deadline). Before anything else runs here: the worker
    SIGKILLs this pid before the group, so nothing can be started outside it."""
    with contextlib.suppress(AttributeError, OSError):  # no setsid: only this pid is killed
        os.setsid()


def end_group(status: int = WATCHDOG_EXIT) -> None:
    """Kill this executor and every process in its group (what its effects started), or
    only itself if it does not lead one; never returns. One ``killpg`` signals them all
    at once, itself included, so none can start another process after the others died."""
    with contextlib.suppress(OSError):
        if os.getpgid(0) == os.getpid():  # never the worker's group
            os.killpg(0, signal.SIGKILL)
    os._exit(status)


#: The reaper: waits for end of file on its stdin (the executor's end, however it came),
#: then kills its process group, the executor's. No Python: a few hundred KB, and no GIL.
_REAPER = ("/bin/sh", "-c", "read _ ; kill -9 0")
#: The pipe's write end, held by the executor alone for its whole life (never inherited:
#: Python's descriptors are not, and it is closed in the reaper before it execs).
_reaper_pipe: int | None = None
_reaper_pid: int | None = None


def group_members(pgid: int) -> list[int] | None:
    """The processes of group ``pgid`` that still run (a zombie runs no code: one whose new
    parent does not reap it, as a container's pid 1 may not, counts as stopped), read in
    /proc; None if /proc cannot tell."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # state, ppid, pgrp follow the command name, which may hold ")".
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it just ended
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def _effects_processes_run() -> bool:
    """Does a process an effect started still run (W16)? With the executor a subreaper
    (`_become_subreaper`), every such process is a child of it or below a living child, and
    the reaper is not one: a child that is not a zombie (each one is reaped here, as nothing
    will wait for it once the effects are done) is the answer, in one system call. Without,
    the group's members are read in /proc, the executor and its reaper aside."""
    if os.getpgid(0) != os.getpid():
        return False  # no group of our own: nothing was ever told apart
    if _subreaper:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False  # no child at all
            if pid == 0:
                return True  # one still runs
    members = group_members(os.getpid()) or []
    return any(pid not in (os.getpid(), _reaper_pid) for pid in members)


#: PR_SET_CHILD_SUBREAPER: orphaned descendants become this process's children.
_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False


def _become_subreaper() -> None:
    """Adopt what an effect's processes leave orphaned (a ``sh -c 'cmd &'`` that exited), so
    that this executor's children are all that still runs of them; after the reaper is
    forked (it must not be one of them)."""
    global _subreaper
    _subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _start_reaper() -> None:
    """Fork the group's reaper (after `_lead_own_group`, so it is in the group), through a
    child that exits at once, so that it is not this executor's child (whose children are
    what its effects started, `_effects_processes_run`). Without it (no /bin/sh, a failed
    fork) the watchdog and the worker's kill still end the group; only a kernel-killed
    executor would then leave its effects' processes behind."""
    global _reaper_pipe, _reaper_pid
    if os.getpgid(0) != os.getpid():
        return  # not a group of our own: nothing to reap
    read_end, write_end = os.pipe()
    told, tell = os.pipe()  # the reaper's pid, from the child between
    try:
        pid = os.fork()
    except OSError:
        for end in (read_end, write_end, told, tell):
            os.close(end)
        return
    if pid == 0:  # only async-signal-safe calls until exec (the executor has one thread here)
        try:
            reaper = os.fork()
            if reaper == 0:
                os.close(write_end)
                os.dup2(read_end, 0)
                os.execv(_REAPER[0], list(_REAPER))
            os.write(tell, reaper.to_bytes(4, "big"))
        finally:
            os._exit(0)
    os.close(read_end)
    os.close(tell)
    os.waitpid(pid, 0)
    said = os.read(told, 4)
    os.close(told)
    _reaper_pipe = write_end
    _reaper_pid = int.from_bytes(said, "big") if len(said) == 4 else None


def _die_with_parent() -> None:
    """SIGKILLed by the kernel when the worker dies (the reaper then ends the group); a
    SIGTERM (a person, a supervisor) ends the group from here."""
    signal.signal(signal.SIGTERM, lambda signum, frame: end_group(128 + signum))
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _prctl(option: int, value: int) -> bool:
    """Linux's ``prctl(option, value)``; False where it fails or there is no such call."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return bool(libc.prctl(option, value) == 0)
    except Exception:  # no libc.so.6, no prctl: not Linux
        return False


class _PipeHost:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        self.conn.send(("step", message))
        reply: tuple[Any, ...] = self.conn.recv()
        return reply


def _watchdog(deadline: Any, parent: int) -> None:
    """Stop (with the group) the moment the coordinator's last lease renewal is too old:
    the stop proof of a lost lease must not depend on the coordinator thread being
    responsive. Also once the worker is gone: its SIGTERM may never come (it died before
    ``prctl``, or elsewhere than PR_SET_PDEATHSIG sees, or the handler is not run)."""
    while True:
        time.sleep(0.1)
        until = deadline.value
        if os.getppid() != parent or (until and time.monotonic() > until):
            end_group()


def executor_main(conn: Connection, provider: CodeProvider, deadline: Any) -> None:
    """The executor process: run one context at a time, for as long as it is asked."""
    _lead_own_group()
    _start_reaper()
    _become_subreaper()
    try:
        _serve(conn, provider, deadline)
    finally:
        # The pipe closed (the worker is gone or done with us) or this failed: what the
        # effects started must not outlive the executor.
        end_group(0)


def _serve(conn: Connection, provider: CodeProvider, deadline: Any) -> None:
    worker = multiprocessing.parent_process()
    parent = worker.pid if worker is not None and worker.pid else os.getppid()
    _die_with_parent()
    threading.Thread(target=_watchdog, args=(deadline, parent), daemon=True).start()
    baseline = threading.active_count()
    # What we inherited stays shared with the worker: keep the collector off those pages.
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when we stop
    host = _PipeHost(conn)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] != "run":
            return
        plan: ContextPlan = message[1]
        source = message[2]
        try:
            # A Version's code comes over the pipe the first time: no store is opened here.
            code = (
                provider.load_source(source)
                if source
                else provider.load(plan.workflow, plan.version)
            )
            end = run_context(plan, code.cls, code.env, host)
        except (EOFError, OSError):
            return
        except Exception as error:  # the code could not even be loaded
            end = ContextEnd("stopped", "fenced", f"executor failed: {type(error).__name__}")
        # Threads an effect started may still run, or processes it started (a process
        # outlived a context that then slept, and terminate() found no context to stop:
        # found by a spec review, stop 37): then this process and its group must be killed
        # before the end is published (DW-FENCE-1, DW-TERM-1).
        lingering = threading.active_count() > baseline or _effects_processes_run()
        try:
            conn.send(("end", end, lingering))
        except (EOFError, OSError):
            return
