"""HTTP API (python-contract §4) on FastAPI: operations, status, events, workflow
instances, OpenAPI."""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from blackops.application import Application, check_tenant
from blackops.http_resources import Caller, add_resource_routes
from blackops.jsonbody import MAX_RAW_BYTES, parse_document, render_json
from blackops.results import OperationResult
from blackops.workflow_code import WorkflowResource
from domain.access import Action, Principal, check_system
from domain.context import Actor
from domain.documents import DocumentError
from domain.errors import (
    HTTP_STATUS,
    BackendUnavailable,
    BlackOpsError,
    InvalidRequest,
    NotFound,
    Unauthorized,
)
from journal.store import PAGE_LIMIT_MAX
from replay.export import observed_lines

#: A rejected operation answers with its category's status and taxonomy code.
REJECTION_CODES = {
    "validation": "invalid_params",
    "authorization": "forbidden",
    "not_found": "not_found",
    "conflict": "conflict",
    "business_rule": "rejected",
}
_DOCUMENT_BODY = {
    "required": False,
    "content": {"application/json": {"schema": {"type": "object"}}},
    "description": "The operation's params document (RFC 8785 rules, at most 1 MiB).",
}


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


class JSON(JSONResponse):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return render_json(content)


log = logging.getLogger("blackops.http")
#: Framework-level refusals (no route, wrong method) in the taxonomy's body shape.
_FRAMEWORK_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found"}


def _error(error: BlackOpsError, **extra: Any) -> JSON:
    headers = {"WWW-Authenticate": "Bearer"} if error.code == "unauthorized" else None
    return JSON({**error.to_body(), **extra}, status_code=error.http_status, headers=headers)


def result_response(result: OperationResult) -> JSON:
    """Inline answers: 200 with the outcome; rejection/failure mapped to the taxonomy."""
    body = result.to_dict()
    if result.rejection is not None:
        code = REJECTION_CODES[result.rejection.category]
        error = {"code": code, "message": result.rejection.message or result.rejection.code}
        return JSON({"error": error, **body}, status_code=HTTP_STATUS[code])
    if result.failure is not None:
        error = {"code": "operation_failed", "message": result.failure.message}
        return JSON({"error": error, **body}, status_code=HTTP_STATUS["operation_failed"])
    return JSON(body, status_code=200)


async def _read_body(request: Request) -> bytes:
    """The raw body, refusing early once it cannot be a document any more."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_RAW_BYTES:
        raise DocumentError("document_too_large", f"request body is over {MAX_RAW_BYTES} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_RAW_BYTES:
            raise DocumentError("document_too_large", f"request body is over {MAX_RAW_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _request_object(raw: bytes, allowed: tuple[str, ...]) -> dict[str, Any]:
    """An instance route's body: one JSON object with only ``allowed`` keys (empty = {}).

    The whole body goes through the strict parser (P13), so hostile JSON text in a body
    that carries documents is refused as ``invalid_params`` wherever it is; the
    envelope's own shape is ``invalid_request`` (decisions P41).
    """
    if raw.lstrip(b" \t\r\n")[:1] not in (b"", b"{"):
        raise InvalidRequest("the body must be a JSON object")
    try:
        body = parse_document(raw, empty_is={})
    except DocumentError as error:
        if allowed or error.code != "invalid_params":
            raise
        # A body that may hold no document has no params to blame.
        raise InvalidRequest(f"the body must be empty or {{}}: {error.message}") from None
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        # repr() escapes lone surrogates, so the answer always encodes.
        named = ", ".join(repr(key[:64]) for key in unknown[:5])
        keys = ", ".join(allowed) or "none"
        raise InvalidRequest(f"unknown body keys {named} (allowed: {keys})")
    return body


def _optional_document(body: dict[str, Any], key: str) -> Any:
    """An optional document of the body: absent is none; ``null`` is not a document
    (DW-DOC-4: only leaving it out means none)."""
    if key not in body:
        return None
    if body[key] is None:
        raise InvalidRequest(f"{key} must be an object; leave it out for none", "invalid_params")
    return body[key]


def _raw_instance_id(request: Request, space: str, uid: str, action: str | None) -> str:
    """The instance id exactly as sent: one percent-encoded path segment of UTF-8.

    Routing sees the decoded path, where ``%2F`` is already a ``/`` (so the routes take
    a ``path`` parameter) and invalid UTF-8 has become U+FFFD; the raw path still says
    what the client meant (decisions P42).
    """
    raw = request.scope.get("raw_path")
    if not isinstance(raw, bytes):  # optional in ASGI; uvicorn and the TestClient set it
        return str(request.path_params["instance_id"])
    route = [b"v1", b"spaces", space.encode(), b"workflows", uid.encode(), b"instances"]
    count = len(route) + 1 + (action is not None)
    segments = [unquote_to_bytes(segment) for segment in raw.split(b"/")[-count:]]
    if segments[: len(route)] != route or (action and segments[-1] != action.encode()):
        raise NotFound("no such route: an instance id is one path segment (send '/' as %2F)")
    try:
        return segments[len(route)].decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("the instance id in the path is not percent-encoded UTF-8") from None


def instance_path(resource: WorkflowResource, instance_id: str) -> str:
    """The instance's URL path; ``.`` and ``..`` are encoded, or clients would drop them."""
    segment = quote(instance_id, safe="")
    if segment in (".", ".."):
        segment = segment.replace(".", "%2E")
    return f"/v1/spaces/{resource.space}/workflows/{resource.uid}/instances/{segment}"


def _prefers_async(prefer: str) -> bool:
    """RFC 7240: ``Prefer: respond-async`` among comma-separated preferences."""
    return any(part.split(";")[0].strip().lower() == "respond-async" for part in prefer.split(","))


def create_http_app(application: Application, token: str | None = None) -> FastAPI:
    """The FastAPI app serving ``application``; every route needs a bearer token.

    ``token`` (optional) is the operator's system token: it acts as the system
    principal ``dev`` in every Space. Every other token is a principal's, looked up by
    its hash in the journal (``application.access``), with its roles per Space.
    """
    api = FastAPI(
        title="BlackOps",
        version="0.1.0",
        description="Durable operations on an event-sourced journal.",
    )
    bearer = HTTPBearer(auto_error=False)

    def caller(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Caller:
        supplied = credentials.credentials if credentials else ""
        if not supplied:
            raise Unauthorized()
        if token and hmac.compare_digest(supplied.encode(), token.encode()):
            return SYSTEM_CALLER
        found = application.access.authenticate(supplied)
        return Caller(found, Actor(found.id, "admin" if found.system else "principal"))

    def operation_of(operation_id: str, who: Caller, action: Action) -> dict[str, Any]:
        """The operation's status, if the caller may see it in its Space; another Space's
        operation is as unknown as none at all."""
        status = application.status(operation_id)
        try:
            who.check(status["tenant"], action)
        except NotFound:
            raise NotFound(f"operation {operation_id} does not exist") from None
        return status

    @api.exception_handler(BlackOpsError)
    async def blackops_error(_: Request, error: BlackOpsError) -> Response:
        if isinstance(error, BackendUnavailable) and error.detail:
            # Driver text names hosts and ports: the server log has it, the caller does not.
            log.warning("backend unavailable: %s (%s)", error.message, error.detail)
        return _error(error)

    @api.exception_handler(HTTPException)
    async def framework_error(_: Request, error: HTTPException) -> Response:
        code = _FRAMEWORK_CODES.get(error.status_code, "invalid_request")
        body = {"error": {"code": code, "message": str(error.detail)}}
        return JSON(body, status_code=error.status_code, headers=error.headers)

    @api.exception_handler(Exception)
    async def unexpected_error(request: Request, error: Exception) -> Response:
        # A bug, not an input problem: log it in full, tell the caller nothing internal.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        message = "an internal error occurred; the server log has the details"
        return JSON({"error": {"code": "internal_error", "message": message}}, status_code=500)

    @api.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, error: RequestValidationError) -> Response:
        where = ", ".join(".".join(str(p) for p in e["loc"]) for e in error.errors()[:3])
        return _error(InvalidRequest(f"invalid request: {where}"))

    @api.post(
        "/v1/spaces/{space}/operations/{type}",
        openapi_extra={"requestBody": _DOCUMENT_BODY},
        summary="Run an operation: Inline (200) or, with Prefer: respond-async, Deferred (202)",
    )
    async def run_operation(
        space: str, type: str, request: Request, who: Caller = Depends(caller)
    ) -> Response:
        who.check(space, Action.OPERATE)
        actor = who.actor
        deferred = _prefers_async(request.headers.get("prefer", ""))
        keys = request.headers.getlist("idempotency-key")
        if len(keys) > 1:
            raise InvalidRequest("send one Idempotency-Key header, not several")
        key = keys[0] if keys else None
        if key is not None and not deferred:
            raise InvalidRequest("Idempotency-Key applies to Deferred operations only")
        raw = await _read_body(request)
        traceparent = request.headers.get("traceparent")

        if deferred:

            def parse_and_submit() -> tuple[str, str]:
                params = parse_document(raw, empty_is={})
                operation_id = application.submit(
                    type,
                    params,
                    actor=actor,
                    tenant=space,
                    idempotency_key=key,
                    traceparent=traceparent,
                )
                # A replayed key may name an operation that has moved on since.
                return operation_id, application.status(operation_id)["status"]

            operation_id, status = await run_in_threadpool(parse_and_submit)
            location = f"/v1/operations/{operation_id}"
            body = {"operationId": operation_id, "status": status, "location": location}
            headers = {"Location": location, "Preference-Applied": "respond-async"}
            return JSON(body, status_code=202, headers=headers)

        def parse_and_run() -> OperationResult:
            # Off the event loop: parsing a 4 MiB body and the run itself both block.
            params = parse_document(raw, empty_is={})
            return application.run(type, params, actor=actor, tenant=space, traceparent=traceparent)

        return result_response(await run_in_threadpool(parse_and_run))

    @api.get(
        "/v1/operations/{operation_id}/outcome",
        summary="The Outcome Record of a Deferred Completed operation (404 otherwise)",
    )
    async def operation_outcome(operation_id: str, who: Caller = Depends(caller)) -> Response:
        await run_in_threadpool(operation_of, operation_id, who, Action.READ)
        record = await run_in_threadpool(application.outcome_record, operation_id)
        return JSON(record.to_dict())

    @api.post(
        "/v1/operations/{operation_id}/redrive",
        summary="Submit a new operation from a dead letter one (202)",
    )
    async def redrive_operation(operation_id: str, who: Caller = Depends(caller)) -> Response:
        await run_in_threadpool(operation_of, operation_id, who, Action.OPERATE)
        actor = who.actor
        new_id = await run_in_threadpool(lambda: application.redrive(operation_id, actor=actor))
        location = f"/v1/operations/{new_id}"
        body = {"operationId": new_id, "redriveOf": operation_id, "location": location}
        return JSON(body, status_code=202, headers={"Location": location})

    @api.get("/v1/operations", summary="Operations by creation time, filtered and paged")
    async def list_operations(
        tenant: str | None = None,
        type: str | None = None,
        status: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        who: Caller = Depends(caller),
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
        return JSON(await run_in_threadpool(lambda: application.list_operations(**filters)))

    @api.get("/v1/operations/{operation_id}", summary="An operation's public status")
    async def operation_status(operation_id: str, who: Caller = Depends(caller)) -> Response:
        return JSON(await run_in_threadpool(operation_of, operation_id, who, Action.READ))

    @api.get(
        "/v1/journal",
        summary="Observed JSONL (application/jsonl): events after a position, in order",
        response_class=Response,
    )
    async def journal(after: int = 0, limit: int = 1000, who: Caller = Depends(caller)) -> Response:
        check_system(who.principal, "reading the whole journal")
        if after < 0 or not 1 <= limit <= PAGE_LIMIT_MAX:
            raise InvalidRequest(f"after must be >= 0 and limit from 1 to {PAGE_LIMIT_MAX}")

        def page() -> tuple[bytes, int | None]:
            lines = list(observed_lines(application.store, after, limit))
            return b"".join(line for _, line in lines), (lines[-1][0] if lines else None)

        body, last = await run_in_threadpool(page)
        # Where to continue: the next request's ``after``.
        headers = {"BlackOps-Next-After": str(last if last is not None else after)}
        return Response(body, media_type="application/jsonl", headers=headers)

    async def _reason_of(request: Request) -> str:
        body = parse_document(await _read_body(request), empty_is={})
        reason = body.get("reason")
        if not isinstance(reason, str):
            raise InvalidRequest('the body must be {"reason": "..."}')
        return reason

    @api.post("/v1/operations/{operation_id}/hold", summary="Hold an operation (OL-10)")
    async def hold_operation(
        operation_id: str, request: Request, who: Caller = Depends(caller)
    ) -> Response:
        await run_in_threadpool(operation_of, operation_id, who, Action.OPERATE)
        actor = who.actor
        reason = await _reason_of(request)
        hold = await run_in_threadpool(
            lambda: application.hold(operation_id, reason=reason, actor=actor)
        )
        return JSON({"operationId": operation_id, "hold": hold})

    @api.post("/v1/operations/{operation_id}/release", summary="Release a hold (privileged)")
    async def release_operation(
        operation_id: str, request: Request, who: Caller = Depends(caller)
    ) -> Response:
        await run_in_threadpool(operation_of, operation_id, who, Action.ADMINISTER)
        # The Space's admin role was checked: the release is an admin's (R2).
        actor = Actor(who.actor.id, "admin")
        reason = await _reason_of(request)
        await run_in_threadpool(
            lambda: application.release(operation_id, reason=reason, actor=actor)
        )
        return JSON({"operationId": operation_id, "released": True})

    @api.get("/v1/operations/{operation_id}/events", summary="An operation's lifecycle events")
    async def operation_events(operation_id: str, who: Caller = Depends(caller)) -> Response:
        await run_in_threadpool(operation_of, operation_id, who, Action.READ)
        events = await run_in_threadpool(application.events, operation_id)
        return JSON({"operationId": operation_id, "events": events})

    # -- workflow instances (durable-workflow §2) -----------------------------------------

    def workflow_in(space: str, uid: str, who: Caller, action: Action) -> WorkflowResource:
        """Workflow ``uid`` of Space ``space``; another Space's is as unknown as none at all,
        so no caller learns what exists elsewhere."""
        who.check(space, action)
        check_tenant(space)
        try:
            resource = application.workflow(uid).resource
        except NotFound:
            resource = None
        if resource is None or resource.space != space:
            raise NotFound(f"no workflow {uid[:128]!r} in space {space!r}")  # uids fit 128
        return resource

    @api.post(
        INSTANCES,
        status_code=201,
        openapi_extra={"requestBody": _CREATE_BODY},
        summary="Create an instance (201, status queued, Location of its status)",
    )
    async def create_instance(
        space: str, uid: str, request: Request, who: Caller = Depends(caller)
    ) -> Response:
        resource = workflow_in(space, uid, who, Action.OPERATE)
        actor = who.actor
        raw = await _read_body(request)

        def parse_and_create() -> str:
            body = _request_object(raw, ("id", "params"))
            if "id" in body and type(body["id"]) is not str:
                raise InvalidRequest("id must be a string of 1-256 characters")
            params = _optional_document(body, "params")
            return application.instances.create(resource, body.get("id"), params, actor)

        instance_id = await run_in_threadpool(parse_and_create)
        location = instance_path(resource, instance_id)
        body = {"id": instance_id, "status": "queued"}  # a new instance is queued (D2)
        return JSON(body, status_code=201, headers={"Location": location})

    @api.get(
        INSTANCES + "/{instance_id:path}",
        summary="An instance's status(): {status, output?, error?}",
    )
    async def instance_status(
        space: str, uid: str, instance_id: str, request: Request, who: Caller = Depends(caller)
    ) -> Response:
        resource = workflow_in(space, uid, who, Action.READ)
        target = _raw_instance_id(request, space, uid, None)
        return JSON(await run_in_threadpool(lambda: application.instances.status(resource, target)))

    @api.post(
        INSTANCES + "/{instance_id:path}/events",
        status_code=202,
        openapi_extra={"requestBody": _EVENT_BODY},
        summary="Accept an event durably (202 with its per-instance sequence number)",
    )
    async def send_instance_event(
        space: str, uid: str, instance_id: str, request: Request, who: Caller = Depends(caller)
    ) -> Response:
        resource = workflow_in(space, uid, who, Action.OPERATE)
        actor = who.actor
        target = _raw_instance_id(request, space, uid, "events")
        raw = await _read_body(request)

        def parse_and_send() -> dict[str, Any]:
            body = _request_object(raw, ("type", "payload"))
            if "type" not in body:
                raise InvalidRequest('the body must name the event type: {"type": "..."}')
            event_type, payload = body["type"], _optional_document(body, "payload")
            sequence = application.instances.send_event(
                resource, target, event_type, payload, actor
            )
            return {"id": target, "type": event_type, "sequence": sequence}

        return JSON(await run_in_threadpool(parse_and_send), status_code=202)

    @api.post(
        INSTANCES + "/{instance_id:path}/terminate",
        openapi_extra={"requestBody": _TERMINATE_BODY},
        summary="Terminate an instance; answers once its code has provably stopped",
    )
    async def terminate_instance(
        space: str, uid: str, instance_id: str, request: Request, who: Caller = Depends(caller)
    ) -> Response:
        resource = workflow_in(space, uid, who, Action.OPERATE)
        actor = who.actor
        target = _raw_instance_id(request, space, uid, "terminate")
        raw = await _read_body(request)

        def parse_and_terminate() -> str:
            _request_object(raw, ())
            # Blocks until the stop is proven (DW-TERM-1), or backend_unavailable.
            application.instances.terminate(resource, target, actor)
            # An instance that had already ended keeps its status (decisions P41).
            status: str = application.instances.status(resource, target)["status"]
            return status

        status = await run_in_threadpool(parse_and_terminate)
        return JSON({"id": target, "status": status})

    @api.get(
        "/v1/spaces/{space}/journal",
        summary="Observed JSONL of one Space: its lines only (positions keep their gaps)",
        response_class=Response,
    )
    async def space_journal(
        space: str, after: int = 0, limit: int = 1000, who: Caller = Depends(caller)
    ) -> Response:
        who.check(space, Action.READ)
        if after < 0 or not 1 <= limit <= PAGE_LIMIT_MAX:
            raise InvalidRequest(f"after must be >= 0 and limit from 1 to {PAGE_LIMIT_MAX}")

        def page() -> tuple[bytes, int]:
            lines, last = space_lines(application.store, space, after, limit)
            return b"".join(lines), last

        body, last = await run_in_threadpool(page)
        return Response(
            body, media_type="application/jsonl", headers={"BlackOps-Next-After": str(last)}
        )

    add_resource_routes(api, application, caller, JSON)
    return api


#: The operator's configured token: the system principal (every Space, whole journal).
SYSTEM_CALLER = Caller(Principal("dev", system=True), Actor("dev", "token"))


def space_lines(store: Any, space: str, after: int, limit: int) -> tuple[list[bytes], int]:
    """Up to ``limit`` Observed JSONL lines of ``space`` after ``after`` (events whose
    execution context names that tenant), and the position to continue from."""
    lines: list[bytes] = []
    position = after
    scanned = 0
    while len(lines) < limit and scanned < 50 * PAGE_LIMIT_MAX:
        batch = list(observed_lines(store, position, PAGE_LIMIT_MAX))
        if not batch:
            break
        for at, line in batch:
            position = at
            scanned += 1
            if tenant_of(line) == space:
                lines.append(line)
                if len(lines) == limit:
                    break
    return lines, position


def tenant_of(line: bytes) -> str | None:
    context = json.loads(line).get("context") or {}
    tenant = context.get("tenant")
    return tenant if isinstance(tenant, str) else None
