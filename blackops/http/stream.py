"""The live Observed stream: Observed JSONL lines as Server-Sent Events, as they are committed
(the whole journal for system principals, one Space's lines for its readers), and the
published JSON Schema of a line.

Each event is ``id: <position>`` and ``data: <the Observed JSONL line>``, byte for byte
the line an export writes (both come from ``replay.export.observed_lines``). A client
that reconnects with ``Last-Event-ID: <the last id it received>`` gets exactly the lines
after it: positions skip numbers, so the rule is "after the last id", never "id + 1".

Reading is polling a position, so the stream is correct without any wake-up: a page is
read after the last position sent; an empty page waits. One tail per server
(:class:`JournalTail`) reads each new page of the journal once, when this process commits
(``EventStore.add_append_listener``) or when the journal's last position moves (polled
every ``poll_seconds``: other processes' commits; PostgreSQL's NOTIFY fires only for
work-making events, so it cannot stand in for that), keeps the newest lines, and wakes the
streams they concern; a stream behind that window reads pages itself, on threads of its
own (``capacity.STREAM_READS``), never the API's pool. One principal may have
``max_streams`` streams open at once; one more is refused ``resource_busy``. While idle a
stream sends a ``: keep-alive`` comment every ``heartbeat_seconds``, and at that pace
checks that its token still authenticates and may still read: a revoked token or a
removed role ends the stream (decisions P47).

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
import bisect
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
from starlette.types import Receive, Scope, Send

from blackops.application import Application
from blackops.http.auth import Caller, application, check_space, served, stream_caller
from blackops.http.bodies import one_header
from blackops.http.capacity import STREAM_READS, reader_key
from blackops.http.journal import PAGE_BYTES, After, tenant_of
from blackops.http.openapi import errors
from blackops.http.params import QUERY_INTEGER, QUERY_NUMBER, SpacePath
from blackops.jsonbody import render_json
from domain.access import Action, check_system
from domain.errors import BlackOpsError, InvalidRequest, ResourceBusy
from journal.store import MAX_POSITION, EventStore
from replay.export import observed_lines
from replay.integrity import IntegrityError
from replay.schema import OBSERVED_LINE_SCHEMA_PATH, observed_line_schema_bytes

log = logging.getLogger("blackops.http.stream")
router = APIRouter()
_BEARER = HTTPBearer(auto_error=False)
#: Rows read per page (the per-Space stream scans this many and keeps its own); a page
#: also ends at `PAGE_BYTES` (one of 500 large events was one write of ~500 MB, which a
#: reader that stopped reading held in the server's memory: found by a defect hunt, stop 40).
PAGE = 500
#: The tail's window of newest lines (JournalTail): at most this many, and this many bytes
#: (lines may be large); a stream behind it reads pages itself.
WINDOW_LINES = 4 * PAGE
WINDOW_BYTES = 8 << 20
#: The longest ``max_seconds`` a request may ask for (a day).
MAX_SECONDS = 86_400.0
StreamLimit = Annotated[
    int | None, Query(ge=1, description="end the stream after this many events"), QUERY_INTEGER
]
MaxSeconds = Annotated[
    float | None,
    Query(gt=0, le=MAX_SECONDS, description="end the stream after this many seconds"),
    QUERY_NUMBER,
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
    #: Streams one principal may have open at once; one more is refused ``resource_busy``.
    max_streams: int = 32

    def __post_init__(self) -> None:
        for name in ("heartbeat_seconds", "poll_seconds"):
            value = getattr(self, name)
            if not 0 < value <= 3600:
                raise ValueError(f"{name} must be from 0 to 3600 seconds")
        if not 1 <= self.max_streams <= 1_000_000:
            raise ValueError("max_streams must be from 1 to 1,000,000")


class EventStreamResponse(StreamingResponse):
    """``text/event-stream``; the event source is closed, and ``on_close`` called, however
    the response ends (also when it never started: the stream's count is released)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        content: AsyncIterator[bytes],
        headers: dict[str, str],
        on_close: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(content, headers=headers)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()

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
        #: The tail's head when this stream opened (None: no window yet). The window serves
        #: it only lines the tail read after that, while it was open: lines read before may
        #: have been changed (F163) or purged since, which the stream must learn from the
        #: store as any new reader does.
        self.since: int | None = None

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            self.loop.call_soon_threadsafe(self.event.set)


@dataclass(frozen=True, slots=True)
class _Page:
    lines: list[tuple[int, bytes]]  # (position, line) to send
    read_up_to: int  # the position the next page starts after
    full: bool  # a whole page was read: more may follow at once


#: In a line, the end of a retention tombstone's type (`operation.purged`, `workflow.purged`):
#: keys are sorted, and a string's quotes are escaped, so only the member ``type`` ends so.
_PURGE_MARK = b'.purged","version":'


class JournalTail:
    """The journal's newest lines, read once per HTTP app and handed to its open streams.

    One thread (``blackops-stream-tail``) reads each new page after the last position it
    read when this process commits (``EventStore.add_append_listener``) or when the
    journal's last position moved (polled every ``poll_seconds``: other processes'
    commits). It keeps the lines after ``_floor`` with their tenants (a window of at most
    ``WINDOW_LINES`` lines and ``WINDOW_BYTES`` bytes) and wakes only the streams the new
    lines concern: the whole journal's and those of a Space they name. Before, every commit
    woke every open stream and each read a page on the API's thread pool, so one tenant's
    idle streams made every commit, and every other tenant's request, slower.

    A stream at or past ``_floor`` takes its lines from the window; one behind it (a resume
    from long ago, a slow reader) reads pages itself on ``STREAM_READS`` until it reaches
    the window. The window holds the journal's lines after ``_floor`` (commit order is
    position order), so reading after the last position sent stays the whole guarantee.
    A read that fails (the store unreachable, an event changed behind the journal's back:
    F163) sets ``_broken`` and wakes every stream: they read for themselves and meet the
    failure as before (F167), until a read of the tail succeeds again.
    """

    def __init__(self, application: Application, settings: StreamSettings) -> None:
        self.application = application
        self.settings = settings
        self._lock = threading.Lock()
        #: Open streams by the Space they send (None: the whole journal); no empty sets.
        self._waiters: dict[str | None, set[_Waiter]] = {}
        self._open: dict[str, int] = {}  # open streams per principal
        self._thread: threading.Thread | None = None
        self._store: EventStore | None = None
        self._poke = threading.Event()
        self._clear_window()

    def _clear_window(self) -> None:
        self._floor: int | None = None  # None: no window yet (or no stream keeps it)
        self._head = 0  # the last position the tail read
        self._broken = False  # the last read failed: streams read for themselves
        self._positions: list[int] = []
        self._lines: list[bytes] = []
        self._tenants: list[str | None] = []
        self._bytes = 0

    # -- what streams call ------------------------------------------------------------------

    def admit(self, principal: str) -> Callable[[], None]:
        """Count an open stream of ``principal``, or refuse it (``resource_busy``) when it has
        ``max_streams`` open; the answer releases the count (once, however often called)."""
        with self._lock:
            count = self._open.get(principal, 0)
            if count >= self.settings.max_streams:
                raise ResourceBusy(
                    f"principal {principal!r} has {count} journal streams open, the most one "
                    "principal may have at once; close one and try again"
                )
            self._open[principal] = count + 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if released.is_set():
                    return
                released.set()
                left = self._open.pop(principal) - 1
                if left:
                    self._open[principal] = left

        return release

    @contextlib.contextmanager
    def subscribe(self, space: str | None) -> Iterator[_Waiter]:
        waiter = _Waiter()
        store = self.application.store
        with self._lock:
            if self._store is not store:  # a store (re)opened since: listen to it
                if self._store is not None:
                    self._store.remove_append_listener(self._poke.set)
                store.add_append_listener(self._poke.set)
                self._store = store
                self._clear_window()
            self._waiters.setdefault(space, set()).add(waiter)
            if self._floor is not None:
                waiter.since = self._head
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="blackops-stream-tail", daemon=True
                )
                self._thread.start()
        try:
            yield waiter
        finally:
            with self._lock:
                waiters = self._waiters.get(space, set())
                waiters.discard(waiter)
                if not waiters:
                    self._waiters.pop(space, None)

    async def page(self, key: str, after: int, space: str | None, waiter: _Waiter) -> _Page:
        """The lines after ``after`` (only ``space``'s, if given): from the window when it
        holds everything after ``after`` and the tail read all of it while ``waiter``'s
        stream was open, else read from the store on ``STREAM_READS``."""
        with self._lock:
            store = self._store or self.application.store
            floor = self._floor
            if floor is not None and waiter.since is not None:
                floor = max(floor, waiter.since)
            if floor is not None and not self._broken and after >= floor:
                return self._window_page(after, space)
        page = await STREAM_READS.run(key, _page, store, after, space)
        if floor is not None and not page.full and page.read_up_to < floor:
            # The read began after the window's floor had been read and read to the end:
            # nothing lies between, so the stream goes on from the window.
            return _Page(page.lines, floor, False)
        return page

    def _window_page(self, after: int, space: str | None) -> _Page:
        positions, tenants, lines = self._positions, self._tenants, self._lines
        found: list[tuple[int, bytes]] = []
        for at in range(bisect.bisect_right(positions, after), len(positions)):
            if space is None or tenants[at] == space:
                found.append((positions[at], lines[at]))
                if len(found) == PAGE:
                    return _Page(found, positions[at], True)
        return _Page(found, max(after, self._head), False)

    # -- the tail's thread ------------------------------------------------------------------

    def _run(self) -> None:
        """Runs while any stream is open: reads what was committed, wakes whom it concerns."""
        seen: int | None = None
        while True:
            with self._lock:
                if not self._waiters:
                    self._thread = None
                    self._clear_window()  # nobody keeps it current from now on
                    return
                store, started, broken = self._store, self._floor is not None, self._broken
                assert store is not None
                closed = store.closed  # its application closed: the streams meet that
                if closed:
                    self._thread = None
                    self._clear_window()
                    woken = [w for ws in self._waiters.values() for w in ws]
            if closed:
                for waiter in woken:
                    waiter.wake()
                return
            try:
                if not started:
                    # The window starts at the journal's end; streams behind it read pages.
                    seen = store.last_position()
                    with self._lock:
                        if self._store is store and self._floor is None:
                            self._floor = self._head = seen
                            woken = [w for ws in self._waiters.values() for w in ws]
                            for waiter in woken:
                                waiter.since = seen
                        else:
                            woken = []
                    # A stream whose own read came before the floor was set saw nothing
                    # new; a commit between its read and the floor would wake none of them
                    # (the tail never reads below its floor): each looks again now.
                    for waiter in woken:
                        waiter.wake()
                    continue
                poked = self._poke.wait(self.settings.poll_seconds)
                self._poke.clear()  # a commit from now on pokes again: the read below is later
                if not poked and not broken:
                    last = store.last_position()  # other processes' commits?
                    if last == seen:
                        continue
                    seen = last
            except Exception as error:  # the thread must outlive any failure
                log.warning("stream tail: %s", error)
                time.sleep(self.settings.poll_seconds)
                continue
            self._read(store)
            with self._lock:
                seen = self._head  # what a poll would see now is read: no second read

    def _read(self, store: EventStore) -> None:
        """Read from the head until a page is not full, waking the streams it concerns."""
        while True:
            with self._lock:
                after = self._head
            lines: list[tuple[int, bytes]] = []
            failed = False
            try:
                for line in observed_lines(store, after, PAGE, max_bytes=PAGE_BYTES):
                    lines.append(line)
            except Exception as error:  # IntegrityError, backend_unavailable, ...
                # The streams read for themselves now, and each meets (and names) it.
                log.warning("stream tail after %d: %s", after, error)
                failed = True
            tenants = [tenant_of(line) for _, line in lines]
            with self._lock:
                if self._store is not store or self._floor is None or self._head != after:
                    return  # the window was dropped meanwhile (a store reopened)
                self._extend(lines, tenants)
                if any(_PURGE_MARK in line for _, line in lines):
                    # A retention purge deletes events the window may hold: from here on
                    # every stream behind the head reads the store, which no longer has them.
                    self._forget_before_head()
                self._broken = failed
                if failed:  # every stream: each reads for itself and meets it
                    woken = [w for waiters in self._waiters.values() for w in waiters]
                else:
                    woken = [*self._waiters.get(None, ())]
                    for tenant in set(tenants) - {None}:
                        woken += self._waiters.get(tenant, ())
            for waiter in woken:
                waiter.wake()
            if failed or not _full(lines):
                return

    def _forget_before_head(self) -> None:
        self._floor = self._head
        self._positions, self._lines, self._tenants, self._bytes = [], [], [], 0

    def _extend(self, lines: list[tuple[int, bytes]], tenants: list[str | None]) -> None:
        """Append to the window, then drop its oldest lines past its bounds (keeping one)."""
        if not lines:
            return
        self._positions += [at for at, _ in lines]
        self._lines += [line for _, line in lines]
        self._tenants += tenants
        self._bytes += sum(len(line) for _, line in lines)
        self._head = lines[-1][0]
        drop = max(0, len(self._lines) - WINDOW_LINES)
        size = self._bytes - sum(len(line) for line in self._lines[:drop])
        while size > WINDOW_BYTES and drop < len(self._lines) - 1:
            size -= len(self._lines[drop])
            drop += 1
        if drop:
            self._floor = self._positions[drop - 1]
            del self._positions[:drop], self._lines[:drop], self._tenants[:drop]
            self._bytes = size


def stream_state(request: Request) -> JournalTail:
    """The app's journal tail, made on first use (``create_http_app`` may pass settings)."""
    state = request.app.state
    tail: JournalTail | None = getattr(state, "blackops_stream", None)
    if tail is None:
        settings = getattr(state, "blackops_stream_settings", None) or StreamSettings()
        tail = JournalTail(served(request).application, settings)
        state.blackops_stream = tail
    return tail


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
    start = _start(request, last_event_id, after, limit, max_seconds)

    def may_read(again: Caller) -> None:
        check_system(again.principal, "reading the whole journal")

    return await _respond(request, app, who, start, None, limit, max_seconds, credentials, may_read)


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
    start = _start(request, last_event_id, after, limit, max_seconds)

    def may_read(again: Caller) -> None:
        check_space(app, again, space, Action.READ)

    return await _respond(
        request, app, who, start, space, limit, max_seconds, credentials, may_read
    )


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
    request: Request,
    last_event_id: str | None,
    after: int,
    limit: int | None,
    max_seconds: float | None,
) -> int:
    """Where the stream starts: after ``Last-Event-ID`` if sent, else after ``?after=``.
    A second ``Last-Event-ID`` is refused: the first was taken (a defect hunt, stop 37)."""
    one_header(request, "Last-Event-ID")
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
    who: Caller,
    start: int,
    space: str | None,
    limit: int | None,
    max_seconds: float | None,
    credentials: HTTPAuthorizationCredentials | None,
    may_read: Callable[[Caller], None],
) -> Response:
    principal, tail = who.principal.id, stream_state(request)
    key = reader_key(principal, space)  # whose share of the stream threads its reads take
    # Refused before any read; from here the response releases it however it ends.
    release = tail.admit(principal)
    try:
        # The access check on the caller's own share: one refused would take the Space's.
        await STREAM_READS.run(reader_key(principal, None), may_read, who)
        # An event changed behind the journal's back right after the start is answered 409
        # before the first byte (F163): a stream that ended there (its headers were sent) is
        # resumed from there, and the client then learns why instead of an empty 200.
        await STREAM_READS.run(key, _check_next, app.store, start)
    except BaseException:
        release()
        raise

    def refusal() -> BlackOpsError | None:
        try:
            may_read(stream_caller(request, credentials))
        except BlackOpsError as error:
            return error
        return None

    events = _events(tail, key, start, space, limit, max_seconds, refusal)
    # No proxy buffering: each event should reach the client when it is sent.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return EventStreamResponse(events, headers=headers, on_close=release)


def _check_next(store: EventStore, start: int) -> None:
    """Raise the export's `IntegrityError` if the event after ``start`` cannot be served."""
    for _ in observed_lines(store, start, 1):
        pass


def _page(store: EventStore, after: int, space: str | None) -> _Page:
    """One page of lines after ``after`` (only ``space``'s, if given). The lines before an
    event changed behind the journal's back are sent; the next page names it (F163)."""
    lines: list[tuple[int, bytes]] = []
    changed = False
    try:
        for line in observed_lines(store, after, PAGE, max_bytes=PAGE_BYTES):
            lines.append(line)
    except IntegrityError:
        if not lines:
            raise
        changed = True  # read on at once: the next page raises it
    if not lines:
        return _Page([], after, False)
    read_up_to, full = lines[-1][0], changed or _full(lines)
    if space is not None:
        lines = [(position, line) for position, line in lines if tenant_of(line) == space]
    return _Page(lines, read_up_to, full)


def _full(lines: list[tuple[int, bytes]]) -> bool:
    """Did a page end at its rows or its bytes (more may follow at once), not the journal's
    end? Bytes are counted as `observed_lines` counts them, by the lines (a little more)."""
    return len(lines) == PAGE or sum(len(line) for _, line in lines) >= PAGE_BYTES


def _frame(position: int, line: bytes) -> bytes:
    # The line is canonical JSON: no raw CR or LF inside, so it is one data field.
    return b"id: %d\ndata: %s\n\n" % (position, line.rstrip(b"\n"))


def _error_frame(error: BlackOpsError) -> bytes:
    """The last event of a stream a refusal ends: no ``id:`` (it is no position), its body
    rendered without raw line breaks (one ``data:`` field)."""
    return b"event: error\ndata: %s\n\n" % render_json(error.to_body())


async def _events(
    tail: JournalTail,
    key: str,
    position: int,
    space: str | None,
    limit: int | None,
    max_seconds: float | None,
    refusal: Callable[[], BlackOpsError | None],
) -> AsyncIterator[bytes]:
    settings = tail.settings
    clock = time.monotonic
    ends = clock() + max_seconds if max_seconds is not None else None
    remaining = limit
    with tail.subscribe(space) as waiter:
        quiet_until = check_at = clock() + settings.heartbeat_seconds
        while True:
            waiter.event.clear()  # lines the tail reads from now on wake the wait below
            try:
                page = await tail.page(key, position, space, waiter)
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
                refused = await STREAM_READS.run(key, refusal)
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
