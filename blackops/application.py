"""``blackops.Application``: the public front (python-contract §1, §2, §6).

It registers handlers and workflows and delegates everything else to services over one
:class:`~blackops.runtime.Runtime`: running and reading operations
(``operations/service.py``), workflow instances, the control plane (``app.control``),
retention, projections and workers. No service depends on the application.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from blackops.control.access import AccessService
from blackops.control.handlers import install as install_control_handlers
from blackops.control.plane import ControlPlane
from blackops.control.provider import ResourceProvider
from blackops.ids import new_id
from blackops.operations.contexts import check_operation_id, check_tenant
from blackops.operations.deferred import DeferredEngine
from blackops.operations.handlers import Handler, HandlerSpec
from blackops.operations.outcomes import OutcomeRecord
from blackops.operations.registry import BUILTIN_PREFIX
from blackops.operations.results import OperationResult
from blackops.operations.retention import PurgeReport, RetentionService, check_reason
from blackops.operations.service import OperationService
from blackops.runtime import Runtime
from blackops.workflows.binding import WorkflowBinding
from blackops.workflows.code import (
    Env,
    LocalProvider,
    WorkflowCode,
    WorkflowResource,
    registered_view,
)
from blackops.workflows.engine import WorkflowEngine
from blackops.workflows.instances import InstanceService
from blackops.workflows.retention import InstanceRetention
from domain.clock import Clock, format_instant
from domain.context import Actor
from domain.errors import InvalidRequest
from domain.operation_types import check_operation_type
from domain.resources import RESOURCE_UID
from domain.retention import Retention
from domain.supervision import Supervision
from journal.store import EventStore
from projections.catalog import Projections

if TYPE_CHECKING:
    from blackops.jsonbody import ParsedDocument
    from blackops.worker import Worker

F = TypeVar("F", bound=Handler)


class Application:
    """A BlackOps application: its operation types, its workflows and its journal.

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
        self._runtime = Runtime(store, clock=clock, retention=retention)
        self._workflows = LocalProvider()
        #: Local registrations plus the store's Workflow resources (their Versions).
        self._provider = ResourceProvider(self._runtime, self._workflows)
        self._runtime.code_provider = self._provider
        self._operations = OperationService(self._runtime)
        self.control = ControlPlane(self._runtime)
        self._runtime.gate = self.control.gate
        install_control_handlers(self.control, self._provider)

    # -- configuration ---------------------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        """What this application's services share (for extensions and tooling)."""
        return self._runtime

    @property
    def clock(self) -> Clock:
        return self._runtime.clock

    @property
    def retention(self) -> Retention:
        """The default retention of operation types that set none (OL-10)."""
        return self._runtime.retention

    def use_store(self, store: str) -> None:
        """Point an application that has not opened its store yet at ``store``."""
        self._runtime.use_store(store)

    @property
    def store(self) -> EventStore:
        return self._runtime.store

    @property
    def store_display(self) -> str:
        return self._runtime.store_display

    def close(self) -> None:
        self._runtime.close()

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
        if type.startswith(BUILTIN_PREFIX):
            raise ValueError(f"operation types starting with {BUILTIN_PREFIX!r} are reserved")

        def register(fn: F) -> F:
            self._runtime.handlers.register(HandlerSpec.build(type, fn, supervision, retention))
            return fn

        return register

    @property
    def operation_types(self) -> list[str]:
        """The application's own operation types (not the built-in ``blackops.*``)."""
        return self._runtime.handlers.public_types

    def handler(self, type: str) -> HandlerSpec:
        return self._runtime.handlers.get(type)

    # -- operations ------------------------------------------------------------------------

    def run(
        self,
        type: str,
        params: dict[str, Any] | ParsedDocument,
        *,
        actor: Actor | str | dict[str, Any],
        tenant: str,
        traceparent: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> OperationResult:
        """Run ``type`` Inline in this process and return its result.

        Everything is validated before any side effect: a bad type, tenant, actor or
        params document raises and records nothing (decisions O3). ``params`` may be a
        ``blackops.jsonbody.ParsedDocument`` (JSON text read with its canonical bytes in one
        pass): its bytes are not made again (decisions F132).
        """
        return self._operations.run(
            type,
            params,
            actor=actor,
            tenant=tenant,
            traceparent=traceparent,
            causation_id=causation_id,
            correlation_id=correlation_id,
        )

    def submit(
        self,
        type: str,
        params: dict[str, Any] | ParsedDocument,
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
        return self.submit_accepted(
            type,
            params,
            actor=actor,
            tenant=tenant,
            idempotency_key=idempotency_key,
            traceparent=traceparent,
            causation_id=causation_id,
            correlation_id=correlation_id,
        )[0]

    def submit_accepted(
        self,
        type: str,
        params: dict[str, Any] | ParsedDocument,
        *,
        actor: Actor | str | dict[str, Any],
        tenant: str,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> tuple[str, str]:
        """:meth:`submit`, also returning the public status the acceptance knows:
        ``pending`` for a new operation, the named operation's for a replayed key (the
        HTTP 202 body, built without reading the journal again). ``params``: as for
        :meth:`run`."""
        return self._operations.submit(
            type,
            params,
            actor=actor,
            tenant=tenant,
            idempotency_key=idempotency_key,
            traceparent=traceparent,
            causation_id=causation_id,
            correlation_id=correlation_id,
        )

    def redrive(self, operation_id: str, *, actor: Actor | str | dict[str, Any]) -> str:
        """Submit a new operation from a Dead Letter one (linked by ``redrive_of``).

        The new one asks the same (type, tenant, params, supervision) and inherits the
        correlation; its causation is the dead one, which gets no new event. Redriving
        again returns the same new operation (decisions P22); to try once more, redrive
        that one when it dies. No handler is needed here: an operator's CLI can do it.
        """
        return self._operations.redrive(operation_id, actor=actor)

    def status(self, operation_id: str) -> dict[str, Any]:
        """The HTTP shape of ``GET /v1/operations/{id}``; ``not_found`` if unknown."""
        return self._operations.status(operation_id)

    def outcome(self, operation_id: str) -> dict[str, Any] | None:
        """The stored outcome document of a Deferred Completed operation (OL-9).

        Every other operation (Inline, rejected, failed, retry scheduled, dead letter,
        still running) raises ``not_found`` saying why there is no Outcome Record.
        """
        return self.outcome_record(operation_id).document

    def outcome_record(self, operation_id: str) -> OutcomeRecord:
        """The Outcome Record with its type name and schema version (``.to_model()``)."""
        return self._operations.outcome_record(operation_id)

    def events(self, operation_id: str) -> list[dict[str, Any]]:
        """The operation's lifecycle events in order, shaped like Observed JSONL lines."""
        return self._operations.events(operation_id)

    # -- running work ----------------------------------------------------------------------

    def engine(self, worker_id: str, *, lease_seconds: float = 30.0) -> DeferredEngine:
        """The claim/run/commit machinery for this application's operation types."""
        from blackops.worker import deferred_engine

        return deferred_engine(self._runtime, worker_id, lease_seconds)

    def workflow_engine(self, worker_id: str, *, lease_seconds: float = 30.0) -> WorkflowEngine:
        """Claims and commits workflow contexts of this application's workflows."""
        from blackops.worker import workflow_engine

        return workflow_engine(self._runtime, worker_id, lease_seconds)

    async def work_until_idle(self) -> None:
        """Run every Deferred attempt and workflow context due at the clock's current
        time, in this process, until nothing more is due (python-contract §6). A retry
        due later waits for ``clock.advance``."""
        from blackops.worker import run_until_idle

        worker_id = f"local-{os.getpid()}-{id(self):x}"
        await asyncio.to_thread(run_until_idle, self._runtime, worker_id)

    def worker(self, **options: Any) -> Worker:
        """A worker for this application (``start()`` / ``stop()``); see blackops.worker."""
        from blackops.worker import Worker, WorkerOptions

        return Worker(self._runtime, WorkerOptions(**options))

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
        return WorkflowBinding(self._runtime, resource)

    def workflow(self, uid: str) -> WorkflowBinding:
        """The binding of a registered workflow or of a Workflow resource (by UID);
        ``not_found`` if there is none."""
        resource = self.control.resource(uid) if RESOURCE_UID.fullmatch(uid) else None
        return WorkflowBinding(self._runtime, resource or self._workflows.resource(uid))

    def workflows(self) -> list[WorkflowResource]:
        """The locally registered workflows."""
        return self._workflows.resources()

    def registered_code(self, uid: str) -> WorkflowCode:
        """The class (and env) registered under ``uid``: what a replay check of new code
        runs (``blackops replay --check --app``); ``not_found`` if none."""
        self._workflows.resource(uid)
        return self._workflows.pick(uid)

    def workflow_views(self, space: str) -> list[dict[str, Any]]:
        """The Space's workflows as ``GET .../workflows`` lists them: the ones registered in
        this application (marked ``registered``) and the Workflow resources."""
        at = format_instant(self.clock.now())
        local = [
            registered_view(r, self.projections.instance_counts(r.uid, r.space), at)
            for r in self._workflows.resources()
            if r.space == space
        ]
        return [*local, *self.control.list_workflows(space)]

    def workflow_view(self, space: str, uid: str) -> dict[str, Any]:
        """One workflow of the Space: a registered one, or a Workflow resource."""
        for resource in self._workflows.resources():
            if resource.uid == uid and resource.space == space:
                counts = self.projections.instance_counts(uid, space)
                return registered_view(resource, counts, format_instant(self.clock.now()))
        return self.control.get_workflow(space, uid)

    @property
    def code_provider(self) -> ResourceProvider:
        return self._provider

    @property
    def instances(self) -> InstanceService:
        return self._runtime.instances

    def instance_counts(self, uid: str) -> dict[str, Any]:
        """``instanceCounts`` of a workflow from the projection (DW-OBS-1), the journal
        position they are as of (``observedPosition``) and when they were read."""
        resource = self.workflow(uid).resource
        counts = self.projections.instance_counts(resource.uid, resource.space)
        return {**counts, "observedAt": format_instant(self.clock.now())}

    def list_instances(self, uid: str, **filters: Any) -> dict[str, Any]:
        """Instances of a registered workflow (``status``, ``limit``, ``cursor``)."""
        resource = self.workflow(uid).resource
        return self.projections.list_instances(resource.uid, space=resource.space, **filters)

    # -- access ----------------------------------------------------------------------------

    @property
    def access(self) -> AccessService:
        """Spaces, principals, roles and bearer tokens (journaled; tokens only as hashes)."""
        return self._runtime.shared(
            "access", lambda store: AccessService(store, self._runtime.clock)
        )

    def access_context(self, actor: Actor | str | dict[str, Any], space: str) -> dict[str, Any]:
        """The execution context stamped on an access change (who, in which Space)."""
        return {
            "tenant": space,
            "actor": Actor.of(actor).to_dict(),
            "correlation_id": new_id(self._runtime.clock),
            "causation_id": None,
            "traceparent": None,
        }

    # -- projections ----------------------------------------------------------------------

    @property
    def projections(self) -> Projections:
        """The shipped read models (caught up on each query)."""
        return self._runtime.projections

    def list_operations(self, **filters: Any) -> dict[str, Any]:
        """Operations by creation time: ``tenant``, ``type``, ``status``, ``since``,
        ``until`` (RFC 3339), ``limit`` (1-1000), ``cursor`` (from ``next``)."""
        return self._operations.list_operations(**filters)

    def operation_counts(self, tenant: str | None = None) -> dict[str, Any]:
        """``{tenant: {type: {status: count}}}`` from the counts projection."""
        return self._operations.operation_counts(tenant)

    # -- retention (OL-10) -----------------------------------------------------------------

    def hold(
        self, operation_id: str, *, reason: str, actor: Actor | str | dict[str, Any]
    ) -> dict[str, Any]:
        """Keep this operation whatever its retention says, until released."""
        return RetentionService(self._runtime).hold(
            check_operation_id(operation_id), reason=reason, actor=Actor.of(actor)
        )

    def release(
        self, operation_id: str, *, reason: str, actor: Actor | str | dict[str, Any]
    ) -> None:
        """End a hold; only a privileged actor may (``forbidden`` otherwise)."""
        RetentionService(self._runtime).release(
            check_operation_id(operation_id), reason=reason, actor=Actor.of(actor)
        )

    def purge_operation(
        self,
        operation_id: str,
        *,
        actor: Actor | str | dict[str, Any],
        reason: str,
        dry_run: bool = False,
    ) -> PurgeReport:
        """Purge one terminal, unheld operation now, whatever its retention (OL-10's
        explicit purge): only a privileged actor, with a reason; ``conflict`` if it is not
        terminal, is held, or was purged (a purge cut short after its tombstone is finished
        instead, and reported)."""
        return RetentionService(self._runtime).purge_operation(
            check_operation_id(operation_id), actor=Actor.of(actor), reason=reason,
            dry_run=dry_run,
        )  # fmt: skip

    def purge(
        self,
        *,
        actor: Actor | str | dict[str, Any],
        reason: str = "retention",
        dry_run: bool = False,
    ) -> PurgeReport:
        """Purge terminal, unheld operations (and outcomes) past their retention, and
        terminal workflow instances past theirs (DW-RET-1)."""
        who = Actor.of(actor)
        report = RetentionService(self._runtime).purge(actor=who, reason=reason, dry_run=dry_run)
        instances = InstanceRetention(self.store, self._runtime.clock, self.instances)
        report.instances = instances.purge(who, check_reason(reason), dry_run=dry_run)
        return report
