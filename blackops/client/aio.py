"""The asyncio client: :class:`AsyncClient`, the same methods as :class:`Client` awaited
(the requests and how answers are read are shared, ``calls.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx

from blackops.client import calls
from blackops.client.calls import Call, JournalPage
from blackops.client.client import (
    DEFAULT_SPACE,
    ExportFiles,
    StreamedLine,
    manifest_document,
    passed,
    pause,
    served_its_ask,
    stream_arguments_checked,
    stream_params,
    stream_timeout,
    streamed_lines,
)
from blackops.client.sse import SSEDecoder
from blackops.errors import BackendUnavailable, BlackOpsError
from blackops.operations.results import OperationResult

T = TypeVar("T")


async def after_first(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``first``, then ``rest``: the chunks of an answer whose first was read already."""
    yield first
    async for chunk in rest:
        yield chunk


class AsyncClient:
    """``async with AsyncClient(base_url, token) as client``: :class:`Client`'s methods,
    awaited; :meth:`stream` is an async iterator."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        space: str = DEFAULT_SPACE,
        timeout: float = 90.0,
        stream_read_timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {**calls.IDENTITY, **calls.bearer(token)}
        self.space = space
        self.stream_read_timeout = stream_read_timeout
        self._http = httpx.AsyncClient(
            base_url=calls.base_url_checked(base_url),
            headers=headers,
            timeout=timeout,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(call.method, call.path, **call.request_args())
        except httpx.TransportError as error:
            raise calls.transport_failure(error) from error
        except httpx.DecodingError as error:
            raise calls.undecodable(error) from error
        return call.read(response)

    async def run(
        self,
        type: str,
        params: dict[str, Any] | None = None,
        *,
        tenant: str | None = None,
        traceparent: str | None = None,
    ) -> OperationResult:
        return await self._send(
            calls.run(type, params, calls.space_of(tenant, self.space), traceparent)
        )

    async def submit(
        self,
        type: str,
        params: dict[str, Any] | None = None,
        *,
        tenant: str | None = None,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        call = calls.submit(
            type, params, calls.space_of(tenant, self.space), idempotency_key, traceparent
        )
        return await self._send(call)

    async def status(self, operation_id: str) -> dict[str, Any]:
        return await self._send(calls.status(operation_id))

    async def outcome(self, operation_id: str) -> dict[str, Any] | None:
        return await self._send(calls.outcome(operation_id))

    async def outcome_record(self, operation_id: str) -> dict[str, Any]:
        return await self._send(calls.outcome_record(operation_id))

    async def events(self, operation_id: str) -> list[dict[str, Any]]:
        return await self._send(calls.events(operation_id))

    async def redrive(self, operation_id: str) -> str:
        return await self._send(calls.redrive(operation_id))

    async def hold(self, operation_id: str, *, reason: str) -> dict[str, Any]:
        return await self._send(calls.hold(operation_id, reason))

    async def release(self, operation_id: str, *, reason: str) -> None:
        await self._send(calls.release(operation_id, reason))

    async def list_operations(self, **filters: Any) -> dict[str, Any]:
        return await self._send(calls.list_operations(filters))

    async def operation_counts(self, tenant: str | None = None) -> dict[str, Any]:
        return await self._send(calls.operation_counts(tenant))

    async def receipt(self, operation_id: str) -> dict[str, Any]:
        return await self._send(calls.receipt(operation_id))

    def workflow(self, uid: str, *, space: str | None = None) -> AsyncWorkflow:
        return AsyncWorkflow(self, calls.space_of(space, self.space), uid)

    async def list_instances(self, uid: str, *, space: str | None = None, **filters: Any) -> Any:
        return await self._send(
            calls.list_instances(calls.space_of(space, self.space), uid, filters)
        )

    async def instance_counts(self, uid: str, *, space: str | None = None) -> dict[str, Any]:
        return await self._send(calls.instance_counts(calls.space_of(space, self.space), uid))

    async def journal(
        self, after: int = 0, limit: int = 1000, *, space: str | None = None
    ) -> JournalPage:
        return await self._send(calls.journal(after, limit, space))

    async def checkpoint(self) -> str:
        return await self._send(calls.checkpoint())

    async def schema(self) -> dict[str, Any]:
        return await self._send(calls.schema())

    async def stream(
        self,
        after: int = 0,
        *,
        space: str | None = None,
        limit: int | None = None,
        max_seconds: float | None = None,
        reconnect: bool = True,
        retry_seconds: float = 1.0,
    ) -> AsyncIterator[StreamedLine]:
        """As :meth:`Client.stream`."""
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
                async with self._http.stream(
                    "GET", path, params=params, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise calls.error_from(response)
                    refused = calls.compressed(response)
                    if refused is not None:
                        raise refused
                    chunks = response.aiter_bytes()
                    first = await anext(chunks, b"")  # the excerpt a refusal quotes
                    refused = calls.not_an_event_stream(response, first)
                    if refused is not None:
                        raise refused
                    wait, failed, resumed = retry_seconds, None, after
                    decoder = SSEDecoder()
                    async for chunk in after_first(first, chunks):
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
                await asyncio.sleep(pause(wait, ends))
                wait = min(wait * 2, 30.0)
            except BackendUnavailable as error:
                if not reconnect:
                    raise
                failed = error
                await asyncio.sleep(pause(wait, ends))
                wait = min(wait * 2, 30.0)
            else:
                if served_its_ask(params, connected):
                    continue
                if not reconnect:
                    return
                await asyncio.sleep(pause(retry_seconds, ends))  # ended by the server

    async def export(
        self,
        path: str,
        *,
        after: int = 0,
        until: int | None = None,
        space: str | None = None,
    ) -> dict[str, Any] | None:
        """As :meth:`Client.export` (the files are written from the event loop's thread:
        local writes, as any async file writer would do)."""
        params = {"after": after, "until": until}
        query = {k: v for k, v in params.items() if v is not None}
        route = calls.journal_path(space, "/export")  # refused before a file is opened
        try:
            with ExportFiles(path) as files:
                async with self._http.stream("GET", route, params=query) as response:
                    if not response.is_success:
                        await response.aread()
                        raise calls.error_from(response)
                    refused = calls.compressed(response)
                    if refused is not None:  # read as is, a cut body passed for the export
                        raise refused
                    if calls.media_type_of(response) != "application/jsonl":
                        await response.aread()  # a proxy's page: the files stay as they were
                        raise calls.wrong_media_type(
                            response, "application/jsonl", response.content
                        )
                    async for chunk in response.aiter_bytes():
                        files.write(chunk)
                    url = calls.manifest_url(response, self._http.base_url)
                manifest = None
                if url is not None:
                    manifest = manifest_document(await self._http.get(url))
                files.commit(None if manifest is None else manifest[0])
        except httpx.TransportError as error:
            raise calls.transport_failure(error) from error
        except httpx.DecodingError as error:
            raise calls.undecodable(error) from error
        return None if manifest is None else manifest[1]


class AsyncWorkflow:
    def __init__(self, client: AsyncClient, space: str, uid: str) -> None:
        self.client, self.space, self.uid = client, space, uid

    async def create(
        self, *, id: str | None = None, params: dict[str, Any] | None = None
    ) -> AsyncInstance:
        created = await self.client._send(calls.create_instance(self.space, self.uid, id, params))
        return AsyncInstance(self, created)

    async def get(self, id: str) -> AsyncInstance:
        await self.client._send(calls.instance_status(self.space, self.uid, id))
        return AsyncInstance(self, id)


class AsyncInstance:
    def __init__(self, workflow: AsyncWorkflow, instance_id: str) -> None:
        self.workflow = workflow
        self.id = instance_id

    async def status(self) -> dict[str, Any]:
        w = self.workflow
        return await w.client._send(calls.instance_status(w.space, w.uid, self.id))

    async def send_event(self, *, type: str, payload: dict[str, Any] | None = None) -> int:
        w = self.workflow
        return await w.client._send(calls.send_event(w.space, w.uid, self.id, type, payload))

    async def terminate(self) -> str:
        w = self.workflow
        return await w.client._send(calls.terminate(w.space, w.uid, self.id))
