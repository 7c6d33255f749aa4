"""Retention (OL-10, Part B): how long a terminal operation's journal and outcome are kept.

``None`` keeps for ever (an outcome: for as long as its journal). Journal and outcome
retention are separate: an outcome may be purged long before the lifecycle that produced
it, never after (a purged operation takes its Outcome Record with it). A hold overrides
both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from domain.errors import InvalidRequest

#: A reason (a hold's, a release's, a purge's) says something: one character that is not
#: blank. Blank is, within the Basic Multilingual Plane, Unicode's White_Space, the control
#: characters and the code points Unicode calls default-ignorable (never shown: zero-width
#: and bidi marks, fillers, variation selectors), with the braille blank and the
#: interlinear annotation marks. Explicit ``\x``/``\u`` escapes only, so Python, pydantic's
#: Rust engine and a JavaScript reader of the OpenAPI pattern (with or without its ``u``
#: flag) agree exactly; the few default-ignorable code points beyond U+FFFF (tags, musical
#: and shorthand format controls) are left out for that (a ``\U`` escape is no escape in
#: JavaScript: review, stop 40). A reason of "\u3000", "\u200b" or "\u061c" was accepted
#: (found by a defect hunt and a review, stop 40).
REASON_SAYS_SOMETHING: Final = re.compile(
    r"[^\x00-\x20\x7f-\xa0\xad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f"
    r"\u2000-\u200f\u2028-\u202f\u205f-\u206f\u2800\u3000\u3164\ufe00-\ufe0f\ufeff"
    r"\uffa0\ufff0-\ufffb]"
)
REASON_MAX_CHARS: Final = 500

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
        journal, outcome = self.journal_seconds, self.outcome_seconds
        if journal is not None and outcome is not None and outcome > journal:
            # A purge past the journal's retention takes the Outcome Record with the stream
            # (P39): a longer outcome period was accepted and had no effect (found by a spec
            # review, stop 37). Outcome retention may be shorter, or left to the journal's.
            raise InvalidRequest(
                "outcome_seconds cannot exceed journal_seconds: an operation purged from the "
                "journal takes its Outcome Record with it (leave outcome_seconds None to keep "
                "it as long as the journal)"
            )
