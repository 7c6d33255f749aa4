"""Callers' side of instances: create, get, status, send_event, terminate (spec §2).

Synchronous core (plain functions over the journal) used by the async Python binding
(``blackops/workflows.py``), the HTTP routes and the CLI. Every write is an append at
the version the caller read, so it is ordered with the instance's contexts; a caller
that lost a race folds what was appended and decides again.
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from blackops.workflows.code import WorkflowResource
from blackops.workflows.local_contexts import running_inline
from blackops.workflows.retention import purge_instance, stream_positions
from blackops.workflows.stamping import event_context, stamp
from domain.clock import Clock
from domain.context import Actor
from domain.documents import canonical_document, canonical_envelope
from domain.errors import BackendUnavailable, BlackOpsError, FencingError
from domain.events import NewEvent
from domain.workflow import (
    LIFETIME_SECONDS,
    MAX_QUEUED_BYTES,
    MAX_QUEUED_EVENTS,
    EventQueueFull,
    InstanceExists,
    InstanceState,
    InstanceTerminal,
    Topic,
    UnknownInstance,
    check_text,
    micros_instant,
    to_micros,
)
from domain.workflow_rules import SECOND, terminated
from journal.instances import instance_stream, load_instance, refresh
from journal.store import Append, EventStore

#: How long an event is retried while other appends to its instance win the race: each
#: loss is another caller's (or the running context's) success. A fixed 50 tries with no
#: pause refused events with backend_unavailable under 8-16 concurrent senders (found by a
#: defect hunt, stop 35); now jittered pauses, doubling to `_RACE_PAUSE_MAX`, until this.
_RACE_SECONDS = 30.0
_RACE_PAUSE_MAX = 0.05


class InstanceService:
    def __init__(self, store: EventStore, clock: Clock, *, poll: float = 0.02) -> None:
        self.store = store
        self.clock = clock
        self.poll = poll
        #: Called after a termination request so local workers look at once.
        self.on_terminate: list[Callable[[], None]] = []
        #: Refuses a create or an event a Workflow resource no longer takes (closed by a
        #: DELETE, or not Ready): ``gate(resource, "create" | "event")`` raises.
        self.gate: Callable[[WorkflowResource, str], None] | None = None

    def _now(self) -> int:
        return to_micros(self.clock.now())

    # -- create / get ----------------------------------------------------------------------

    def create(
        self,
        resource: WorkflowResource,
        instance_id: str | None,
        params: Any,
        actor: Actor,
        *,
        correlation_id: str | None = None,
        causation_id: str | None = None,
    ) -> str:
        if instance_id is None:
            instance_id = str(uuid.uuid4())  # decisions D5
        check_text(instance_id, "instance id", "invalid_request")
        if params is not None:
            canonical_document(params)  # invalid_params / document_too_large (DW-DOC-5)
        stream = instance_stream(resource.uid, instance_id)
        state = load_instance(self.store, stream)
        if state.exists:
            raise InstanceExists(instance_id)
        if self.gate is not None:
            self.gate(resource, "create")
        now = self._now()
        data: dict[str, Any] = {
            "workflow": resource.uid,
            "instance_id": instance_id,
            "lifetime_ends_at": micros_instant(now + LIFETIME_SECONDS * SECOND),
            # Two callers never write byte-identical appends: the store must not take the
            # second for the first one's lost acknowledgement (decisions P14) and let both win.
            "request": uuid.uuid4().hex,
        }
        if params is not None:
            data["params"] = params
        ctx = {
            "instance_id": instance_id,
            "workflow": resource.uid,
            "tenant": resource.space,
            "actor": actor.to_dict(),
            "correlation_id": correlation_id or str(uuid.uuid4()),
            "causation_id": causation_id,
            "traceparent": None,
            "context": 0,
            "worker": None,
            "fencing_token": None,
        }
        event = NewEvent(Topic.CREATED, micros_instant(now), ctx, data)
        try:
            self.store.append(Append(stream, state.version, [event]))
        except FencingError:
            raise InstanceExists(instance_id) from None  # another create won (DW-INST-2)
        if self.gate is not None:
            try:
                self.gate(resource, "created")
            except BlackOpsError:
                # A DELETE was accepted while this create was on its way: the instance
                # must not outlive it (DW-DEL-2). It never ran; purge it and refuse.
                self._purge_new(stream, actor)
                raise
        return instance_id

    def _purge_new(self, stream: str, actor: Actor) -> None:
        state = load_instance(self.store, stream)
        if state.version != 1:
            return  # a worker claimed it meanwhile: the DELETE fences and purges it
        positions = stream_positions(self.store, stream)
        purge_instance(
            self.store,
            self.clock,
            state,
            positions,
            actor=actor.to_dict(),
            reason="workflow_deleted",
            by="create",
        )

    def load(self, resource: WorkflowResource, instance_id: object) -> InstanceState:
        if type(instance_id) is not str or not 1 <= len(instance_id) <= 256:
            raise UnknownInstance(str(instance_id)[:256])
        state = load_instance(self.store, instance_stream(resource.uid, instance_id))
        if not state.exists or state.space != resource.space:
            # DW-INST-3: unknown, or purged; or another Space's instance of a uid registered
            # in both (code registrations name their own uids): unknown here too.
            raise UnknownInstance(instance_id)
        return state

    def status(self, resource: WorkflowResource, instance_id: str) -> dict[str, Any]:
        return self.load(resource, instance_id).status_view()

    # -- events ----------------------------------------------------------------------------

    def send_event(
        self,
        resource: WorkflowResource,
        instance_id: str,
        event_type: object,
        payload: Any,
        actor: Actor,
    ) -> int:
        """Accept an event durably and give it the instance's next sequence number
        (DW-EVT-1); returns that number."""
        check_text(event_type, "event type", "invalid_request")
        assert isinstance(event_type, str)
        # The stored entry's canonical size (DW-EVT-3): {"payload":P,"type":T} with the
        # payload's canonical bytes computed once, while validating it.
        typed = canonical_envelope({"type": event_type})
        size = len(typed)
        if payload is not None:
            size += len(canonical_document(payload)) + len(b'"payload":,')
        state = self.load(resource, instance_id)
        if self.gate is not None:
            self.gate(resource, "event")
        request = uuid.uuid4().hex
        deadline = time.monotonic() + _RACE_SECONDS
        for lost in itertools.count():
            if lost:  # another append won: let the winners through before reading again
                time.sleep(random.uniform(0, min(_RACE_PAUSE_MAX, 0.0005 * 2 ** min(lost, 10))))
                refresh(self.store, state)
            if state.purged or not state.exists:
                raise UnknownInstance(instance_id)  # purged meanwhile (retention, DELETE)
            if state.is_terminal:
                raise InstanceTerminal(instance_id, state.status)
            now = self._now()
            wait = state.waiting_for()
            # Handed straight to the wait (not counted, D12) only if the wait is for this
            # type, still within its deadline (D11), and nothing queued would serve it first.
            direct = (
                wait is not None
                and wait.config.get("type") == event_type
                and wait.due_at is not None
                and now <= wait.due_at
                and state.matching_event(event_type, wait.due_at) is None
            )
            if not direct and (
                state.queued_count + 1 > MAX_QUEUED_EVENTS
                or state.queued_bytes + size > MAX_QUEUED_BYTES
            ):
                raise EventQueueFull(
                    f"instance {instance_id!r} holds {state.queued_count} unconsumed events "
                    f"({state.queued_bytes} bytes); the limits are {MAX_QUEUED_EVENTS} events "
                    f"and {MAX_QUEUED_BYTES} bytes"
                )
            data: dict[str, Any] = {
                "seq": state.next_seq,
                "type": event_type,
                "size": size,
                "direct": direct,
                "request": request,  # never byte-identical to another caller's (P14)
            }
            if payload is not None:
                data["payload"] = payload
            at = micros_instant(now)
            if direct:
                data["wake_at"] = at
            ctx = {**event_context(state), "actor": actor.to_dict()}
            try:
                self.store.append(stamp(state, [(Topic.EVENT_ACCEPTED, data)], at, ctx))
            except FencingError:
                if time.monotonic() > deadline:
                    break
                continue
            return int(data["seq"])
        raise BackendUnavailable(
            f"the instance kept changing for {_RACE_SECONDS:g} s; the event was not accepted"
        )

    # -- terminate -------------------------------------------------------------------------

    def terminate(
        self, resource: WorkflowResource, instance_id: str, actor: Actor, *, timeout: float = 60.0
    ) -> None:
        """Fence the owner, stop its code, then publish ``terminated`` (DW-TERM-1).

        With no context running the instance ends at once (decisions D13). Otherwise a
        ``workflow.termination_requested`` fences the running context's owner, whose
        worker kills the executor process running it and, once it has exited, records
        ``terminated``. If that worker died, its lease runs out (its executors die with
        it) and the stop is proven by that. Returns only once ``terminated`` is in the
        journal; if stop cannot be proven within ``timeout`` seconds it raises
        ``backend_unavailable`` and the request stays in force.
        """
        state = self.load(resource, instance_id)
        deadline = time.monotonic() + timeout
        for _ in range(10_000):
            if self.advance_termination(state, actor):
                return
            if time.monotonic() > deadline:
                raise BackendUnavailable(
                    f"instance {instance_id!r}: the running context's stop is not proven yet; "
                    "termination stays requested, call terminate() again to wait"
                )
            if state.termination_requested_at is not None:
                time.sleep(self.poll)
        raise BackendUnavailable("termination could not be recorded")

    def advance_termination(self, state: InstanceState, actor: Actor, how: str = "") -> bool:
        """One step towards a proven stop; True once ``state`` is terminal.

        No context open: ``terminated`` at once (D13). A context open: first fence its
        owner (``termination_requested`` raises the token), then either its worker
        records the stop or, once the owner's lease has run out since the request, the
        stop is proven by that. Never blocks; ``state`` is refreshed from the journal.
        """
        if state.is_terminal or state.purged:  # already terminal (DW-TERM-1) or gone
            return True
        now = self._now()
        at = micros_instant(now)
        ctx = {**event_context(state), "actor": actor.to_dict()}
        try:
            if not state.context_open:
                self.store.append(stamp(state, [terminated(state, how or "no_context")], at, ctx))
                return True
            if state.termination_requested_at is None:
                lease = int(state.lease_seconds * SECOND)
                data = {
                    "fencing_token": state.fencing_token + 1,
                    "wake_at": micros_instant(now + lease),
                }
                self.store.append(stamp(state, [(Topic.TERMINATION_REQUESTED, data)], at, ctx))
                for listener in list(self.on_terminate):
                    listener()
            elif not running_inline(state.stream) and (
                now >= state.termination_requested_at + int(state.lease_seconds * SECOND)
            ):
                # The owner's lease has run out since the request (it could not renew
                # it): its worker abandoned the context and killed its executor.
                self.store.append(stamp(state, [terminated(state, "lease_expired")], at, ctx))
                return True
        except FencingError:
            pass
        refresh(self.store, state)
        return state.is_terminal
