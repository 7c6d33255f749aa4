"""The synchronous client: :class:`Client` and its workflow / instance handles."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import httpx

from blackops.client import calls
from blackops.client.calls import Call, JournalPage
from blackops.client.sse import SSEDecoder
from blackops.errors import BackendUnavailable, BlackOpsError, InvalidRequest
from blackops.operations.results import OperationResult

T = TypeVar("T")
#: What ``space=`` defaults to (the Space ``blackops serve`` bootstraps).
DEFAULT_SPACE = "default"
#: The longest ``max_seconds`` the server grants one connection (a day: ``MAX_SECONDS`` of
#: blackops/http/stream.py, refused above it); a longer deadline takes several connections.
CONNECTION_SECONDS = 86_400.0
#: How much sooner than asked a connection may end and still have served its whole ask (the
#: server's clock timed it, and it started later than ours).
CONNECTION_SLACK = 60.0


@dataclass(frozen=True, slots=True)
class StreamedLine:
    """One event of a live stream: its position and its Observed JSONL line (with the
    newline), byte for byte the line an export writes."""

    position: int
    line: bytes


def stream_arguments_checked(
    after: object, limit: object, max_seconds: object, retry_seconds: object
) -> None:
    """A stream's arguments as the server would take them, refused (``invalid_request``)
    before anything is sent: ``max_seconds`` of 0 or less read as an empty journal, a
    string ``after`` failed mid-stream with a raw ``TypeError``, a NaN deadline retried
    for ever (found by a defect hunt, stop 38). Unlike one connection, a client's stream
    may last past a day (it reconnects), so ``max_seconds`` has no upper bound here."""
    if type(after) is not int or after < 0:
        raise InvalidRequest(f"after must be a non-negative integer, not {after!r:.40}")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise InvalidRequest(f"limit must be an integer >= 1, not {limit!r:.40}")
    given = {"retry_seconds": retry_seconds}
    if max_seconds is not None:
        given["max_seconds"] = max_seconds
    for name, value in given.items():
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not 0 < value < math.inf
        ):
            raise InvalidRequest(f"{name} must be a finite number of seconds above 0")  # NaN too


def stream_params(
    after: int, limit: int | None, ends: float | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The query and headers of one (re)connection: Last-Event-ID is the last position
    received (the server resumes after it: positions have gaps, never ``id + 1``);
    ``max_seconds`` what is left of the deadline, at most :data:`CONNECTION_SECONDS`."""
    params: dict[str, Any] = {"after": after}
    if limit is not None:
        params["limit"] = limit
    if ends is not None:
        left = round(ends - time.monotonic(), 3)
        params["max_seconds"] = max(0.001, min(CONNECTION_SECONDS, left))
    return params, {"Last-Event-ID": str(after), "Accept": "text/event-stream"}


def streamed_lines(decoder: SSEDecoder, chunk: bytes) -> Iterator[StreamedLine]:
    """The journal lines one chunk of a stream completes: ``message`` events with an
    ``id:`` field of their own (comments and id-less events are heartbeats or notices:
    skipped; an empty ``id:`` resets the id and is no position either). The ``error`` event
    a refusal ends a stream with is raised as the class its code names; other named events
    are not journal lines: skipped. An id that is no position is refused."""
    for event in decoder.feed(chunk):
        if event.event == "error":
            raise calls.error_in(event.data)
        if event.event != "message" or not event.has_id or not event.id:
            continue
        if not (event.id.isascii() and event.id.isdigit()):
            raise calls.error_of(
                "internal_error", f"a stream event's id is no position: {event.id[:40]!r}"
            )
        yield StreamedLine(int(event.id), event.data + b"\n")


def stream_timeout(connect: float | None, read: float, ends: float | None) -> httpx.Timeout:
    """One (re)connection's timeouts: ``connect`` never past the stream's deadline (the
    server ends the stream itself at ``max_seconds``, so reads keep ``read``)."""
    if ends is not None:
        left = max(0.001, ends - time.monotonic())
        connect = left if connect is None else min(connect, left)
    return httpx.Timeout(connect, read=read)


def served_its_ask(params: dict[str, Any], connected: float) -> bool:
    """Whether a connection (made at ``connected``) that ended normally asked for
    :data:`CONNECTION_SECONDS` of a longer deadline and had them: the client split the
    deadline, nothing dropped, so the next connection follows at once, ``reconnect`` or not."""
    return (
        params.get("max_seconds") == CONNECTION_SECONDS
        and time.monotonic() - connected >= CONNECTION_SECONDS - CONNECTION_SLACK
    )


def pause(wait: float, ends: float | None) -> float:
    """The pause before reconnecting: ``wait``, never past the deadline."""
    return wait if ends is None else max(0.0, min(wait, ends - time.monotonic()))


def passed(ends: float | None) -> bool:
    return ends is not None and time.monotonic() >= ends


class ExportFiles:
    """An export's body and manifest, each written beside its target (``.partial``) and put
    in place together once both arrived: a failure leaves the previous pair as it was, and
    a body is never beside a manifest that is not its own (the old manifest goes first)."""

    def __init__(self, path: str) -> None:
        self.path, self.manifest_path = path, path + ".manifest.json"
        self._body, self._manifest = path + ".partial", self.manifest_path + ".partial"
        self._out: IO[bytes] = open(self._body, "wb")  # noqa: SIM115 (closed in finish/abort)

    def write(self, chunk: bytes) -> None:
        self._out.write(chunk)

    def commit(self, manifest: bytes | None) -> None:
        self._out.close()
        if manifest is not None:
            with open(self._manifest, "wb") as out:
                out.write(manifest)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.manifest_path)  # stale (another export's), or replaced below
        os.replace(self._body, self.path)
        if manifest is not None:
            os.replace(self._manifest, self.manifest_path)

    def __enter__(self) -> ExportFiles:
        return self

    def __exit__(self, *_: object) -> None:
        self._out.close()
        for partial in (self._body, self._manifest):  # left only by a failure
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)


def manifest_document(response: httpx.Response) -> tuple[bytes, dict[str, Any]]:
    """The manifest an export links, its bytes and its JSON object, or the error its
    answer carries."""
    calls.answered(response)
    try:
        document = response.json()
    except ValueError:
        document = None
    if not isinstance(document, dict):
        excerpt = response.content[:200]
        raise calls.error_of(
            "internal_error", f"the export's manifest is no JSON object: {excerpt!r}"
        )
    return response.content, document


class Client:
    """The BlackOps HTTP API for a reader and a caller: ``Client(base_url, token)``.

    Methods are named like the in-process :class:`blackops.Application`'s and raise the
    same exception classes, chosen by the answer's ``error.code``; a server that cannot
    be reached is ``BackendUnavailable``. A request that can never work (a base URL that is
    not ``http(s)://host``, a token with whitespace inside) is ``InvalidRequest``, at once;
    the token is stripped (token files end with a newline). ``space`` is the default Space
    of ``run``, ``submit`` and the workflow methods (``tenant=`` / ``space=`` override it).
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        space: str = DEFAULT_SPACE,
        timeout: float = 90.0,
        stream_read_timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {**calls.IDENTITY, **calls.bearer(token)}
        self.space = space
        #: A stream with no byte (not even a keep-alive) for this long is reconnected.
        self.stream_read_timeout = stream_read_timeout
        self._http = httpx.Client(
            base_url=calls.base_url_checked(base_url),
            headers=headers,
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send(self, call: Call[T]) -> T:
        try:
            response = self._http.request(call.method, call.path, **call.request_args())
        except httpx.TransportError as error:
            raise calls.transport_failure(error) from error
        except httpx.DecodingError as error:
            raise calls.undecodable(error) from error
        return call.read(response)

    # -- operations -----------------------------------------------------------------------

    def run(
        self,
        type: str,
        params: dict[str, Any] | None = None,
        *,
        tenant: str | None = None,
        traceparent: str | None = None,
    ) -> OperationResult:
        """Run Inline; a rejection or a failure is a result, as in process."""
        return self._send(calls.run(type, params, calls.space_of(tenant, self.space), traceparent))

    def submit(
        self,
        type: str,
        params: dict[str, Any] | None = None,
        *,
        tenant: str | None = None,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        """Accept as Deferred; returns the operation id."""
        call = calls.submit(
            type, params, calls.space_of(tenant, self.space), idempotency_key, traceparent
        )
        return self._send(call)

    def status(self, operation_id: str) -> dict[str, Any]:
        return self._send(calls.status(operation_id))

    def outcome(self, operation_id: str) -> dict[str, Any] | None:
        """The outcome document of a Deferred Completed operation (``not_found`` else)."""
        return self._send(calls.outcome(operation_id))

    def outcome_record(self, operation_id: str) -> dict[str, Any]:
        """``{operationId, type, schemaVersion, digest, outcome}``."""
        return self._send(calls.outcome_record(operation_id))

    def events(self, operation_id: str) -> list[dict[str, Any]]:
        return self._send(calls.events(operation_id))

    def redrive(self, operation_id: str) -> str:
        return self._send(calls.redrive(operation_id))

    def hold(self, operation_id: str, *, reason: str) -> dict[str, Any]:
        return self._send(calls.hold(operation_id, reason))

    def release(self, operation_id: str, *, reason: str) -> None:
        self._send(calls.release(operation_id, reason))

    def list_operations(self, **filters: Any) -> dict[str, Any]:
        """``tenant``, ``type``, ``status``, ``since``, ``until``, ``limit``, ``cursor``:
        ``{"items": [...], "next": cursor or None}``."""
        return self._send(calls.list_operations(filters))

    def operation_counts(self, tenant: str | None = None) -> dict[str, Any]:
        return self._send(calls.operation_counts(tenant))

    def receipt(self, operation_id: str) -> dict[str, Any]:
        """The operation's inclusion receipt ``{"entry", "index", "proof"}``."""
        return self._send(calls.receipt(operation_id))

    # -- workflows ------------------------------------------------------------------------

    def workflow(self, uid: str, *, space: str | None = None) -> Workflow:
        """The instances of workflow ``uid`` in ``space`` (``create`` / ``get``)."""
        return Workflow(self, calls.space_of(space, self.space), uid)

    def list_instances(self, uid: str, *, space: str | None = None, **filters: Any) -> Any:
        """``status``, ``since``, ``until``, ``limit``, ``cursor``:
        ``{"items": [...], "next": cursor or None}``."""
        return self._send(calls.list_instances(calls.space_of(space, self.space), uid, filters))

    def instance_counts(self, uid: str, *, space: str | None = None) -> dict[str, Any]:
        """``{"instanceCounts": {...}, "observedAt", "observedPosition"}``."""
        return self._send(calls.instance_counts(calls.space_of(space, self.space), uid))

    # -- the journal ----------------------------------------------------------------------

    def journal(
        self, after: int = 0, limit: int = 1000, *, space: str | None = None
    ) -> JournalPage:
        """One page of Observed JSONL: the whole journal (system tokens) or ``space``'s."""
        return self._send(calls.journal(after, limit, space))

    def stream(
        self,
        after: int = 0,
        *,
        space: str | None = None,
        limit: int | None = None,
        max_seconds: float | None = None,
        reconnect: bool = True,
        retry_seconds: float = 1.0,
    ) -> Iterator[StreamedLine]:
        """Every line after ``after`` as it is committed, in order, each once.

        A dropped connection is resumed with ``Last-Event-ID`` (after ``retry_seconds``,
        doubling up to 30 s while the server cannot be reached), unless ``reconnect`` is
        false. It ends when ``limit`` lines were received or ``max_seconds`` passed (past a
        day, what the server grants one connection, over several connections), and
        otherwise never; if the server cannot be reached when ``max_seconds`` passes (the
        last attempt failed), that failure is raised instead: an outage is not an empty
        journal. Refusals (a revoked token, an answer that is no event stream) raise."""
        stream_arguments_checked(after, limit, max_seconds, retry_seconds)
        path = calls.journal_path(space, "/stream")
        ends = time.monotonic() + max_seconds if max_seconds is not None else None
        remaining, wait = limit, retry_seconds
        failed: BlackOpsError | None = None  # the last attempt's failure, if it failed
        while True:
            if passed(ends):
                if failed is not None:
                    raise failed
                return
            params, headers = stream_params(after, remaining, ends)
            timeout = stream_timeout(self._http.timeout.connect, self.stream_read_timeout, ends)
            connected = time.monotonic()
            try:
                with self._http.stream(
                    "GET", path, params=params, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code != 200:
                        response.read()
                        raise calls.error_from(response)
                    refused = calls.compressed(response)
                    if refused is not None:
                        raise refused
                    chunks = response.iter_bytes()
                    first = next(chunks, b"")  # the excerpt a refusal quotes
                    refused = calls.not_an_event_stream(response, first)
                    if refused is not None:
                        raise refused
                    wait, failed, resumed = retry_seconds, None, after
                    decoder = SSEDecoder()
                    for chunk in itertools.chain((first,), chunks):
                        for streamed in streamed_lines(decoder, chunk):
                            if streamed.position <= resumed:
                                # Sent again by a server that ignored Last-Event-ID. Within
                                # one connection nothing is dropped: a relay's duplicate or
                                # reordering is replay's to report (decisions P51).
                                continue
                            after = streamed.position
                            yield streamed
                            if remaining is not None:
                                remaining -= 1
                                if remaining == 0:
                                    return
            except httpx.DecodingError as error:
                raise calls.undecodable(error) from error
            except httpx.TransportError as error:
                failed = calls.transport_failure(error)
                if not reconnect or not isinstance(failed, BackendUnavailable):
                    raise failed from error
                time.sleep(pause(wait, ends))
                wait = min(wait * 2, 30.0)
            except BackendUnavailable as error:
                if not reconnect:
                    raise
                failed = error
                time.sleep(pause(wait, ends))
                wait = min(wait * 2, 30.0)
            else:
                if served_its_ask(params, connected):
                    continue
                if not reconnect:
                    return
                time.sleep(pause(retry_seconds, ends))  # ended by the server: no tight loop

    def export(
        self,
        path: str,
        *,
        after: int = 0,
        until: int | None = None,
        space: str | None = None,
    ) -> dict[str, Any] | None:
        """``GET /v1/journal/export`` (``space``: that Space's lines): the JSONL body into
        ``path`` and, when the answer links its manifest (``Link: <...>; rel="describedby"``,
        on this client's origin only), the manifest into ``path + ".manifest.json"``;
        returns the manifest (None without one, and a stale manifest file is removed). Both
        files are replaced together once both arrived; a failure leaves the old ones."""
        params = {"after": after, "until": until}
        query = {k: v for k, v in params.items() if v is not None}
        route = calls.journal_path(space, "/export")  # refused before a file is opened
        try:
            with ExportFiles(path) as files:
                with self._http.stream("GET", route, params=query) as response:
                    if not response.is_success:
                        response.read()
                        raise calls.error_from(response)
                    refused = calls.compressed(response)
                    if refused is not None:  # read as is, a cut body passed for the export
                        raise refused
                    if calls.media_type_of(response) != "application/jsonl":
                        response.read()  # a proxy's page, not the export: the files stay
                        raise calls.wrong_media_type(
                            response, "application/jsonl", response.content
                        )
                    for chunk in response.iter_bytes():
                        files.write(chunk)
                    url = calls.manifest_url(response, self._http.base_url)
                manifest = None if url is None else manifest_document(self._http.get(url))
                files.commit(None if manifest is None else manifest[0])
        except httpx.TransportError as error:
            raise calls.transport_failure(error) from error
        except httpx.DecodingError as error:
            raise calls.undecodable(error) from error
        return None if manifest is None else manifest[1]

    def checkpoint(self) -> str:
        """The journal's current signed checkpoint (a text note)."""
        return self._send(calls.checkpoint())

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of an Observed JSONL line (served without a token)."""
        return self._send(calls.schema())


class Workflow:
    """``client.workflow(uid)``: create and get instances (DurableWorkflow §2)."""

    def __init__(self, client: Client, space: str, uid: str) -> None:
        self.client, self.space, self.uid = client, space, uid

    def create(self, *, id: str | None = None, params: dict[str, Any] | None = None) -> Instance:
        created = self.client._send(calls.create_instance(self.space, self.uid, id, params))
        return Instance(self, created)

    def get(self, id: str) -> Instance:
        """The instance ``id``; ``UnknownInstance`` if there is none."""
        self.client._send(calls.instance_status(self.space, self.uid, id))
        return Instance(self, id)

    def __repr__(self) -> str:
        return f"Workflow({self.space!r}, {self.uid!r})"


class Instance:
    """One workflow instance: ``status``, ``send_event``, ``terminate``."""

    def __init__(self, workflow: Workflow, instance_id: str) -> None:
        self.workflow = workflow
        self.id = instance_id

    def status(self) -> dict[str, Any]:
        """``{status, output?, error?}``."""
        w = self.workflow
        return w.client._send(calls.instance_status(w.space, w.uid, self.id))

    def send_event(self, *, type: str, payload: dict[str, Any] | None = None) -> int:
        """Accept an event durably; returns its per-instance sequence number."""
        w = self.workflow
        return w.client._send(calls.send_event(w.space, w.uid, self.id, type, payload))

    def terminate(self) -> str:
        """Returns once the instance's code has stopped: ``terminated``, or the status an
        instance that had already ended keeps."""
        w = self.workflow
        return w.client._send(calls.terminate(w.space, w.uid, self.id))

    def __repr__(self) -> str:
        return f"Instance({self.workflow.uid!r}, {self.id!r})"


__all__ = ["BlackOpsError", "Client", "Instance", "JournalPage", "StreamedLine", "Workflow"]
