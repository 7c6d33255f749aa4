"""Who is calling: bearer tokens to principals, and the application a route serves.

The operator's configured token acts as the system principal ``dev`` in every Space;
every other token is a principal's, looked up by its hash in the journal, with its roles
per Space. Routes take ``who: Caller = Depends(caller)`` and ``app = Depends(application)``.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from domain.access import Action, Principal, check_access
from domain.context import Actor
from domain.errors import NotFound, Unauthorized


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated principal of a request, and the actor its events record."""

    principal: Principal
    actor: Actor

    def check(self, space: str, action: Action) -> None:
        check_access(self.principal, space, action)


#: The web console's session cookie (``blackops/console``): it holds the bearer token the
#: login form took. Besides the console's own pages, only the live journal streams accept
#: it (``stream_caller``: a browser's EventSource cannot send a header); every other API
#: route wants the Authorization header, so no cookie ever authorises an API change.
SESSION_COOKIE = "blackops_session"
#: The operator's configured token: the system principal (every Space, whole journal).
SYSTEM_CALLER = Caller(Principal("dev", system=True), Actor("dev", "token"))
#: The bearer scheme every route declares (and the lean routes call, as FastAPI would).
BEARER = HTTPBearer(auto_error=False)


@dataclass(frozen=True, slots=True)
class Served:
    """What ``create_http_app`` serves, kept in ``api.state.blackops``."""

    application: Application
    system_token: str | None


def served(request: Request) -> Served:
    found: Served = request.app.state.blackops
    return found


async def application(request: Request) -> Application:
    # async: FastAPI runs a plain-def dependency in the thread pool (a hop per request).
    return served(request).application


async def caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(BEARER)
) -> Caller:
    """The request's caller: on the event loop when no store read is needed (the system
    token, a principal the access cache holds), else looked up in the thread pool. A
    plain-def dependency would take a thread hop on every request for a dict look-up."""
    state, supplied = served(request), credentials.credentials if credentials else ""
    found = known_caller(state, supplied)
    if found is not None:
        return found
    return await run_in_threadpool(authenticate, state, supplied)


def stream_caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(BEARER)
) -> Caller:
    """The bearer token, else the console's session cookie (the live streams only)."""
    if credentials and credentials.credentials:
        return authenticate(served(request), credentials.credentials)
    return authenticate(served(request), request.cookies.get(SESSION_COOKIE, ""))


def authenticate(state: Served, supplied: str) -> Caller:
    """The principal of a bearer token (``unauthorized`` for none or an unknown one)."""
    found = known_caller(state, supplied)
    if found is not None:
        return found
    return _caller_of(state.application.access.authenticate(supplied))


def known_caller(state: Served, supplied: str) -> Caller | None:
    """:func:`authenticate` where it needs no store read, else ``None``."""
    if not supplied:
        raise Unauthorized()
    token = state.system_token
    if token and hmac.compare_digest(supplied.encode(), token.encode()):
        return SYSTEM_CALLER
    found = state.application.access.cached_principal(supplied)
    return None if found is None else _caller_of(found)


def _caller_of(principal: Principal) -> Caller:
    return Caller(principal, Actor(principal.id, "admin" if principal.system else "principal"))


def check_space(app: Application, who: Caller, space: str, action: Action) -> None:
    """The access rule, and the Space must exist even for a system principal (which
    ``check_access`` lets through without knowing)."""
    who.check(space, action)
    if who.principal.system and not app.access.space_exists(space):
        raise NotFound(f"no space {space!r}")
