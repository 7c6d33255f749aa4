"""The published JSON Schema of an Observed JSONL line (draft 2020-12), shipped in the package.

``replay/schemas/observed-line.v<N>.json`` is the schema of version N; a new event family or
context shape is a new version, never an edit of a published one. The HTTP API serves the
current version at ``GET /v1/schemas/observed-line.json`` and ``blackops journal schema``
prints it, byte for byte this file.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Final

#: The version served and printed today.
OBSERVED_LINE_SCHEMA_VERSION: Final = 1
#: Where the HTTP API serves it (a stable URL: the schema's own ``$id`` is a URN).
OBSERVED_LINE_SCHEMA_PATH: Final = "/v1/schemas/observed-line.json"


@cache
def observed_line_schema_bytes(version: int = OBSERVED_LINE_SCHEMA_VERSION) -> bytes:
    """The schema file exactly as shipped."""
    name = f"observed-line.v{version}.json"
    # Beside this module (package data): importlib.resources would also search a
    # same-named directory elsewhere on sys.path (tests/replay/, say).
    return (Path(__file__).with_name("schemas") / name).read_bytes()


def observed_line_schema(version: int = OBSERVED_LINE_SCHEMA_VERSION) -> dict[str, Any]:
    """The schema as a JSON document (a fresh copy each call)."""
    schema: dict[str, Any] = json.loads(observed_line_schema_bytes(version))
    return schema
