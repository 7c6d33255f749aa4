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
    supplied = credentials.credentials if credentials else ""
    if not supplied:
        raise Unauthorized()
    state = served(request)
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
