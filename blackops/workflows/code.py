"""The code-provider seam: at the start of each context, pick and pin a Version.

The engine asks a :class:`CodeProvider` which workflows it serves, which Version a
new context of one of them pins (DW-REPLAY-2: picked at the context's start and
kept), and for the class and env of a pinned Version. :class:`LocalProvider` is the
provider of ``app.register_workflow(cls)``: a local Workflow resource whose only
Version is that class. Workflow resources with Workers, Versions and Deployments
plug in another provider; the engine does not change.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from domain.errors import InvalidRequest, NotFound

#: Local Workflow resource uids: what a URL path segment and a stream id carry.
WORKFLOW_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True, slots=True)
class WorkflowCode:
    """One pinned Version of a workflow: its id, its class and its declared env."""

    workflow: str
    version: str
    cls: type
    env: Any


class NotLoaded:
    """The ``cls`` of a picked Version whose code is loaded where its context runs
    (``CodeProvider.load``), not where it was picked."""


@dataclass(frozen=True, slots=True)
class WorkflowResource:
    """A Workflow resource as the engine and the callers see it."""

    uid: str
    space: str
    class_name: str


class CodeProvider(Protocol):
    def workflows(self) -> list[str]:
        """The uids of the workflows whose contexts this provider can run."""
        ...

    def local_workflows(self) -> list[str]:
        """The workflows it serves that are known without opening the store (registered in
        this process): a worker forks its executors early for them (decisions F80)."""
        ...

    def generation(self) -> int:
        """How many registrations this process has made so far: an executor forked at
        generation ``g`` holds the code of every workflow registered at or before it."""
        ...

    def registered_at(self, workflow: str) -> int:
        """The generation at which ``workflow``'s code was last registered in this process;
        0 when an executor gets its code over its pipe (:meth:`source`), not by the fork.
        An executor forked earlier than this must not run it (decisions F150)."""
        ...

    def pick(self, workflow: str) -> WorkflowCode:
        """The Version a new context of ``workflow`` pins (called once per context)."""
        ...

    def space_of(self, workflow: str) -> str | None:
        """The Space this process registered ``workflow`` in (a code registration), or None
        (a Workflow resource: its minted uid is one Space's already)."""
        ...

    def load(self, workflow: str, version: str) -> WorkflowCode:
        """A pinned Version again (an executor process looks its code up by id)."""
        ...

    def source(self, workflow: str, version: str) -> Any:
        """What an executor needs to load a pinned Version without the store, or None
        when it has the code already (it was forked with it)."""
        ...

    def load_source(self, source: Any) -> WorkflowCode:
        """A pinned Version from what :meth:`source` gave (in an executor)."""
        ...

    def after_fork(self) -> None:
        """In a forked child: locks another thread held at the fork are replaced."""
        ...

    def refresh(self) -> None:
        """Forget cached reads (after a change this process made itself)."""
        ...


class Env:
    """A Version's declared environment: attributes only, nothing of the management plane."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        for name, value in (values or {}).items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("env is read-only")

    def __repr__(self) -> str:
        return f"Env({sorted(vars(self))})"


@dataclass
class LocalProvider:
    """Workflows registered in this process: each class is its resource's only Version."""

    _code: dict[str, WorkflowCode] = field(default_factory=dict)
    _resources: dict[str, WorkflowResource] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _generation: int = 0  # registrations so far
    _registered_at: dict[str, int] = field(default_factory=dict)  # uid: its last one's

    def register(self, cls: type, *, uid: str, space: str, env: Any) -> WorkflowResource:
        if not isinstance(cls, type) or not callable(getattr(cls, "run", None)):
            raise InvalidRequest("a workflow is a class whose instances have a callable run")
        if not isinstance(uid, str) or not WORKFLOW_UID.fullmatch(uid):
            raise InvalidRequest("workflow uid must be 1-128 of [A-Za-z0-9_.-], alphanumeric first")
        version = local_version(cls)
        with self._lock:
            known = self._code.get(uid)
            if known is not None and known.version != version:
                raise InvalidRequest(f"workflow {uid!r} is already registered with another class")
            # Every registration counts, a same-code class again too: its class object and
            # env are new, and executors forked before it hold the old ones.
            self._generation += 1
            self._registered_at[uid] = self._generation
            self._code[uid] = WorkflowCode(uid, version, cls, env)
            resource = self._resources[uid] = WorkflowResource(uid, space, cls.__name__)
            return resource

    def after_fork(self) -> None:
        self._lock = threading.Lock()

    def refresh(self) -> None:
        return None  # nothing is cached: registrations are this process's own

    def resource(self, uid: str) -> WorkflowResource:
        found = self._resources.get(uid)
        if found is None:
            raise NotFound(f"no workflow {uid!r}")
        return found

    def resources(self) -> list[WorkflowResource]:
        return [self._resources[uid] for uid in sorted(self._resources)]

    def workflows(self) -> list[str]:
        return sorted(self._code)

    def local_workflows(self) -> list[str]:
        return self.workflows()

    def generation(self) -> int:
        with self._lock:  # a registration under way is counted once it is complete
            return self._generation

    def registered_at(self, workflow: str) -> int:
        with self._lock:
            return self._registered_at.get(workflow, 0)

    def pick(self, workflow: str) -> WorkflowCode:
        return self._code[workflow]

    def space_of(self, workflow: str) -> str | None:
        found = self._resources.get(workflow)
        return found.space if found is not None else None

    def source(self, workflow: str, version: str) -> None:
        return None  # a forked executor has the registered classes already

    def load_source(self, source: Any) -> WorkflowCode:
        raise LookupError("local workflows are loaded by id")

    def load(self, workflow: str, version: str) -> WorkflowCode:
        code = self._code[workflow]
        if code.version != version:
            raise LookupError(f"version {version} of {workflow} is not loaded here")
        return code


def local_version(cls: type) -> str:
    """A local Version id: the class's qualified name and a digest of its code objects,
    so a changed class under the same name is a different Version in the history."""
    digest = hashlib.sha256()
    for name in sorted(vars(cls)):
        member = vars(cls)[name]
        code = getattr(getattr(member, "__func__", member), "__code__", None)
        if code is not None:
            digest.update(name.encode())
            digest.update(code.co_code)
    return f"local:{cls.__module__}.{cls.__qualname__}@{digest.hexdigest()[:12]}"


def registered_view(resource: WorkflowResource, counts: dict[str, Any], at: str) -> dict[str, Any]:
    """A workflow registered in the application, shaped like a Workflow resource's view
    (DW-CRUD-1) and marked ``registered``: read-only (no spec to replace, nothing to
    delete), always Ready while this application runs it."""
    return {
        "uid": resource.uid,
        "name": resource.uid,
        "space": resource.space,
        "spec": {"className": resource.class_name},
        "generation": 1,
        "observedGeneration": 1,
        "createdAt": None,
        "deleting": False,
        "operations": [],
        "observed": {
            "ready": True,
            "instanceCounts": counts["instanceCounts"],
            "observedAt": at,
            "observedPosition": counts["observedPosition"],
            "reason": "registered in the application",
        },
        "output": {},
        "registered": True,
    }
