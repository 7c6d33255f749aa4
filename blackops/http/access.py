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
from blackops.http.auth import SYSTEM_CALLER, Caller, application, caller, check_space
from blackops.http.bodies import resource_body
from blackops.http.models import (
    IssuedToken,
    PrincipalInSpace,
    PrincipalList,
    RevokedToken,
    RoleBody,
    SpaceBody,
    SpaceView,
    TokenBody,
)
from blackops.http.openapi import errors, request_body
from blackops.http.params import PrincipalPath, SpacePath, TokenPath
from blackops.http.responses import JSON
from domain.access import Action, Principal, Role, check_system
from domain.errors import Conflict, InvalidRequest, NotFound

router = APIRouter(tags=["access"])
SPACE = "/v1/spaces/{space}"
Space = SpacePath
PrincipalId = PrincipalPath


def in_space(app: Application, principal_id: str, space: str) -> dict[str, Any]:
    """The principal as this Space sees it: its role here and nothing of other Spaces;
    one without a role here is as unknown as one that does not exist."""
    role = _with_role_in(app, principal_id, space).role_in(space)
    assert role is not None
    return {"id": principal_id, "space": space, "role": role.value}


def _with_role_in(app: Application, principal_id: str, space: str) -> Principal:
    """The principal, if it has a role in ``space`` (else ``NotFound``, as if none)."""
    try:
        principal = app.access.principal(principal_id)
    except NotFound:
        principal = None
    if principal is None or principal.role_in(space) is None:
        raise NotFound(f"no principal {principal_id[:128]!r} in space {space!r}")
    return principal


@router.post(
    "/v1/spaces",
    status_code=201,
    summary="Create a Space (system principals)",
    openapi_extra=request_body(SpaceBody, required=True, description='{"name": ...}'),
    response_model=SpaceView,
    responses=errors(400, 403, 409, 413),
)
async def create_space(
    request: Request, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_system(who.principal, "creating a space")
    body = await resource_body(request)
    if set(body) != {"name"}:
        raise InvalidRequest('the body must be {"name": ...}')
    ctx = app.access_context(who.actor, str(body["name"])[:63])
    return JSON(await run_in_threadpool(lambda: app.access.create_space(body["name"], ctx)), 201)


@router.get(
    SPACE + "/principals",
    summary="Principals with a role in the Space (admin)",
    response_model=PrincipalList,
    responses=errors(400, 403, 404),
)
async def list_principals(
    space: Space, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.ADMINISTER)
    return JSON({"items": await run_in_threadpool(lambda: app.access.principals(space))})


@router.put(
    SPACE + "/principals/{principal_id}",
    summary="Create a principal / set its role",
    openapi_extra=request_body(RoleBody, required=True, description='{"role": ...}'),
    response_model=PrincipalInSpace,
    responses=errors(400, 403, 404, 409, 413),
)
async def put_principal(
    space: Space,
    principal_id: PrincipalId,
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
        # A principal that exists without a role here is not this Space's: another Space's
        # (a Space admin would pull in someone it does not administer, and change what its
        # Space-less requests answer), one whose roles were all revoked, or a system
        # principal (whose id this Space's tokens would then act under). Giving it a role
        # here is a system principal's call; the grant judges it on the state it follows,
        # so a revoke landing before it is not overtaken.
        outside = None if who.principal.system else _not_this_spaces(principal_id)
        try:
            access.principal(principal_id)
        except NotFound:
            # Never journaled, yet the configured token's id: a Space's tokens must not act
            # under it (found by a review).
            if outside is not None and principal_id == SYSTEM_CALLER.principal.id:
                raise outside from None
            access.create_principal(principal_id, ctx)
            outside = None  # created here just now: this Space's to give a role
        access.grant(principal_id, space, role, ctx, unless_outside=outside)
        return in_space(app, principal_id, space)

    return JSON(await run_in_threadpool(grant))


def _not_this_spaces(principal_id: str) -> Conflict:
    """A Space admin's refusal to give a role to a principal that is not its Space's
    (decisions R20): it names no other Space."""
    return Conflict(
        f"principal {principal_id[:128]!r} already exists outside this space: "
        "only a system principal may give it a role here"
    )


@router.delete(
    SPACE + "/principals/{principal_id}",
    summary="Remove a principal's role",
    response_model=PrincipalInSpace,
    responses=errors(400, 403, 404, 409),
)
async def revoke_role(
    space: Space,
    principal_id: PrincipalId,
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
    summary="Issue a bearer token scoped to this Space (shown once; only its hash is kept)",
    openapi_extra=request_body(TokenBody, required=False, description='{} or {"label": ...}'),
    response_model=IssuedToken,
    responses=errors(400, 403, 404, 409, 413),
)
async def issue_token(
    space: Space,
    principal_id: PrincipalId,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.ADMINISTER)
    body = await resource_body(request)
    if not set(body) <= {"label"}:
        raise InvalidRequest('the body must be {} or {"label": ...}')
    if "label" in body and body["label"] is None:
        # The schema's label is a string: leave it out for none (``null`` was taken, found
        # by a defect hunt, stop 37).
        raise InvalidRequest("token label must be a string; leave it out for no label")
    ctx = app.access_context(who.actor, space)

    def issue() -> dict[str, Any]:
        principal = _with_role_in(app, principal_id, space)  # 404 unless it has a role here
        if not who.principal.system and principal.system:
            # Its tokens would act under a system principal's id, whatever their scope.
            raise Conflict(
                f"principal {principal_id[:128]!r} is a system principal: only a system "
                "principal may issue its tokens"
            )
        # Scoped: the token carries only this Space's role, whatever else the principal
        # holds elsewhere (a Space admin never mints power over another).
        token, record = app.access.issue_token(
            principal_id, ctx, label=body.get("label"), space=space
        )
        return {**record, "token": token}

    return JSON(await run_in_threadpool(issue), 201)


@router.delete(
    SPACE + "/principals/{principal_id}/tokens/{token_id}",
    summary="Revoke a token scoped to this Space (system principals: any of its tokens)",
    response_model=RevokedToken,
    responses=errors(400, 403, 404, 409),
)
async def revoke_token(
    space: Space,
    principal_id: PrincipalId,
    token_id: TokenPath,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    """The same right as ``blackops token revoke`` for a system principal; a Space admin
    reaches only tokens it could have issued (scoped to its Space)."""
    check_space(app, who, space, Action.ADMINISTER)
    ctx = app.access_context(who.actor, space)
    scope = None if who.principal.system else space

    def revoke() -> dict[str, Any]:
        in_space(app, principal_id, space)  # 404 unless it has a role here
        return app.access.revoke_token(principal_id, token_id, ctx, space=scope)

    return JSON(await run_in_threadpool(revoke))
