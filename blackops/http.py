"""HTTP API (python-contract §4) on FastAPI: operations, status, events, OpenAPI."""

from __future__ import annotations

import hmac
import logging
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from blackops.application import Application
from blackops.jsonbody import MAX_RAW_BYTES, parse_document, render_json
from blackops.results import OperationResult
from domain.context import Actor
from domain.documents import DocumentError
from domain.errors import HTTP_STATUS, BlackOpsError, InvalidRequest, Unauthorized
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


def _prefers_async(prefer: str) -> bool:
    """RFC 7240: ``Prefer: respond-async`` among comma-separated preferences."""
    return any(part.split(";")[0].strip().lower() == "respond-async" for part in prefer.split(","))


def create_http_app(application: Application, token: str) -> FastAPI:
    """The FastAPI app serving ``application``; every route needs ``Bearer <token>``."""
    api = FastAPI(
        title="BlackOps",
        version="0.1.0",
        description="Durable operations on an event-sourced journal.",
    )
    bearer = HTTPBearer(auto_error=False)

    def principal(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Actor:
        supplied = credentials.credentials if credentials else ""
        if not supplied or not hmac.compare_digest(supplied.encode(), token.encode()):
            raise Unauthorized()
        return Actor("dev", "token")

    @api.exception_handler(BlackOpsError)
    async def blackops_error(_: Request, error: BlackOpsError) -> Response:
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
        space: str, type: str, request: Request, actor: Actor = Depends(principal)
    ) -> Response:
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
    async def operation_outcome(operation_id: str, _: Actor = Depends(principal)) -> Response:
        record = await run_in_threadpool(application.outcome_record, operation_id)
        return JSON(record.to_dict())

    @api.post(
        "/v1/operations/{operation_id}/redrive",
        summary="Submit a new operation from a dead letter one (202)",
    )
    async def redrive_operation(operation_id: str, actor: Actor = Depends(principal)) -> Response:
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
        _: Actor = Depends(principal),
    ) -> Response:
        filters = {"tenant": tenant, "type": type, "status": status, "since": since,
                   "until": until, "limit": limit, "cursor": cursor}  # fmt: skip
        return JSON(await run_in_threadpool(lambda: application.list_operations(**filters)))

    @api.get("/v1/operations/{operation_id}", summary="An operation's public status")
    async def operation_status(operation_id: str, _: Actor = Depends(principal)) -> Response:
        return JSON(await run_in_threadpool(application.status, operation_id))

    @api.get(
        "/v1/journal",
        summary="Observed JSONL (application/jsonl): events after a position, in order",
        response_class=Response,
    )
    async def journal(after: int = 0, limit: int = 1000, _: Actor = Depends(principal)) -> Response:
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
        operation_id: str, request: Request, actor: Actor = Depends(principal)
    ) -> Response:
        reason = await _reason_of(request)
        hold = await run_in_threadpool(
            lambda: application.hold(operation_id, reason=reason, actor=actor)
        )
        return JSON({"operationId": operation_id, "hold": hold})

    @api.post("/v1/operations/{operation_id}/release", summary="Release a hold (privileged)")
    async def release_operation(
        operation_id: str, request: Request, actor: Actor = Depends(principal)
    ) -> Response:
        reason = await _reason_of(request)
        await run_in_threadpool(
            lambda: application.release(operation_id, reason=reason, actor=actor)
        )
        return JSON({"operationId": operation_id, "released": True})

    @api.get("/v1/operations/{operation_id}/events", summary="An operation's lifecycle events")
    async def operation_events(operation_id: str, _: Actor = Depends(principal)) -> Response:
        events = await run_in_threadpool(application.events, operation_id)
        return JSON({"operationId": operation_id, "events": events})

    return api
