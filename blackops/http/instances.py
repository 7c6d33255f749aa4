"""Workflow instance routes (DurableWorkflow §2): create, status, events, terminate."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.http.auth import Caller, application, caller
from blackops.http.bodies import optional_document, raw_path_segment, read_body, request_object
from blackops.http.responses import JSON
from blackops.operations.contexts import check_tenant
from blackops.workflows.code import WorkflowResource
from domain.access import Action
from domain.errors import InvalidRequest, NotFound

router = APIRouter()
INSTANCES = "/v1/spaces/{space}/workflows/{uid}/instances"


def _envelope(properties: dict[str, Any], required: list[str], what: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return {
        "required": bool(required),
        "content": {"application/json": {"schema": schema}},
        "description": what,
    }


_DOC = {"type": "object", "description": "a document (RFC 8785 rules, at most 1 MiB)"}
_ID_TEXT = {"type": "string", "minLength": 1, "maxLength": 256}
_CREATE_BODY = _envelope(
    {"id": _ID_TEXT, "params": _DOC}, [], "Optional instance id (else a UUID) and params."
)
_EVENT_BODY = _envelope({"type": _ID_TEXT, "payload": _DOC}, ["type"], "The event to accept.")
_TERMINATE_BODY = _envelope({}, [], "Empty, or {}.")


def workflow_in(
    app: Application, space: str, uid: str, who: Caller, action: Action
) -> WorkflowResource:
    """Workflow ``uid`` of Space ``space``; another Space's is as unknown as none at all,
    so no caller learns what exists elsewhere."""
    who.check(space, action)
    check_tenant(space)
    try:
        resource = app.workflow(uid).resource
    except NotFound:
        resource = None
    if resource is None or resource.space != space:
        raise NotFound(f"no workflow {uid[:128]!r} in space {space!r}")  # uids fit 128
    return resource


def instance_path(resource: WorkflowResource, instance_id: str) -> str:
    """The instance's URL path; ``.`` and ``..`` are encoded, or clients would drop them."""
    segment = quote(instance_id, safe="")
    if segment in (".", ".."):
        segment = segment.replace(".", "%2E")
    return f"/v1/spaces/{resource.space}/workflows/{resource.uid}/instances/{segment}"


def _instance_id(request: Request, space: str, uid: str, action: str | None) -> str:
    route = [b"v1", b"spaces", space.encode(), b"workflows", uid.encode(), b"instances"]
    return raw_path_segment(request, route, action, "instance_id")


@router.post(
    INSTANCES,
    status_code=201,
    openapi_extra={"requestBody": _CREATE_BODY},
    summary="Create an instance (201, status queued, Location of its status)",
)
async def create_instance(
    space: str,
    uid: str,
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
    return JSON(body, status_code=201, headers={"Location": location})


@router.get(
    INSTANCES + "/{instance_id:path}",
    summary="An instance's status(): {status, output?, error?}",
)
async def instance_status(
    space: str,
    uid: str,
    instance_id: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    resource = workflow_in(app, space, uid, who, Action.READ)
    target = _instance_id(request, space, uid, None)
    return JSON(await run_in_threadpool(lambda: app.instances.status(resource, target)))


@router.post(
    INSTANCES + "/{instance_id:path}/events",
    status_code=202,
    openapi_extra={"requestBody": _EVENT_BODY},
    summary="Accept an event durably (202 with its per-instance sequence number)",
)
async def send_instance_event(
    space: str,
    uid: str,
    instance_id: str,
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
    INSTANCES + "/{instance_id:path}/terminate",
    openapi_extra={"requestBody": _TERMINATE_BODY},
    summary="Terminate an instance; answers once its code has provably stopped",
)
async def terminate_instance(
    space: str,
    uid: str,
    instance_id: str,
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
