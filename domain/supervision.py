"""Supervision Policy (OL-7, Part B), business rejection (OL-6) and retry arithmetic."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal

from domain.json_text import scalar_text

REJECTION_CATEGORIES: Final = (
    "validation",
    "authorization",
    "not_found",
    "conflict",
    "business_rule",
)
_CODE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


def recordable_code(code: str) -> str:
    """A rejection code as the journal records it (``[a-z][a-z0-9_.-]{0,63}``): lower case,
    any other character ``_``, ``r_`` before one that starts with no letter, cut at 64.
    ``INSUFFICIENT_FUNDS`` is ``insufficient_funds``. Refusing such a code turned the
    handler's rejection into a ValueError, a failure its policy could even retry (found by
    a spec review, stop 36)."""
    if _CODE.fullmatch(code):
        return code
    spelled = re.sub(r"[^a-z0-9_.-]", "_", code.lower())
    if not spelled[0].isalpha():  # only [a-z0-9_.-] are left
        spelled = "r_" + spelled
    return spelled[:64]


class OperationRejected(Exception):
    """An expected business rejection (OL-6): Received/Running -> Rejected, terminal.

    An unknown category is a programming error and raises ``ValueError`` at once; a code
    is recorded as `recordable_code` spells it.
    """

    def __init__(self, category: str, code: str, message: str = "") -> None:
        if category not in REJECTION_CATEGORIES:
            raise ValueError(
                f"rejection category must be one of {REJECTION_CATEGORIES}, not {category!r}"
            )
        if not isinstance(code, str) or not code:
            raise ValueError("rejection code must be a non-empty string")
        if not isinstance(message, str):
            raise ValueError("rejection message must be a string")
        super().__init__(f"{category}/{code}: {message}")
        self.category = category
        self.code = recordable_code(code)
        self.message = scalar_text(message, 1000)  # recordable whatever the handler wrote


class Retryable(Exception):
    """Raise (or subclass) to ask the Supervision Policy for another attempt."""


Backoff = Literal["constant", "exponential"]
Exhausted = Literal["failed", "dead_letter"]


@dataclass(frozen=True, slots=True)
class Supervision:
    """Per operation type. The default is one attempt, then ``failed`` (decisions O1)."""

    max_attempts: int = 1
    backoff: Backoff = "constant"
    initial_delay_seconds: float = 0
    max_delay_seconds: float = 43_200
    jitter: bool = False
    retry_on: tuple[type[BaseException], ...] = field(default=())
    exhausted: Exhausted = "failed"
    #: Failures retried (with the backoff) for as long as they recur, never spending
    #: ``max_attempts`` (a condition the handler waits out, like an unproven stop); only
    #: the other retryable failures count against it.
    retry_always_on: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if type(self.max_attempts) is not int or not 1 <= self.max_attempts <= 1000:
            raise ValueError("max_attempts must be an integer from 1 to 1000")
        if self.backoff not in ("constant", "exponential"):
            raise ValueError("backoff must be 'constant' or 'exponential'")
        for name in ("initial_delay_seconds", "max_delay_seconds"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not 0 <= value <= 31_536_000:
                raise ValueError(f"{name} must be a number of seconds from 0 to 31536000")
        if self.exhausted not in ("failed", "dead_letter"):
            raise ValueError("exhausted must be 'failed' or 'dead_letter'")
        if type(self.jitter) is not bool:  # "false" was taken, and jittered (a spec review)
            raise ValueError("jitter must be True or False")
        for name in ("retry_on", "retry_always_on"):
            types = getattr(self, name)
            if not isinstance(types, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in types
            ):
                raise ValueError(f"{name} must be a tuple of exception types")

    def is_retryable(self, error: BaseException) -> bool:
        """O2: ``Retryable`` and the ``retry_on`` types; never a rejection."""
        if isinstance(error, OperationRejected):
            return False
        return isinstance(error, (Retryable, *self.retry_on, *self.retry_always_on))

    def spares(self, error: BaseException) -> bool:
        """Is ``error`` retried without spending ``max_attempts`` (``retry_always_on``)?"""
        return not isinstance(error, OperationRejected) and isinstance(error, self.retry_always_on)

    def may_retry(self, failed_attempt: int) -> bool:
        return failed_attempt < self.max_attempts

    def delay_after(self, failed_attempt: int, random_fraction: float = 1.0) -> float:
        """Seconds to wait after failed attempt *k* (1-based).

        constant: ``min(max, initial)``; exponential: ``min(max, initial * 2**(k-1))``.
        With ``jitter`` the delay is scaled by ``random_fraction`` in [0, 1] ("full
        jitter"); the caller supplies the randomness so this stays pure.
        """
        if failed_attempt < 1:
            raise ValueError("attempts are 1-based")
        if self.backoff == "constant":
            base = self.initial_delay_seconds
        else:
            # Cap the exponent: beyond 2**64 the minimum is max_delay anyway.
            base = self.initial_delay_seconds * 2 ** min(failed_attempt - 1, 64)
        delay = float(min(self.max_delay_seconds, base))
        if self.jitter:
            if not 0.0 <= random_fraction <= 1.0:
                raise ValueError("random_fraction must be within [0, 1]")
            delay *= random_fraction
        return delay

    def describe(self) -> dict[str, object]:
        """The journaled form (recorded with ``operation.received``)."""
        return {
            "max_attempts": self.max_attempts,
            "backoff": self.backoff,
            "initial_delay_seconds": self.initial_delay_seconds,
            "max_delay_seconds": self.max_delay_seconds,
            "jitter": self.jitter,
            "retry_on": _names(self.retry_on),
            "exhausted": self.exhausted,
            **({"retry_always_on": _names(self.retry_always_on)} if self.retry_always_on else {}),
        }


def _names(types: tuple[type[BaseException], ...]) -> list[str]:
    return sorted(f"{t.__module__}.{t.__qualname__}" for t in types)
