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
    StreamedLine,
    stream_failure,
    stream_params,
    streamed_lines,
)
from blackops.client.sse import SSEDecoder
from blackops.errors import BackendUnavailable
from blackops.operations.results import OperationResult

T = TypeVar("T")


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
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.space = space
        self.stream_read_timeout = stream_read_timeout
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
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
            raise calls.unreachable(error) from error
        return call.read(response)

    async def run(
        self,
        type: str,
        params: dict[str, Any] | None = None,
        *,
        tenant: str | None = None,
        traceparent: str | None = None,
    ) -> OperationResult:
        return await self._send(calls.run(type, params, tenant or self.space, traceparent))

    async def submit(
        self,
        type: str,
        params: dict[str, Any] | None = None,
        *,
        tenant: str | None = None,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        call = calls.submit(type, params, tenant or self.space, idempotency_key, traceparent)
        return await self._send(call)

    async def status(self, operation_id: str) -> dict[str, Any]:
        return await self._send(calls.status(operation_id))

    async def outcome(self, operation_id: str) -> dict[str, Any] | None:
        document: dict[str, Any] | None = (await self.outcome_record(operation_id))["outcome"]
        return document

    async def outcome_record(self, operation_id: str) -> dict[str, Any]:
        return await self._send(calls.outcome_record(operation_id))

    async def events(self, operation_id: str) -> list[dict[str, Any]]:
        return await self._send(calls.events(operation_id))

    async def redrive(self, operation_id: str) -> str:
        return await self._send(calls.redrive(operation_id))

    async def list_operations(self, **filters: Any) -> dict[str, Any]:
        return await self._send(calls.list_operations(filters))

    async def operation_counts(self, tenant: str | None = None) -> dict[str, Any]:
        return await self._send(calls.operation_counts(tenant))

    async def receipt(self, operation_id: str) -> dict[str, Any]:
        return await self._send(calls.receipt(operation_id))

    def workflow(self, uid: str, *, space: str | None = None) -> AsyncWorkflow:
        return AsyncWorkflow(self, space or self.space, uid)

    async def list_instances(self, uid: str, *, space: str | None = None, **filters: Any) -> Any:
        return await self._send(calls.list_instances(space or self.space, uid, filters))

    async def instance_counts(self, uid: str, *, space: str | None = None) -> dict[str, Any]:
        return await self._send(calls.instance_counts(space or self.space, uid))

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
        path = calls.journal_path(space, "/stream")
        ends = time.monotonic() + max_seconds if max_seconds is not None else None
        remaining, wait = limit, retry_seconds
        timeout = httpx.Timeout(self._http.timeout.connect, read=self.stream_read_timeout)
        while True:
            params, headers = stream_params(after, remaining, ends)
            try:
                async with self._http.stream(
                    "GET", path, params=params, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise calls.error_from(response)
                    wait = retry_seconds
                    decoder = SSEDecoder()
                    async for chunk in response.aiter_bytes():
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
                await asyncio.sleep(wait)
                wait = min(wait * 2, 30.0)
            else:
                if ends is not None and time.monotonic() >= ends:
                    return
                if not reconnect:
                    return
                await asyncio.sleep(retry_seconds)  # ended by the server: no tight loop


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
