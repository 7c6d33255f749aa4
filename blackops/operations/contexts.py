"""The checks at an operation's door and the execution context it is given (OL-12).

Every surface (Python, HTTP, CLI, the control plane) validates tenants, ids and keys
here, before any side effect, and builds the context recorded on every event.
"""

from __future__ import annotations

import contextvars
import re
from typing import Any

from blackops.ids import new_id
from domain.access import SPACE_NAME
from domain.clock import Clock
from domain.context import Actor, ExecutionContext, check_traceparent
from domain.errors import InvalidRequest, NotFound

TENANT = SPACE_NAME  # a tenant is a Space
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
#: Idempotency keys: visible ASCII, as an HTTP header carries them (decisions P21).
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
#: The execution context of the handler running in this thread or task, so operations
#: submitted from inside a handler inherit correlation and tenant and record causation.
CURRENT_CONTEXT: contextvars.ContextVar[ExecutionContext | None] = contextvars.ContextVar(
    "blackops_current_context", default=None
)


def check_idempotency_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidRequest("idempotency key must be 1-255 visible ASCII characters")
    return key


def check_tenant(tenant: object) -> str:
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        raise InvalidRequest("tenant (Space) must be 1-63 letters, digits, '_', '.', '-'")
    return tenant


def check_operation_id(operation_id: object) -> str:
    if not isinstance(operation_id, str) or not _ID.fullmatch(operation_id):
        # Named up to 128 characters, as instance and workflow ids are: a 60,000-character id
        # was echoed whole (found by a defect hunt, stop 37).
        shown = operation_id[:128] if isinstance(operation_id, str) else operation_id
        raise NotFound(f"operation {shown!r} does not exist")
    return operation_id


def operation_context(
    clock: Clock,
    type: str,
    actor: Actor | str | dict[str, Any],
    tenant: str,
    traceparent: str | None = None,
    causation_id: str | None = None,
    correlation_id: str | None = None,
    *,
    operation_id: str | None = None,
) -> ExecutionContext:
    """The context of a new operation; inside a handler, a child of that operation."""
    operation_id = operation_id or new_id(clock)
    parent: ExecutionContext | None = CURRENT_CONTEXT.get()
    if parent is not None:
        # Called from inside a handler: a child of that operation (OL-12, Part B).
        if tenant != parent.tenant:
            raise InvalidRequest(
                f"an operation submitted from a handler stays in its tenant "
                f"{parent.tenant!r}, not {tenant!r}"
            )
        correlation_id = correlation_id or parent.correlation_id
        causation_id = causation_id or parent.operation_id
        # The same trace: its spans started a new one (found by a defect hunt, stop 40).
        traceparent = traceparent or parent.traceparent
    for name, value in (("causation_id", causation_id), ("correlation_id", correlation_id)):
        if value is not None and (not isinstance(value, str) or not _ID.fullmatch(value)):
            raise InvalidRequest(f"{name} must be an id of 1-200 characters")
    return ExecutionContext(
        operation_id=operation_id,
        operation_type=type,
        tenant=check_tenant(tenant),
        actor=Actor.of(actor),
        correlation_id=correlation_id or operation_id,
        causation_id=causation_id,
        traceparent=check_traceparent(traceparent),
    )
