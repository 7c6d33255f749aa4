"""Identifiers: UUIDv7 (time-ordered, RFC 9562) from the injected clock plus randomness."""

from __future__ import annotations

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
