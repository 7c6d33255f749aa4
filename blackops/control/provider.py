"""The engine's code provider for Workflow resources backed by Versions (DW-REPLAY-2).

``workflows()`` lists the local registrations plus the open Workflow resources of the
catalog stream (a DELETE takes a resource off it: its instances are no longer woken).
``pick`` chooses a Version by weight from the Worker's active allocation for each new
context; ``load`` turns a pinned Version into its class and env, loading the bundle in
its own module namespace (``blackops/control/bundles.py``), so two Versions of one module run
side by side in one process. Reads of the allocation are cached for ``ttl`` seconds:
a context may start on an allocation up to that old.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from blackops.control.bundles import load_version as load_bundle
from blackops.workflows.binding import WorkflowBinding
from blackops.workflows.code import Env, LocalProvider, NotLoaded, WorkflowCode, WorkflowResource
from domain.errors import BlackOpsError
from domain.resources import VersionState, is_uid, pick_version
from journal.resources import catalog, load_deployment, load_version, load_workflow

if TYPE_CHECKING:
    from blackops.runtime import Runtime
    from blackops.workflows.instances import InstanceService


class ResourceProvider:
    def __init__(self, runtime: Runtime, local: LocalProvider, *, ttl: float = 0.25) -> None:
        self.runtime = runtime
        self.local = local
        self.ttl = ttl
        self._lock = threading.Lock()
        self._catalog_version = 0
        self._open: set[str] = set()
        self._catalog_read = float("-inf")
        self._catalog_store: object = None
        self._allocations: dict[str, tuple[float, str, list[dict[str, Any]]]] = {}
        self._versions: dict[str, VersionState] = {}
        self._code: dict[tuple[str, str], WorkflowCode] = {}
        self._random = random.Random()

    # -- CodeProvider ----------------------------------------------------------------------

    def workflows(self) -> list[str]:
        return sorted({*self.local.workflows(), *self._catalog()})

    def local_workflows(self) -> list[str]:
        return self.local.workflows()  # Workflow resources are in the store

    def generation(self) -> int:
        return self.local.generation()

    def registered_at(self, workflow: str) -> int:
        # A Version's code reaches an executor over its pipe: any executor can run it.
        return 0 if _is_resource(workflow) else self.local.registered_at(workflow)

    def space_of(self, workflow: str) -> str | None:
        return None if _is_resource(workflow) else self.local.space_of(workflow)

    def pick(self, workflow: str) -> WorkflowCode:
        if not _is_resource(workflow):
            return self.local.pick(workflow)
        class_name, allocation = self._allocation(workflow)
        usable = [
            entry
            for entry in allocation
            if entry["weight"] > 0 and self._version(entry["version"]).abi(class_name)
        ]
        # DW-REPLAY-2: by weight, among the Versions that have the class (never none).
        version = pick_version(usable, self._random)
        return WorkflowCode(workflow, version, NotLoaded, None)

    def load(self, workflow: str, version: str) -> WorkflowCode:
        if not _is_resource(workflow):
            return self.local.load(workflow, version)
        with self._lock:
            known = self._code.get((workflow, version))
        if known is not None:
            return known
        source = self.source(workflow, version)
        assert source is not None
        return self.load_source(source)

    def source(self, workflow: str, version: str) -> VersionSource | None:
        """What it takes to load a pinned Version without the store (None: a local
        workflow, whose code a forked executor already has). Read where the store is:
        an executor process gets it over its pipe and never opens a store for code."""
        if not _is_resource(workflow):
            return None
        state = load_workflow(self.runtime.store, workflow)
        if not state.spec:
            raise LookupError(f"workflow {workflow} does not exist")
        found = self._version(version)
        if not found.exists:
            raise LookupError(f"version {version} does not exist")
        bindings = []
        for binding in found.bindings:
            uid = binding["resource"]["resourceUid"]
            bound = load_workflow(self.runtime.store, uid)
            class_name = bound.spec.get("className", "")
            bindings.append((binding["name"], uid, bound.space or found.space, class_name))
        return VersionSource(
            workflow, version, state.class_name, found.main, found.modules, found.env, bindings
        )

    def load_source(self, source: VersionSource) -> WorkflowCode:
        """The class and env of a Version, loaded in an isolated namespace (cached)."""
        key = (source.workflow, source.version)
        with self._lock:
            known = self._code.get(key)
        if known is not None:
            return known
        bundle = load_bundle(source.version, source.modules, source.main)
        code = WorkflowCode(
            source.workflow, source.version, bundle.export(source.class_name), self._env(source)
        )
        with self._lock:
            self._code[key] = code
        return code

    # -- reads -----------------------------------------------------------------------------

    def _catalog(self) -> set[str]:
        store = self.runtime.store
        with self._lock:
            if store is not self._catalog_store:  # a new process or a new store: start over
                self._catalog_store, self._catalog_version, self._open = store, 0, set()
                self._catalog_read = float("-inf")
            if time.monotonic() - self._catalog_read < self.ttl:
                return set(self._open)
            try:
                version, changes = catalog(store, self._catalog_version)
            except BlackOpsError:
                return set(self._open)  # the store is away: the last known set
            for change, uid in changes:
                (self._open.add if change == "added" else self._open.discard)(uid)
            self._catalog_version, self._catalog_read = version, time.monotonic()
            return set(self._open)

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        self.local.after_fork()

    def refresh(self) -> None:
        """Forget cached reads (after a change this process made itself)."""
        with self._lock:
            self._catalog_read = float("-inf")
            self._allocations.clear()

    def outlast_caches(self) -> None:
        """Forget this process's cached reads and wait until every worker's are newer than
        now (they are at most ``ttl`` old): a change committed before this call is then what
        every new context sees. Control-plane operations call it before they complete."""
        self.refresh()
        time.sleep(self.ttl * 1.5)

    def _allocation(self, workflow: str) -> tuple[str, list[dict[str, Any]]]:
        now = time.monotonic()
        with self._lock:
            cached = self._allocations.get(workflow)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1], cached[2]
        state = load_workflow(self.runtime.store, workflow)
        if not state.exists or state.deleting:
            raise LookupError(f"workflow {workflow} is closed")
        allocation = load_deployment(self.runtime.store, state.worker).allocation
        with self._lock:
            self._allocations[workflow] = (now, state.class_name, allocation)
        return state.class_name, allocation

    def _version(self, version: str) -> VersionState:
        with self._lock:
            known = self._versions.get(version)
        if known is not None:
            return known
        state = load_version(self.runtime.store, version)
        if state.verification is not None:  # immutable from here on: keep it
            with self._lock:
                self._versions[version] = state
        return state

    def _env(self, source: VersionSource) -> Env:
        """The declared env, and each binding as a WorkflowBinding (and nothing else of
        the management plane)."""
        values: dict[str, Any] = dict(source.env)
        for name, uid, space, class_name in source.bindings:
            resource = WorkflowResource(uid, space, class_name)
            values[name] = WorkflowBinding(_InstancesOnly(self.runtime), resource)
        return Env(values)


@dataclass(frozen=True, slots=True)
class VersionSource:
    """A pinned Version's code as an executor needs it: picklable, no store needed."""

    workflow: str
    version: str
    class_name: str
    main: str
    modules: dict[str, str]
    env: dict[str, Any]
    #: (name, uid, space, className) of each workflowBinding.
    bindings: list[tuple[str, str, str, str]]


class _InstancesOnly:
    """What a binding in workflow code reaches of the application: its instances, not
    the management plane (no control plane, access, operations)."""

    __slots__ = ("_runtime",)

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @property
    def instances(self) -> InstanceService:
        return self._runtime.instances


def _is_resource(workflow: str) -> bool:
    return is_uid(workflow, "wf")
