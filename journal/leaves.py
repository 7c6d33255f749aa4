"""Tamper evidence, recorded as events are appended: one Merkle leaf per event.

The entry of an event is its Observed JSONL line without the newline: the RFC 8785
canonical JSON of ``{at, context, data, position, stream, type, version}``. The stored
state is the canonical ``{at, context, data}``, and the other four members sort after
those three, so the entry is the stored bytes with the closing brace replaced by them.
Stream ids and event types are restricted to characters JSON writes as themselves, so
every backend (PostgreSQL builds the entry in SQL) produces the same bytes.

leaf = SHA-256(0x00 || entry), as RFC 6962 (``replay/merkle.py`` builds the tree).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

#: Printable ASCII except the quote and the backslash: a JSON string of these is just
#: the characters between two quotes, in every encoder.
SAFE_NAME: Final = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]{1,200}$")


def entry_bytes(position: int, stream: str, version: int, topic: str, state: bytes) -> bytes:
    if not state.startswith(b"{") or not state.endswith(b"}") or state == b"{}":
        raise ValueError(f"event at position {position} is not a canonical envelope")
    return b"".join(
        (
            state[:-1],
            b',"position":',
            str(position).encode(),
            b',"stream":"',
            stream.encode(),
            b'","type":"',
            topic.encode(),
            b'","version":',
            str(version).encode(),
            b"}",
        )
    )


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def event_leaf(position: int, stream: str, version: int, topic: str, state: bytes) -> bytes:
    return leaf_hash(entry_bytes(position, stream, version, topic, state))
