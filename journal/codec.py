"""Event state on disk: the RFC 8785 canonical bytes of ``{at, context, data}``."""

from __future__ import annotations

from typing import Any

from domain.documents import canonical_envelope
from domain.events import NewEvent
from domain.json_text import load_canonical


def encode_state(event: NewEvent) -> bytes:
    """Canonical bytes, so a hash of the stored state is a hash of the canonical event.

    Envelope limits, not document limits: the data may wrap a full 1 MiB params document.
    """
    return canonical_envelope({"at": event.at, "context": event.context, "data": event.data})


def decode_state(state: bytes) -> tuple[str, dict[str, Any], dict[str, Any]]:
    body = load_canonical(state)  # any depth: documents have no depth limit
    return body["at"], body["context"], body["data"]
