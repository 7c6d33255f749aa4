"""The executor process's own side: run one context at a time, for as long as it is asked.

Forked from the worker after the application's code is loaded. Only plain data crosses
its pipe: the context's plan (and, the first time, a Version's code) comes in, step
requests go out, replies come back. It dies with its worker (``PR_SET_PDEATHSIG``) and
exits by itself once the coordinator's last lease renewal is too old (the watchdog), so
a frozen worker leaves nothing running when its lease ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from blackops.workflows.code import CodeProvider
from blackops.workflows.context import ContextEnd, ContextPlan, run_context

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _PipeHost:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        self.conn.send(("step", message))
        reply: tuple[Any, ...] = self.conn.recv()
        return reply


def _watchdog(deadline: Any) -> None:
    """Exit the moment the coordinator's last lease renewal is too old: the stop
    proof of a lost lease must not depend on the coordinator thread being responsive."""
    while True:
        time.sleep(0.1)
        until = deadline.value
        if until and time.monotonic() > until:
            os._exit(70)


def executor_main(conn: Connection, provider: CodeProvider, deadline: Any) -> None:
    """The executor process: run one context at a time, for as long as it is asked."""
    _die_with_parent()
    threading.Thread(target=_watchdog, args=(deadline,), daemon=True).start()
    baseline = threading.active_count()
    # What we inherited stays shared with the worker: keep the collector off those pages.
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when we stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
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
        # Threads an effect started may still run: then this process must be killed
        # before the end is published (DW-FENCE-1).
        lingering = threading.active_count() > baseline
        try:
            conn.send(("end", end, lingering))
        except (EOFError, OSError):
            return
