"""The synchronous client: :class:`Client` and its workflow / instance handles."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from blackops.client import calls
from blackops.client.calls import Call, JournalPage
from blackops.client.sse import SSEDecoder
from blackops.errors import BackendUnavailable, BlackOpsError
from blackops.operations.results import OperationResult

T = TypeVar("T")
#: What ``space=`` defaults to (the Space ``blackops serve`` bootstraps).
DEFAULT_SPACE = "default"


@dataclass(frozen=True, slots=True)
class StreamedLine:
    """One event of a live stream: its position and its Observed JSONL line (with the
    newline), byte for byte the line an export writes."""

    position: int
    line: bytes


def stream_params(
    after: int, limit: int | None, ends: float | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The query and headers of one (re)connection: Last-Event-ID is the last position
    received (the server resumes after it: positions have gaps, never ``id + 1``)."""
    params: dict[str, Any] = {"after": after}
    if limit is not None:
        params["limit"] = limit
    if ends is not None:
        params["max_seconds"] = max(0.001, round(ends - time.monotonic(), 3))
    return params, {"Last-Event-ID": str(after), "Accept": "text/event-stream"}


def streamed_lines(decoder: SSEDecoder, chunk: bytes) -> Iterator[StreamedLine]:
    """The journal lines one chunk of a stream completes (comments and id-less events are
    heartbeats: skipped). The ``error`` event a refusal ends a stream with is raised as
    the class its code names; other named events are not journal lines: skipped."""
    for event in decoder.feed(chunk):
        if event.event == "error":
            raise calls.error_in(event.data)
        if event.event == "message" and event.id is not None:
            yield StreamedLine(int(event.id), event.data + b"\n")


def stream_failure(error: httpx.TransportError | BackendUnavailable) -> BlackOpsError:
    """What a stream that may not reconnect raises for ``error``."""
    return calls.unreachable(error) if isinstance(error, httpx.TransportError) else error


def write_export(path: str, chunks: Iterator[bytes]) -> None:
    """The body into ``path``, replaced atomically once complete."""
    partial = path + ".partial"
    with open(partial, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
    os.replace(partial, path)


class Client:
    """The BlackOps HTTP API for a reader and a caller: ``Client(base_url, token)``.

    Methods are named like the in-process :class:`blackops.Application`'s and raise the
    same exception classes, chosen by the answer's ``error.code``; a server that cannot
    be reached is ``BackendUnavailable``. ``space`` is the default Space of ``run``,
    ``submit`` and the workflow methods (``tenant=`` / ``space=`` override it). Use it as
    a context manager, or call :meth:`close`.
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
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.space = space
        #: A stream with no byte (not even a keep-alive) for this long is reconnected.
        self.stream_read_timeout = stream_read_timeout
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
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
            raise calls.unreachable(error) from error
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
        return self._send(calls.run(type, params, tenant or self.space, traceparent))

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
        call = calls.submit(type, params, tenant or self.space, idempotency_key, traceparent)
        return self._send(call)

    def status(self, operation_id: str) -> dict[str, Any]:
        return self._send(calls.status(operation_id))

    def outcome(self, operation_id: str) -> dict[str, Any] | None:
        """The outcome document of a Deferred Completed operation (``not_found`` else)."""
        document: dict[str, Any] | None = self.outcome_record(operation_id)["outcome"]
        return document

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
        return Workflow(self, space or self.space, uid)

    def list_instances(self, uid: str, *, space: str | None = None, **filters: Any) -> Any:
        """``status``, ``since``, ``until``, ``limit``, ``cursor``:
        ``{"items": [...], "next": cursor or None}``."""
        return self._send(calls.list_instances(space or self.space, uid, filters))

    def instance_counts(self, uid: str, *, space: str | None = None) -> dict[str, Any]:
        """``{"instanceCounts": {...}, "observedAt", "observedPosition"}``."""
        return self._send(calls.instance_counts(space or self.space, uid))

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
        false. It ends when ``limit`` lines were received or ``max_seconds`` passed, and
        otherwise never. Refusals (a revoked token, say) raise."""
        path = calls.journal_path(space, "/stream")
        ends = time.monotonic() + max_seconds if max_seconds is not None else None
        remaining, wait = limit, retry_seconds
        timeout = httpx.Timeout(self._http.timeout.connect, read=self.stream_read_timeout)
        while True:
            params, headers = stream_params(after, remaining, ends)
            try:
                with self._http.stream(
                    "GET", path, params=params, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code != 200:
                        response.read()
                        raise calls.error_from(response)
                    wait = retry_seconds
                    decoder = SSEDecoder()
                    for chunk in response.iter_bytes():
                        for streamed in streamed_lines(decoder, chunk):
                            after = streamed.position
                            yield streamed
                            if remaining is not None:
                                remaining -= 1
                                if remaining == 0:
                                    return
            except (httpx.TransportError, BackendUnavailable) as error:
                if not reconnect:
                    raise stream_failure(error) from error
                time.sleep(wait)
                wait = min(wait * 2, 30.0)
            else:
                if ends is not None and time.monotonic() >= ends:
                    return
                if not reconnect:
                    return
                time.sleep(retry_seconds)  # ended by the server: no tight loop

    def export(
        self, path: str, *, after: int = 0, until: int | None = None
    ) -> dict[str, Any] | None:
        """``GET /v1/journal/export``: the JSONL body into ``path`` and, when the answer
        links its manifest (``Link: <...>; rel="describedby"``), the manifest into
        ``path + ".manifest.json"``; returns the manifest (None without one)."""
        params = {"after": after, "until": until}
        try:
            with self._http.stream(
                "GET",
                "/v1/journal/export",
                params={k: v for k, v in params.items() if v is not None},
            ) as response:
                if not response.is_success:
                    response.read()
                    raise calls.error_from(response)
                write_export(path, response.iter_bytes())
                manifest_url = calls.described_by(response.headers.get("link"))
            if manifest_url is None:
                return None
            manifest = calls.checked(self._http.get(manifest_url))
        except httpx.TransportError as error:
            raise calls.unreachable(error) from error
        write_export(path + ".manifest.json", iter([manifest.content]))
        document: dict[str, Any] = manifest.json()
        return document

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
