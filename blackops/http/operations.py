"""Operation routes (python-contract §4): run Inline or Deferred, status, outcome, events,
listing and counts, redrive, hold and release."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.http.auth import BEARER, Caller, application, caller, check_space
from blackops.http.bodies import idempotency_key, prefers_async, read_body, reason_of
from blackops.http.models import (
    Accepted,
    HoldAnswer,
    InlineResult,
    OperationCounts,
    OperationEvents,
    OperationList,
    OperationStatusName,
    OperationStatusView,
    OutcomeRecordView,
    ReasonBody,
    Redriven,
    ReleaseAnswer,
)
from blackops.http.openapi import document_body, errors, request_body
from blackops.http.params import QUERY_INTEGER, SPACE_PATTERN, SpacePath, TypePath
from blackops.http.responses import JSON, result_response
from blackops.http.scopes import served_path
from blackops.operations.contexts import IDEMPOTENCY_KEY
from blackops.operations.results import OperationResult
from blackops.operations.service import read_params
from domain.access import Action
from domain.context import TRACEPARENT, Actor, check_traceparent
from domain.errors import InvalidRequest, NotFound
from domain.operation_types import MAX_TYPE_LENGTH, OPERATION_TYPE
from projections.catalog import CURSOR

router = APIRouter(tags=["operations"])
Space = SpacePath
OperationId = Annotated[str, Path(description="an operation id (unknown ids answer 404)")]


def received_traceparent(value: str | None) -> str | None:
    """The header as W3C Trace Context tells a receiver to take it: a malformed value, or
    one with an all-zero id, is ignored (the trace starts here), never an error."""
    if value is None or not TRACEPARENT.fullmatch(value):
        return None
    return check_traceparent(value)


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


RUN_PATH = "/v1/spaces/{space}/operations/{type}"


@router.post(
    RUN_PATH,
    summary="Run an operation: Inline (200) or, with Prefer: respond-async, Deferred (202)",
    openapi_extra=document_body("The operation's params document; an empty body is {}."),
    response_model=InlineResult,
    responses={
        202: {"model": Accepted, "description": "Deferred: durably accepted"},
        422: {"model": InlineResult, "description": "Rejected (error.code rejected)"},
        **errors(400, 403, 404, 409, 413, 422, 500),
    },
)
async def run_operation(
    space: Space,
    type: TypePath,
    request: Request,
    prefer: Annotated[
        str | None,
        Header(description="respond-async: run Deferred and answer 202 at once (RFC 7240)"),
    ] = None,
    idempotency_key_header: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=IDEMPOTENCY_KEY.pattern,
            description="Deferred only: the same key (per Space and type) is the same operation",
        ),
    ] = None,
    traceparent: Annotated[
        str | None,
        Header(
            description="W3C Trace Context, recorded on every event when it is a well-formed "
            "version-00 value with non-zero ids; any other value is ignored, as W3C Trace "
            "Context says a receiver must",
        ),
    ] = None,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    return await _run(app, who, space, type, request, _prefer(request), traceparent)


async def run_operation_lean(request: Request) -> Response:
    """:func:`run_operation` as served (decisions F130): the same dependencies, called in
    FastAPI's order, and the same header check, without its per-request parameter
    machinery. ``tests/http/test_lean_routes.py`` holds it equal to the documented route."""
    who = await caller(request, await BEARER(request))
    app = await application(request)
    headers = request.headers
    key = headers.get("idempotency-key")
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidRequest("invalid request: header.Idempotency-Key")
    params = request.path_params
    return await _run(
        app, who, params["space"], params["type"], request, _prefer(request),
        headers.get("traceparent"),
    )  # fmt: skip


def _prefer(request: Request) -> str:
    """Every ``Prefer`` field line as one value (RFC 9110 5.3, RFC 7240): the first line alone
    was read, so a proxy's own ``Prefer`` line before the client's turned a Deferred submit
    into an Inline run (found by a defect hunt, stop 34)."""
    return ", ".join(request.headers.getlist("prefer"))


async def _run(
    app: Application,
    who: Caller,
    space: str,
    type: str,
    request: Request,
    prefer: str | None,
    traceparent: str | None,
) -> Response:
    check_space(app, who, space, Action.OPERATE)
    actor = who.actor
    deferred = prefers_async(prefer or "")
    key = idempotency_key(request)
    if key is not None and not deferred:
        raise InvalidRequest("Idempotency-Key applies to Deferred operations only")
    raw = await read_body(request)
    # Two traceparent lines are no trace context (W3C's test suite: a duplicated header
    # starts a new trace); the first was recorded.
    single = len(request.headers.getlist("traceparent")) == 1
    trace = received_traceparent(traceparent) if single else None

    if deferred:

        def parse_and_submit() -> tuple[str, str]:
            params = read_params(raw, empty_is={})
            # The acceptance knows the status (a replayed key: the operation it names,
            # which may have moved on since); the journal is not read again.
            return app.submit_accepted(
                type, params, actor=actor, tenant=space, idempotency_key=key,
                traceparent=trace,
            )  # fmt: skip

        operation_id, status = await run_in_threadpool(parse_and_submit)
        location = f"/v1/operations/{operation_id}"
        body = {"operationId": operation_id, "status": status, "location": location}
        served = served_path(request.scope, location)
        headers = {"Location": served, "Preference-Applied": "respond-async"}
        return JSON(body, status_code=202, headers=headers)

    def parse_and_run() -> OperationResult:
        # Off the event loop: parsing a 4 MiB body and the run itself both block.
        params = read_params(raw, empty_is={})
        return app.run(type, params, actor=actor, tenant=space, traceparent=trace)

    return result_response(await run_in_threadpool(parse_and_run))


@router.get(
    "/v1/operations/{operation_id}/outcome",
    summary="The Outcome Record of a Deferred Completed operation (404 otherwise)",
    response_model=OutcomeRecordView,
    responses=errors(404),
)
async def operation_outcome(
    operation_id: OperationId,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.READ)
    record = await run_in_threadpool(app.outcome_record, operation_id)
    return JSON(record.to_dict())


@router.post(
    "/v1/operations/{operation_id}/redrive",
    status_code=202,
    summary="Submit a new operation from a dead letter one (202)",
    response_model=Redriven,
    responses=errors(403, 404, 409),
)
async def redrive_operation(
    operation_id: OperationId,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.OPERATE)
    actor = who.actor
    new_id = await run_in_threadpool(lambda: app.redrive(operation_id, actor=actor))
    location = f"/v1/operations/{new_id}"
    body = {"operationId": new_id, "redriveOf": operation_id, "location": location}
    return JSON(body, status_code=202, headers={"Location": served_path(request.scope, location)})


def _tenant_of(who: Caller, tenant: str | None) -> str | None:
    """The Space a listing reads: the one named, or the caller's only one."""
    if tenant is None and not who.principal.system:
        spaces = list(who.principal.roles)
        if len(spaces) != 1:
            raise InvalidRequest("name the space: ?tenant=SPACE")
        tenant = spaces[0]
    return tenant


_INSTANT = {"format": "date-time"}
Since = Annotated[
    str | None,
    Query(
        json_schema_extra=_INSTANT,
        description="created at or after this RFC 3339 instant (any offset)",
    ),
]
Until = Annotated[
    str | None,
    Query(json_schema_extra=_INSTANT, description="created before this RFC 3339 instant"),
]
Limit = Annotated[int, Query(ge=1, le=1000, description="items per page"), QUERY_INTEGER]
Cursor = Annotated[
    str | None, Query(pattern=CURSOR.pattern, description="the `next` of the previous page")
]


@router.get(
    "/v1/operations",
    summary="Operations by creation time, filtered and paged",
    response_model=OperationList,
    responses=errors(400, 403, 404),
)
async def list_operations(
    tenant: Annotated[str | None, Query(pattern=SPACE_PATTERN)] = None,
    type: Annotated[
        str | None, Query(pattern=OPERATION_TYPE.pattern, max_length=MAX_TYPE_LENGTH)
    ] = None,
    status: OperationStatusName | None = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = 100,
    cursor: Cursor = None,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    tenant = _tenant_of(who, tenant)
    if tenant is not None:
        check_space(app, who, tenant, Action.READ)
    filters = {"tenant": tenant, "type": type, "status": status, "since": since,
               "until": until, "limit": limit, "cursor": cursor}  # fmt: skip
    return JSON(await run_in_threadpool(lambda: app.list_operations(**filters)))


@router.get(
    "/v1/operation-counts",
    summary="Operations by tenant, type and public status (the counts projection)",
    response_model=OperationCounts,
    responses=errors(400, 403, 404),
)
async def operation_counts(
    tenant: Annotated[str | None, Query(pattern=SPACE_PATTERN)] = None,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    tenant = _tenant_of(who, tenant)
    if tenant is not None:
        check_space(app, who, tenant, Action.READ)
    found = await run_in_threadpool(lambda: app.projections.operation_counts(tenant))
    return JSON(found)


@router.get(
    "/v1/operations/{operation_id}",
    summary="An operation's public status",
    response_model=OperationStatusView,
    responses=errors(404),
)
async def operation_status(
    operation_id: OperationId,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    return JSON(await run_in_threadpool(operation_of, app, operation_id, who, Action.READ))


_REASON = request_body(ReasonBody, required=True, description='{"reason": "..."}')


@router.post(
    "/v1/operations/{operation_id}/hold",
    summary="Hold an operation (OL-10)",
    openapi_extra=_REASON,
    response_model=HoldAnswer,
    responses=errors(400, 403, 404, 409, 413),
)
async def hold_operation(
    operation_id: OperationId,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.OPERATE)
    actor = who.actor
    reason = await reason_of(request)
    hold = await run_in_threadpool(lambda: app.hold(operation_id, reason=reason, actor=actor))
    return JSON({"operationId": operation_id, "hold": hold})


@router.post(
    "/v1/operations/{operation_id}/release",
    summary="Release a hold (privileged)",
    openapi_extra=_REASON,
    response_model=ReleaseAnswer,
    responses=errors(400, 403, 404, 409, 413),
)
async def release_operation(
    operation_id: OperationId,
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


@router.get(
    "/v1/operations/{operation_id}/events",
    summary="An operation's lifecycle events, as Observed JSONL lines",
    response_model=OperationEvents,
    responses=errors(404),
)
async def operation_events(
    operation_id: OperationId,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    await run_in_threadpool(operation_of, app, operation_id, who, Action.READ)
    events = await run_in_threadpool(app.events, operation_id)
    return JSON({"operationId": operation_id, "events": events})
