"""The Runtime: what every service of one application shares, and nothing else.

Services (the operation service, the control plane, retention, workers, the HTTP and CLI
edges through ``Application``) take a :class:`Runtime`, never the ``Application``: the
store (reopened per process), the clock, the operation handlers, the workflow code
provider, the settings, and the store-bound services built once per open store.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from blackops.observability.signals import NO_SIGNALS, Signals
from blackops.operations.registry import HandlerRegistry
from domain.clock import Clock
from domain.errors import InvalidRequest
from domain.retention import Retention
from journal.commit_queue import CommitObserver
from journal.locator import StoreLocation, resolve_store
from journal.operations import OperationJournal
from journal.store import EventStore

if TYPE_CHECKING:
    from blackops.workflows.code import CodeProvider, WorkflowResource
    from blackops.workflows.instances import InstanceService
    from projections.catalog import Projections

T = TypeVar("T")


class SystemClock:
    """Wall-clock UTC time; tests inject ``blackops.testing.FakeClock`` instead."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class Runtime:
    """One application's store, clock, handlers, code provider and settings.

    The store opens on first use (a CLI may still choose it with :meth:`use_store` after
    importing the application) and again in a forked child: connections are never shared
    across processes.
    """

    def __init__(
        self,
        store: str | None = None,
        *,
        clock: Clock | None = None,
        retention: Retention | None = None,
    ) -> None:
        if retention is not None and not isinstance(retention, Retention):
            raise TypeError("retention must be a blackops.Retention")
        self._location: StoreLocation | None = resolve_store(store) if store else None
        self.clock: Clock = clock or SystemClock()
        #: The default for operation types that set none (OL-10): keep for ever.
        self.retention = retention or Retention()
        self.handlers = HandlerRegistry()
        #: Which workflows this application runs and their code (set by the application).
        self.code_provider: CodeProvider | None = None
        #: Refuses a create or an event a Workflow resource no longer takes (the control
        #: plane's check): ``gate(resource, "create" | "created" | "event")`` raises.
        self.gate: Callable[[WorkflowResource, str], None] | None = None
        #: Told of lease renewals and losses and executor restarts (metrics and logs, when
        #: ``blackops.observability.observe`` set it up; a no-op otherwise).
        self.signals: Signals = NO_SIGNALS
        self._commit_observers: list[CommitObserver] = []
        self._store: EventStore | None = None
        self._store_pid = 0
        self._lock = threading.Lock()
        self._shared: dict[str, tuple[EventStore, Any]] = {}
        _reset_after_fork(self)

    # -- the store -------------------------------------------------------------------------

    def use_store(self, store: str) -> None:
        """Point a runtime that has not opened its store yet at ``store``."""
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
                # A forked child (an executor) opens its own. A memory store is the
                # process's own objects: a child keeps its copy, as it is all there is.
                self._store = EventStore(self._location or resolve_store(None))
                self._store_pid = os.getpid()
                for observer in self._commit_observers:
                    self._store.add_commit_observer(observer)
            return self._store

    def add_commit_observer(self, observer: CommitObserver) -> None:
        """Tell ``observer`` of every commit of this runtime's store, the one open now and
        any opened later (the store is not opened to register)."""
        with self._lock:
            if observer in self._commit_observers:
                return
            self._commit_observers.append(observer)
            if self._store is not None:
                self._store.add_commit_observer(observer)

    @property
    def store_opened(self) -> bool:
        """Whether the store has been opened in this process (nothing is opened to ask)."""
        return self._store is not None

    @property
    def store_display(self) -> str:
        return (self._location or resolve_store(None)).display

    def close(self) -> None:
        with self._lock:
            store, self._store = self._store, None
            self._shared.clear()
        if store is not None:  # outside the lock: it waits for calls inside it (F171)
            store.close()

    # -- services bound to the open store --------------------------------------------------

    def shared(self, name: str, build: Callable[[EventStore], T]) -> T:
        """The one ``name`` service of the open store, built by ``build`` on first use and
        again when the store is reopened (another process, another store)."""
        store = self.store  # outside the lock: opening it takes the lock too
        with self._lock:
            found = self._shared.get(name)
            if found is None or found[0] is not store:
                found = self._shared[name] = (store, build(store))
            service: T = found[1]
            return service

    @property
    def instances(self) -> InstanceService:
        """Callers' side of workflow instances (create, status, events, terminate)."""
        from blackops.workflows.instances import InstanceService

        def build(store: EventStore) -> InstanceService:
            service = InstanceService(store, self.clock)
            service.gate = self.gate
            return service

        return self.shared("instances", build)

    @property
    def projections(self) -> Projections:
        """The shipped read models (caught up on each query)."""
        from projections.catalog import Projections

        return self.shared("projections", Projections)

    def journal(self) -> OperationJournal:
        return OperationJournal(self.store)

    def provider(self) -> CodeProvider:
        if self.code_provider is None:
            raise RuntimeError("this runtime has no workflow code provider")
        return self.code_provider

    def retention_of(self, operation_type: str) -> Retention:
        """The retention policy of ``operation_type``: its own, else the default."""
        spec = self.handlers.find(operation_type)
        return spec.retention if spec is not None and spec.retention else self.retention


def _reset_after_fork(runtime: Runtime) -> None:
    """A forked executor must not inherit a lock another thread held at the fork."""
    ref = weakref.ref(runtime)

    def reset() -> None:
        found = ref()
        if found is not None:
            found._lock = threading.Lock()
            if found.code_provider is not None:
                found.code_provider.after_fork()

    os.register_at_fork(after_in_child=reset)
