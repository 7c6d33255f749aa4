"""Request bodies and headers: strict JSON documents (P13), envelopes, keys, preferences."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote_to_bytes

from fastapi import Request

from blackops.jsonbody import MAX_RAW_BYTES, parse_document
from domain.documents import DocumentError
from domain.errors import InvalidRequest, NotFound


async def read_body(request: Request) -> bytes:
    """The raw body, refusing early once it cannot be a document any more."""
    declared = request.headers.get("content-length")
    # ASCII digits only ('²'.isdigit() is true), and no int() of thousands of digits.
    if (
        declared is not None
        and declared.isascii()
        and declared.isdigit()
        and (len(declared) > 18 or int(declared) > MAX_RAW_BYTES)
    ):
        raise DocumentError("document_too_large", f"request body is over {MAX_RAW_BYTES} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_RAW_BYTES:
            raise DocumentError("document_too_large", f"request body is over {MAX_RAW_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def request_object(raw: bytes, allowed: tuple[str, ...]) -> dict[str, Any]:
    """An instance route's body: one JSON object with only ``allowed`` keys (empty = {}).

    The whole body goes through the strict parser (P13), so hostile JSON text in a body
    that carries documents is refused as ``invalid_params`` wherever it is; the
    envelope's own shape is ``invalid_request`` (decisions P41).
    """
    if raw.lstrip(b" \t\r\n")[:1] not in (b"", b"{"):
        raise InvalidRequest("the body must be a JSON object")
    try:
        body = parse_document(raw, empty_is={})
    except DocumentError as error:
        if allowed or error.code != "invalid_params":
            raise
        # A body that may hold no document has no params to blame.
        raise InvalidRequest(f"the body must be empty or {{}}: {error.message}") from None
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        # repr() escapes lone surrogates, so the answer always encodes.
        named = ", ".join(repr(key[:64]) for key in unknown[:5])
        keys = ", ".join(allowed) or "none"
        raise InvalidRequest(f"unknown body keys {named} (allowed: {keys})")
    return body


def optional_document(body: dict[str, Any], key: str) -> Any:
    """An optional document of the body: absent is none; ``null`` is not a document
    (DW-DOC-4: only leaving it out means none)."""
    if key not in body:
        return None
    if body[key] is None:
        raise InvalidRequest(f"{key} must be an object; leave it out for none", "invalid_params")
    return body[key]


async def resource_body(request: Request) -> Any:
    """A control-plane body: strict JSON; its shape is ``invalid_request`` (DW-SPEC-3)."""
    raw = await read_body(request)
    try:
        return parse_document(raw, empty_is={})
    except DocumentError as error:
        if error.code == "document_too_large":
            raise
        raise InvalidRequest(f"the body is not a JSON object: {error.message}") from None


async def reason_of(request: Request) -> str:
    """A hold's or release's body: exactly ``{"reason": "..."}``."""
    body = parse_document(await read_body(request), empty_is={})
    reason = body.get("reason")
    if set(body) != {"reason"} or not isinstance(reason, str):
        raise InvalidRequest('the body must be {"reason": "..."}')
    return reason


def one_header(request: Request, name: str) -> str | None:
    """The value of header ``name``, sent at most once: two would say two things, and a
    server keeping the first and a proxy keeping the last would act on different ones."""
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise InvalidRequest(f"send one {name} header, not several")
    return values[0] if values else None


def idempotency_key(request: Request) -> str | None:
    return one_header(request, "Idempotency-Key")


def prefers_async(prefer: str) -> bool:
    """RFC 7240: ``Prefer: respond-async`` among comma-separated preferences (a comma or a
    semicolon inside a quoted value belongs to the value: ``note="a,respond-async"`` asked
    for nothing, and ran Deferred; found by a defect hunt, stop 39)."""
    return any(_preference_name(part) == "respond-async" for part in _unquoted_split(prefer, ","))


def _preference_name(preference: str) -> str:
    """A preference as it is named, with its value if it has one (``respond-async`` has
    none): what comes before its ``;parameters``."""
    return preference.split(";", 1)[0].strip().lower()


def _unquoted_split(text: str, separator: str) -> list[str]:
    """``text`` split at each ``separator`` outside quoted strings (RFC 9110 5.6.4: a
    backslash quotes the next character)."""
    parts: list[str] = []
    start, quoted, escaped = 0, False, False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def path_segment(value: str) -> str:
    """``value`` as one path segment: percent-encoded, and ``.``/``..`` as ``%2E``s, which
    clients (RFC 3986 section 5.2.4) would otherwise resolve away. Browsers remove ``%2E``
    segments too (the WHATWG URL standard): the console puts those ids in ``?id=``
    (``blackops.console.render.instance_url``, decisions U16)."""
    segment = quote(value, safe="")
    return segment.replace(".", "%2E") if segment in (".", "..") else segment


def raw_path_segment(request: Request, route: list[bytes], action: str | None, name: str) -> str:
    """A path parameter exactly as sent: one percent-encoded segment of UTF-8.

    Routing sees the decoded path, where ``%2F`` is already a ``/`` (so such routes take
    a ``path`` parameter) and invalid UTF-8 has become U+FFFD; the raw path still says
    what the client meant (decisions P42). ``route`` is the segments before it.
    """
    raw = request.scope.get("raw_path")
    if not isinstance(raw, bytes):  # optional in ASGI; uvicorn and the TestClient set it
        return str(request.path_params[name])
    count = len(route) + 1 + (action is not None)
    segments = [unquote_to_bytes(segment) for segment in raw.split(b"/")[-count:]]
    if segments[: len(route)] != route or (action and segments[-1] != action.encode()):
        raise NotFound("no such route: an instance id is one path segment (send '/' as %2F)")
    try:
        return segments[len(route)].decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("the instance id in the path is not percent-encoded UTF-8") from None
