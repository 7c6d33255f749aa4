"""The FastAPI application: assembly only (routers, error handlers, what it serves)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from blackops.application import Application
from blackops.audit.checkpoints import CheckpointService
from blackops.console.app import install as install_console
from blackops.http import (
    access,
    api_docs,
    audit,
    head,
    instances,
    journal,
    metrics,
    operations,
    query,
    resources,
    stream,
)
from blackops.http.auth import SYSTEM_CALLER, Caller, Served
from blackops.http.lean import serve_lean
from blackops.http.openapi import publish
from blackops.http.responses import install_error_handlers
from blackops.http.stream import StreamSettings
from blackops.observability.hub import observe

__all__ = ["SYSTEM_CALLER", "Caller", "StreamSettings", "create_http_app"]


def create_http_app(
    application: Application,
    token: str | None = None,
    *,
    stream_settings: StreamSettings | None = None,
    checkpoints: CheckpointService | None = None,
    metrics_token: str | None = None,
) -> FastAPI:
    """The FastAPI app serving ``application``; every route needs a bearer token (but the
    published schema of an Observed line).

    ``token`` (optional) is the operator's system token: it acts as the system
    principal ``dev`` in every Space. Every other token is a principal's, looked up by
    its hash in the journal (``application.access``), with its roles per Space.
    ``stream_settings`` paces the live journal streams (heartbeats, polling).
    ``checkpoints`` is the checkpoint service (with this process's signing key); without
    one the audit routes read the checkpoints other processes signed.
    ``metrics_token`` (optional) may read ``GET /metrics`` and nothing else (so may the
    system token); the application's observer (``blackops.observability``) is attached.
    """
    api = FastAPI(
        title="BlackOps",
        version="0.1.0",
        description="Durable operations on an event-sourced journal.",
        docs_url=None,  # api_docs serves both pages from this origin (decisions H10)
        redoc_url=None,
        # A path with a trailing slash names no route: 404 not_found with the error body,
        # not a 307 to an absolute URL the OpenAPI document never mentions (decisions H17).
        redirect_slashes=False,
    )
    api.state.blackops = Served(application, token)
    api.state.checkpoints = checkpoints
    api.state.observability = observe(application.runtime)
    api.state.metrics_token = metrics_token or None
    install_error_handlers(api)
    for module in (operations, journal, audit, instances, access, resources, metrics):
        api.include_router(module.router)
    api.add_middleware(head.HeadAsGet)  # everything inside sees a GET
    # A filter named twice is refused, not cut (the names the published document declares).
    api.add_middleware(query.OneValueEach, document=lambda: api.openapi())
    # Outside HeadAsGet: a HEAD is timed and counted as HEAD.
    api.add_middleware(metrics.TimingMiddleware, observability=api.state.observability)
    serve_lean(api, "POST", operations.RUN_PATH, operations.run_operation_lean)
    stream.install(api, stream_settings)
    api_docs.install(api)
    install_console(api)  # /ui/: the web console, not in the schema (decisions U1)

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            document = get_openapi(
                title=api.title, version=api.version, description=api.description,
                routes=api.routes,
            )  # fmt: skip
            api.openapi_schema = publish(document)
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    return api
