"""``blackops.Application``: register operation handlers, run them, read their journal."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from blackops.clocks import SystemClock
from blackops.handlers import Handler, HandlerSpec, check_operation_type
from blackops.ids import new_id
from blackops.inline import InlineRunner
from blackops.results import OperationResult, status_view
from domain.clock import Clock
from domain.context import Actor, ExecutionContext, check_traceparent
from domain.documents import canonical_document
from domain.errors import InvalidRequest, NotFound
from domain.supervision import Supervision
from journal.locator import StoreLocation, resolve_store
from journal.operations import OperationJournal
from journal.store import EventStore

F = TypeVar("F", bound=Handler)
TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


def check_tenant(tenant: object) -> str:
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        raise InvalidRequest("tenant (Space) must be 1-63 letters, digits, '_', '.', '-'")
    return tenant


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

    def __init__(self, store: str | None = None, *, clock: Clock | None = None) -> None:
        self._location: StoreLocation | None = resolve_store(store) if store else None
        self.clock: Clock = clock or SystemClock()
        self._handlers: dict[str, HandlerSpec] = {}
        self._store: EventStore | None = None
        self._lock = threading.Lock()

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
            if self._store is None:
                self._store = EventStore(self._location or resolve_store(None))
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

    def operation(self, type: str, *, supervision: Supervision | None = None) -> Callable[[F], F]:
        """Register ``fn(ctx, params)`` as the handler of operation ``type``."""
        check_operation_type(type)

        def register(fn: F) -> F:
            if type in self._handlers:
                raise ValueError(f"operation type {type!r} is already registered")
            self._handlers[type] = HandlerSpec.build(type, fn, supervision)
            return fn

        return register

    @property
    def operation_types(self) -> list[str]:
        return sorted(self._handlers)

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
        spec = self.handler(check_operation_type(type))
        canonical = canonical_document(params)
        ctx = self._context(
            spec.operation_type, actor, tenant, traceparent, causation_id, correlation_id
        )
        return InlineRunner(self._journal(), self.clock).run(spec, canonical, ctx)

    def _context(
        self,
        type: str,
        actor: Actor | str | dict[str, Any],
        tenant: str,
        traceparent: str | None,
        causation_id: str | None,
        correlation_id: str | None,
    ) -> ExecutionContext:
        operation_id = new_id(self.clock)
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

    def events(self, operation_id: str) -> list[dict[str, Any]]:
        """The operation's lifecycle events in order, shaped like Observed JSONL lines."""
        events = self._journal().events(check_operation_id(operation_id))
        return [event.to_observed() for event in events]
