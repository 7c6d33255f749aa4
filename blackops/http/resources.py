"""Control-plane routes (DurableWorkflow §1): Workers, Versions, Deployments and Workflow
resources. Mutations answer ``202`` with their Operation (``GET /v1/operations/{id}``).
Every route checks the caller's Space and role first, as ``access.py`` says."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.http.auth import Caller, application, caller, check_space
from blackops.http.bodies import idempotency_key, resource_body
from blackops.http.responses import JSON, accepted
from domain.access import Action
from domain.errors import InvalidRequest

router = APIRouter()
SPACE = "/v1/spaces/{space}"


@router.post(SPACE + "/workers", status_code=201, summary="Create a Worker (a code unit)")
async def create_worker(
    space: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    body = await resource_body(request)
    if set(body) != {"name"}:
        raise InvalidRequest('the body must be {"name": ...}')
    created = await run_in_threadpool(
        lambda: app.control.create_worker(space, body["name"], who.actor)
    )
    return JSON(created, 201)


@router.get(SPACE + "/workers", summary="The Space's Workers")
async def list_workers(
    space: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON({"items": await run_in_threadpool(lambda: app.control.workers(space))})


@router.get(SPACE + "/workers/{worker}", summary="A Worker")
async def get_worker(
    space: str, worker: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON(await run_in_threadpool(lambda: app.control.worker_in(space, worker)))


@router.post(
    SPACE + "/workers/{worker}/versions",
    status_code=202,
    summary="Upload a Version (content-addressed); 202 with its ABI verification",
)
async def upload_version(
    space: str,
    worker: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    body = await resource_body(request)
    return accepted(
        await run_in_threadpool(lambda: app.control.upload_version(space, worker, body, who.actor))
    )


@router.get(SPACE + "/workers/{worker}/versions", summary="A Worker's Versions")
async def list_versions(
    space: str, worker: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON({"items": await run_in_threadpool(lambda: app.control.versions(space, worker))})


@router.get(SPACE + "/versions/{version}", summary="A Version, its sources and its verdict")
async def get_version(
    space: str, version: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)

    def read() -> dict[str, Any]:
        state = app.control.version_in(space, version)
        return {**state.view(), "sources": state.modules}

    return JSON(await run_in_threadpool(read))


@router.delete(SPACE + "/versions/{version}", status_code=202, summary="Delete a Version")
async def delete_version(
    space: str,
    version: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    key = idempotency_key(request)
    return accepted(
        await run_in_threadpool(lambda: app.control.delete_version(space, version, who.actor, key))
    )


@router.get(SPACE + "/workers/{worker}/deployment", summary="The active allocation")
async def get_deployment(
    space: str, worker: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON(await run_in_threadpool(lambda: app.control.deployment(space, worker)))


@router.put(
    SPACE + "/workers/{worker}/deployment",
    status_code=202,
    summary="Update the allocation (an Operation; pending until it finishes)",
)
async def put_deployment(
    space: str,
    worker: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    key = idempotency_key(request)
    body = await resource_body(request)
    if set(body) != {"allocation"}:
        raise InvalidRequest('the body must be {"allocation": [{"version", "weight"}]}')
    allocation = body["allocation"]
    return accepted(
        await run_in_threadpool(
            lambda: app.control.update_deployment(space, worker, allocation, who.actor, key)
        )
    )


@router.post(
    SPACE + "/workflows",
    status_code=202,
    summary="Create a Workflow resource (202 with its Operation)",
)
async def create_workflow(
    space: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    key = idempotency_key(request)
    body = await resource_body(request)
    return accepted(
        await run_in_threadpool(lambda: app.control.create_workflow(space, body, who.actor, key))
    )


@router.get(SPACE + "/workflows", summary="The Space's Workflow resources")
async def list_workflows(
    space: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON({"items": await run_in_threadpool(lambda: app.control.list_workflows(space))})


@router.get(SPACE + "/workflows/{uid}", summary="A Workflow resource and its observation")
async def get_workflow(
    space: str, uid: str, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON(await run_in_threadpool(lambda: app.control.get_workflow(space, uid)))


@router.put(SPACE + "/workflows/{uid}", status_code=202, summary="Replace (DW-CRUD-2)")
async def replace_workflow(
    space: str,
    uid: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    key = idempotency_key(request)
    body = await resource_body(request)
    return accepted(
        await run_in_threadpool(
            lambda: app.control.replace_workflow(space, uid, body, who.actor, key)
        )
    )


@router.delete(SPACE + "/workflows/{uid}", status_code=202, summary="Delete (DW-DEL-1..5)")
async def delete_workflow(
    space: str,
    uid: str,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    key = idempotency_key(request)
    return accepted(
        await run_in_threadpool(lambda: app.control.delete_workflow(space, uid, who.actor, key))
    )
