"""Journal routes: Observed JSONL pages of the whole journal (system principals) and of one
Space (its lines only)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.http.auth import Caller, application, caller
from domain.access import Action, check_system
from domain.errors import InvalidRequest
from domain.json_text import JSONTextError, parse_json
from journal.store import PAGE_LIMIT_MAX
from replay.export import observed_lines

router = APIRouter()


def _check_page(after: int, limit: int) -> None:
    if after < 0 or not 1 <= limit <= PAGE_LIMIT_MAX:
        raise InvalidRequest(f"after must be >= 0 and limit from 1 to {PAGE_LIMIT_MAX}")


@router.get(
    "/v1/journal",
    summary="Observed JSONL (application/jsonl): events after a position, in order",
    response_class=Response,
)
async def journal(
    after: int = 0,
    limit: int = 1000,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    check_system(who.principal, "reading the whole journal")
    _check_page(after, limit)

    def page() -> tuple[bytes, int | None]:
        lines = list(observed_lines(app.store, after, limit))
        return b"".join(line for _, line in lines), (lines[-1][0] if lines else None)

    body, last = await run_in_threadpool(page)
    # Where to continue: the next request's ``after``.
    headers = {"BlackOps-Next-After": str(last if last is not None else after)}
    return Response(body, media_type="application/jsonl", headers=headers)


@router.get(
    "/v1/spaces/{space}/journal",
    summary="Observed JSONL of one Space: its lines only (positions keep their gaps)",
    response_class=Response,
)
async def space_journal(
    space: str,
    after: int = 0,
    limit: int = 1000,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    who.check(space, Action.READ)
    _check_page(after, limit)

    def page() -> tuple[bytes, int]:
        lines, last = space_lines(app.store, space, after, limit)
        return b"".join(lines), last

    body, last = await run_in_threadpool(page)
    return Response(
        body, media_type="application/jsonl", headers={"BlackOps-Next-After": str(last)}
    )


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
    """The tenant an Observed line's execution context names, or ``None``.

    Never fails on a line: one journaled before documents had a depth limit may be deeper
    than orjson reads (1,024 levels), and is then read by the iterative parser, which keeps
    its own stack instead of recursing. A line that is not an event names no tenant.
    """
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            event = parse_json(line.decode("utf-8"))
        except (UnicodeDecodeError, JSONTextError):
            return None
    context = event.get("context") if type(event) is dict else None
    tenant = context.get("tenant") if type(context) is dict else None
    return tenant if type(tenant) is str else None
