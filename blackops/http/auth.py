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
_BEARER = HTTPBearer(auto_error=False)


@dataclass(frozen=True, slots=True)
class Served:
    """What ``create_http_app`` serves, kept in ``api.state.blackops``."""

    application: Application
    system_token: str | None


def served(request: Request) -> Served:
    found: Served = request.app.state.blackops
    return found


def application(request: Request) -> Application:
    return served(request).application


def caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_BEARER)
) -> Caller:
    return authenticate(served(request), credentials.credentials if credentials else "")


def stream_caller(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_BEARER)
) -> Caller:
    """The bearer token, else the console's session cookie (the live streams only)."""
    if credentials and credentials.credentials:
        return authenticate(served(request), credentials.credentials)
    return authenticate(served(request), request.cookies.get(SESSION_COOKIE, ""))


def authenticate(state: Served, supplied: str) -> Caller:
    """The principal of a bearer token (``unauthorized`` for none or an unknown one)."""
    if not supplied:
        raise Unauthorized()
    token = state.system_token
    if token and hmac.compare_digest(supplied.encode(), token.encode()):
        return SYSTEM_CALLER
    found = state.application.access.authenticate(supplied)
    return Caller(found, Actor(found.id, "admin" if found.system else "principal"))


def check_space(app: Application, who: Caller, space: str, action: Action) -> None:
    """The access rule, and the Space must exist even for a system principal (which
    ``check_access`` lets through without knowing)."""
    who.check(space, action)
    if who.principal.system and not app.access.space_exists(space):
        raise NotFound(f"no space {space!r}")
