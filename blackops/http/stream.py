"""The live Observed stream: Observed JSONL lines as Server-Sent Events, as they are committed
(the whole journal for system principals, one Space's lines for its readers), and the
published JSON Schema of a line.

Each event is ``id: <position>`` and ``data: <the Observed JSONL line>``, byte for byte
the line an export writes (both come from ``replay.export.observed_lines``). A client
that reconnects with ``Last-Event-ID: <the last id it received>`` gets exactly the lines
after it: positions skip numbers, so the rule is "after the last id", never "id + 1".

Reading is polling a position, so the stream is correct without any wake-up: a page is
read after the last position sent; an empty page waits. Wake-ups only cut the wait: this
process's commits wake every open stream at once (``EventStore.add_append_listener``), and
one shared poller per server reads the journal's last position every ``poll_seconds`` for
commits of other processes (PostgreSQL's NOTIFY fires only for work-making events, so it
cannot stand in for that). While idle a stream sends a ``: keep-alive`` comment every
``heartbeat_seconds``, and at that pace checks that its token still authenticates and may
still read: a revoked token or a removed role ends the stream (decisions P47).

A stream that a refusal ends (a revoked token, a lost role, an event changed behind the
journal's back, the store unreachable) sends one last event before it closes: ``event:
error``, ``data:`` the refusal's body (``{"error": {"code", "message"}}``, as the same
refusal answered before the stream began), and no ``id:``. Its headers were sent, so the
status cannot say it; without it a reader that does not reconnect could not tell a refusal
from the server closing (decisions F167).

The two stream routes take the web console's session cookie when no Authorization header
is sent (``stream_caller``: a browser's ``EventSource`` cannot send one; decisions U5), with
the same access rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.types import Send

from blackops.application import Application
from blackops.http.auth import Caller, application, check_space, served, stream_caller
from blackops.http.journal import After, tenant_of
from blackops.http.openapi import errors
from blackops.http.params import SpacePath
from blackops.jsonbody import render_json
from domain.access import Action, check_system
from domain.errors import BlackOpsError, InvalidRequest
from journal.store import MAX_POSITION, EventStore
from replay.export import observed_lines
from replay.integrity import IntegrityError
from replay.schema import OBSERVED_LINE_SCHEMA_PATH, observed_line_schema_bytes

log = logging.getLogger("blackops.http.stream")
router = APIRouter()
_BEARER = HTTPBearer(auto_error=False)
#: Rows read per page (the per-Space stream scans this many and keeps its own).
PAGE = 500
#: The longest ``max_seconds`` a request may ask for (a day).
MAX_SECONDS = 86_400.0
StreamLimit = Annotated[
    int | None, Query(ge=1, description="end the stream after this many events")
]
MaxSeconds = Annotated[
    float | None,
    Query(gt=0, le=MAX_SECONDS, description="end the stream after this many seconds"),
]
#: Checked by the service after the access check (its pattern is documentation only).
LastEventId = Annotated[
    str | None,
    Header(
        json_schema_extra={"pattern": r"^[0-9]{1,19}$"},
        description="the last `id:` received: the stream continues after it (an id beyond "
        "the largest position a journal can have waits for lines that never come)",
    ),
]


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """How streams pace themselves (``create_http_app(..., stream=...)``,
    ``blackops serve --heartbeat-seconds``)."""

    #: A ``: keep-alive`` comment after this long without a line; also how often a
    #: stream re-checks its caller's access.
    heartbeat_seconds: float = 15.0
    #: How often the shared poller looks for other processes' commits.
    poll_seconds: float = 0.25

    def __post_init__(self) -> None:
        for name in ("heartbeat_seconds", "poll_seconds"):
            value = getattr(self, name)
            if not 0 < value <= 3600:
                raise ValueError(f"{name} must be from 0 to 3600 seconds")


class EventStreamResponse(StreamingResponse):
    """``text/event-stream``; the event source is closed however the response ends."""

    media_type = "text/event-stream"

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()


class _Waiter:
    """One open stream's wake-up: set from any thread, awaited on its event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            self.loop.call_soon_threadsafe(self.event.set)


class JournalWakes:
    """Wakes the open streams of one HTTP app when the journal may have grown."""

    def __init__(self, application: Application, settings: StreamSettings) -> None:
        self.application = application
        self.settings = settings
        self._lock = threading.Lock()
        self._waiters: set[_Waiter] = set()
        self._poller: threading.Thread | None = None
        self._listening: EventStore | None = None

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[_Waiter]:
        waiter = _Waiter()
        store = self.application.store
        with self._lock:
            if self._listening is not store:  # a store (re)opened since: listen to it
                if self._listening is not None:
                    self._listening.remove_append_listener(self.wake_all)
                store.add_append_listener(self.wake_all)
                self._listening = store
            self._waiters.add(waiter)
            if self._poller is None:
                self._poller = threading.Thread(
                    target=self._poll, args=(store,), name="blackops-stream-poller", daemon=True
                )
                self._poller.start()
        try:
            yield waiter
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    def wake_all(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.wake()

    def _poll(self, store: EventStore) -> None:
        """Runs while any stream is open: wakes them all when the last position moves."""
        seen: int | None = None
        while True:
            with self._lock:
                if not self._waiters:
                    self._poller = None
                    return
            try:
                last = store.last_position()
            except BlackOpsError as error:
                log.warning("stream poller: %s", error)
                last = None
            if last != seen:
                seen = last
                self.wake_all()
            time.sleep(self.settings.poll_seconds)


def stream_state(request: Request) -> JournalWakes:
    """The app's wake-ups, made on first use (``create_http_app`` may pass settings)."""
    state = request.app.state
    wakes: JournalWakes | None = getattr(state, "blackops_stream", None)
    if wakes is None:
        settings = getattr(state, "blackops_stream_settings", None) or StreamSettings()
        wakes = JournalWakes(served(request).application, settings)
        state.blackops_stream = wakes
    return wakes


def install(api: Any, settings: StreamSettings | None) -> None:
    """Called by ``create_http_app``: the router and the pacing of its streams."""
    api.state.blackops_stream_settings = settings or StreamSettings()
    api.include_router(router)


# -- the routes -------------------------------------------------------------------------------

_STREAM_DESCRIPTION = (
    "Server-Sent Events, one per journal event: `id:` its position, `data:` its Observed "
    "JSONL line (byte for byte the export's). Starts after `Last-Event-ID` if sent, else "
    "after `?after=`; resume with the last id received (positions have gaps). A "
    "`: keep-alive` comment while idle. Without `limit` / `max_seconds` it never ends by "
    "itself; a refusal ends it (a revoked token, a lost role, an event changed behind the "
    "journal's back) after one last event `event: error` whose `data:` is the refusal's "
    'JSON body (`{"error": {"code", "message"}}`), with no `id:`.'
)
#: 200 is ``text/event-stream``. The route's ``response_class`` is the plain Response on
#: purpose: FastAPI documents the error bodies under the route class's media type, and
#: they are JSON; the handler returns an :class:`EventStreamResponse`.
_STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The live stream: `id: <position>` and `data: <line>` per event",
        # Each event (OpenAPI's reading of an event stream): its id is the position, its
        # data one Observed JSONL line, valid against the published schema.
        "content": {"text/event-stream": {"schema": {"$ref": "#/components/schemas/JournalEvent"}}},
    },
}


@router.get(
    "/v1/journal/stream",
    summary="The whole journal, live, as Server-Sent Events (system principals)",
    description=_STREAM_DESCRIPTION,
    response_class=Response,
    responses={**_STREAM_RESPONSES, **errors(400, 403, 409)},
)
async def journal_stream(
    request: Request,
    last_event_id: LastEventId = None,
    after: After = 0,
    limit: StreamLimit = None,
    max_seconds: MaxSeconds = None,
    who: Caller = Depends(stream_caller),
    app: Application = Depends(application),
    credentials: HTTPAuthorizationCredentials | None = Depends(_BEARER),
) -> Response:
    check_system(who.principal, "reading the whole journal")
    start = _start(last_event_id, after, limit, max_seconds)

    def may_read(again: Caller) -> None:
        check_system(again.principal, "reading the whole journal")

    return await _respond(request, app, start, None, limit, max_seconds, credentials, may_read)


@router.get(
    "/v1/spaces/{space}/journal/stream",
    summary="One Space's journal lines, live, as Server-Sent Events (readers of the Space)",
    description=_STREAM_DESCRIPTION,
    response_class=Response,
    responses={**_STREAM_RESPONSES, **errors(400, 403, 404, 409)},
)
async def space_journal_stream(
    space: SpacePath,
    request: Request,
    last_event_id: LastEventId = None,
    after: After = 0,
    limit: StreamLimit = None,
    max_seconds: MaxSeconds = None,
    who: Caller = Depends(stream_caller),
    app: Application = Depends(application),
    credentials: HTTPAuthorizationCredentials | None = Depends(_BEARER),
) -> Response:
    await run_in_threadpool(check_space, app, who, space, Action.READ)
    start = _start(last_event_id, after, limit, max_seconds)

    def may_read(again: Caller) -> None:
        check_space(app, again, space, Action.READ)

    return await _respond(request, app, start, space, limit, max_seconds, credentials, may_read)


@router.get(
    OBSERVED_LINE_SCHEMA_PATH,
    summary="The JSON Schema (draft 2020-12) of an Observed JSONL line; no token needed",
    response_class=Response,
    responses={
        200: {
            "description": "The schema document",
            "content": {"application/schema+json": {"schema": {"type": "object"}}},
        }
    },
)
async def observed_line_schema() -> Response:
    return Response(observed_line_schema_bytes(), media_type="application/schema+json")


# -- how a stream runs --------------------------------------------------------------------------


def _start(
    last_event_id: str | None, after: int, limit: int | None, max_seconds: float | None
) -> int:
    """Where the stream starts: after ``Last-Event-ID`` if sent, else after ``?after=``."""
    if after < 0:
        raise InvalidRequest("after must be a position >= 0")
    if limit is not None and limit < 1:
        raise InvalidRequest("limit must be >= 1")
    if max_seconds is not None and not 0 < max_seconds <= MAX_SECONDS:
        raise InvalidRequest(f"max_seconds must be more than 0 and at most {MAX_SECONDS:.0f}")
    if last_event_id is None:
        return after
    text = last_event_id.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise InvalidRequest("Last-Event-ID must be a journal position (the id last received)")
    # Any id of the published pattern is a place in the journal: one past the largest
    # position the store can hold is after every line (it is clamped, never overflows SQL).
    return min(int(text), MAX_POSITION)


async def _respond(
    request: Request,
    app: Application,
    start: int,
    space: str | None,
    limit: int | None,
    max_seconds: float | None,
    credentials: HTTPAuthorizationCredentials | None,
    may_read: Callable[[Caller], None],
) -> Response:
    # An event changed behind the journal's back right after the start is answered 409
    # before the first byte (F163): a stream that ended there (its headers were sent) is
    # resumed from there, and the client then learns why instead of an empty 200 for ever.
    await run_in_threadpool(_check_next, app.store, start)
    wakes = stream_state(request)

    def refusal() -> BlackOpsError | None:
        try:
            may_read(stream_caller(request, credentials))
        except BlackOpsError as error:
            return error
        return None

    events = _events(app.store, wakes, start, space, limit, max_seconds, refusal)
    # No proxy buffering: each event should reach the client when it is sent.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return EventStreamResponse(events, headers=headers)


def _check_next(store: EventStore, start: int) -> None:
    """Raise the export's `IntegrityError` if the event after ``start`` cannot be served."""
    for _ in observed_lines(store, start, 1):
        pass


@dataclass(frozen=True, slots=True)
class _Page:
    lines: list[tuple[int, bytes]]  # (position, line) to send
    read_up_to: int  # the position the next page starts after
    full: bool  # a whole page was read: more may follow at once


def _page(store: EventStore, after: int, space: str | None) -> _Page:
    """One page of lines after ``after`` (only ``space``'s, if given). The lines before an
    event changed behind the journal's back are sent; the next page names it (F163)."""
    lines: list[tuple[int, bytes]] = []
    changed = False
    try:
        for line in observed_lines(store, after, PAGE):
            lines.append(line)
    except IntegrityError:
        if not lines:
            raise
        changed = True  # read on at once: the next page raises it
    if not lines:
        return _Page([], after, False)
    read_up_to, full = lines[-1][0], changed or len(lines) == PAGE
    if space is not None:
        lines = [(position, line) for position, line in lines if tenant_of(line) == space]
    return _Page(lines, read_up_to, full)


def _frame(position: int, line: bytes) -> bytes:
    # The line is canonical JSON: no raw CR or LF inside, so it is one data field.
    return b"id: %d\ndata: %s\n\n" % (position, line.rstrip(b"\n"))


def _error_frame(error: BlackOpsError) -> bytes:
    """The last event of a stream a refusal ends: no ``id:`` (it is no position), its body
    rendered without raw line breaks (one ``data:`` field)."""
    return b"event: error\ndata: %s\n\n" % render_json(error.to_body())


async def _events(
    store: EventStore,
    wakes: JournalWakes,
    position: int,
    space: str | None,
    limit: int | None,
    max_seconds: float | None,
    refusal: Callable[[], BlackOpsError | None],
) -> AsyncIterator[bytes]:
    settings = wakes.settings
    clock = time.monotonic
    ends = clock() + max_seconds if max_seconds is not None else None
    remaining = limit
    with wakes.subscribe() as waiter:
        quiet_until = check_at = clock() + settings.heartbeat_seconds
        while True:
            waiter.event.clear()  # a commit from now on wakes the wait below
            try:
                page = await run_in_threadpool(_page, store, position, space)
            except BlackOpsError as error:
                # Headers are sent: say why in a last event, and end the stream.
                log.warning("stream after %d ended: %s", position, error)
                yield _error_frame(error)
                return
            lines, position = page.lines, page.read_up_to
            if remaining is not None:
                lines = lines[:remaining]
                remaining -= len(lines)
            if lines:
                yield b"".join(_frame(at, line) for at, line in lines)
                quiet_until = clock() + settings.heartbeat_seconds
            if remaining == 0:
                return
            now = clock()
            if ends is not None and now >= ends:
                return
            if now >= check_at:
                refused = await run_in_threadpool(refusal)
                if refused is not None:
                    yield _error_frame(refused)
                    return
                check_at = now + settings.heartbeat_seconds
            if now >= quiet_until:
                yield b": keep-alive\n\n"
                quiet_until = now + settings.heartbeat_seconds
            if page.full:
                continue  # more may be there already: read on without waiting
            deadline = min(quiet_until, check_at, ends if ends is not None else check_at)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.event.wait(), max(0.0, deadline - clock()))
