"""HTTP routes of the control plane (spec §1): Spaces' principals and tokens, Workers,
Versions, Deployments and Workflow resources.

Every route checks the caller's Space and role first (``domain.access.check_access``):
a caller with no role in the Space gets ``404`` exactly as for a Space that does not
exist; a role too low gets ``403``. Mutations of Workflow resources, Versions and
Deployments answer ``202`` with their Operation (``GET /v1/operations/{id}``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.jsonbody import parse_document
from domain.access import Action, Principal, Role, check_access, check_system
from domain.context import Actor
from domain.documents import DocumentError
from domain.errors import InvalidRequest, NotFound

SPACE = "/v1/spaces/{space}"


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated principal of a request, and the actor its events record."""

    principal: Principal
    actor: Actor

    def check(self, space: str, action: Action) -> None:
        check_access(self.principal, space, action)


def idempotency_key(request: Request) -> str | None:
    keys = request.headers.getlist("idempotency-key")
    if len(keys) > 1:
        raise InvalidRequest("send one Idempotency-Key header, not several")
    return keys[0] if keys else None


async def resource_body(request: Request) -> Any:
    """A control-plane body: strict JSON; its shape is ``invalid_request`` (DW-SPEC-3)."""
    from blackops.http import _read_body

    raw = await _read_body(request)
    try:
        return parse_document(raw, empty_is={})
    except DocumentError as error:
        if error.code == "document_too_large":
            raise
        raise InvalidRequest(f"the body is not a JSON object: {error.message}") from None


def add_resource_routes(
    api: FastAPI,
    application: Application,
    caller: Callable[..., Caller],
    json: type[JSONResponse],
) -> None:
    plane = application.control

    def check(who: Caller, space: str, action: Action) -> None:
        """The access rule, and the Space must exist even for a system principal (which
        ``check_access`` lets through without knowing)."""
        who.check(space, action)
        if who.principal.system and not application.access.space_exists(space):
            raise NotFound(f"no space {space!r}")

    async def call(fn: Callable[[], Any]) -> Any:
        return await run_in_threadpool(fn)

    def accepted(view: dict[str, Any]) -> JSONResponse:
        return json(view, status_code=202, headers={"Location": view["location"]})

    # -- Spaces, principals, tokens ------------------------------------------------------

    def in_space(principal_id: str, space: str) -> dict[str, Any]:
        """The principal as this Space sees it: its role here and nothing of other Spaces;
        one without a role here is as unknown as one that does not exist."""
        try:
            role = application.access.principal(principal_id).role_in(space)
        except NotFound:
            role = None
        if role is None:
            raise NotFound(f"no principal {principal_id[:128]!r} in space {space!r}")
        return {"id": principal_id, "space": space, "role": role.value}

    @api.post("/v1/spaces", status_code=201, summary="Create a Space (system principals)")
    async def create_space(request: Request, who: Caller = Depends(caller)) -> Any:
        check_system(who.principal, "creating a space")
        body = await resource_body(request)
        if set(body) != {"name"}:
            raise InvalidRequest('the body must be {"name": ...}')
        ctx = application.access_context(who.actor, str(body["name"])[:63])
        return json(await call(lambda: application.access.create_space(body["name"], ctx)), 201)

    @api.get(SPACE + "/principals", summary="Principals with a role in the Space (admin)")
    async def list_principals(space: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.ADMINISTER)
        return json({"items": await call(lambda: application.access.principals(space))})

    @api.put(SPACE + "/principals/{principal_id}", summary="Create a principal / set its role")
    async def put_principal(
        space: str, principal_id: str, request: Request, who: Caller = Depends(caller)
    ) -> Any:
        """Body ``{"role": "reader|operator|deployer|admin"}``: the principal is created
        if it does not exist, and holds that role in this Space."""
        check(who, space, Action.ADMINISTER)
        body = await resource_body(request)
        if set(body) != {"role"}:
            raise InvalidRequest('the body must be {"role": "reader|operator|deployer|admin"}')
        role = Role.parse(body["role"])
        ctx = application.access_context(who.actor, space)

        def grant() -> dict[str, Any]:
            access = application.access
            try:
                access.principal(principal_id)
            except NotFound:
                access.create_principal(principal_id, ctx)
            access.grant(principal_id, space, role, ctx)
            return in_space(principal_id, space)

        return json(await call(grant))

    @api.delete(SPACE + "/principals/{principal_id}", summary="Remove a principal's role")
    async def revoke_role(space: str, principal_id: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.ADMINISTER)
        ctx = application.access_context(who.actor, space)

        def revoke() -> dict[str, Any]:
            in_space(principal_id, space)  # 404 unless it has a role here
            application.access.revoke(principal_id, space, ctx)
            return {"id": principal_id, "space": space, "role": None}

        return json(await call(revoke))

    @api.post(
        SPACE + "/principals/{principal_id}/tokens",
        status_code=201,
        summary="Issue a bearer token (shown once; only its hash is kept)",
    )
    async def issue_token(
        space: str, principal_id: str, request: Request, who: Caller = Depends(caller)
    ) -> Any:
        check(who, space, Action.ADMINISTER)
        body = await resource_body(request)
        if not set(body) <= {"label"}:
            raise InvalidRequest('the body must be {} or {"label": ...}')
        ctx = application.access_context(who.actor, space)

        def issue() -> dict[str, Any]:
            in_space(principal_id, space)  # 404 unless it has a role here
            # Scoped: the token carries only this Space's role, whatever else the
            # principal holds elsewhere (a Space admin never mints power over another).
            token, record = application.access.issue_token(
                principal_id, ctx, label=body.get("label"), space=space
            )
            return {**record, "token": token}

        return json(await call(issue), 201)

    # -- Workers, Versions, Deployments -----------------------------------------------------

    @api.post(SPACE + "/workers", status_code=201, summary="Create a Worker (a code unit)")
    async def create_worker(space: str, request: Request, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.DEPLOY)
        body = await resource_body(request)
        if set(body) != {"name"}:
            raise InvalidRequest('the body must be {"name": ...}')
        return json(await call(lambda: plane.create_worker(space, body["name"], who.actor)), 201)

    @api.get(SPACE + "/workers", summary="The Space's Workers")
    async def list_workers(space: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.READ)
        return json({"items": await call(lambda: plane.workers(space))})

    @api.get(SPACE + "/workers/{worker}", summary="A Worker")
    async def get_worker(space: str, worker: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.READ)
        return json(await call(lambda: plane.worker_in(space, worker)))

    @api.post(
        SPACE + "/workers/{worker}/versions",
        status_code=202,
        summary="Upload a Version (content-addressed); 202 with its ABI verification",
    )
    async def upload_version(
        space: str, worker: str, request: Request, who: Caller = Depends(caller)
    ) -> Any:
        check(who, space, Action.DEPLOY)
        body = await resource_body(request)
        return accepted(await call(lambda: plane.upload_version(space, worker, body, who.actor)))

    @api.get(SPACE + "/workers/{worker}/versions", summary="A Worker's Versions")
    async def list_versions(space: str, worker: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.READ)
        return json({"items": await call(lambda: plane.versions(space, worker))})

    @api.get(SPACE + "/versions/{version}", summary="A Version, its sources and its verdict")
    async def get_version(space: str, version: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.READ)

        def read() -> dict[str, Any]:
            state = plane.version_in(space, version)
            return {**state.view(), "sources": state.modules}

        return json(await call(read))

    @api.delete(SPACE + "/versions/{version}", status_code=202, summary="Delete a Version")
    async def delete_version(
        space: str, version: str, request: Request, who: Caller = Depends(caller)
    ) -> Any:
        check(who, space, Action.DEPLOY)
        key = idempotency_key(request)
        return accepted(await call(lambda: plane.delete_version(space, version, who.actor, key)))

    @api.get(SPACE + "/workers/{worker}/deployment", summary="The active allocation")
    async def get_deployment(space: str, worker: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.READ)
        return json(await call(lambda: plane.deployment(space, worker)))

    @api.put(
        SPACE + "/workers/{worker}/deployment",
        status_code=202,
        summary="Update the allocation (an Operation; pending until it finishes)",
    )
    async def put_deployment(
        space: str, worker: str, request: Request, who: Caller = Depends(caller)
    ) -> Any:
        check(who, space, Action.DEPLOY)
        key = idempotency_key(request)
        body = await resource_body(request)
        if set(body) != {"allocation"}:
            raise InvalidRequest('the body must be {"allocation": [{"version", "weight"}]}')
        allocation = body["allocation"]
        return accepted(
            await call(lambda: plane.update_deployment(space, worker, allocation, who.actor, key))
        )

    # -- Workflow resources (DW-SPEC, DW-OBS, DW-CRUD, DW-DEL) -------------------------------

    @api.post(
        SPACE + "/workflows",
        status_code=202,
        summary="Create a Workflow resource (202 with its Operation)",
    )
    async def create_workflow(space: str, request: Request, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.DEPLOY)
        key = idempotency_key(request)
        body = await resource_body(request)
        return accepted(await call(lambda: plane.create_workflow(space, body, who.actor, key)))

    @api.get(SPACE + "/workflows", summary="The Space's Workflow resources")
    async def list_workflows(space: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.READ)
        return json({"items": await call(lambda: plane.list_workflows(space))})

    @api.get(SPACE + "/workflows/{uid}", summary="A Workflow resource and its observation")
    async def get_workflow(space: str, uid: str, who: Caller = Depends(caller)) -> Any:
        check(who, space, Action.READ)
        return json(await call(lambda: plane.get_workflow(space, uid)))

    @api.put(SPACE + "/workflows/{uid}", status_code=202, summary="Replace (DW-CRUD-2)")
    async def replace_workflow(
        space: str, uid: str, request: Request, who: Caller = Depends(caller)
    ) -> Any:
        check(who, space, Action.DEPLOY)
        key = idempotency_key(request)
        body = await resource_body(request)
        return accepted(
            await call(lambda: plane.replace_workflow(space, uid, body, who.actor, key))
        )

    @api.delete(SPACE + "/workflows/{uid}", status_code=202, summary="Delete (DW-DEL-1..5)")
    async def delete_workflow(
        space: str, uid: str, request: Request, who: Caller = Depends(caller)
    ) -> Any:
        check(who, space, Action.DEPLOY)
        key = idempotency_key(request)
        return accepted(await call(lambda: plane.delete_workflow(space, uid, who.actor, key)))
