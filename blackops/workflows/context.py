"""One execution context: a fresh workflow object, one ``run`` call, and its ``step``.

This module runs wherever the context runs (an executor process of a worker, or the
caller's thread under ``work_until_idle``). It owns no journal: completed steps
replay from the plan it was given, and everything new goes to a :class:`Host`, which
decides and **commits** before it answers (DW-DO-3). A reply of ``stop`` ends the
context with an uncatchable :class:`ContextStop`; the host publishes sleeping,
waiting or a terminal state only after :func:`run_context` has returned, that is
after the code has stopped (DW-FENCE-1).

Every document the code receives (``event.params``, a step's result or payload) is the
value as the journal holds it, decoded from canonical bytes, and a fresh object each
time: the first run sees what every replay will see (an integral float comes back the
int RFC 8785 records), and nothing the code changes can reach the plan, the host's
folded state or a snapshot written from it (in process they would share objects).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from blackops.failures import describe_error
from blackops.workflows.api import (
    ContextStop,
    InvalidStepArgument,
    StepFailed,
    WaitTimeout,
    WorkflowEvent,
)
from domain.documents import DocumentError, canonical_document, canonical_json
from domain.errors import InvalidRequest
from domain.json_text import load_canonical
from domain.workflow import (
    MAX_SLEEP_SECONDS,
    MAX_STEPS,
    RetryPolicy,
    check_seconds,
    check_text,
)


class Host(Protocol):
    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """Decide and commit one step request; answers ``("ok", value)``,
        ``("failed", message)`` or ``("stop", reason, message)``."""
        ...


@dataclass(slots=True)
class ContextPlan:
    """What a context needs: who it is and the step history so far (plain data, so it
    crosses a process boundary cheaply)."""

    stream: str
    workflow: str
    version: str
    instance_id: str
    params: dict[str, Any] | None
    steps: dict[str, dict[str, Any]]
    context: int = 0


@dataclass(slots=True)
class ContextEnd:
    """How a context ended: ``complete`` (output), ``errored`` (reason, message) or
    ``stopped`` (reason: suspend, fenced, lifetime_exceeded...)."""

    kind: str
    reason: str | None = None
    message: str = ""
    output: dict[str, Any] | None = None


def _callable_without_arguments(effect: Callable[..., Any]) -> bool:
    """Can ``effect`` be called with no argument (as far as its signature tells: a callable
    without one, some built-ins, is given the benefit of the doubt)? One needing an argument
    spent every attempt of its retry policy failing with Python's TypeError before (found by
    a spec review, stop 37)."""
    try:
        # Its own signature, not the one ``functools.wraps`` copied from the function it
        # calls: a decorator that supplies the argument itself was refused (found by review).
        signature = inspect.signature(effect, follow_wrapped=False)
    except (TypeError, ValueError):  # no signature to read
        return True
    try:
        signature.bind()
    except TypeError:
        return False
    return True


def error_message(error: BaseException) -> str:
    return describe_error(error)["message"]


#: Values a shallow copy need not copy: a flat document's copy shares only these.
_IMMUTABLE = frozenset((str, int, float, bool, type(None)))


def handed_out(recorded: dict[str, Any] | None) -> dict[str, Any] | None:
    """A copy of a recorded document for the code, shared with nothing.

    ``recorded`` is already the journal's decoding of its canonical bytes (the plan is
    folded from the journal; a new result is decoded before it is sent), so a copy is all
    it takes, not a second canonicalisation (several times dearer, on every replayed
    step): a flat document's is a shallow copy; a nested one's an orjson round trip,
    exact for such values (shortest floats, safe integers); past orjson's nesting limit
    the unlimited writer takes over.
    """
    if recorded is None:
        return None
    for value in recorded.values():  # a loop, not all(): this runs for every replayed step
        if type(value) not in _IMMUTABLE:
            break
    else:
        return recorded.copy()
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(recorded))
    except orjson.JSONEncodeError:
        copied = load_canonical(canonical_json(recorded))
    return copied


@dataclass(eq=False)
class _Call:
    name: str
    settled: bool = False


@dataclass(eq=False)
class Step:
    """``run``'s second argument: bound to one instance and one context (DW-STEP-1)."""

    _plan: ContextPlan
    _host: Host
    _calls: list[_Call] = field(default_factory=list)
    _new_names: set[str] = field(default_factory=set)
    _stop: ContextStop | None = None
    _host_failure: BaseException | None = None
    #: A replay check's record of every call, ``(name, kind)`` in call order (else None).
    _trace: list[tuple[str, str]] | None = None
    #: A replay check: a call the history holds no result for stops the context at once,
    #: before its effect could run or its host be asked ("left_history").
    _replay_only: bool = False
    #: Host errors this context raised: genuineness is identity (DW-HERR-1).
    _genuine: list[BaseException] = field(default_factory=list)

    # -- the three steps -------------------------------------------------------------------

    # The arguments after the name may be left out: a completed name does not use them
    # (DW-STEP-3, "完了済み名の残りの引数は使わない"; as JavaScript passes undefined), and an
    # unfinished one refuses what is missing as anything invalid (InvalidStepArgument). A
    # completed name called without them killed the run with Python's own TypeError (found
    # by a spec review, stop 36).
    def do(
        self, name: str, effect: Callable[[], Any] | None = None, retry_policy: Any = None
    ) -> Awaitable[dict[str, Any] | None]:
        record = self._begin(name, "do")
        if record is not None and record["completed"]:
            return self._replayed(record)
        if not callable(effect) or not _callable_without_arguments(effect):
            raise InvalidStepArgument("step.do needs a zero-argument callable effect")
        try:
            policy = RetryPolicy.from_spec(retry_policy)
        except (TypeError, ValueError) as error:
            raise InvalidStepArgument(f"invalid retry policy: {error}") from None
        if record is not None and record["config"].get("retryPolicy"):
            policy = RetryPolicy.from_spec(record["config"]["retryPolicy"])  # first saved
        attempt = (record["failed_attempts"] if record else 0) + 1
        call = self._start(name)
        return self._do(call, effect, policy, attempt)

    def sleep(self, name: str, seconds: int | None = None) -> Awaitable[dict[str, Any] | None]:
        record = self._begin(name, "sleep")
        if record is not None and record["completed"]:
            return self._replayed(record)
        try:
            check_seconds(seconds, "seconds", 0, MAX_SLEEP_SECONDS)
        except ValueError as error:
            raise InvalidStepArgument(str(error)) from None
        call = self._start(name)
        return self._ask(call, "sleep", ("sleep", name, seconds))

    def wait_for_event(
        self, name: str, *, type: str | None = None, timeout_seconds: int | None = None
    ) -> Awaitable[dict[str, Any] | None]:
        record = self._begin(name, "wait")
        if record is not None and record["completed"]:
            return self._replayed(record)
        try:
            check_text(type, "event type")
            check_seconds(timeout_seconds, "timeout_seconds", 1, MAX_SLEEP_SECONDS)
        except (InvalidRequest, ValueError) as error:
            raise InvalidStepArgument(str(error)) from None
        call = self._start(name)
        return self._ask(call, "wait", ("wait", name, type, timeout_seconds))

    # -- bookkeeping -----------------------------------------------------------------------

    def _begin(self, name: str, kind: str) -> dict[str, Any] | None:
        """Checks every call makes, in the spec's order: stopped? name valid? overlap?
        a recorded name called as another kind (DW-STEP-2/3, decisions D7)?"""
        if self._stop is not None:
            raise self._stop  # a stopped context stays stopped, even if the app caught it
        # A recorded name passed this check when it was first journaled: replaying a
        # long history need not check every name again.
        if type(name) is not str or name not in self._plan.steps:
            try:
                check_text(name, "step name")
            except InvalidRequest as error:
                raise InvalidStepArgument(error.message) from None
        if any(not call.settled for call in self._calls):
            self._halt("step_definition_mismatch", f"step {name[:64]!r} overlaps an unsettled step")
        if self._trace is not None:
            self._trace.append((name, kind))
        record = self._plan.steps.get(name)
        # A name keeps its kind, completed or not (DW-STEP-2, decisions D7): replaying a
        # result across kinds has no meaning (a do's document for a sleep, whose promise
        # is void; a wait's timeout from a do). Stops 33-35 replayed a completed one.
        if record is not None and record["kind"] != kind:
            self._halt(
                "step_definition_mismatch",
                f"step {name[:64]!r} was a {record['kind']} step, now called as {kind}",
            )
        new = record is None and name not in self._new_names
        if new and len(self._plan.steps) + len(self._new_names) >= MAX_STEPS:
            self._halt("step_limit_exceeded", f"more than {MAX_STEPS} steps")
        return record

    def _start(self, name: str) -> _Call:
        if self._replay_only:  # checked, and about to run new work: the history ends here
            self._halt("left_history", f"step {name[:64]!r} has no recorded result")
        self._new_names.add(name)
        call = _Call(name)
        self._calls.append(call)
        return call

    def _halt(self, reason: str, message: str) -> None:
        self._stop = ContextStop(reason, message)
        raise self._stop

    def _replayed(self, record: dict[str, Any]) -> _Ready:
        """A completed name, called as its kind: its recorded outcome, no new effect
        (DW-STEP-3, D7, D8)."""
        if record["succeeded"]:
            return _Ready(handed_out(record["result"]))
        error = record["error"] or {}
        failure = (WaitTimeout if error.get("name") == "wait_timeout" else StepFailed)(
            error.get("message", "")
        )
        self._genuine.append(failure)
        return _Ready(None, failure)

    def _request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """Ask the host; if the host itself fails (the journal is unreachable, the worker
        is going away), the context is lost, not the workflow's fault: remembered here so
        :func:`run_context` re-raises it whatever the app does with it."""
        try:
            return self._host.request(message)
        except BaseException as failure:
            self._host_failure = failure
            raise

    def _settle(self, call: _Call, kind: str, reply: tuple[Any, ...]) -> Any:
        call.settled = True
        if reply[0] in ("ok", "failed"):
            # Completed now: a later call of this name in this context replays it
            # exactly like one completed in an earlier context.
            self._new_names.discard(call.name)
            ok = reply[0] == "ok"
            self._plan.steps[call.name] = {
                "kind": kind,
                "completed": True,
                "succeeded": ok,
                "result": reply[1] if ok else None,
                "error": None if ok else {"name": reply[2], "message": reply[1]},
            }
        if reply[0] == "ok":
            # Never ``reply[1]`` itself: in process it is the engine's folded state.
            return handed_out(reply[1])
        if reply[0] == "failed":
            failure = (WaitTimeout if reply[2] == "wait_timeout" else StepFailed)(reply[1])
            self._genuine.append(failure)
            raise failure
        self._halt(reply[1], reply[2] if len(reply) > 2 else "")

    async def _ask(self, call: _Call, kind: str, message: tuple[Any, ...]) -> Any:
        return self._settle(call, kind, self._request(message))

    async def _do(
        self, call: _Call, effect: Callable[[], Any], policy: RetryPolicy, attempt: int
    ) -> Any:
        try:
            value = effect()
            if inspect.isawaitable(value):
                value = await value
            if value is not None:
                encoded = canonical_document(value)  # DW-DO-1: a document or None
                if type(value) is not dict:
                    raise DocumentError("invalid_params", "an effect must return a dict or None")
                # The host gets what the journal will hold, not the effect's own object
                # (which the effect or the code may keep and change): the engine's fold,
                # and a snapshot of it, then match the journal.
                value = load_canonical(encoded)
            ok, payload = True, value
        except DocumentError as error:
            ok, payload = False, f"the effect did not return a document: {error.message}"[:500]
        except BaseException as error:  # decisions D9: raising anything fails the attempt
            ok, payload = False, error_message(error)
        if self._stop is not None:  # the effect called a step and stopped the context
            raise self._stop
        message = ("do", call.name, attempt, ok, payload, policy.to_document())
        return self._settle(call, "do", self._request(message))


class _Ready:
    """An awaitable that is already settled (a replayed step)."""

    __slots__ = ("_error", "_value")

    def __init__(self, value: Any, error: BaseException | None = None) -> None:
        self._value, self._error = value, error

    def __await__(self) -> Generator[Any, None, Any]:
        if self._error is not None:
            raise self._error
        return self._value
        yield  # pragma: no cover - makes this a generator


def run_context(
    plan: ContextPlan,
    cls: type,
    env: Any,
    host: Host,
    *,
    trace: list[tuple[str, str]] | None = None,
    replay_only: bool = False,
) -> ContextEnd:
    """Construct ``cls(env)`` afresh and call ``run`` once (DW-ABI-2, DW-REPLAY-1).

    Returns how it ended; never raises for anything the workflow code does. A replay
    check (``blackops/workflows/replay_check.py``) passes ``trace`` to learn every call
    and ``replay_only``: the first call without a recorded result ends the context as
    ``stopped`` / ``left_history`` before its effect runs or the host is asked.
    """
    step = Step(plan, host, _trace=trace, _replay_only=replay_only)
    # In process the plan's params are the engine's folded state's: the code gets a copy.
    event = WorkflowEvent(plan.instance_id, handed_out(plan.params))
    loop: asyncio.AbstractEventLoop | None = None
    try:
        try:
            result = cls(env).run(event, step)
            if inspect.isawaitable(result):
                # A new loop per context: no task or future of an earlier context survives.
                loop = asyncio.new_event_loop()
                loop.set_exception_handler(lambda _loop, _context: None)
                result = loop.run_until_complete(_awaited(result))
        finally:
            if loop is not None:
                loop.close()
    except BaseException as error:  # DW-HERR-2: anything else escaping run is run_threw
        if step._host_failure is not None:
            raise step._host_failure from None
        if step._stop is not None:
            return _stopped(step, step._stop)
        if isinstance(error, ContextStop):  # a stop of another context's step object
            return ContextEnd(
                "errored", "run_threw", "run used the step object of another execution context"
            )
        if any(not call.settled for call in step._calls):  # DW-STEP-2: settled (rejected)
            return ContextEnd(
                "errored", "step_definition_mismatch", "run ended while a step was still unsettled"
            )
        if any(error is genuine for genuine in step._genuine) and isinstance(error, StepFailed):
            return ContextEnd("errored", "step_failed", error_message(error))
        return ContextEnd("errored", "run_threw", error_message(error))
    if step._host_failure is not None:
        raise step._host_failure
    if step._stop is not None:  # the app caught a stop and returned anyway
        return _stopped(step, step._stop)
    if any(not call.settled for call in step._calls):
        return ContextEnd(
            "errored", "step_definition_mismatch", "run settled while a step was still unsettled"
        )
    if result is not None:
        try:
            encoded = canonical_document(result)
            if type(result) is not dict:
                raise DocumentError("invalid_params", "not a dict")
        except DocumentError as error:
            return ContextEnd(
                "errored", "run_threw", f"run returned a non-document: {error.message}"[:500]
            )
        result = load_canonical(encoded)  # as recorded; the code may still hold its own
    return ContextEnd("complete", output=result)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _stopped(step: Step, stop: ContextStop) -> ContextEnd:
    stop = step._stop or stop
    if stop.reason in ("suspend", "fenced", "left_history"):
        return ContextEnd("stopped", stop.reason)
    return ContextEnd("errored", stop.reason, stop.message)
