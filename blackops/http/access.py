"""Access routes: Spaces, and each Space's principals, roles and tokens.

Every route checks the caller's Space and role first (``domain.access.check_access``): a
caller with no role in the Space gets ``404`` exactly as for a Space that does not exist;
a role too low gets ``403``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.http.auth import Caller, application, caller, check_space
from blackops.http.bodies import resource_body
from blackops.http.responses import JSON
from domain.access import Action, Role, check_system
from domain.errors import InvalidRequest, NotFound

router = APIRouter()
SPACE = "/v1/spaces/{space}"


def in_space(app: Application, principal_id: str, space: str) -> dict[str, Any]:
    """The principal as this Space sees it: its role here and nothing of other Spaces;
    one without a role here is as unknown as one that does not exist."""
    try:
        role = app.access.principal(principal_id).role_in(space)
    except NotFound:
        role = None
    if role is None:
        raise NotFound(f"no principal {principal_id[:128]!r} in space {space!r}")
    return {"id": principal_id, "space": space, "role": role.value}


@router.post("/v1/spaces", status_code=201, summary="Create a Space (system principals)")
async def create_space(
    request: Request, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_system(who.principal, "creating a space")
    body = await resource_body(request)
    if set(body) != {"name"}:
        raise InvalidRequest('the body must be {"name": ...}')
    ctx = app.access_context(who.actor, str(body["name"])[:63])
    return JSON(await run_in_threadpool(lambda: app.access.create_space(body["name"], ctx)), 201)


@router.get(SPACE + "/principals", summary="Principals with a role in the Space (admin)")
async def list_principals(
    space: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.ADMINISTER)
    return JSON({"items": await run_in_threadpool(lambda: app.access.principals(space))})


@router.put(SPACE + "/principals/{principal_id}", summary="Create a principal / set its role")
async def put_principal(
    space: str,
    principal_id: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    """Body ``{"role": "reader|operator|deployer|admin"}``: the principal is created if
    it does not exist, and holds that role in this Space."""
    check_space(app, who, space, Action.ADMINISTER)
    body = await resource_body(request)
    if set(body) != {"role"}:
        raise InvalidRequest('the body must be {"role": "reader|operator|deployer|admin"}')
    role = Role.parse(body["role"])
    ctx = app.access_context(who.actor, space)

    def grant() -> dict[str, Any]:
        access = app.access
        try:
            access.principal(principal_id)
        except NotFound:
            access.create_principal(principal_id, ctx)
        access.grant(principal_id, space, role, ctx)
        return in_space(app, principal_id, space)

    return JSON(await run_in_threadpool(grant))


@router.delete(SPACE + "/principals/{principal_id}", summary="Remove a principal's role")
async def revoke_role(
    space: str,
    principal_id: str,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.ADMINISTER)
    ctx = app.access_context(who.actor, space)

    def revoke() -> dict[str, Any]:
        in_space(app, principal_id, space)  # 404 unless it has a role here
        app.access.revoke(principal_id, space, ctx)
        return {"id": principal_id, "space": space, "role": None}

    return JSON(await run_in_threadpool(revoke))


@router.post(
    SPACE + "/principals/{principal_id}/tokens",
    status_code=201,
    summary="Issue a bearer token (shown once; only its hash is kept)",
)
async def issue_token(
    space: str,
    principal_id: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.ADMINISTER)
    body = await resource_body(request)
    if not set(body) <= {"label"}:
        raise InvalidRequest('the body must be {} or {"label": ...}')
    ctx = app.access_context(who.actor, space)

    def issue() -> dict[str, Any]:
        in_space(app, principal_id, space)  # 404 unless it has a role here
        # Scoped: the token carries only this Space's role, whatever else the principal
        # holds elsewhere (a Space admin never mints power over another).
        token, record = app.access.issue_token(
            principal_id, ctx, label=body.get("label"), space=space
        )
        return {**record, "token": token}

    return JSON(await run_in_threadpool(issue), 201)
