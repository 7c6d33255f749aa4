"""The shapes of request bodies and answers, as the OpenAPI document publishes them.

Bodies are still read by the strict JSON parser (duplicate keys, NaN and lone surrogates
refused: decisions P13) and then checked against these models, so the published schema is
the one enforced. Documents inside bodies (params, payloads) are free-form objects under
the document rules (RFC 8785, 1 MiB, 1024 keys per object, the nesting limit).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from blackops.http.openapi import DocumentSchema, EnvSchema
from domain.access import LABEL, SPACE_NAME
from domain.resources import BINDING_NAME, CLASS_NAME, RESOURCE_NAME, VERSION_ID
from domain.retention import REASON_MAX_CHARS, REASON_SAYS_SOMETHING

Document = Annotated[dict[str, Any], DocumentSchema]
#: The public statuses of an operation (OL-2).
OperationStatusName = Literal[
    "received", "accepted", "running", "retry_scheduled", "completed", "rejected", "failed",
    "dead_letter",
]  # fmt: skip
InstanceStatusName = Literal[
    "queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"
]


class Strict(BaseModel):
    """A body or answer whose keys are exactly these."""

    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    """An answer that may carry more keys than listed (they are documented in prose)."""

    model_config = ConfigDict(extra="allow")


# -- request bodies ---------------------------------------------------------------------------


class CreateInstanceBody(Strict):
    id: str | None = Field(None, min_length=1, max_length=256, description="else a UUID")
    params: Document | None = Field(None, description="the instance's params document")


class SendEventBody(Strict):
    type: str = Field(min_length=1, max_length=256)
    payload: Document | None = Field(None, description="leave it out for none")


class TerminateBody(Strict):
    """Empty, or ``{}``."""


class ReasonBody(Strict):
    reason: str = Field(
        min_length=1,
        max_length=REASON_MAX_CHARS,
        pattern=REASON_SAYS_SOMETHING.pattern,
        description="not all blank: white space, control and invisible characters",
    )


class SpaceBody(Strict):
    name: str = Field(pattern=SPACE_NAME.pattern)


class WorkerBody(Strict):
    name: str = Field(pattern=RESOURCE_NAME.pattern)


class RoleBody(Strict):
    role: Literal["reader", "operator", "deployer", "admin"]


class TokenBody(Strict):
    label: str | None = Field(None, pattern=LABEL.pattern)


class BindingRef(Strict):
    resourceUid: str = Field(pattern=r"^wf-[0-9a-f]{32}$")  # noqa: N815 (the spec's name)


class Binding(Strict):
    name: str = Field(pattern=BINDING_NAME.pattern)
    resource: BindingRef


class VersionBody(Strict):
    """A Version's bundle; that every source compiles, every package is present and
    ``main`` names a module is checked by the service (400)."""

    modules: dict[str, str] = Field(
        min_length=1, max_length=256, description="dotted module name -> Python source"
    )
    main: str
    env: Annotated[dict[str, Any], EnvSchema] | None = Field(
        None, description="NAME (a Python identifier) -> a document value"
    )
    workflowBindings: list[Binding] | None = Field(None, max_length=64)  # noqa: N815


class AllocationEntry(Strict):
    version: str = Field(pattern=VERSION_ID.pattern)
    weight: int = Field(ge=0, le=100)


class DeploymentBody(Strict):
    """Distinct Versions whose weights sum to 100 (checked by the service), or []."""

    allocation: list[AllocationEntry] = Field(max_length=64)


class DeploymentCheckBody(Strict):
    """A dry run of an allocation change: the Versions it would weigh, checked against
    recorded histories (every in-flight instance and the newest ``terminalHistories``
    terminal ones of each Workflow; default 100)."""

    allocation: list[AllocationEntry] = Field(max_length=64)
    terminalHistories: int = Field(default=100, ge=0, le=100_000)  # noqa: N815


class WorkerRef(Strict):
    resourceUid: str = Field(min_length=1, max_length=128)  # noqa: N815 (the spec's name)


class WorkflowSpec(Strict):
    """DW-SPEC-1..3: exactly these two keys; the Worker must exist in the Space (DW-SPEC-4)."""

    worker: WorkerRef
    className: str = Field(pattern=CLASS_NAME.pattern)  # noqa: N815


class WorkflowCreateBody(Strict):
    name: str = Field(pattern=RESOURCE_NAME.pattern)
    spec: WorkflowSpec


class WorkflowReplaceBody(Strict):
    name: str | None = Field(None, pattern=RESOURCE_NAME.pattern)
    spec: WorkflowSpec


# -- answers: operations ----------------------------------------------------------------------


class RejectionView(Strict):
    category: Literal["validation", "authorization", "not_found", "conflict", "business_rule"]
    code: str
    message: str


class FailureView(Strict):
    message: str
    type: str | None = None


class OutcomeSummary(Strict):
    type: str | None
    schemaVersion: int | None  # noqa: N815
    digest: str | None
    recorded: bool


class OperationStatusView(Strict):
    operationId: str  # noqa: N815
    type: str
    tenant: str
    mode: Literal["inline", "deferred"] | None
    status: OperationStatusName
    attempt: int
    correlationId: str  # noqa: N815
    createdAt: str | None  # noqa: N815  (null: purged before its tombstone kept it)
    updatedAt: str  # noqa: N815
    version: int
    worker: str | None = None
    fencingToken: int | None = None  # noqa: N815
    redriveOf: str | None = None  # noqa: N815
    retryDueAt: str | None = None  # noqa: N815
    rejection: RejectionView | None = None
    failure: FailureView | None = None
    outcome: OutcomeSummary | None = None
    hold: dict[str, Any] | None = None
    purged: dict[str, Any] | None = None


class InlineResult(Strict):
    """An Inline run's completion (also beside ``error`` when it was rejected or failed)."""

    operationId: str  # noqa: N815
    status: OperationStatusName
    attempt: int
    outcome: Document | None = None
    rejection: RejectionView | None = None
    failure: FailureView | None = None


class Accepted(Strict):
    operationId: str  # noqa: N815
    status: OperationStatusName
    location: str


class Redriven(Strict):
    operationId: str  # noqa: N815
    redriveOf: str  # noqa: N815
    location: str


class OperationListItem(Strict):
    operationId: str  # noqa: N815
    tenant: str
    type: str
    mode: str
    status: OperationStatusName
    attempt: int
    createdAt: str  # noqa: N815
    updatedAt: str  # noqa: N815


class OperationList(Strict):
    items: list[OperationListItem]
    next: str | None = Field(description="the cursor of the next page, if there is one")


class OperationCounts(Strict):
    counts: dict[str, dict[str, dict[str, int]]] = Field(
        description="tenant -> type -> public status -> count"
    )
    observedPosition: int  # noqa: N815


class OutcomeRecordView(Strict):
    operationId: str  # noqa: N815
    type: str | None
    schemaVersion: int  # noqa: N815
    digest: str | None
    outcome: Document | None


class ObservedLine(Strict):
    """An event as an Observed JSONL line (python-contract §7)."""

    position: int
    stream: str
    version: int
    type: str
    at: str
    context: dict[str, Any]
    data: dict[str, Any]


class OperationEvents(Strict):
    operationId: str  # noqa: N815
    events: list[ObservedLine]


class HoldAnswer(Strict):
    operationId: str  # noqa: N815
    hold: dict[str, Any]


class ReleaseAnswer(Strict):
    operationId: str  # noqa: N815
    released: bool


# -- answers: instances ------------------------------------------------------------------------


class InstanceCreated(Strict):
    id: str
    status: Literal["queued"]


class InstanceStatusView(Strict):
    """``status()``'s exact shape (DW-INST-4)."""

    status: InstanceStatusName
    output: Document | None = None
    error: dict[str, Any] | None = None


class EventAccepted(Strict):
    id: str
    type: str
    sequence: int


class Terminated(Strict):
    id: str
    status: InstanceStatusName


class InstanceListItem(Strict):
    id: str
    status: InstanceStatusName
    createdAt: str  # noqa: N815
    updatedAt: str  # noqa: N815


class InstanceList(Strict):
    items: list[InstanceListItem]
    next: str | None


class InstanceCounts(Strict):
    instanceCounts: dict[InstanceStatusName, int]  # noqa: N815
    observedAt: str  # noqa: N815
    observedPosition: int  # noqa: N815


# -- answers: access and resources -------------------------------------------------------------


class SpaceView(Strict):
    name: str
    createdAt: str  # noqa: N815


class PrincipalInSpace(Strict):
    id: str
    space: str
    role: Literal["reader", "operator", "deployer", "admin"] | None


class PrincipalList(Strict):
    items: list[dict[str, Any]]


class IssuedToken(Open):
    token: str = Field(description="shown once: only its SHA-256 is kept")
    tokenId: str  # noqa: N815


class RevokedToken(Open):
    tokenId: str  # noqa: N815
    revoked: bool


class Items(Strict):
    items: list[dict[str, Any]]


class ControlOperation(Open):
    """A control-plane mutation: its Operation (follow ``location``) and what it concerns."""

    operationId: str  # noqa: N815
    status: OperationStatusName
    location: str


class WorkerView(Strict):
    uid: str
    name: str
    space: str
    createdAt: str  # noqa: N815


class CreatedWorker(Open):
    uid: str
    name: str
    space: str
    operationId: str  # noqa: N815


class VersionView(Strict):
    version: str
    worker: dict[str, str]
    main: str
    modules: list[str]
    env: dict[str, Any]
    workflowBindings: list[dict[str, Any]]  # noqa: N815
    verification: dict[str, Any] | None
    deleted: bool


class VersionWithSources(VersionView):
    sources: dict[str, str]


ReplayFindingKind = Literal[
    "kind_changed", "new_step_inside_history", "history_step_unused", "output_changed",
    "outcome_changed", "nondeterministic", "class_missing", "extends_history", "reaches_frontier",
    "skipped",
]  # fmt: skip


class ReplayFinding(Strict):
    """A finding (or a note) of a replay check: the step, its kind, where in the history."""

    kind: ReplayFindingKind
    step: str | None
    stepKind: Literal["do", "sleep", "wait"] | None  # noqa: N815
    position: int | None
    version: int | None
    reason: str


class ReplayInstance(Strict):
    workflow: str
    instanceId: str  # noqa: N815
    stream: str
    status: str
    events: int
    verdict: Literal["compatible", "incompatible"]
    findings: list[ReplayFinding]
    notes: list[ReplayFinding]
    replayEnd: dict[str, Any]  # noqa: N815


class ReplayReportView(Strict):
    """``blackops replay --check --json`` and the gate's report: one per candidate."""

    candidate: str
    compatible: bool
    checked: int
    counts: dict[str, int]
    hashSeedVaried: bool  # noqa: N815
    instances: list[ReplayInstance]


class CheckedVersion(Strict):
    version: str
    weight: int
    scope: dict[str, Any]
    report: ReplayReportView


class DeploymentCheckView(Strict):
    """The dry run's answer: compatible only if every weighed Version is."""

    worker: dict[str, str]
    allocation: list[dict[str, Any]]
    compatible: bool
    versions: list[CheckedVersion]


class DeploymentView(Strict):
    worker: dict[str, str]
    allocation: list[dict[str, Any]]
    generation: int
    pending: list[dict[str, Any]]


class WorkflowView(Open):
    """DW-CRUD-1: the management record and the last observation (DW-OBS-1)."""

    uid: str
    name: str
    space: str
    spec: dict[str, Any]
    generation: int
    observedGeneration: int  # noqa: N815
    deleting: bool
    observed: dict[str, Any]
    output: dict[str, Any]


class WorkflowList(Strict):
    items: list[WorkflowView]
