"""``GET /metrics``: the Prometheus text format, for the system token or the metrics token
(decisions M4), and the middleware timing every request by its route template.

Left out of the OpenAPI document (``include_in_schema=False``, decisions M9): it answers
Prometheus' text format, not JSON, and is for operators' scrapers, not API clients.
"""

from __future__ import annotations

import hmac
import time

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blackops.http.auth import authenticate, served
from blackops.observability.hub import Observability
from blackops.observability.metrics import CONTENT_TYPE
from domain.access import check_system

router = APIRouter()
_BEARER = HTTPBearer(auto_error=False)


def observability(request: Request) -> Observability:
    found: Observability = request.app.state.observability
    return found


def metrics_reader(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_BEARER)
) -> None:
    """The metrics token, or the system token / a system principal; else 401 (no valid
    token) or 403 (a principal of some Spaces: figures span every Space)."""
    metrics_token: str | None = request.app.state.metrics_token
    supplied = credentials.credentials if credentials else ""
    if (
        metrics_token
        and supplied
        and hmac.compare_digest(supplied.encode(), metrics_token.encode())
    ):
        return
    check_system(authenticate(served(request), supplied).principal, "reading the metrics")


@router.get("/metrics", include_in_schema=False, dependencies=[Depends(metrics_reader)])
async def metrics(request: Request) -> Response:
    metrics = observability(request).metrics
    assert metrics is not None
    body = await run_in_threadpool(metrics.render)  # the gauges read the store
    return Response(body, media_type=CONTENT_TYPE)


class TimingMiddleware:
    """Observes each HTTP request's duration by route template, method and status (a raw
    path would make a label per operation id: unbounded)."""

    def __init__(self, app: ASGIApp, observability: Observability) -> None:
        self.app = app
        self.observability = observability

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics = self.observability.metrics
        if scope["type"] != "http" or metrics is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            metrics.http.labels(_template(scope), _method(scope), str(status[0])).observe(
                time.perf_counter() - started
            )


# Anyone may send any method token (even unauthenticated, to a 404 path): each raw one
# would be a new series.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _method(scope: Scope) -> str:
    method = str(scope.get("method", ""))
    return method if method in _METHODS else "other"


def _template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"
