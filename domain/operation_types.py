"""What an operation type's name may be: dotted lower-case words (the registry, the handlers,
the application and the projections' filters check names with it)."""

from __future__ import annotations

import re

from domain.errors import InvalidRequest

OPERATION_TYPE = re.compile(r"^[a-z][a-z0-9_-]{0,63}(\.[a-z][a-z0-9_-]{0,63}){0,7}$")
#: At most this many characters, whatever the pattern admits (P12).
MAX_TYPE_LENGTH = 128


def check_operation_type(name: object) -> str:
    if (
        not isinstance(name, str)
        or len(name) > MAX_TYPE_LENGTH
        or not OPERATION_TYPE.fullmatch(name)
    ):
        raise InvalidRequest("operation type must be dotted lower-case words, e.g. 'invoice.issue'")
    return name
