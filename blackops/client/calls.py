"""What each client method sends and how its answer is read, once for the sync and the async
client: a :class:`Call` is a request and the function that turns its response into the
method's result (or raises the error the answer names).

Errors raise the classes of ``blackops`` chosen by the body's ``error.code``, as the
in-process API raises them (decisions P48). An Inline run that was rejected or failed is
not an error: ``run`` returns its :class:`~blackops.OperationResult`, as in process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote, urlsplit

import httpx

# The public name (python-contract §1), so the client checks a document with the very rules
# the in-process API applies; it loads nothing blackops.errors has not loaded already.
from blackops import canonical_document
from blackops.errors import (
    BackendUnavailable,
    BlackOpsError,
    Conflict,
    DependencyConflict,
    DocumentError,
    EventQueueFull,
    Forbidden,
    InstanceExists,
    InstanceTerminal,
    InvalidRequest,
    NotFound,
    ResourceBusy,
    Unauthorized,
    UnknownInstance,
)
from blackops.operations.results import Failure, OperationResult, Rejection

T = TypeVar("T")

#: The class each taxonomy code raises: the class of ``blackops`` whose instances carry
#: that ``.code`` (``invalid_params`` and ``document_too_large`` are DocumentError's).
#: ``rejected``, ``operation_failed`` and ``internal_error`` have no class of their own:
#: a BlackOpsError with that code.
ERROR_CLASSES: dict[str, type[BlackOpsError]] = {
    "invalid_params": DocumentError,
    "document_too_large": DocumentError,
    "invalid_request": InvalidRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "unknown_instance": UnknownInstance,
    "not_found": NotFound,
    "instance_exists": InstanceExists,
    "instance_terminal": InstanceTerminal,
    "dependency_conflict": DependencyConflict,
    "resource_busy": ResourceBusy,
    "event_queue_full": EventQueueFull,
    "backend_unavailable": BackendUnavailable,
    "conflict": Conflict,
}


#: Codes the in-process API raises as a plain BlackOpsError (no class of their own).
CODES_WITHOUT_CLASS = ("rejected", "operation_failed", "internal_error", "journal_rewritten")


def error_of(code: str, message: str, status: int | None = None) -> BlackOpsError:
    """The exception the in-process API would raise for ``code``, with the server's message.

    A code this client does not know (a newer server) is ``internal_error`` naming it.
    ``status_code`` is the HTTP status the answer came with."""
    cls = ERROR_CLASSES.get(code, BlackOpsError)
    if cls is BlackOpsError and code not in CODES_WITHOUT_CLASS:
        message, code = f"{code}: {message}", "internal_error"
    # The server wrote the message already: build the class without its own constructor
    # (which composes messages from ids), exactly as BlackOpsError would.
    error = cls.__new__(cls)
    BlackOpsError.__init__(error, code, message)
    if isinstance(error, BackendUnavailable):
        error.detail = ""
    if isinstance(error, DocumentError):
        error.path = message.rsplit(" at ", 1)[1] if " at " in message else "$"
    error.status_code = status  # type: ignore[attr-defined]
    return error


def error_from(response: httpx.Response) -> BlackOpsError:
    """The error an answer carries (``{"error": {"code", "message"}}``), or one that says
    what came back instead (a proxy's page, say)."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    carried = _carried(body, status)
    if carried is not None:
        return carried
    text = response.text[:200] if response.content else ""
    if status in (502, 503, 504):
        return error_of("backend_unavailable", f"HTTP {status} from {response.url}", status)
    return error_of("internal_error", f"HTTP {status} without an error body: {text!r}", status)


def error_in(data: bytes) -> BlackOpsError:
    """The refusal a stream's ``event: error`` carries (its data is an error body), or one
    that says what came instead."""
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    carried = _carried(body)
    if carried is not None:
        return carried
    return error_of("internal_error", f"a stream ended with an error event: {data[:200]!r}")


def _carried(body: object, status: int | None = None) -> BlackOpsError | None:
    """The error a ``{"error": {"code", "message"}}`` body names, or None if it names none."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        return error_of(detail["code"], str(detail.get("message", "")), status)
    return None


#: Failures before a request left: the server cannot have acted on it.
_NOT_SENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)


def unreachable(error: httpx.TransportError) -> BackendUnavailable:
    """No answer (connection refused, reset, timed out): the client's
    ``backend_unavailable``; ``detail`` has httpx's words. The message tells a request that
    never left from one that may have been carried out without its answer arriving (a read
    timed out: a caller retrying a ``submit`` without an idempotency key on "cannot be
    reached" ran it twice; found by a defect hunt, stop 38)."""
    if isinstance(error, _NOT_SENT):
        message = "the BlackOps server cannot be reached"
    else:
        message = (
            "the BlackOps server did not answer: the request may have been carried out "
            "(an idempotency key makes a retry safe)"
        )
    found = BackendUnavailable(message, f"{type(error).__name__}")
    found.detail = f"{type(error).__name__}: {error}"
    return found


#: httpx errors that say this request can never be sent as it is (a header httpx refuses,
#: a URL it has no transport for): the caller's mistake, not an outage, so never retried.
LOCAL_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.LocalProtocolError,
    httpx.UnsupportedProtocol,
)


def transport_failure(error: httpx.TransportError) -> BackendUnavailable | InvalidRequest:
    """What a request that got no answer raises: ``invalid_request`` when it could never
    work (:data:`LOCAL_ERRORS`), else ``backend_unavailable`` (:func:`unreachable`)."""
    if isinstance(error, LOCAL_ERRORS):
        return InvalidRequest(f"the request cannot be sent: {type(error).__name__}: {error}")
    return unreachable(error)


def base_url_checked(base_url: str) -> str:
    """``base_url`` if it is ``http(s)://host[:port][/prefix]``; anything else (no scheme,
    a query) would fail on every request, so it is refused once, here."""
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 (raises ValueError for a port that is no number)
    except ValueError:
        parts = None
    if (
        parts is None
        or parts.scheme.lower() not in ("http", "https")
        or not parts.hostname
        or parts.query
        or parts.fragment
    ):
        raise InvalidRequest(f"the base URL must be http(s)://host[:port][/path], not {base_url!r}")
    return base_url


#: What a bearer token may hold: visible ASCII (RFC 6750's b64token is narrower still).
_TOKEN = re.compile(r"[\x21-\x7e]+")


def bearer(token: str | None) -> dict[str, str]:
    """The Authorization header of ``token``, stripped (token files and secrets end with a
    newline); a token with other whitespace or non-ASCII inside is refused, never named
    (the message must not leak it)."""
    if token is None or not token.strip():
        return {}
    token = token.strip()
    if not _TOKEN.fullmatch(token):
        raise InvalidRequest("the token holds characters a bearer token cannot (whitespace?)")
    return {"Authorization": f"Bearer {token}"}


#: Sent with every request: the server never compresses its answers, and httpx's decoders
#: do not check that a gzip or deflate body ended, so a compressed body cut short by a
#: middlebox read as a shorter whole one (a journal page without its last lines, a partial
#: export saved as the export: found by a defect hunt, stop 39).
IDENTITY: Final = {"Accept-Encoding": "identity"}


def compressed(response: httpx.Response) -> BlackOpsError | None:
    """A success that came with a content coding though none was asked (`IDENTITY`) was
    changed on the way and is not taken as a result (nor, for a stream or an export, read
    at all): ``internal_error`` naming the coding."""
    coding = response.headers.get("content-encoding", "").strip().lower()
    if coding in ("", "identity"):
        return None
    return error_of(
        "internal_error",
        f"the answer came with Content-Encoding {coding[:40]!r} though none was asked: "
        "changed on the way, not read",
        response.status_code,
    )


def undecodable(error: httpx.DecodingError) -> BlackOpsError:
    """A body httpx could not decode (a corrupt content coding): ``internal_error``."""
    return error_of("internal_error", f"the answer's body could not be decoded: {error}")


def checked(response: httpx.Response) -> httpx.Response:
    """``response`` if it is a success whose body can be trusted whole; else the error it
    is (an error answer is read as it came: a 503 a gateway compressed is still
    ``backend_unavailable``, retried; a cut one reads as no error body)."""
    if not response.is_success:
        raise error_from(response)
    refused = compressed(response)
    if refused is not None:
        raise refused
    return response


def media_type_of(response: httpx.Response) -> str:
    found: str = response.headers.get("content-type", "")
    return found.split(";")[0].strip().lower()


def wrong_media_type(response: httpx.Response, media_type: str, excerpt: bytes) -> BlackOpsError:
    """A success that is not this API's answer (an SSO proxy's login page, a captive
    portal's 200): not of ``media_type``, it would read as a result, an empty stream, or an
    export's file (found by a defect hunt, stop 38: ``export`` replaced the file with the
    page and removed the manifest), so it is refused, ``internal_error`` naming what came."""
    return error_of(
        "internal_error",
        f"the server answered {response.status_code} with Content-Type "
        f"{media_type_of(response) or 'none'!r}, not {media_type}: {excerpt[:200]!r}",
        response.status_code,
    )


def answered(response: httpx.Response, media_type: str = "application/json") -> httpx.Response:
    """``response`` if it is a success of ``media_type``; else the error it is."""
    if media_type_of(checked(response)) != media_type:
        raise wrong_media_type(response, media_type, response.content)
    return response


def json_of(response: httpx.Response, media_type: str = "application/json") -> Any:
    """The JSON document of a success of ``media_type``; else the error it is."""
    try:
        return answered(response, media_type).json()
    except ValueError:
        excerpt = response.content[:200]
        raise error_of(
            "internal_error", f"the answer is no JSON document: {excerpt!r}", response.status_code
        ) from None


def unexpected(response: httpx.Response, what: str) -> BlackOpsError:
    """A success whose JSON is not what this route answers (a gateway's own document, say):
    ``internal_error`` naming what came, never a ``KeyError`` from reading it (found by a
    defect hunt, stop 39)."""
    return error_of(
        "internal_error",
        f"the answer is not this API's ({what}): {response.content[:200]!r}",
        response.status_code,
    )


def json_object(response: httpx.Response, media_type: str = "application/json") -> dict[str, Any]:
    """`json_of` when the document must be an object (every route's answer is one)."""
    body = json_of(response, media_type)
    if type(body) is not dict:
        raise unexpected(response, "not a JSON object")
    return body


def shaped(*members: tuple[str, type]) -> Callable[[httpx.Response], dict[str, Any]]:
    """A reader of an answer's object, which must hold each of ``members`` (name, type)."""

    def read(response: httpx.Response) -> dict[str, Any]:
        body = json_object(response)
        for name, kind in members:
            if type(body.get(name)) is not kind:
                raise unexpected(response, f"no {kind.__name__} {name!r}")
        return body

    return read


def member(kind: type[T], name: str) -> Callable[[httpx.Response], T]:
    """A reader of the member ``name`` of an answer's object, which must be a ``kind``."""
    whole = shaped((name, kind))
    return lambda response: whole(response)[name]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: bytes | None = None  # the JSON body (see :func:`json_body`), or None for none
    headers: dict[str, str] = field(default_factory=dict)

    def request_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"params": query(self.params), "headers": self.headers}
        if self.body is not None:
            args["content"] = self.body
            args["headers"] = {**self.headers, "Content-Type": "application/json"}
        return args


def json_body(members: dict[str, object], documents: tuple[str, ...] = ()) -> bytes:
    """A request body: an object of ``members`` (None ones left out). Those named in
    ``documents`` are checked and written by ``canonical_document``, so the client refuses
    what the in-process API refuses (``DocumentError``; python-contract §1: exact built-in
    types, nothing converted) and sends exactly what it was given; the others are text."""
    parts: list[bytes] = []
    for name, value in members.items():
        if value is None:
            continue
        encoded = canonical_document(value) if name in documents else text_json(name, value)
        parts.append(json.dumps(name).encode() + b":" + encoded)
    return b"{" + b",".join(parts) + b"}"


def text_json(name: str, value: object) -> bytes:
    """A text member as JSON: a ``str`` (no subclass, nothing converted) that is Unicode
    text (:func:`unicode_text`)."""
    if type(value) is not str:
        raise InvalidRequest(f"{name} must be a str, not {type(value).__name__}")
    return json.dumps(unicode_text(name, value), ensure_ascii=False).encode("utf-8")


def unicode_text(name: str, value: str, code: str = "invalid_request") -> str:
    """``value`` if it is Unicode text. A lone surrogate has no UTF-8, so no URL or body
    can carry it (httpx would raise a raw UnicodeEncodeError): refused before any request
    with the class the in-process API raises for the same input, ``code``'s (an id that
    names nothing is ``not_found`` there, a bad filter or name ``invalid_request``). The
    message names the parameter, never the value (it could not be printed)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error_of(code, f"{name} holds a lone surrogate (not Unicode text)") from None
    return value


def query(params: dict[str, Any]) -> dict[str, Any]:
    """A request's query: ``params`` without the None ones, each name and text value
    :func:`unicode_text` (a filter's refusal is ``invalid_request``, as in process). A filter
    takes one value (decisions H15): a list or tuple is refused as in process (httpx sent one
    parameter per item, so ``[x]`` was answered as ``x`` and ``[]`` unfiltered: found by a
    defect hunt, stop 35)."""
    sent: dict[str, Any] = {}
    for name, value in params.items():
        unicode_text("a query parameter's name", name)
        if isinstance(value, list | tuple):
            raise InvalidRequest(f"{name} takes one value, not a {type(value).__name__}")
        if value is None:
            continue
        # As in process: an int (no bool) or text, an enum of either included, sent as the
        # number or text it is (str() of a str enum may be its name); "5", 5 for a name,
        # bytes were sent as str(value) (found by a defect hunt, stop 39).
        if name in INTEGER_FILTERS:
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidRequest(f"{name} must be an int, not {type(value).__name__}")
            sent[name] = int.__int__(value)
        elif isinstance(value, str):
            sent[name] = str.__str__(unicode_text(name, value))
        else:
            raise InvalidRequest(f"{name} must be a str, not {type(value).__name__}")
    return sent


#: Query parameters that are integers (a page's size, a journal page's start); every other
#: one is text.
INTEGER_FILTERS: Final = frozenset({"limit", "after"})


#: A header value httpx can send: visible ASCII and spaces (no CR, LF or other controls).
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")


def header_value(name: str, value: str) -> str:
    """``value`` if it can be a header's; a refusal (never a raw UnicodeEncodeError or an
    httpx LocalProtocolError) otherwise."""
    if type(value) is not str or not _HEADER_VALUE.fullmatch(value):
        raise InvalidRequest(f"{name} must be printable ASCII text")
    return value


def segment(text: str, name: str, code: str = "invalid_request") -> str:
    """One percent-encoded path segment (decisions P42): ``/`` as ``%2F``, ``.`` and
    ``..`` as ``%2E`` / ``%2E%2E`` (clients drop dot segments). An empty one names
    nothing and would make another route's URL (``/v1/operations/`` is the list). ``name``
    and ``code``: how text that is no Unicode is refused (:func:`unicode_text`)."""
    if type(text) is not str:  # as in process: an id that is no text names nothing
        raise error_of(code, f"{name} must be a str, not {type(text).__name__}")
    if not text:
        raise InvalidRequest("an empty name or id names nothing")
    quoted = quote(unicode_text(name, text, code), safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


# -- operations --------------------------------------------------------------------------------


def _result(response: httpx.Response) -> OperationResult:
    """An Inline answer: 200, or a rejection / failure with the completion beside the
    error (decisions P2, P3); anything else raises."""
    if response.is_success and media_type_of(response) != "application/json":
        raise wrong_media_type(response, "application/json", response.content)
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not (
        response.is_success or body.get("status") in ("rejected", "failed")
    ):
        raise error_from(response)
    refused = compressed(response)  # read as a result: it must have come whole
    if refused is not None:
        raise refused
    result = _inline_result(body)
    if result is None:
        raise unexpected(response, "not an Inline operation's result")
    return result


def _inline_result(body: dict[str, Any]) -> OperationResult | None:
    """The result an Inline answer's object holds, or None if it is not one's shape."""
    operation_id, status = body.get("operationId"), body.get("status")
    outcome, attempt = body.get("outcome"), body.get("attempt", 0)
    rejection, failure = body.get("rejection"), body.get("failure")
    if (
        type(operation_id) is not str
        or type(status) is not str
        or not (outcome is None or type(outcome) is dict)
        or type(attempt) is not int
    ):
        return None
    if rejection is not None:
        if type(rejection) is not dict:
            return None
        category, code, message = (rejection.get(k) for k in ("category", "code", "message"))
        if type(category) is not str or type(code) is not str or type(message) is not str:
            return None
        rejection = Rejection(category, code, message)
    if failure is not None:
        message, kind = (
            (failure.get("message"), failure.get("type")) if type(failure) is dict else (None, None)
        )
        if type(message) is not str or not (kind is None or type(kind) is str):
            return None
        failure = Failure(message, kind)
    return OperationResult(
        operation_id=operation_id,
        status=status,
        outcome=outcome,
        rejection=rejection,
        failure=failure,
        attempt=attempt,
    )


def document_body(params: dict[str, Any] | None) -> bytes:
    """An operation's params as the whole body (None: the empty document)."""
    return canonical_document({} if params is None else params)


def space_of(given: str | None, default: str) -> str:
    """The Space a call names: the client's own only when none is given (an empty one is
    refused where it is used, as every empty name: it was read as none, and a run went to
    the default Space; found by a defect hunt, stop 36)."""
    return default if given is None else given


def operations_path(tenant: str, type: str) -> str:
    return f"/v1/spaces/{segment(tenant, 'tenant')}/operations/{segment(type, 'type')}"


def run(
    type: str, params: dict[str, Any] | None, tenant: str, traceparent: str | None
) -> Call[OperationResult]:
    headers = {"traceparent": header_value("traceparent", traceparent)} if traceparent else {}
    path = operations_path(tenant, type)
    return Call("POST", path, _result, body=document_body(params), headers=headers)


def submit(
    type: str,
    params: dict[str, Any] | None,
    tenant: str,
    idempotency_key: str | None,
    traceparent: str | None,
) -> Call[str]:
    headers = {"Prefer": "respond-async"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = header_value("idempotency_key", idempotency_key)
    if traceparent:
        headers["traceparent"] = header_value("traceparent", traceparent)
    path = operations_path(tenant, type)
    return Call(
        "POST",
        path,
        member(str, "operationId"),
        body=document_body(params),
        headers=headers,
    )


def _operation(operation_id: str, tail: str = "") -> str:
    if not operation_id:  # as in process, without a request
        raise NotFound("operation '' does not exist")
    # As in process: an id that is no Unicode names no operation (not_found).
    return f"/v1/operations/{segment(operation_id, 'operation_id', 'not_found')}{tail}"


#: What the object of each answer holds at least (the rest is read as it comes).
_STATUS: Final = shaped(("operationId", str), ("status", str))
_RECORD: Final = shaped(("operationId", str))
_PAGE: Final = shaped(("items", list))
_INSTANCE: Final = shaped(("status", str))


def status(operation_id: str) -> Call[dict[str, Any]]:
    return Call("GET", _operation(operation_id), _STATUS)


def outcome_record(operation_id: str) -> Call[dict[str, Any]]:
    return Call("GET", _operation(operation_id, "/outcome"), _RECORD)


def _outcome_document(response: httpx.Response) -> dict[str, Any] | None:
    record = json_object(response)
    document = record.get("outcome")
    if "outcome" not in record or not (document is None or type(document) is dict):
        raise unexpected(response, "no outcome document")
    return document


def outcome(operation_id: str) -> Call[dict[str, Any] | None]:
    """The outcome document of an Outcome Record (its ``outcome`` member)."""
    return Call("GET", _operation(operation_id, "/outcome"), _outcome_document)


def events(operation_id: str) -> Call[list[dict[str, Any]]]:
    return Call("GET", _operation(operation_id, "/events"), member(list, "events"))


def redrive(operation_id: str) -> Call[str]:
    return Call("POST", _operation(operation_id, "/redrive"), member(str, "operationId"))


def hold(operation_id: str, reason: str) -> Call[dict[str, Any]]:
    return Call(
        "POST",
        _operation(operation_id, "/hold"),
        member(dict, "hold"),
        body=json_body({"reason": reason}),
    )


def _nothing(response: httpx.Response) -> None:
    answered(response)


def release(operation_id: str, reason: str) -> Call[None]:
    return Call(
        "POST",
        _operation(operation_id, "/release"),
        _nothing,
        body=json_body({"reason": reason}),
    )


#: The filters of each listing: the routes' query parameters and the in-process keywords.
OPERATION_FILTERS: Final = ("tenant", "type", "status", "since", "until", "limit", "cursor")
INSTANCE_FILTERS: Final = ("status", "since", "until", "limit", "cursor")


def known_filters(method: str, filters: dict[str, Any], names: tuple[str, ...]) -> None:
    """A ``TypeError`` for a filter the listing has not, as in process: the server ignores
    a query parameter it does not know, so a misspelled filter answered the whole listing
    (found by a defect hunt, stop 36)."""
    for name in filters:
        if name not in names:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")


def list_operations(filters: dict[str, Any]) -> Call[dict[str, Any]]:
    known_filters("list_operations", filters, OPERATION_FILTERS)
    return Call("GET", "/v1/operations", _PAGE, params=filters)


def operation_counts(tenant: str | None) -> Call[dict[str, Any]]:
    return Call("GET", "/v1/operation-counts", json_object, params={"tenant": tenant})


def receipt(operation_id: str) -> Call[dict[str, Any]]:
    return Call("GET", _operation(operation_id, "/receipt"), json_object)


# -- workflow instances ------------------------------------------------------------------------


def workflow_path(space: str, uid: str, tail: str) -> str:
    space = segment(space, "space")  # checked first, as the server does
    # As in process: a uid that is no Unicode names no workflow (not_found).
    return f"/v1/spaces/{space}/workflows/{segment(uid, 'uid', 'not_found')}{tail}"


def instances_path(space: str, uid: str) -> str:
    return workflow_path(space, uid, "/instances")


def create_instance(
    space: str, uid: str, instance_id: str | None, params: dict[str, Any] | None
) -> Call[str]:
    body = json_body({"id": instance_id, "params": params}, ("params",))
    return Call("POST", instances_path(space, uid), member(str, "id"), body=body)


def instance_path(space: str, uid: str, instance_id: str, tail: str = "") -> str:
    if not instance_id:  # "…/instances/" is the listing: as in process, without a request
        raise UnknownInstance(instance_id)
    instance = segment(instance_id, "instance id", "unknown_instance")  # as in process
    return f"{instances_path(space, uid)}/{instance}{tail}"


def instance_status(space: str, uid: str, instance_id: str) -> Call[dict[str, Any]]:
    return Call("GET", instance_path(space, uid, instance_id), _INSTANCE)


def send_event(
    space: str, uid: str, instance_id: str, type: str, payload: dict[str, Any] | None
) -> Call[int]:
    path = instance_path(space, uid, instance_id, "/events")
    body = json_body({"type": type, "payload": payload}, ("payload",))
    return Call("POST", path, member(int, "sequence"), body=body)


def terminate(space: str, uid: str, instance_id: str) -> Call[str]:
    path = instance_path(space, uid, instance_id, "/terminate")
    return Call("POST", path, member(str, "status"), body=b"{}")


def list_instances(space: str, uid: str, filters: dict[str, Any]) -> Call[dict[str, Any]]:
    known_filters("list_instances", filters, INSTANCE_FILTERS)
    return Call("GET", instances_path(space, uid), _PAGE, params=filters)


def instance_counts(space: str, uid: str) -> Call[dict[str, Any]]:
    return Call("GET", workflow_path(space, uid, "/instance-counts"), json_object)


# -- the journal -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalPage:
    """One page of Observed JSONL: each line with its newline, byte for byte the export's,
    and the position to continue after (``BlackOps-Next-After``)."""

    lines: list[bytes]
    next_after: int


def journal_path(space: str | None, tail: str = "") -> str:
    """The whole journal's route, or ``space``'s: an empty ``space`` is refused, as every
    other empty name (it read the whole journal: found by a defect hunt, stop 36)."""
    if space is None:
        return f"/v1/journal{tail}"
    return f"/v1/spaces/{segment(space, 'space')}/journal{tail}"


def _page(response: httpx.Response) -> JournalPage:
    answered(response, "application/jsonl")
    next_after = response.headers.get("BlackOps-Next-After", "")
    if not next_after.isascii() or not next_after.isdigit():
        raise error_of(
            "internal_error",
            f"a journal page without a position to go on from (BlackOps-Next-After: "
            f"{next_after[:40]!r})",
            response.status_code,
        )
    return JournalPage(response.content.splitlines(keepends=True), int(next_after))


def journal(after: int, limit: int, space: str | None) -> Call[JournalPage]:
    return Call("GET", journal_path(space), _page, params={"after": after, "limit": limit})


def checkpoint() -> Call[str]:
    return Call("GET", "/v1/checkpoint", lambda r: answered(r, "text/plain").text)


def schema() -> Call[dict[str, Any]]:
    return Call(
        "GET", "/v1/schemas/observed-line.json", lambda r: json_object(r, "application/schema+json")
    )


def manifest_url(response: httpx.Response, base: httpx.URL) -> httpx.URL | None:
    """Where an export's answer says its manifest is (``Link: <...>; rel="describedby"``,
    relative to the request), or None. Only on the client's own origin: the request
    carries the bearer token, which must not go wherever an answer (or a proxy) points."""
    target = described_by(response.headers.get("link"))
    if target is None:
        return None
    try:
        url = response.url.join(target)
    except httpx.InvalidURL:
        url = None
    if url is None or (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
        named = f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}" if url else target
        raise error_of(
            "internal_error",
            f"the export's manifest link names another origin ({named}): not followed, "
            "the token is not sent there",
            response.status_code,
        )
    return url


def not_an_event_stream(response: httpx.Response, excerpt: bytes) -> BlackOpsError | None:
    """A 200 that is no event stream would read as an empty stream for ever: it is refused
    (WHATWG: fail the connection)."""
    if media_type_of(response) == "text/event-stream":
        return None
    return wrong_media_type(response, "text/event-stream", excerpt)


_LINK = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]*)*)")


def described_by(link_header: str | None) -> str | None:
    """The target of ``Link: <...>; rel="describedby"`` (RFC 8288), if there is one."""
    for target, parameters in _LINK.findall(link_header or ""):
        for parameter in parameters.split(";"):
            name, _, value = parameter.strip().partition("=")
            if name.strip().lower() == "rel" and "describedby" in value.strip('"').split():
                return str(target)
    return None
