"""``blackops.Application``: register operation handlers, run them, read their journal."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from blackops.access import AccessService
from blackops.clocks import SystemClock
from blackops.control_handlers import install as install_control_handlers
from blackops.control_plane import ControlPlane
from blackops.deferred import DeferredEngine, check_lease_seconds, check_worker_id
from blackops.handlers import CURRENT_CONTEXT, Handler, HandlerSpec, check_operation_type
from blackops.ids import derived_id, new_id
from blackops.inline import InlineRunner, received_data
from blackops.outcomes import OutcomeRecord, outcome_record
from blackops.resource_provider import ResourceProvider
from blackops.results import OperationResult, status_view
from blackops.workflow_code import Env, LocalProvider, WorkflowResource
from blackops.workflow_engine import WorkflowEngine
from blackops.workflow_instances import InstanceService
from blackops.workflows import WorkflowBinding
from domain.access import SPACE_NAME
from domain.clock import Clock, format_instant
from domain.context import Actor, ExecutionContext, check_traceparent
from domain.documents import canonical_document
from domain.errors import Conflict, FencingError, InvalidRequest, NotFound
from domain.json_text import load_canonical
from domain.lifecycle import EventType, Mode, State
from domain.operation import Operation
from domain.resources import RESOURCE_UID
from domain.retention import Retention
from domain.supervision import OperationRejected, Supervision
from journal.locator import StoreLocation, resolve_store
from journal.operations import OperationJournal
from journal.store import EventStore
from projections.catalog import Projections

if TYPE_CHECKING:
    from blackops.retention import PurgeReport
    from blackops.worker import Worker

F = TypeVar("F", bound=Handler)
TENANT = SPACE_NAME  # a tenant is a Space
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
#: Idempotency keys: visible ASCII, as an HTTP header carries them (decisions P21).
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


def check_idempotency_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidRequest("idempotency key must be 1-255 visible ASCII characters")
    return key


def check_tenant(tenant: object) -> str:
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        raise InvalidRequest("tenant (Space) must be 1-63 letters, digits, '_', '.', '-'")
    return tenant


def _reset_locks_after_fork(app: Application) -> None:
    """A forked executor must not inherit a lock another thread held at the fork."""
    ref = weakref.ref(app)

    def reset() -> None:
        found = ref()
        if found is not None:
            found._lock = threading.Lock()
            found.code_provider.after_fork()

    os.register_at_fork(after_in_child=reset)


def check_operation_id(operation_id: object) -> str:
    if not isinstance(operation_id, str) or not _ID.fullmatch(operation_id):
        raise NotFound(f"operation {operation_id!r} does not exist")
    return operation_id


class Application:
    """A BlackOps application: its operation types and its journal.

    ``Application()`` uses ``$BLACKOPS_STORE`` or the embedded SQLite default under
    ``./.blackops/``; ``"sqlite:///path"``, ``"postgresql://..."`` and ``"memory://"``
    choose another store. The store opens on first use, so a CLI can still point the
    application at ``--store`` (:meth:`use_store`) after importing it.
    """

    def __init__(
        self,
        store: str | None = None,
        *,
        clock: Clock | None = None,
        retention: Retention | None = None,
    ) -> None:
        self._location: StoreLocation | None = resolve_store(store) if store else None
        self.clock: Clock = clock or SystemClock()
        if retention is not None and not isinstance(retention, Retention):
            raise TypeError("retention must be a blackops.Retention")
        #: The default for operation types that set none (OL-10): keep for ever.
        self.retention = retention or Retention()
        self._handlers: dict[str, HandlerSpec] = {}
        self._store: EventStore | None = None
        self._projections: Projections | None = None
        self._workflows = LocalProvider()
        #: Local registrations plus the store's Workflow resources (their Versions).
        self._provider = ResourceProvider(self, self._workflows)
        self._instances: InstanceService | None = None
        self._access: AccessService | None = None
        self._store_pid = 0
        self._lock = threading.Lock()
        self.control = ControlPlane(self)
        install_control_handlers(self)
        _reset_locks_after_fork(self)

    # -- configuration ---------------------------------------------------------------------

    def use_store(self, store: str) -> None:
        """Point an application that has not opened its store yet at ``store``."""
        with self._lock:
            location = resolve_store(store)
            if self._store is not None and self._store.location != location:
                raise InvalidRequest("the store is already open; choose it before first use")
            self._location = location

    @property
    def store(self) -> EventStore:
        with self._lock:
            reopen = self._store_pid != os.getpid() and (
                self._store is None or self._store.location.kind != "memory"
            )
            if self._store is None or reopen:
                # A forked child (an executor) opens its own: connections are not shared
                # across processes. (A memory store is the process's own objects: a child
                # keeps its copy, as it is all there is.)
                self._store = EventStore(self._location or resolve_store(None))
                self._store_pid = os.getpid()
            return self._store

    @property
    def store_display(self) -> str:
        return (self._location or resolve_store(None)).display

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def __enter__(self) -> Application:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def operation(
        self,
        type: str,
        *,
        supervision: Supervision | None = None,
        retention: Retention | None = None,
    ) -> Callable[[F], F]:
        """Register ``fn(ctx, params)`` as the handler of operation ``type``."""
        check_operation_type(type)
        if type.startswith("blackops."):
            raise ValueError("operation types starting with 'blackops.' are reserved")

        def register(fn: F) -> F:
            if type in self._handlers:
                raise ValueError(f"operation type {type!r} is already registered")
            self._handlers[type] = HandlerSpec.build(type, fn, supervision, retention)
            return fn

        return register

    @property
    def operation_types(self) -> list[str]:
        """The application's own operation types (not the built-in ``blackops.*``)."""
        return sorted(t for t in self._handlers if not t.startswith("blackops."))

    def handler(self, type: str) -> HandlerSpec:
        try:
            return self._handlers[type]
        except KeyError:
            raise NotFound(f"operation type {type!r} is not registered") from None

    # -- running ---------------------------------------------------------------------------

    def run(
        self,
        type: str,
        params: dict[str, Any],
        *,
        actor: Actor | str | dict[str, Any],
        tenant: str,
        traceparent: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> OperationResult:
        """Run ``type`` Inline in this process and return its result.

        Everything is validated before any side effect: a bad type, tenant, actor or
        params document raises and records nothing (decisions O3).
        """
        spec = self._public_handler(type)
        canonical = canonical_document(params)
        ctx = self._context(
            spec.operation_type, actor, tenant, traceparent, causation_id, correlation_id
        )
        return InlineRunner(self._journal(), self.clock).run(spec, canonical, ctx)

    def _public_handler(self, type: str) -> HandlerSpec:
        """A type callers may run or submit: the built-in ``blackops.*`` types are the
        control plane's own, reachable only through its checks (``app.control``)."""
        check_operation_type(type)
        if type.startswith("blackops."):
            raise NotFound(f"operation type {type!r} is not registered")
        return self.handler(type)

    def submit(
        self,
        type: str,
        params: dict[str, Any],
        *,
        actor: Actor | str | dict[str, Any],
        tenant: str,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> str:
        """Accept ``type`` as a Deferred operation, durably, and return its id.

        Returns only after ``operation.received`` and ``operation.accepted`` are
        committed. The same ``idempotency_key`` (per tenant and type, decisions O5)
        returns the same operation and records nothing; with other params it is a
        ``conflict``. Params that fail the handler's model are ``invalid_params``
        and record nothing (decisions P20).
        """
        spec = self._public_handler(type)
        canonical = canonical_document(params)
        key = check_idempotency_key(idempotency_key)
        tenant = check_tenant(tenant)
        operation_id = derived_id("idempotency", tenant, spec.operation_type, key) if key else None
        ctx = self._context(
            spec.operation_type,
            actor,
            tenant,
            traceparent,
            causation_id,
            correlation_id,
            operation_id=operation_id,
        )
        try:
            spec.parse_params(load_canonical(canonical))
        except OperationRejected as invalid:
            raise InvalidRequest(invalid.message, code="invalid_params") from None
        data = received_data(spec, ctx, canonical, Mode.DEFERRED)
        if key:
            data["idempotency_key"] = key
        return self._accept(ctx, data, canonical, replayable=key is not None)

    def _accept(
        self, ctx: ExecutionContext, data: dict[str, Any], canonical: bytes, *, replayable: bool
    ) -> str:
        """Record Received -> Accepted in one commit. ``replayable``: the id is derived,
        and finding it taken by the same request is success, not an error."""
        operation = Operation(ctx.operation_id)
        at, context = format_instant(self.clock.now()), ctx.to_dict()
        operation.record(EventType.RECEIVED, at, context, data)
        operation.record(EventType.ACCEPTED, at, context, {})
        try:
            self._journal().save(operation)
        except FencingError:
            if not replayable:
                raise
            existing = self._journal().load(operation.id)
            if canonical_document(existing.params) != canonical:
                raise Conflict(
                    f"operation {operation.id} was already submitted with this key "
                    "and different params"
                ) from None
        return operation.id

    def redrive(self, operation_id: str, *, actor: Actor | str | dict[str, Any]) -> str:
        """Submit a new operation from a Dead Letter one (linked by ``redrive_of``).

        The new one asks the same (type, tenant, params, supervision) and inherits the
        correlation; its causation is the dead one, which gets no new event. Redriving
        again returns the same new operation (decisions P22); to try once more, redrive
        that one when it dies. No handler is needed here: an operator's CLI can do it.
        """
        journal = self._journal()
        events = journal.events(check_operation_id(operation_id))
        dead = journal.load(operation_id)
        if dead.state is not State.DEAD_LETTER:
            raise Conflict(
                f"operation {operation_id} is {dead.public_status}; only dead_letter "
                "operations can be redriven"
            )
        ctx = self._context(
            dead.type,
            actor,
            dead.tenant,
            None,
            dead.id,
            dead.correlation_id,
            operation_id=derived_id("redrive", dead.id),
        )
        asked = events[0].data
        data = {
            **{k: asked[k] for k in ("operation_type", "mode", "tenant", "params", "supervision")},
            "correlation_id": dead.correlation_id,
            "redrive_of": dead.id,
        }
        return self._accept(ctx, data, canonical_document(dead.params), replayable=True)

    # -- Deferred execution ----------------------------------------------------------------

    def engine(self, worker_id: str, *, lease_seconds: float = 30.0) -> DeferredEngine:
        """The claim/run/commit machinery for this application's operation types."""
        check_worker_id(worker_id)  # both before the store opens
        check_lease_seconds(lease_seconds)
        return DeferredEngine(self.store, self._handlers, self.clock, worker_id, lease_seconds)

    async def work_until_idle(self) -> None:
        """Run every Deferred attempt due at the clock's current time, in this process,
        until nothing more is due (python-contract §6). A retry due later waits for
        ``clock.advance``."""
        await asyncio.to_thread(self._work_until_idle)

    def _work_until_idle(self) -> None:
        worker_id = f"local-{os.getpid()}-{id(self):x}"
        engine = self.engine(worker_id)
        workflows = self.workflow_engine(worker_id)
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
            acted += workflows.run_until_idle()
            if not acted:
                return

    # -- workflows -------------------------------------------------------------------------

    def register_workflow(
        self,
        cls: type,
        *,
        uid: str | None = None,
        space: str = "default",
        env: dict[str, Any] | None = None,
    ) -> WorkflowBinding:
        """A local Workflow resource whose only Version is ``cls`` (python-contract §1).

        ``uid`` defaults to the class name; ``env`` is the declared environment the
        class is constructed with (``self.env.NAME``).
        """
        check_tenant(space)
        if uid is not None and RESOURCE_UID.fullmatch(uid):
            raise InvalidRequest("uids of the form wf-<32 hex> are minted for Workflow resources")
        resource = self._workflows.register(cls, uid=uid or cls.__name__, space=space, env=Env(env))
        return WorkflowBinding(self, resource)

    def workflow(self, uid: str) -> WorkflowBinding:
        """The binding of a registered workflow or of a Workflow resource (by UID);
        ``not_found`` if there is none."""
        resource = self.control.resource(uid) if RESOURCE_UID.fullmatch(uid) else None
        return WorkflowBinding(self, resource or self._workflows.resource(uid))

    def workflows(self) -> list[WorkflowResource]:
        """The locally registered workflows."""
        return self._workflows.resources()

    @property
    def code_provider(self) -> ResourceProvider:
        return self._provider

    @property
    def access(self) -> AccessService:
        """Spaces, principals, roles and bearer tokens (journaled; tokens only as hashes)."""
        store = self.store
        with self._lock:
            if self._access is None or self._access.store is not store:
                self._access = AccessService(store, self.clock)
            return self._access

    def access_context(self, actor: Actor | str | dict[str, Any], space: str) -> dict[str, Any]:
        """The execution context stamped on an access change (who, in which Space)."""
        return {
            "tenant": space,
            "actor": Actor.of(actor).to_dict(),
            "correlation_id": new_id(self.clock),
            "causation_id": None,
            "traceparent": None,
        }

    @property
    def instances(self) -> InstanceService:
        store = self.store
        with self._lock:
            if self._instances is None or self._instances.store is not store:
                self._instances = InstanceService(store, self.clock)
                self._instances.gate = self.control.gate
            return self._instances

    def instance_counts(self, uid: str) -> dict[str, Any]:
        """``instanceCounts`` of a registered workflow, from the projection (DW-OBS-1)."""
        resource = self.workflow(uid).resource
        return self.projections.instance_counts(resource.uid)

    def list_instances(self, uid: str, **filters: Any) -> dict[str, Any]:
        """Instances of a registered workflow (``status``, ``limit``, ``cursor``)."""
        resource = self.workflow(uid).resource
        return self.projections.list_instances(resource.uid, **filters)

    def workflow_engine(self, worker_id: str, *, lease_seconds: float = 30.0) -> WorkflowEngine:
        """Claims and commits workflow contexts of this application's workflows."""
        check_worker_id(worker_id)
        check_lease_seconds(lease_seconds)
        return WorkflowEngine(self.store, self._provider, self.clock, worker_id, lease_seconds)

    def worker(self, **options: Any) -> Worker:
        """A worker for this application (``start()`` / ``stop()``); see blackops.worker."""
        from blackops.worker import Worker

        return Worker(self, **options)

    def _context(
        self,
        type: str,
        actor: Actor | str | dict[str, Any],
        tenant: str,
        traceparent: str | None,
        causation_id: str | None,
        correlation_id: str | None,
        *,
        operation_id: str | None = None,
    ) -> ExecutionContext:
        operation_id = operation_id or new_id(self.clock)
        parent: ExecutionContext | None = CURRENT_CONTEXT.get()
        if parent is not None:
            # Called from inside a handler: a child of that operation (OL-12, Part B).
            if tenant != parent.tenant:
                raise InvalidRequest(
                    f"an operation submitted from a handler stays in its tenant "
                    f"{parent.tenant!r}, not {tenant!r}"
                )
            correlation_id = correlation_id or parent.correlation_id
            causation_id = causation_id or parent.operation_id
        for name, value in (("causation_id", causation_id), ("correlation_id", correlation_id)):
            if value is not None and (not isinstance(value, str) or not _ID.fullmatch(value)):
                raise InvalidRequest(f"{name} must be an id of 1-200 characters")
        return ExecutionContext(
            operation_id=operation_id,
            operation_type=type,
            tenant=check_tenant(tenant),
            actor=Actor.of(actor),
            correlation_id=correlation_id or operation_id,
            causation_id=causation_id,
            traceparent=check_traceparent(traceparent),
        )

    # -- reading ---------------------------------------------------------------------------

    def _journal(self) -> OperationJournal:
        return OperationJournal(self.store)

    def status(self, operation_id: str) -> dict[str, Any]:
        """The HTTP shape of ``GET /v1/operations/{id}``; ``not_found`` if unknown."""
        return status_view(self._journal().load(check_operation_id(operation_id)))

    # -- projections ----------------------------------------------------------------------

    @property
    def projections(self) -> Projections:
        """The shipped read models (caught up on each query)."""
        store = self.store  # outside the lock: opening it takes the lock too
        with self._lock:
            if self._projections is None or self._projections.store is not store:
                self._projections = Projections(store)
            return self._projections

    def list_operations(self, **filters: Any) -> dict[str, Any]:
        """Operations by creation time: ``tenant``, ``type``, ``status``, ``since``,
        ``until`` (RFC 3339), ``limit`` (1-1000), ``cursor`` (from ``next``)."""
        return self.projections.list_operations(**filters)

    def operation_counts(self, tenant: str | None = None) -> dict[str, Any]:
        """``{tenant: {type: {status: count}}}`` from the counts projection."""
        return self.projections.counts(tenant)

    # -- retention (OL-10) -----------------------------------------------------------------

    def hold(
        self, operation_id: str, *, reason: str, actor: Actor | str | dict[str, Any]
    ) -> dict[str, Any]:
        """Keep this operation whatever its retention says, until released."""
        from blackops.retention import RetentionService

        return RetentionService(self).hold(
            check_operation_id(operation_id), reason=reason, actor=Actor.of(actor)
        )

    def release(
        self, operation_id: str, *, reason: str, actor: Actor | str | dict[str, Any]
    ) -> None:
        """End a hold; only a privileged actor may (``forbidden`` otherwise)."""
        from blackops.retention import RetentionService

        RetentionService(self).release(
            check_operation_id(operation_id), reason=reason, actor=Actor.of(actor)
        )

    def purge(
        self,
        *,
        actor: Actor | str | dict[str, Any],
        reason: str = "retention",
        dry_run: bool = False,
    ) -> PurgeReport:
        """Purge terminal, unheld operations (and outcomes) past their retention."""
        from blackops.retention import RetentionService

        return RetentionService(self).purge(actor=Actor.of(actor), reason=reason, dry_run=dry_run)

    def outcome(self, operation_id: str) -> dict[str, Any] | None:
        """The stored outcome document of a Deferred Completed operation (OL-9).

        Every other operation (Inline, rejected, failed, retry scheduled, dead letter,
        still running) raises ``not_found`` saying why there is no Outcome Record.
        """
        return self.outcome_record(operation_id).document

    def outcome_record(self, operation_id: str) -> OutcomeRecord:
        """The Outcome Record with its type name and schema version (``.to_model()``)."""
        operation = self._journal().load(check_operation_id(operation_id))
        return outcome_record(self.store, operation)

    def events(self, operation_id: str) -> list[dict[str, Any]]:
        """The operation's lifecycle events in order, shaped like Observed JSONL lines."""
        events = self._journal().events(check_operation_id(operation_id))
        return [event.to_observed() for event in events]
