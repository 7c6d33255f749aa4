"""How a failure is written down (decisions D18): short and human-readable, the type and
message, never a traceback, never the input values. Shared by operation attempts and
workflow steps."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeGuard

from domain.json_text import scalar_text

if TYPE_CHECKING:
    from pydantic import ValidationError


class OutcomeInvalid(Exception):
    """The handler returned something that is not a valid outcome document."""


def summarise_validation(error: ValidationError) -> str:
    """Where and what, never the offending input values (they may be secret)."""
    parts = []
    for item in error.errors(include_input=False, include_url=False)[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "$"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def is_validation_error(error: BaseException) -> TypeGuard[ValidationError]:
    """A pydantic ValidationError. Looked up, never imported: only code that imported
    pydantic can raise one, so a worker of an app without models never loads it (~7 MB)."""
    core = sys.modules.get("pydantic_core")
    return core is not None and isinstance(error, core.ValidationError)


def describe_error(error: BaseException) -> dict[str, str]:
    """Short and human-readable (decisions D18): type and message, never a traceback.

    Whatever the exception holds, the result is recordable: lone surrogates are
    spelled out, a failing ``__str__`` is survived, pydantic errors omit inputs.
    """
    kind = type(error)
    if isinstance(error, OutcomeInvalid):
        name = "outcome_invalid"
    elif kind.__module__ == "builtins":
        name = kind.__qualname__
    else:
        name = f"{kind.__module__}.{kind.__qualname__}"
    try:
        text = summarise_validation(error) if is_validation_error(error) else str(error)
    except Exception:  # an exception whose __str__ raises must not lose the failure
        text = "(message unavailable)"
    message = f"{kind.__name__}: {text}" if text else kind.__name__
    return {"type": scalar_text(name, 200), "message": scalar_text(message, 500)}
