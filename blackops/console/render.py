"""Pages from templates, and refusals as pages.

``ConsoleRoute`` is the route class of every console route: a refusal the API would answer
as a JSON error (``not_found``, ``forbidden``, ``invalid_request``, ...) becomes a page with
the same status, and a request without a valid session is sent to the sign-in page (a GET)
or answered 401 (anything else). The HTML is escaped by Jinja2's autoescape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlencode

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.concurrency import run_in_threadpool

from blackops.console.session import Session, session_of
from blackops.http.bodies import path_segment
from domain.documents import DocumentError, canonical_json
from domain.errors import BlackOpsError, InvalidRequest

#: Characters a journal value may hold that a browser does not show as themselves: controls
#: (but tab and newline), bidi controls (U+202A-202E, U+2066-2069, U+200E/F, U+061C), which
#: reorder the text around them, and the other invisible format characters (zero widths,
#: U+2060-2064, U+FEFF, variation selectors, tags, fillers). That is Unicode's Cc, Cf, Zl, Zp
#: and Default_Ignorable_Code_Point, written out: unicodedata takes 0.7 s to list them.
INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891"
    "\u08e2\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]+"
)


def _escapes(run: str) -> str:
    """``\\u202e`` for each character (``\\U000e0041`` beyond the BMP), as Python writes
    them."""
    return "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in run)


def visible_text(value: str) -> str:
    """``value`` with every invisible character written as its escape (no markup)."""
    return INVISIBLE.sub(lambda found: _escapes(found.group()), value)


def _shown(value: Any) -> Any:
    """What ``{{ value }}`` prints: a value with invisible characters gets each as a styled
    escape, so no journal value can hide text or reorder the page around it (an id
    ``\\u202e24-redro`` showed as ``order-42``: decisions U23). It is the environment's
    ``finalize``, so no template can forget it; markup (a macro's output, ``| exact``) is
    left as it is. The markup has no quote, so in an attribute it is text, never a way out."""
    if value is None or hasattr(value, "__html__"):
        return value
    text = value if isinstance(value, str) else str(value)
    if INVISIBLE.search(text) is None:
        return value
    shown, last = Markup(), 0
    for found in INVISIBLE.finditer(text):
        shown += escape(text[last : found.start()])
        shown += Markup("<span class=esc>%s</span>") % _escapes(found.group())
        last = found.end()
    return shown + escape(text[last:])


_ENV = Environment(
    loader=PackageLoader("blackops.console", "templates"),
    autoescape=select_autoescape(("html",)),
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=_shown,
)
#: Every page tells the browser not to be framed, sniffed, or to run anything not ours.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _pretty(value: Any) -> str:
    """Indented JSON; a document deeper than the stdlib encoder recurses (one journaled
    before documents had a depth limit) as its canonical text on one line instead."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    except RecursionError:
        pass
    try:  # iterative at any depth, but only for an object
        return canonical_json(value if type(value) is dict else {"value": value}).decode()
    except DocumentError as error:
        return f"(cannot be shown: {error})"


def _utc(value: Any) -> str:
    """An RFC 3339 instant as ``YYYY-MM-DD HH:MM:SS.ffffff UTC`` (the text unchanged if not)."""
    if not isinstance(value, str):
        return "" if value is None else str(value)
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return at.strftime("%Y-%m-%d %H:%M:%S.%f UTC") if at.tzinfo else value


_ENV.filters["pretty"] = _pretty
_ENV.filters["utc"] = _utc
# A Space, workflow uid or operation id as a path segment (never "." or ".."); an instance
# id's URL is ``instance_url``'s.
_ENV.filters["seg"] = lambda value: path_segment(str(value))
# Where markup cannot go (<title>, an attribute people read): the escapes as plain text.
_ENV.filters["plain"] = lambda value: escape(visible_text(str(value)))
# A value exactly as it is, for what a program reads (a copy button, a form field).
_ENV.filters["exact"] = lambda value: escape(str(value))
_ENV.globals["query"] = lambda base, **more: urlencode({**base, **more})


def instance_url(space: str, uid: str, instance_id: str, kind: str = "instances") -> str:
    """The console URL of an instance's page (``instances``), its Terminate confirmation
    (``terminate``) or its receipt file (``receipts``): the id as one percent-encoded path
    segment, but ``.`` and ``..`` in ``?id=`` after an empty segment. A browser removes a
    dot segment however it is spelled (the WHATWG URL standard reads ``%2E`` as ``.``), so
    ``/instances/%2E`` reached ``/instances/`` (decisions U16). No instance has an empty id,
    so no other id's URL is the same."""
    base = f"/ui/spaces/{path_segment(space)}/workflows/{path_segment(uid)}/{kind}/"
    if instance_id in (".", ".."):
        return f"{base}?{urlencode({'id': instance_id})}"
    return base + quote(instance_id, safe="")


def instance_named(path_id: str, query_id: str | None) -> str:
    """The instance id an ``instance_url`` names: the path's, or after an empty path
    segment ``?id=``'s."""
    if query_id is None:
        return path_id
    if path_id:  # one URL, one instance
        raise InvalidRequest("name the instance in the path or in ?id=, not in both")
    return query_id


_ENV.globals["instance_url"] = instance_url


def page(
    request: Request,
    template: str,
    session: Session | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    html = _ENV.get_template(template).render(
        request=request, session=session, path=request.url.path, **context
    )
    return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)


class NoSession(Exception):
    """The request has no valid session cookie."""


class CsrfRefused(Exception):
    """A form without a valid CSRF token: nothing was done."""


def require(request: Request) -> Session:
    found = session_of(request)
    if found is None:
        raise NoSession()
    return found


_TITLES = {
    400: "Bad request",
    401: "Sign-in needed",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
}


def error_page(request: Request, status: int, code: str, message: str) -> HTMLResponse:
    return page(
        request, "error.html", session_of(request), status_code=status,
        title=_TITLES.get(status, "Error"), code=code, message=message,
    )  # fmt: skip


#: A longer ``next`` target is dropped (sign-in then goes to the start page), not refused:
#: a console URL may be longer than that, and its sign-in must still work (decisions U14).
NEXT_MAX = 256


#: What a ``next`` taken from the raw path keeps as sent: its percent-escapes and the path's
#: reserved characters; anything else (a space, a quote, a byte that is not ASCII) is escaped.
_RAW_SAFE = "/%:@!$&'()*+,;=[]~-._"


def login_redirect(request: Request) -> Response:
    # The path as sent: the decoded one turns an instance id's %2F into a separator and
    # %2E%2E into a dot segment (decisions U16), which the page after sign-in would lose.
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    path = quote(raw, safe=_RAW_SAFE)  # a non-ASCII byte (never sent raw) percent-encoded
    raw_query = request.scope.get("query_string", b"").decode("latin-1")
    target = path + (f"?{raw_query}" if raw_query else "")
    query = f"?{urlencode({'next': target})}" if len(target) <= NEXT_MAX else ""
    location = "/ui/login" + query
    return RedirectResponse(location, status_code=303, headers=SECURITY_HEADERS)


def check_utf8_url(request: Request) -> None:
    """A console URL's path and query are percent-encoded UTF-8 (decisions P42): routing and
    the query's parser read anything else as U+FFFD, so ``instances/%FF`` showed, and could
    terminate, the instance named U+FFFD (found by a defect hunt, stop 38). The API reads
    its instance ids from the raw path (`raw_path_segment`); the console refuses the URL."""
    raw = request.scope.get("raw_path")
    for part in (raw if isinstance(raw, bytes) else b"", request.scope.get("query_string", b"")):
        try:
            unquote_to_bytes(part).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("the URL is not percent-encoded UTF-8") from None


class ConsoleRoute(APIRoute):
    """Refusals as pages; no session: to the sign-in page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                check_utf8_url(request)
                return await handler(request)
            except NoSession:
                if request.method == "GET":
                    return login_redirect(request)
                status, code, message = 401, "unauthorized", "Sign in first."
            except CsrfRefused:
                status, code = 403, "forbidden"
                message = (
                    "The form's security (CSRF) token is missing or does not match this "
                    "session; nothing was changed. Go back, reload the page and try again."
                )
            except RequestValidationError as error:
                where = ", ".join(".".join(str(p) for p in e["loc"]) for e in error.errors()[:3])
                status, code, message = 400, "invalid_request", f"invalid request: {where}"
            except BlackOpsError as error:
                if error.http_status == 401 and request.method == "GET":
                    return login_redirect(request)
                status, code, message = error.http_status, error.code, error.message
            # An error page looks the session up (a store read): in the thread pool, not
            # on the event loop.
            return await run_in_threadpool(error_page, request, status, code, message)

        return handle
