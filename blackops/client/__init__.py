"""A typed HTTP client of the BlackOps API: ``from blackops.client import Client``.

``Client(base_url, token)`` (sync, a context manager) and ``AsyncClient`` (asyncio) cover
what a reader and a caller do: operations (run, submit, status, outcome, events, lists),
workflow instances, journal pages, the live stream, exports. Errors raise the exception
classes of ``blackops`` chosen by the answer's ``error.code``; what can never be sent (a
document that is none, a token with a newline inside) is refused before a request, as in
process. It imports no server code (no FastAPI, uvicorn, eventsourcing or database driver):
httpx, ``blackops.errors``, the result types and ``blackops.canonical_document``.
"""

from __future__ import annotations

from blackops.client.aio import AsyncClient, AsyncInstance, AsyncWorkflow
from blackops.client.calls import ERROR_CLASSES, JournalPage, error_of
from blackops.client.client import Client, Instance, StreamedLine, Workflow

__all__ = [
    "ERROR_CLASSES",
    "AsyncClient",
    "AsyncInstance",
    "AsyncWorkflow",
    "Client",
    "Instance",
    "JournalPage",
    "StreamedLine",
    "Workflow",
    "error_of",
]
