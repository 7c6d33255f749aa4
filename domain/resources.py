"""Workflow resources and their code: Workers, Versions, Deployments (spec §1).

Pure model: validation of what callers send (DW-SPEC-1..3, bundles, allocations), the
event names of each aggregate, and folds from events to state. The journal layer gives
them streams; the product surface decides when to append what.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from domain.documents import canonical_document, sha256_digest
from domain.errors import InvalidRequest

#: DW-SPEC-2.
CLASS_NAME: Final = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]{0,63}$")
#: Resource names (Workers, Workflows) within a Space.
RESOURCE_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
#: UIDs the host mints: a kind prefix and 32 hex digits.
RESOURCE_UID: Final = re.compile(r"^(wf|wk)-[0-9a-f]{32}$")


def is_uid(value: object, kind: str) -> bool:
    """Whether ``value`` is a UID the host minted for a ``kind`` ("wf" or "wk")."""
    return (
        type(value) is str and value.startswith(kind + "-") and bool(RESOURCE_UID.fullmatch(value))
    )


def minted_uid(kind: str, digest_id: str) -> str:
    """A UID from a derived id (``blackops.ids.derived_id``): ``kind-`` and 32 hex."""
    return f"{kind}-{digest_id.replace('-', '')}"


VERSION_ID: Final = re.compile(r"^sha256:[0-9a-f]{64}$")
BINDING_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_ALLOCATION: Final = 16
MAX_BINDINGS: Final = 64
#: How many unknown keys a refusal names (as blackops/http/bodies.py ``request_object``).
KEYS_NAMED: Final = 5


class Topic:
    """Event names of the control-plane aggregates."""

    NAME_CLAIMED = "name.claimed"
    NAME_RELEASED = "name.released"
    CATALOG_ADDED = "catalog.workflow_added"
    CATALOG_REMOVED = "catalog.workflow_removed"
    WORKER_CREATED = "worker.created"
    VERSION_UPLOADED = "version.uploaded"
    VERSION_VERIFIED = "version.verified"
    VERSION_DELETED = "version.deleted"
    VERSION_REPLAY_CHECKED = "version.replay_checked"
    DEPLOYMENT_UPDATE_ACCEPTED = "deployment.update_accepted"
    DEPLOYMENT_ALLOCATED = "deployment.allocated"
    DEPLOYMENT_UPDATE_REFUSED = "deployment.update_refused"
    DEPLOYMENT_ATTACHED = "deployment.workflow_attached"
    DEPLOYMENT_VERSION_REMOVED = "deployment.version_removed"
    WORKFLOW_ACCEPTED = "workflow_resource.accepted"
    WORKFLOW_REPLACED = "workflow_resource.replaced"
    WORKFLOW_RECONCILED = "workflow_resource.reconciled"
    WORKFLOW_BOUND = "workflow_resource.bound"
    WORKFLOW_DELETING = "workflow_resource.deleting"
    WORKFLOW_DELETED = "workflow_resource.deleted"


# -- validation at the edge ----------------------------------------------------------------


def named_keys(keys: Iterable[object]) -> str:
    """Unknown keys as a refusal names them: the first few, sorted, each cut and quoted.

    ``repr`` spells out lone surrogates, so the refusal itself always renders; the cap
    keeps a body of 100,000 unknown keys from being echoed back whole.
    """
    names = sorted(str(key)[:64] for key in keys)
    shown = ", ".join(repr(name) for name in names[:KEYS_NAMED])
    more = len(names) - KEYS_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def _exact_keys(value: object, keys: set[str], where: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise InvalidRequest(f"{where} must be an object")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise InvalidRequest(f"{where} has unknown keys: {named_keys(unknown)} (DW-SPEC-3)")
    missing = sorted(keys - set(value))
    if missing:
        raise InvalidRequest(f"{where} lacks {', '.join(missing)} (DW-SPEC-1, no defaults)")
    nulls = sorted(k for k in keys if value[k] is None)
    if nulls:
        raise InvalidRequest(f"{where}.{nulls[0]} must not be null (DW-SPEC-3)")
    return value


def check_workflow_spec(spec: object) -> dict[str, Any]:
    """DW-SPEC-1..3: exactly ``worker: {resourceUid}`` and ``className``; nothing else,
    no nulls, no defaults. Returns the spec as given (a new dict)."""
    body = _exact_keys(spec, {"worker", "className"}, "spec")
    worker = _exact_keys(body["worker"], {"resourceUid"}, "spec.worker")
    uid = worker["resourceUid"]
    if type(uid) is not str or not 1 <= len(uid) <= 128:
        raise InvalidRequest("spec.worker.resourceUid must be a string of 1-128 characters")
    name = body["className"]
    if type(name) is not str or not CLASS_NAME.fullmatch(name):
        raise InvalidRequest(
            "spec.className must match ^[A-Za-z_$][A-Za-z0-9_$]{0,63}$ (DW-SPEC-2)"
        )
    return {"worker": {"resourceUid": uid}, "className": name}


def check_name(name: object, what: str) -> str:
    if type(name) is not str or not RESOURCE_NAME.fullmatch(name):
        raise InvalidRequest(f"{what} name must be 1-63 of [A-Za-z0-9_.-], alphanumeric first")
    return name


def check_env(env: object) -> dict[str, Any]:
    """A Version's declared, non-secret env: names to documents' scalar or nested values."""
    if env is None:
        return {}
    if type(env) is not dict:
        raise InvalidRequest("env must be an object of NAME: value")
    for name in env:
        if type(name) is not str or not BINDING_NAME.fullmatch(name):
            raise InvalidRequest(f"env name {str(name)[:64]!r} must be a Python identifier")
    canonical_document(env)  # values are documents' values (invalid_params otherwise)
    return dict(env)


def check_bindings(bindings: object, env: dict[str, Any]) -> list[dict[str, Any]]:
    """``workflowBindings: [{name, resource: {resourceUid}}]``, names unique, not in env."""
    if bindings is None:
        return []
    if type(bindings) is not list or len(bindings) > MAX_BINDINGS:
        raise InvalidRequest(f"workflowBindings must be a list of at most {MAX_BINDINGS}")
    seen: set[str] = set()
    out = []
    for index, binding in enumerate(bindings):
        entry = _exact_keys(binding, {"name", "resource"}, f"workflowBindings[{index}]")
        ref = _exact_keys(entry["resource"], {"resourceUid"}, f"workflowBindings[{index}].resource")
        name, uid = entry["name"], ref["resourceUid"]
        if type(name) is not str or not BINDING_NAME.fullmatch(name):
            raise InvalidRequest(f"workflowBindings[{index}].name must be a Python identifier")
        if name in seen or name in env:
            raise InvalidRequest(f"binding name {name!r} is used twice (env or bindings)")
        if not is_uid(uid, "wf"):
            raise InvalidRequest(f"workflowBindings[{index}].resource.resourceUid is not a UID")
        seen.add(name)
        out.append({"name": name, "resource": {"resourceUid": uid}})
    return out


def version_id(content: dict[str, Any]) -> str:
    """Content address of a Version: SHA-256 of its canonical bundle document."""
    return sha256_digest(canonical_document(content))


def whole_number(value: object) -> int | None:
    """``value`` as an int if JSON calls it an integer (``5`` or ``5.0``: JSON Schema counts
    a number with a zero fraction as one, and RFC 8785 writes both ``5``), else None. Bools
    are not numbers here. ``weight: 100.0`` was refused as "must be an integer" (found by
    the contract's fuzzer, stop 34)."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


def check_allocation(allocation: object) -> list[dict[str, Any]]:
    """``[{version, weight}]``: distinct Version ids, integer weights 0-100 summing to 100
    (or an empty list: no code selected)."""
    if type(allocation) is not list or len(allocation) > MAX_ALLOCATION:
        raise InvalidRequest(f"allocation must be a list of at most {MAX_ALLOCATION} entries")
    out: list[dict[str, Any]] = []
    for index, entry in enumerate(allocation):
        item = _exact_keys(entry, {"version", "weight"}, f"allocation[{index}]")
        version, weight = item["version"], whole_number(item["weight"])
        if type(version) is not str or not VERSION_ID.fullmatch(version):
            raise InvalidRequest(f"allocation[{index}].version must be a Version id (sha256:…)")
        if weight is None or not 0 <= weight <= 100:
            raise InvalidRequest(f"allocation[{index}].weight must be an integer 0-100")
        out.append({"version": version, "weight": weight})
    if len({e["version"] for e in out}) != len(out):
        raise InvalidRequest("allocation names a Version twice")
    if out and sum(e["weight"] for e in out) != 100:
        raise InvalidRequest("allocation weights must sum to 100")
    return out


def weighted(allocation: list[dict[str, Any]]) -> list[str]:
    """The Versions that can be picked (weight > 0): the ones DW-SPEC-5/7 concern."""
    return [e["version"] for e in allocation if e["weight"] > 0]


def pick_version(allocation: list[dict[str, Any]], chooser: random.Random | None = None) -> str:
    """DW-REPLAY-2: one Version, chosen by weight, for one new context."""
    entries = [e for e in allocation if e["weight"] > 0]
    if not entries:
        raise LookupError("no Version is selected")
    rng = chooser or random
    return str(rng.choices([e["version"] for e in entries], [e["weight"] for e in entries])[0])


# -- folds ---------------------------------------------------------------------------------


@dataclass
class VersionState:
    id: str
    version: int = 0
    worker: str = ""
    space: str = ""
    main: str = ""
    modules: dict[str, str] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    bindings: list[dict[str, Any]] = field(default_factory=list)
    #: The ABI verification result (``None``: not finished), per class.
    verification: dict[str, Any] | None = None
    deleted: bool = False
    #: Replay checks of this Version against recorded histories (the deploy gate).
    checks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.version > 0

    def abi(self, class_name: str) -> bool | None:
        """DW-ABI-1 for one class: True/False once verified, None while unverified."""
        if self.verification is None:
            return None
        found = self.verification.get("classes", {}).get(class_name)
        return bool(found and found.get("ok"))

    def apply(self, kind: str, data: dict[str, Any]) -> None:
        self.version += 1
        if kind == Topic.VERSION_UPLOADED:
            self.worker, self.space, self.main = data["worker"], data["space"], data["main"]
            self.modules, self.env = data["modules"], data.get("env", {})
            self.bindings = data.get("workflowBindings", [])
        elif kind == Topic.VERSION_VERIFIED:
            self.verification = data["result"]
        elif kind == Topic.VERSION_DELETED:
            self.deleted = True
        elif kind == Topic.VERSION_REPLAY_CHECKED:
            self.checks.append(data)

    def view(self) -> dict[str, Any]:
        return {
            "version": self.id,
            "worker": {"resourceUid": self.worker},
            "main": self.main,
            "modules": sorted(self.modules),
            "env": self.env,
            "workflowBindings": self.bindings,
            "verification": self.verification,
            "deleted": self.deleted,
        }


@dataclass
class DeploymentState:
    worker: str
    version: int = 0
    allocation: list[dict[str, Any]] = field(default_factory=list)
    generation: int = 0
    #: Accepted, unfinished allocation updates: operation id -> allocation (DW-SPEC-7).
    pending: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Updates refused (a Version deleted meanwhile): operation id -> deleted Versions.
    refused: dict[str, list[str]] = field(default_factory=dict)

    def apply(self, kind: str, data: dict[str, Any]) -> None:
        self.version += 1
        if kind == Topic.DEPLOYMENT_UPDATE_ACCEPTED:
            self.pending[data["operation"]] = data["allocation"]
        elif kind == Topic.DEPLOYMENT_ALLOCATED:
            self.pending.pop(data["operation"], None)
            self.allocation = data["allocation"]
            self.generation += 1
        elif kind == Topic.DEPLOYMENT_UPDATE_REFUSED:
            self.pending.pop(data["operation"], None)
            if data.get("deleted"):
                self.refused[data["operation"]] = data["deleted"]


@dataclass
class WorkflowResourceState:
    uid: str
    version: int = 0
    name: str = ""
    space: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    reconciled_generation: int = 0
    created_at: str = ""
    #: The delete Operation once DELETE was accepted: create/event/wake are closed.
    deleting: str | None = None
    deleted: bool = False
    operations: list[str] = field(default_factory=list)
    #: Versions whose workflowBindings name this Workflow (DW-DEL-1).
    bound: list[str] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.version > 0 and not self.deleted

    @property
    def worker(self) -> str:
        return str(self.spec["worker"]["resourceUid"])

    @property
    def class_name(self) -> str:
        return str(self.spec["className"])

    def apply(self, kind: str, data: dict[str, Any], at: str = "") -> None:
        self.version += 1
        if kind == Topic.WORKFLOW_ACCEPTED:
            self.name, self.space, self.spec = data["name"], data["space"], data["spec"]
            self.generation, self.created_at = 1, at
            self.operations.append(data["operation"])
        elif kind == Topic.WORKFLOW_REPLACED:
            self.spec, self.generation = data["spec"], data["generation"]
            self.operations.append(data["operation"])
        elif kind == Topic.WORKFLOW_RECONCILED:
            self.reconciled_generation = max(self.reconciled_generation, data["generation"])
        elif kind == Topic.WORKFLOW_DELETING:
            self.deleting = data["operation"]
            self.operations.append(data["operation"])
        elif kind == Topic.WORKFLOW_DELETED:
            self.deleted = True
        elif kind == Topic.WORKFLOW_BOUND and data["version"] not in self.bound:
            self.bound.append(data["version"])


@dataclass
class NameState:
    """Who holds a name in a Space: the uid that claimed it last, unless released."""

    version: int = 0
    holder: str | None = None

    def apply(self, kind: str, data: dict[str, Any]) -> None:
        self.version += 1
        if kind == Topic.NAME_CLAIMED:
            self.holder = data["uid"]
        elif kind == Topic.NAME_RELEASED and self.holder == data["uid"]:
            self.holder = None


@dataclass
class WorkerState:
    uid: str
    version: int = 0
    name: str = ""
    space: str = ""
    created_at: str = ""

    @property
    def exists(self) -> bool:
        return self.version > 0

    def apply(self, kind: str, data: dict[str, Any], at: str = "") -> None:
        self.version += 1
        if kind == Topic.WORKER_CREATED:
            self.name, self.space, self.created_at = data["name"], data["space"], at

    def view(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "name": self.name,
            "space": self.space,
            "createdAt": self.created_at,
        }
