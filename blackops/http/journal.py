"""Journal routes: Observed JSONL pages of the whole journal (system principals) and of one
Space (its lines only).

A Space's lines are found by reading every Space's and keeping its own (there is no
per-Space position index), so a Space's page reads at most ``SPACE_SCAN_ROWS`` rows and
ends early with ``BlackOps-Next-After`` past what it read: fewer lines than asked, even
none, with a cursor that moved, is no end of the journal (the end is a cursor that did not
move). Those reads run on their own threads (``capacity.SPACE_READS``), never on the pool
every other route uses, so a tenant's scans cannot hold up another tenant's requests."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.http.auth import Caller, application, caller, check_space
from blackops.http.capacity import SPACE_READS, reader_key
from blackops.http.openapi import errors
from blackops.http.params import QUERY_INTEGER, SpacePath
from domain.access import Action, check_system
from domain.json_text import JSONTextError, parse_json
from journal.store import MAX_POSITION, PAGE_LIMIT_MAX
from replay.export import observed_lines

router = APIRouter(tags=["journal"])
After = Annotated[
    int,
    Query(ge=0, le=MAX_POSITION, description="lines with positions after this one"),
    QUERY_INTEGER,
]
PageLimit = Annotated[
    int, Query(ge=1, le=PAGE_LIMIT_MAX, description="at most this many lines"), QUERY_INTEGER
]
#: Rows a Space's page reads at most, among every Space's (one page of an export): its cost
#: no longer grows with other tenants' data (it was 50 x 10,000 rows a request).
SPACE_SCAN_ROWS = 2_000
#: And at most this many bytes of them: 2,000 large events were ~2 GB read and held per
#: page, four pages at once (found by a defect hunt, stop 40).
SPACE_SCAN_BYTES = 8 << 20
#: A page of lines a live reader (a stream, the console's recent lines) holds at once ends
#: with the event that reaches this many bytes (and at one event, however large).
PAGE_BYTES = 1 << 20
#: The JSONL answers: one canonical JSON object per line (python-contract §7).
JSONL: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Observed JSONL; header BlackOps-Next-After is where to continue",
        "content": {"application/jsonl": {"schema": {"type": "string"}}},
        "headers": {
            "BlackOps-Next-After": {
                "description": "the next request's ``after``",
                "schema": {"type": "integer"},
            }
        },
    }
}


@router.get(
    "/v1/journal",
    summary="Observed JSONL (application/jsonl): events after a position, in order",
    response_class=Response,
    responses={**JSONL, **errors(400, 403, 409)},
)
async def journal(
    after: After = 0,
    limit: PageLimit = 1000,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    check_system(who.principal, "reading the whole journal")

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
    description=f"Reads at most {SPACE_SCAN_ROWS:,} events of the whole journal per request, so "
    "a page may hold fewer lines than `limit`, even none, while `BlackOps-Next-After` moves "
    "on: continue from it until it equals `after` (the end of the journal).",
    responses={**JSONL, **errors(400, 403, 404, 409)},
)
async def space_journal(
    space: SpacePath,
    after: After = 0,
    limit: PageLimit = 1000,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Response:
    check_space(app, who, space, Action.READ)

    def page() -> tuple[bytes, int]:
        lines, last = space_lines(app.store, space, after, limit)
        return b"".join(lines), last

    body, last = await SPACE_READS.run(reader_key(who.principal.id, space), page)
    return Response(
        body, media_type="application/jsonl", headers={"BlackOps-Next-After": str(last)}
    )


def space_lines(
    store: Any, space: str, after: int, limit: int, scan: int = SPACE_SCAN_ROWS
) -> tuple[list[bytes], int]:
    """Up to ``limit`` Observed JSONL lines of ``space`` after ``after`` (events whose
    execution context names that tenant) among the next ``scan`` events (and at most
    `SPACE_SCAN_BYTES` of them), and the position to continue from: the last event read,
    so the next page starts past what this one scanned even when none of it was the
    Space's."""
    lines: list[bytes] = []
    position = after
    for at, line in observed_lines(store, after, scan, max_bytes=SPACE_SCAN_BYTES):
        position = at
        if tenant_of(line) == space:
            lines.append(line)
            if len(lines) == limit:
                break
    return lines, position


def event_of(line: bytes) -> dict[str, Any] | None:
    """An Observed line as an object, or ``None`` if it is not one.

    Never fails on a line: one journaled before documents had a depth limit may be deeper
    than orjson reads (1,024 levels), and is then read by the iterative parser, which keeps
    its own stack instead of recursing.
    """
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            event = parse_json(line.decode("utf-8"))
        except (UnicodeDecodeError, JSONTextError):
            return None
    return event if type(event) is dict else None


def tenant_of(line: bytes) -> str | None:
    """The tenant an Observed line's execution context names, or ``None`` (also for a line
    that is not an event)."""
    event = event_of(line)
    context = event.get("context") if event is not None else None
    tenant = context.get("tenant") if type(context) is dict else None
    return tenant if type(tenant) is str else None
