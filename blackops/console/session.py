"""The console's sign-in: the bearer token in a cookie, and CSRF tokens for every form.

The session cookie (``blackops.http.auth.SESSION_COOKIE``) holds the token the login form
took: ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page sends
it), ``Secure`` on https. A form that changes anything carries a CSRF token: an HMAC keyed
by a digest of the session's token over a fixed label, so it is tied to the session, cannot
be computed without the token, and holds across processes and restarts (decisions U6); the
login form's is instead an HMAC, under a key this process draws at start, of a random nonce
in a short-lived cookie of its own.
Tokens are compared in constant time (``hmac.compare_digest``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import Response

from blackops.http.auth import SESSION_COOKIE, Caller, authenticate, served
from domain.errors import BlackOpsError, InvalidRequest

LOGIN_COOKIE = "blackops_login"
#: Form bodies the console reads are small (a token, a reason, a CSRF token).
MAX_FORM_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in browser: its principal and the CSRF token its forms carry."""

    caller: Caller
    csrf: str


def _secret(request: Request) -> bytes:
    found: bytes = request.app.state.console_secret
    return found


def _mac(request: Request, purpose: bytes, value: str) -> str:
    message = purpose + b"\x00" + value.encode("utf-8", "surrogateescape")
    return hmac.new(_secret(request), message, hashlib.sha256).hexdigest()


#: What a session's form token is the MAC of; the key is the digest of the session's token.
_SESSION_LABEL = b"blackops console form token v1"
_KEY_LABEL = b"blackops console form key\0"


def session_csrf(token: str) -> str:
    """The CSRF token of a session's forms, the same in every process serving it."""
    # Not sha256(token): that is the token digest the journal records (a reader of the
    # journal must not be able to compute a session's form token).
    key = hashlib.sha256(_KEY_LABEL + token.encode("utf-8", "surrogateescape")).digest()
    return hmac.new(key, _SESSION_LABEL, hashlib.sha256).hexdigest()


def same(expected: str, supplied: str) -> bool:
    """Constant-time equality of two tokens (any text: compared as bytes)."""
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogateescape"), supplied.encode("utf-8", "surrogateescape")
    )


def session_of(request: Request) -> Session | None:
    """The session of the request's cookie, or None (no cookie, or a token no longer valid)."""
    token = request.cookies.get(SESSION_COOKIE, "")
    if not token:
        return None
    try:
        who = authenticate(served(request), token)
    except BlackOpsError:
        return None
    return Session(who, session_csrf(token))


def csrf_ok(request: Request, session: Session, supplied: str) -> bool:
    return same(session.csrf, supplied)


def login_csrf(request: Request) -> tuple[str, str]:
    """(nonce for the login cookie, the CSRF token the login form carries): a nonce the
    browser already holds is kept, so two open sign-in tabs both work."""
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not (len(nonce) == 43 and nonce.isascii()):
        nonce = secrets.token_urlsafe(32)
    return nonce, _mac(request, b"login", nonce)


def login_csrf_ok(request: Request, supplied: str) -> bool:
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    return bool(nonce) and same(_mac(request, b"login", nonce), supplied)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_login_cookie(request: Request, response: Response, nonce: str) -> None:
    response.set_cookie(
        LOGIN_COOKIE, nonce, max_age=3600, path="/ui/", httponly=True, samesite="strict",
        secure=_secure(request),
    )  # fmt: skip


def set_session_cookie(request: Request, response: Response, token: str) -> None:
    # Path "/": the live tail's EventSource reads /v1/.../journal/stream with it.
    response.set_cookie(
        SESSION_COOKIE, token, path="/", httponly=True, samesite="strict",
        secure=_secure(request),
    )  # fmt: skip
    response.delete_cookie(LOGIN_COOKIE, path="/ui/")


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=_secure(request)
    )


async def form_of(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body: the first value of each field."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise InvalidRequest("the form is too large")
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidRequest("a form body is URL-encoded ASCII") from None
    try:
        fields = parse_qs(text, keep_blank_values=True, errors="strict", max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest("the form is not well-formed") from None
    return {name: values[0] for name, values in fields.items()}
