"""How routes describe themselves in ``/openapi.json``: the shared error body and the
statuses each route can answer, so the document says exactly what the service does.

Every route declares ``responses=errors(...)`` with the refusals it can give (every
authenticated route can answer 401 and 503; one that reads a path parameter, 404; one
that takes a body, 400 and 413). The error body is the taxonomy's (python-contract §3).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, WithJsonSchema

from domain.errors import HTTP_STATUS
from replay.schema import observed_line_schema

ErrorCode = Literal[
    "invalid_params",
    "invalid_request",
    "unauthorized",
    "forbidden",
    "unknown_instance",
    "not_found",
    "instance_exists",
    "instance_terminal",
    "dependency_conflict",
    "resource_busy",
    "document_too_large",
    "event_queue_full",
    "backend_unavailable",
    "conflict",
    "rejected",
    "operation_failed",
    "internal_error",
    "journal_rewritten",
]


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: ErrorCode
    message: str


class ErrorBody(BaseModel):
    """``{"error": {"code", "message"}}``; some answers add fields (an Inline run's
    rejection or failure carries the operation's completion beside it)."""

    model_config = ConfigDict(extra="allow")
    error: ErrorDetail


_WHAT = {
    400: "Malformed input (invalid_request, invalid_params)",
    401: "No valid bearer token (unauthorized)",
    403: "The caller's role is too low here (forbidden)",
    404: "Not found, or not visible to this caller (not_found, unknown_instance)",
    409: "A conflict with the current state",
    413: "A document over its limits (document_too_large)",
    422: "A business rejection (rejected)",
    429: "Too many unconsumed events (event_queue_full)",
    500: "The operation failed, or an internal error",
    503: "The journal store cannot be reached (backend_unavailable)",
}
#: What every authenticated route can answer.
AUTHENTICATED = (401, 503)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: each status with the shared error body."""
    chosen = sorted({*AUTHENTICATED, *statuses})
    unknown = [s for s in chosen if s not in _WHAT]
    if unknown:
        raise ValueError(f"no description for status {unknown}")
    return {status: {"model": ErrorBody, "description": _WHAT[status]} for status in chosen}


def codes_for(status: int) -> list[str]:
    """The taxonomy codes an HTTP status carries (for docs and tests)."""
    return sorted(code for code, value in HTTP_STATUS.items() if value == status)


# -- request bodies and documents in the published schema ---------------------------------

#: Marks a field whose schema is a shared one (replaced when the document is built: pydantic
#: cannot refer to schemas it did not make).
_DOCUMENT_MARK = "x-blackops-document"
_ENV_MARK = "x-blackops-env"
DocumentSchema = WithJsonSchema({_DOCUMENT_MARK: True})
#: A Version's env: Python-identifier names to document values.
EnvSchema = WithJsonSchema({_ENV_MARK: True})
_REF = "#/components/schemas/{model}"
MAX_SAFE_INTEGER = 2**53 - 1
#: The document rules (python-contract §1) as far as JSON Schema can say them: objects of at
#: most 1024 keys, safe integers, finite numbers (JSON has no others); the canonical size
#: (1 MiB) and the nesting limit are checked by the service and answered 413 / 400.
COMPONENTS: dict[str, Any] = {
    "Document": {
        "type": "object",
        "maxProperties": 1024,
        "additionalProperties": {"$ref": "#/components/schemas/DocumentValue"},
        "description": "A document: RFC 8785 rules, at most 1,048,576 canonical bytes.",
    },
    "DocumentValue": {
        "anyOf": [
            {"type": "null"},
            {"type": "boolean"},
            {"type": "string"},
            {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
            {"type": "number", "not": {"type": "integer"}},
            {"type": "array", "items": {"$ref": "#/components/schemas/DocumentValue"}},
            {"$ref": "#/components/schemas/Document"},
        ]
    },
    # The published schema of a line (its own resource: its ``$id`` and ``$defs`` kept).
    "ObservedLine": {k: v for k, v in observed_line_schema().items() if k != "$schema"},
    "JournalEvent": {
        "description": "One Server-Sent Event of a journal stream: a journal line, or the "
        "refusal that ends the stream (`event: error`, no `id`)",
        "oneOf": [
            {
                "type": "object",
                "required": ["id", "data"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[1-9][0-9]{0,18}$"},
                    "event": {"const": "message"},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"$ref": "#/components/schemas/ObservedLine"},
                    },
                },
            },
            {
                "type": "object",
                "required": ["event", "data"],
                "properties": {
                    "event": {"const": "error"},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"$ref": "#/components/schemas/ErrorBody"},
                    },
                },
                "not": {"required": ["id"]},
            },
        ],
    },
}


def request_body(model: type[BaseModel], *, required: bool, description: str) -> dict[str, Any]:
    """``openapi_extra`` declaring a JSON body of ``model``'s shape. The route reads the body
    itself (the strict parser), so FastAPI never parses it; optional fields may be left
    out but are never ``null`` (only leaving a document out means none, DW-DOC-4)."""
    schema = model.model_json_schema(ref_template=_REF)
    for name, definition in schema.pop("$defs", {}).items():
        COMPONENTS[name] = _not_null(definition)
    COMPONENTS[model.__name__] = _not_null(schema)
    return {
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}
            },
            "description": description,
        }
    }


def document_body(description: str) -> dict[str, Any]:
    """``openapi_extra`` of a route whose whole body is one document (empty means ``{}``)."""
    ref = {"$ref": "#/components/schemas/Document"}
    body = {"required": False, "content": {"application/json": {"schema": ref}}}
    return {"requestBody": {**body, "description": description}}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """Optional properties of a request body: absent is allowed, ``null`` is not."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf")
        if name in required or not options:
            continue
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) != len(options):
            prop.pop("anyOf")
            prop.pop("default", None)
            prop.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
    return schema


def publish(document: dict[str, Any]) -> dict[str, Any]:
    """The finished OpenAPI document: the shared schemas added, document marks resolved."""
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in COMPONENTS.items():
        components.setdefault(name, schema)
    # FastAPI documents a 422 of its own on every route that takes parameters; the
    # service never answers it (a malformed parameter is 400 invalid_request).
    validation = "#/components/schemas/HTTPValidationError"
    for item in document.get("paths", {}).values():
        for operation in item.values():
            answer = operation.get("responses", {}).get("422", {})
            schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
            if schema.get("$ref") == validation:
                del operation["responses"]["422"]
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    for item in document.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                parameter["schema"] = _never_null(parameter.get("schema", {}))
    published: dict[str, Any] = _resolve_marks(document)
    return published


def _never_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A header or query parameter is absent or a string: never JSON ``null`` (FastAPI
    writes ``anyOf: [T, null]`` for an optional one, which a client would send as the
    text "null")."""
    options = schema.get("anyOf")
    if not options:
        return schema
    kept = [o for o in options if o != {"type": "null"}]
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    return {**rest, **kept[0]} if len(kept) == 1 else {**rest, "anyOf": kept}


def _resolve_marks(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(_DOCUMENT_MARK) is True:
            return {"$ref": "#/components/schemas/Document"}
        if value.get(_ENV_MARK) is True:
            return {
                "type": "object",
                "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"},
                "additionalProperties": {"$ref": "#/components/schemas/DocumentValue"},
            }
        return {key: _resolve_marks(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve_marks(item) for item in value]
    return value
