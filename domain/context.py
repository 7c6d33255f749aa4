"""Execution Context (OL-12, Part B): who, for whom, which attempt, under which token."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from domain.errors import InvalidRequest
from domain.json_text import scalar_text

# W3C Trace Context, version 00: version-traceid-parentid-flags, ids not all zero.
#: W3C Trace Context, version 00. A trace id or parent id of all zeros is invalid, and W3C
#: says to ignore such a header: it is recorded as none (anything malformed is refused).
TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_ZERO_IDS = re.compile(r"^00-(0{32}-[0-9a-f]{16}|[0-9a-f]{32}-0{16})-[0-9a-f]{2}$")
_ACTOR_KINDS = frozenset(
    {"principal", "user", "service", "token", "cli", "system", "operation", "admin"}
)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asked: a principal id and its kind."""

    id: str
    kind: str = "principal"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not 1 <= len(self.id) <= 256:
            raise InvalidRequest("actor id must be a string of 1-256 characters")
        if scalar_text(self.id) != self.id:
            raise InvalidRequest("actor id must be Unicode text (no lone surrogates)")
        if self.kind not in _ACTOR_KINDS:
            raise InvalidRequest(f"actor kind must be one of {sorted(_ACTOR_KINDS)}")

    @classmethod
    def of(cls, value: Actor | str | dict[str, Any]) -> Actor:
        """Accept an Actor, a bare principal id, or ``{"id", "kind"}``."""
        if isinstance(value, Actor):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, dict) and set(value) <= {"id", "kind"} and "id" in value:
            return cls(value["id"], value.get("kind", "principal"))
        raise InvalidRequest("actor must be a principal id or {'id', 'kind'}")

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "kind": self.kind}


def check_traceparent(value: str | None) -> str | None:
    """A W3C ``traceparent`` or None; anything malformed is refused, not dropped. One with
    an all-zero id is well formed but invalid: ignored, as W3C requires (decisions Q11)."""
    if value is None:
        return None
    if not isinstance(value, str) or not TRACEPARENT.fullmatch(value):
        raise InvalidRequest("traceparent must be a W3C Trace Context version 00 value")
    return None if _ZERO_IDS.fullmatch(value) else value


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """Attached to every lifecycle event and handed to the handler as ``ctx``.

    ``attempt`` is 1-based; 0 means no attempt has started yet. ``worker`` and
    ``fencing_token`` are set for Deferred attempts only.
    """

    operation_id: str
    operation_type: str
    tenant: str
    actor: Actor
    correlation_id: str
    causation_id: str | None = None
    attempt: int = 0
    worker: str | None = None
    fencing_token: int | None = None
    traceparent: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionContext:
        """Back from the journaled form (``to_dict``)."""
        actor = data["actor"]
        return cls(
            operation_id=data["operation_id"],
            operation_type=data["operation_type"],
            tenant=data["tenant"],
            actor=Actor(actor["id"], actor["kind"]),
            correlation_id=data["correlation_id"],
            causation_id=data.get("causation_id"),
            attempt=data.get("attempt", 0),
            worker=data.get("worker"),
            fencing_token=data.get("fencing_token"),
            traceparent=data.get("traceparent"),
        )

    def for_attempt(
        self, attempt: int, *, worker: str | None = None, fencing_token: int | None = None
    ) -> ExecutionContext:
        return replace(self, attempt=attempt, worker=worker, fencing_token=fencing_token)

    def to_dict(self) -> dict[str, Any]:
        """The journaled form: stable keys, ``None`` where a value does not apply."""
        return {
            "operation_id": self.operation_id,
            "operation_type": self.operation_type,
            "correlation_id": self.correlation_id,
            "causation_id": self.causation_id,
            "actor": self.actor.to_dict(),
            "tenant": self.tenant,
            "attempt": self.attempt,
            "worker": self.worker,
            "fencing_token": self.fencing_token,
            "traceparent": self.traceparent,
        }
