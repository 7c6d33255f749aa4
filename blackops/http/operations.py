"""Operation routes (python-contract §4): run Inline or Deferred, status, outcome, events,
listing, redrive, hold and release."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.http.auth import Caller, application, caller
from blackops.http.bodies import idempotency_key, prefers_async, read_body, reason_of
from blackops.http.responses import JSON, result_response
from blackops.jsonbody import parse_document
from blackops.operations.results import OperationResult
from domain.access import Action
from domain.context import Actor
from domain.errors import InvalidRequest, NotFound

router = APIRouter()
_DOCUMENT_BODY = {
    "required": False,
    "content": {"application/json": {"schema": {"type": "object"}}},
    "description": "The operation's params document (RFC 8785 rules, at most 1 MiB).",
}


def operation_of(
    app: Application, operation_id: str, who: Caller, action: Action
) -> dict[str, Any]:
    """The operation's status, if the caller may see it in its Space; another Space's
    operation is as unknown as none at all."""
    status = app.status(operation_id)
    try:
        who.check(status["tenant"], action)
    except NotFound:
        raise NotFound(f"operation {operation_id} does not exist") from None
    return status


@router.post(
    "/v1/spaces/{space}/operations/{type}",
    openapi_extra={"requestBody": _DOCUMENT_BODY},
    summary="Run an operation: Inline (200) or, with Prefer: respond-async, Deferred (202)",
)
async def run_operation(
    space: str,
    type: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    who.check(space, Action.OPERATE)
    actor = who.actor
    deferred = prefers_async(request.headers.get("prefer", ""))
    key = idempotency_key(request)
    if key is not None and not deferred:
        raise InvalidRequest("Idempotency-Key applies to Deferred operations only")
    raw = await read_body(request)
    traceparent = request.headers.get("traceparent")

    if deferred:

        def parse_and_submit() -> tuple[str, str]:
            params = parse_document(raw, empty_is={})
            operation_id = app.submit(
                type, params, actor=actor, tenant=space, idempotency_key=key,
                traceparent=traceparent,
            )  # fmt: skip
            # A replayed key may name an operation that has moved on since.
            return operation_id, app.status(operation_id)["status"]

        operation_id, status = await run_in_threadpool(parse_and_submit)
        location = f"/v1/operations/{operation_id}"
        body = {"operationId": operation_id, "status": status, "location": location}
        headers = {"Location": location, "Preference-Applied": "respond-async"}
        return JSON(body, status_code=202, headers=headers)

    def parse_and_run() -> OperationResult:
        # Off the event loop: parsing a 4 MiB body and the run itself both block.
        params = parse_document(raw, empty_is={})
        return app.run(type, params, actor=actor, tenant=space, traceparent=traceparent)

    return result_response(await run_in_threadpool(parse_and_run))


@router.get(
    "/v1/operations/{operation_id}/outcome",
    summary="The Outcome Record of a Deferred Completed operation (404 otherwise)",
)
async def operation_outcome(
    operation_id: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.READ)
    record = await run_in_threadpool(app.outcome_record, operation_id)
    return JSON(record.to_dict())


@router.post(
    "/v1/operations/{operation_id}/redrive",
    summary="Submit a new operation from a dead letter one (202)",
)
async def redrive_operation(
    operation_id: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.OPERATE)
    actor = who.actor
    new_id = await run_in_threadpool(lambda: app.redrive(operation_id, actor=actor))
    location = f"/v1/operations/{new_id}"
    body = {"operationId": new_id, "redriveOf": operation_id, "location": location}
    return JSON(body, status_code=202, headers={"Location": location})


@router.get("/v1/operations", summary="Operations by creation time, filtered and paged")
async def list_operations(
    tenant: str | None = None,
    type: str | None = None,
    status: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    if tenant is None and not who.principal.system:
        spaces = list(who.principal.roles)
        if len(spaces) != 1:
            raise InvalidRequest("name the space: ?tenant=SPACE")
        tenant = spaces[0]
    if tenant is not None:
        who.check(tenant, Action.READ)
    filters = {"tenant": tenant, "type": type, "status": status, "since": since,
               "until": until, "limit": limit, "cursor": cursor}  # fmt: skip
    return JSON(await run_in_threadpool(lambda: app.list_operations(**filters)))


@router.get("/v1/operations/{operation_id}", summary="An operation's public status")
async def operation_status(
    operation_id: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Response:
    return JSON(await run_in_threadpool(operation_of, app, operation_id, who, Action.READ))


@router.post("/v1/operations/{operation_id}/hold", summary="Hold an operation (OL-10)")
async def hold_operation(
    operation_id: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.OPERATE)
    actor = who.actor
    reason = await reason_of(request)
    hold = await run_in_threadpool(lambda: app.hold(operation_id, reason=reason, actor=actor))
    return JSON({"operationId": operation_id, "hold": hold})


@router.post("/v1/operations/{operation_id}/release", summary="Release a hold (privileged)")
async def release_operation(
    operation_id: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.ADMINISTER)
    # The Space's admin role was checked: the release is an admin's (R2).
    actor = Actor(who.actor.id, "admin")
    reason = await reason_of(request)
    await run_in_threadpool(lambda: app.release(operation_id, reason=reason, actor=actor))
    return JSON({"operationId": operation_id, "released": True})


@router.get("/v1/operations/{operation_id}/events", summary="An operation's lifecycle events")
async def operation_events(
    operation_id: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.READ)
    events = await run_in_threadpool(app.events, operation_id)
    return JSON({"operationId": operation_id, "events": events})
