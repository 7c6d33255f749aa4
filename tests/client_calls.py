"""One client call made the same way through `Client` and `AsyncClient` (the client tests'
caller), on a transport that answers what the test chose."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from blackops.client import AsyncClient, Client

BASE_URL = "http://api.example"


def call_client(
    caller: str, transport: httpx.MockTransport, method: str,
    *args: Any, **kwargs: Any,
) -> Any:  # fmt: skip
    """``method(*args, **kwargs)`` of a ``caller`` (``sync`` or ``async``) client of Space
    ``acme`` with a token, sent through ``transport``; its result (or what it raises)."""
    if caller == "sync":
        with Client(BASE_URL, "tok", transport=transport, space="acme") as client:
            return getattr(client, method)(*args, **kwargs)

    async def scenario() -> Any:
        async with AsyncClient(BASE_URL, "tok", transport=transport, space="acme") as client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(scenario())
