"""Path parameters every router shares. Their patterns are published but checked by the
service, after the access check: a caller without a role in a Space learns nothing about
it, not even that a name in its path is malformed (decisions R1)."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Path
from pydantic import BeforeValidator
from starlette.convertors import Convertor, register_url_convertor

from domain.access import PRINCIPAL_ID, SPACE_NAME, TOKEN_ID
from domain.operation_types import MAX_TYPE_LENGTH, OPERATION_TYPE


def _documented(pattern: str, description: str, max_length: int | None = None) -> object:
    """A path parameter whose schema says ``pattern`` (and ``maxLength``), checked by the
    route itself (the same rule, with the taxonomy's error)."""
    limits = {} if max_length is None else {"maxLength": max_length}
    return Path(json_schema_extra={"pattern": pattern, **limits}, description=description)


SPACE_PATTERN = SPACE_NAME.pattern
SpacePath = Annotated[str, _documented(SPACE_PATTERN, "the Space (tenant)")]
# Its maxLength too: the pattern admits 519 characters, the service 128 (found by a defect
# hunt, stop 37: a schema-valid type was refused).
TypePath = Annotated[str, _documented(OPERATION_TYPE.pattern, "an operation type", MAX_TYPE_LENGTH)]
PrincipalPath = Annotated[str, _documented(PRINCIPAL_ID.pattern, "a principal id")]
TokenPath = Annotated[str, _documented(TOKEN_ID.pattern, "a token id: 16 hex digits")]


class AnyPath(Convertor[str]):
    """Starlette's ``path`` (``.*``) stops at a line feed, so an instance whose id holds one
    (any scalar value may: P42) was created and listed but every route of it was 404
    (found by a defect hunt, stop 34): this one takes every character."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


#: A path parameter that may hold any character (instance ids: the API's and the console's routes).
ANY_PATH = "any_path"
register_url_convertor(ANY_PATH, AnyPath())


def _decimal_digits(value: object) -> object:
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("must be written in decimal digits")
    return value


#: A JSON number's spelling (RFC 8259 6): what `type: number` admits in a query string.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _decimal_number(value: object) -> object:
    if isinstance(value, str) and not (value.isascii() and _JSON_NUMBER.fullmatch(value)):
        raise ValueError("must be written as a JSON number")
    return value


#: Query integers as the schema says, ``type: integer``: decimal ASCII digits, nothing else.
#: Python's reading let ``1_0``, ``+3``, ``4.0``, `` 5 `` through (found by a defect hunt,
#: stop 34), where a ``Last-Event-ID`` and dates are digits only.
QUERY_INTEGER = BeforeValidator(_decimal_digits)
#: Query numbers (``max_seconds``): a JSON number's spelling (``5e-324`` too; no ``_``, ``+``,
#: spaces, ``inf``).
QUERY_NUMBER = BeforeValidator(_decimal_number)
