"""Retention (OL-10, Part B): how long a terminal operation's journal and outcome are kept.

``None`` keeps for ever. Journal and outcome retention are separate: an outcome may be
purged long before the lifecycle that produced it. A hold overrides both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from domain.errors import InvalidRequest

#: Actor kinds that may release a hold (until Spaces and roles exist: decisions P38).
PRIVILEGED_KINDS: Final = frozenset({"admin", "system", "cli", "token"})


@dataclass(frozen=True, slots=True)
class Retention:
    journal_seconds: float | None = None
    outcome_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("journal_seconds", "outcome_seconds"):
            value = getattr(self, name)
            if value is not None and (
                type(value) not in (int, float) or not 0 <= value <= 3_153_600_000
            ):
                raise InvalidRequest(f"{name} must be None or seconds from 0 to 100 years")
