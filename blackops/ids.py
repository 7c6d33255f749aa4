"""Identifiers: UUIDv7 (time-ordered, RFC 9562) from the injected clock plus randomness."""

from __future__ import annotations

import hashlib
import os
import uuid

from domain.clock import Clock


def new_id(clock: Clock) -> str:
    """A UUIDv7 string: 48 bits of Unix milliseconds, version, 74 random bits."""
    millis = int(clock.now().timestamp() * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis << 80) | (0x7 << 76) | ((rand >> 68) & 0xFFF) << 64
    value |= (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def derived_id(*parts: str) -> str:
    """A UUIDv8 (RFC 9562) from the SHA-256 of ``parts``: the same parts, the same id.

    Idempotency keys map to operation ids this way, so the journal's own unique
    constraint on (stream, version 1) decides which of many concurrent submissions
    with one key wins, across any number of processes.
    """
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()
    value = int.from_bytes(digest[:16], "big")
    value &= ~(0xF << 76) & ~(0b11 << 62)
    value |= (0x8 << 76) | (0b10 << 62)
    return str(uuid.UUID(int=value))


def idempotent_operation_id(space: str, operation_type: str, key: str) -> str:
    """The one operation an idempotency key names, per Space (tenant) and type (O5)."""
    return derived_id("idempotency", space, operation_type, key)


def redrive_id(dead_operation_id: str) -> str:
    """The one operation that redrives a Dead Letter one (P22: redriving again returns it)."""
    return derived_id("redrive", dead_operation_id)
