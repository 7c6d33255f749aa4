"""Where the monitor reads the log (``audit watch``): the service over HTTP here, the store
directly in ``store_source.py``; either raises :class:`LogUnreadable` when the log cannot be
read just now, which is no finding."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import httpx


class LogUnreadable(Exception):
    """The log could not be read just now (not a finding: it says nothing about the log)."""


class Source(Protocol):
    """Where the monitor reads the log: the service over HTTP, or the store directly."""

    def note(self) -> str: ...

    def proof(self, old: int, new: int) -> Sequence[bytes]: ...


class RecordedLeaves(Protocol):
    """The log's leaves as a source holds them (the store's, ``audit watch --store``), read
    once per check: the monitor recomputes each signed root from them (decisions T9), since
    at an unchanged size no proof is asked and a proof alone never re-reads old leaves."""

    @property
    def size(self) -> int: ...

    def root(self, size: int) -> bytes: ...


@runtime_checkable
class LeafSource(Protocol):
    """A source that reads the log's leaves itself (the store; the service's are its own)."""

    def leaves(self) -> RecordedLeaves: ...


class HttpSource:
    def __init__(
        self, url: str, token: str | None, transport: httpx.BaseTransport | None = None
    ) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(
            base_url=url.rstrip("/"), headers=headers, timeout=30, transport=transport
        )

    def note(self) -> str:
        return self._get("/v1/checkpoint", {}).text

    def proof(self, old: int, new: int) -> Sequence[bytes]:
        answer = self._get("/v1/proofs/consistency", {"from": old, "to": new})
        return [base64.b64decode(line, validate=True) for line in answer.text.split()]

    def _get(self, path: str, params: dict[str, int]) -> httpx.Response:
        """The answer; unreachable or 5xx is :class:`LogUnreadable`, a 4xx an
        ``httpx.HTTPStatusError`` (the service refused: a finding, when it is the proof)."""
        import httpx

        try:
            answer = self.client.get(path, params=params)
        except httpx.TransportError as error:
            raise LogUnreadable(f"GET {path}: {error}") from None
        if answer.status_code >= 500:
            raise LogUnreadable(f"GET {path}: {answer.status_code} {answer.text.strip()[:200]}")
        answer.raise_for_status()
        return answer
