"""Workflow instance routes (DurableWorkflow §2): create, status, events, terminate."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.audit.checkpoints import CheckpointService
from blackops.audit.receipts import INSTANCE_TERMINAL, receipt_for, terminal_position
from blackops.http.audit import Receipt, checkpoints
from blackops.http.auth import Caller, application, caller, check_space
from blackops.http.bodies import (
    optional_document,
    path_segment,
    raw_path_segment,
    read_body,
    request_object,
)
from blackops.http.models import (
    CreateInstanceBody,
    EventAccepted,
    InstanceCounts,
    InstanceCreated,
    InstanceList,
    InstanceStatusName,
    InstanceStatusView,
    SendEventBody,
    TerminateBody,
    Terminated,
)
from blackops.http.openapi import errors, request_body
from blackops.http.operations import Cursor, Limit, Since, Until
from blackops.http.params import SpacePath  # also registers the any_path convertor
from blackops.http.responses import JSON
from blackops.http.scopes import served_path
from blackops.workflows.code import WorkflowResource
from domain.access import Action
from domain.errors import InvalidRequest, NotFound
from journal.instances import instance_stream

router = APIRouter()
INSTANCES = "/v1/spaces/{space}/workflows/{uid}/instances"


Space = SpacePath
Uid = Annotated[str, Path(description="a Workflow resource UID, or a registered workflow's uid")]
InstanceId = Annotated[
    str, Path(description="the instance id: one path segment, percent-encoded UTF-8")
]
_CREATE_BODY = request_body(
    CreateInstanceBody, required=False, description="Optional instance id (else a UUID), params."
)
_EVENT_BODY = request_body(SendEventBody, required=True, description="The event to accept.")
_TERMINATE_BODY = request_body(TerminateBody, required=False, description="Empty, or {}.")


def workflow_in(
    app: Application, space: str, uid: str, who: Caller, action: Action
) -> WorkflowResource:
    """Workflow ``uid`` of Space ``space``; another Space's is as unknown as none at all,
    so no caller learns what exists elsewhere."""
    check_space(app, who, space, action)
    try:
        resource = app.workflow(uid).resource
    except NotFound:
        resource = None
    if resource is None or resource.space != space:
        raise NotFound(f"no workflow {uid[:128]!r} in space {space!r}")  # uids fit 128
    return resource


def instance_path(resource: WorkflowResource, instance_id: str) -> str:
    """The instance's URL path; ``.`` and ``..`` are encoded, or clients would drop them."""
    segment = path_segment(instance_id)
    return f"/v1/spaces/{resource.space}/workflows/{resource.uid}/instances/{segment}"


def _instance_id(request: Request, space: str, uid: str, action: str | None) -> str:
    route = [b"v1", b"spaces", space.encode(), b"workflows", uid.encode(), b"instances"]
    return raw_path_segment(request, route, action, "instance_id")


@router.get(
    INSTANCES,
    summary="Instances of a workflow by creation time: status and time filters, paged",
    response_model=InstanceList,
    responses=errors(400, 403, 404),
)
async def list_instances(
    space: Space,
    uid: Uid,
    status: InstanceStatusName | None = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = 100,
    cursor: Cursor = None,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    resource = workflow_in(app, space, uid, who, Action.READ)
    filters = {"status": status, "since": since, "until": until, "limit": limit,
               "cursor": cursor}  # fmt: skip
    page = await run_in_threadpool(lambda: app.list_instances(resource.uid, **filters))
    return JSON(page)


@router.get(
    "/v1/spaces/{space}/workflows/{uid}/instance-counts",
    summary="instanceCounts of a workflow (DW-OBS-1), and the journal position they are of",
    response_model=InstanceCounts,
    responses=errors(400, 403, 404),
)
async def instance_counts(
    space: Space,
    uid: Uid,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    resource = workflow_in(app, space, uid, who, Action.READ)
    counts = await run_in_threadpool(lambda: app.instance_counts(resource.uid))
    return JSON(counts)


@router.post(
    INSTANCES,
    status_code=201,
    openapi_extra=_CREATE_BODY,
    summary="Create an instance (201, status queued, Location of its status)",
    response_model=InstanceCreated,
    responses=errors(400, 403, 404, 409, 413),
)
async def create_instance(
    space: Space,
    uid: Uid,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    resource = workflow_in(app, space, uid, who, Action.OPERATE)
    actor = who.actor
    raw = await read_body(request)

    def parse_and_create() -> str:
        body = request_object(raw, ("id", "params"))
        if "id" in body and type(body["id"]) is not str:
            raise InvalidRequest("id must be a string of 1-256 characters")
        params = optional_document(body, "params")
        return app.instances.create(resource, body.get("id"), params, actor)

    instance_id = await run_in_threadpool(parse_and_create)
    location = instance_path(resource, instance_id)
    body = {"id": instance_id, "status": "queued"}  # a new instance is queued (D2)
    return JSON(body, status_code=201, headers={"Location": served_path(request.scope, location)})


@router.get(
    INSTANCES + "/{instance_id:any_path}/receipt",
    summary="The receipt of the instance's terminal event (tlog-proof@v1 to a signed checkpoint)",
    response_model=Receipt,
    responses=errors(400, 403, 404, 409),
)
async def instance_receipt(
    space: Space,
    uid: Uid,
    instance_id: InstanceId,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
    service: CheckpointService = Depends(checkpoints),
) -> Response:
    resource = workflow_in(app, space, uid, who, Action.READ)
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes) and unquote_to_bytes(raw.rsplit(b"/", 1)[-1]) != b"receipt":
        # An instance whose id ends in "/receipt" (sent as %2F): its status, not a receipt.
        # The last segment as sent, decoded: "%72eceipt" is "receipt" (RFC 3986 6.2.2.2).
        target = _instance_id(request, space, uid, None)
        return JSON(await run_in_threadpool(lambda: app.instances.status(resource, target)))
    target = _instance_id(request, space, uid, "receipt")

    def receipt() -> dict[str, Any]:
        app.instances.status(resource, target)  # unknown (or purged): unknown_instance
        events = app.store.read_stream(instance_stream(resource.uid, target))
        observed = [{"type": e.type, "position": e.position} for e in events]
        return receipt_for(service, terminal_position(observed, INSTANCE_TERMINAL))

    return JSON(await run_in_threadpool(receipt))


@router.get(
    INSTANCES + "/{instance_id:any_path}",
    summary="An instance's status(): {status, output?, error?}",
    response_model=InstanceStatusView,
    responses=errors(400, 403, 404),
)
async def instance_status(
    space: Space,
    uid: Uid,
    instance_id: InstanceId,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    resource = workflow_in(app, space, uid, who, Action.READ)
    target = _instance_id(request, space, uid, None)
    return JSON(await run_in_threadpool(lambda: app.instances.status(resource, target)))


@router.post(
    INSTANCES + "/{instance_id:any_path}/events",
    status_code=202,
    openapi_extra=_EVENT_BODY,
    summary="Accept an event durably (202 with its per-instance sequence number)",
    response_model=EventAccepted,
    responses=errors(400, 403, 404, 409, 413, 429),
)
async def send_instance_event(
    space: Space,
    uid: Uid,
    instance_id: InstanceId,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    resource = workflow_in(app, space, uid, who, Action.OPERATE)
    actor = who.actor
    target = _instance_id(request, space, uid, "events")
    raw = await read_body(request)

    def parse_and_send() -> dict[str, Any]:
        body = request_object(raw, ("type", "payload"))
        if "type" not in body:
            raise InvalidRequest('the body must name the event type: {"type": "..."}')
        event_type, payload = body["type"], optional_document(body, "payload")
        sequence = app.instances.send_event(resource, target, event_type, payload, actor)
        return {"id": target, "type": event_type, "sequence": sequence}

    return JSON(await run_in_threadpool(parse_and_send), status_code=202)


@router.post(
    INSTANCES + "/{instance_id:any_path}/terminate",
    openapi_extra=_TERMINATE_BODY,
    summary="Terminate an instance; answers once its code has provably stopped",
    response_model=Terminated,
    responses=errors(400, 403, 404, 413),
)
async def terminate_instance(
    space: Space,
    uid: Uid,
    instance_id: InstanceId,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    resource = workflow_in(app, space, uid, who, Action.OPERATE)
    actor = who.actor
    target = _instance_id(request, space, uid, "terminate")
    raw = await read_body(request)

    def parse_and_terminate() -> str:
        request_object(raw, ())
        # Blocks until the stop is proven (DW-TERM-1), or backend_unavailable.
        app.instances.terminate(resource, target, actor)
        # An instance that had already ended keeps its status (decisions P41).
        status: str = app.instances.status(resource, target)["status"]
        return status

    status = await run_in_threadpool(parse_and_terminate)
    return JSON({"id": target, "status": status})
