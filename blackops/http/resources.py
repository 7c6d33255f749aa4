"""Control-plane routes (DurableWorkflow §1): Workers, Versions, Deployments and Workflow
resources. Mutations answer ``202`` with their Operation (``GET /v1/operations/{id}``).
Every route checks the caller's Space and role first, as ``access.py`` says."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from starlette.concurrency import run_in_threadpool

from blackops.application import Application
from blackops.http.auth import Caller, application, caller, check_space
from blackops.http.bodies import idempotency_key, resource_body
from blackops.http.models import (
    ControlOperation,
    CreatedWorker,
    DeploymentBody,
    DeploymentCheckBody,
    DeploymentCheckView,
    DeploymentView,
    Items,
    VersionBody,
    VersionWithSources,
    WorkerBody,
    WorkerView,
    WorkflowCreateBody,
    WorkflowList,
    WorkflowReplaceBody,
    WorkflowView,
)
from blackops.http.openapi import errors, request_body
from blackops.http.params import SpacePath
from blackops.http.responses import JSON, accepted
from domain.access import Action
from domain.errors import InvalidRequest
from domain.resources import whole_number

router = APIRouter(tags=["control plane"])
SPACE = "/v1/spaces/{space}"
Space = SpacePath
Worker = Annotated[str, Path(description="a Worker UID (wk-...)")]
Version = Annotated[str, Path(description="a Version id (sha256:...)")]
Uid = Annotated[str, Path(description="a Workflow resource UID (wf-...) or a registered uid")]
#: Mutations: 202 with the control-plane Operation to follow.
_ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {"model": ControlOperation, "description": "accepted: follow location"}
}
_KEY = {
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "pattern": r"^[\x21-\x7e]{1,255}$"},
            "description": "the same key is the same Operation (DW-SPEC-7, DW-DEL-5)",
        }
    ]
}


def _with_key(extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, **_KEY}


@router.post(
    SPACE + "/workers",
    status_code=201,
    summary="Create a Worker (a code unit)",
    openapi_extra=request_body(WorkerBody, required=True, description='{"name": ...}'),
    response_model=CreatedWorker,
    responses=errors(400, 403, 404, 409, 413),
)
async def create_worker(
    space: Space,
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


@router.get(
    SPACE + "/workers",
    summary="The Space's Workers",
    response_model=Items,
    responses=errors(400, 403, 404),
)
async def list_workers(
    space: Space, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON({"items": await run_in_threadpool(lambda: app.control.workers(space))})


@router.get(
    SPACE + "/workers/{worker}",
    summary="A Worker",
    response_model=WorkerView,
    responses=errors(400, 403, 404),
)
async def get_worker(
    space: Space,
    worker: Worker,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON(await run_in_threadpool(lambda: app.control.worker_in(space, worker)))


@router.post(
    SPACE + "/workers/{worker}/versions",
    status_code=202,
    summary="Upload a Version (content-addressed); 202 with its ABI verification",
    openapi_extra=request_body(VersionBody, required=True, description="the bundle"),
    response_model=ControlOperation,
    responses={**_ACCEPTED, **errors(400, 403, 404, 409, 413)},
)
async def upload_version(
    space: Space,
    worker: Worker,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    body = await resource_body(request)
    return accepted(
        await run_in_threadpool(lambda: app.control.upload_version(space, worker, body, who.actor)),
        request,
    )


@router.get(
    SPACE + "/workers/{worker}/versions",
    summary="A Worker's Versions",
    response_model=Items,
    responses=errors(400, 403, 404),
)
async def list_versions(
    space: Space,
    worker: Worker,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON({"items": await run_in_threadpool(lambda: app.control.versions(space, worker))})


@router.get(
    SPACE + "/versions/{version}",
    summary="A Version, its sources and its verdict",
    response_model=VersionWithSources,
    responses=errors(400, 403, 404),
)
async def get_version(
    space: Space,
    version: Version,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.READ)

    def read() -> dict[str, Any]:
        state = app.control.version_in(space, version)
        return {**state.view(), "sources": state.modules}

    return JSON(await run_in_threadpool(read))


@router.delete(
    SPACE + "/versions/{version}",
    status_code=202,
    summary="Delete a Version (refused while an allocation weighs it)",
    openapi_extra=_KEY,
    response_model=ControlOperation,
    responses={**_ACCEPTED, **errors(400, 403, 404, 409)},
)
async def delete_version(
    space: Space,
    version: Version,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    key = idempotency_key(request)
    return accepted(
        await run_in_threadpool(lambda: app.control.delete_version(space, version, who.actor, key)),
        request,
    )


@router.get(
    SPACE + "/workers/{worker}/deployment",
    summary="The active allocation and pending updates",
    response_model=DeploymentView,
    responses=errors(400, 403, 404),
)
async def get_deployment(
    space: Space,
    worker: Worker,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON(await run_in_threadpool(lambda: app.control.deployment(space, worker)))


@router.put(
    SPACE + "/workers/{worker}/deployment",
    status_code=202,
    summary="Update the allocation (an Operation; pending until it finishes)",
    openapi_extra=_with_key(
        request_body(DeploymentBody, required=True, description='{"allocation": [...]}')
    ),
    response_model=ControlOperation,
    responses={**_ACCEPTED, **errors(400, 403, 404, 409, 413)},
)
async def put_deployment(
    space: Space,
    worker: Worker,
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
        ),
        request,
    )


@router.post(
    SPACE + "/workers/{worker}/deployment/check",
    summary="Dry run of an allocation change: its Versions against recorded histories",
    description="Changes nothing and appends nothing: every Version the allocation weighs "
    "is loaded in isolation and run, step results served from the history and no effect "
    "executed, against every in-flight instance and the newest `terminalHistories` "
    "terminal ones of each Workflow whose class it provides.",
    openapi_extra=request_body(
        DeploymentCheckBody, required=True, description='{"allocation": [...]}'
    ),
    response_model=DeploymentCheckView,
    responses=errors(400, 403, 404, 413),
)
async def check_deployment(
    space: Space,
    worker: Worker,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    body = await resource_body(request)
    if "allocation" not in body or not set(body) <= {"allocation", "terminalHistories"}:
        raise InvalidRequest(
            'the body must be {"allocation": [{"version", "weight"}], "terminalHistories"?}'
        )
    terminal = whole_number(body.get("terminalHistories", 100))
    if terminal is None or not 0 <= terminal <= 100_000:
        raise InvalidRequest("terminalHistories must be an integer from 0 to 100000")
    allocation = body["allocation"]
    return JSON(
        await run_in_threadpool(
            lambda: app.control.check_deployment(space, worker, allocation, terminal=terminal)
        )
    )


@router.post(
    SPACE + "/workflows",
    status_code=202,
    summary="Create a Workflow resource (202 with its Operation)",
    openapi_extra=_with_key(
        request_body(WorkflowCreateBody, required=True, description='{"name", "spec"}')
    ),
    response_model=ControlOperation,
    responses={**_ACCEPTED, **errors(400, 403, 404, 409, 413)},
)
async def create_workflow(
    space: Space,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    key = idempotency_key(request)
    body = await resource_body(request)
    return accepted(
        await run_in_threadpool(lambda: app.control.create_workflow(space, body, who.actor, key)),
        request,
    )


@router.get(
    SPACE + "/workflows",
    summary="The Space's Workflow resources (and the workflows its application registers)",
    response_model=WorkflowList,
    responses=errors(400, 403, 404),
)
async def list_workflows(
    space: Space, who: Caller = Depends(caller), app: Application = Depends(application)
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON({"items": await run_in_threadpool(lambda: app.workflow_views(space))})


@router.get(
    SPACE + "/workflows/{uid}",
    summary="A Workflow resource (or a registered workflow) and its observation",
    response_model=WorkflowView,
    responses=errors(400, 403, 404),
)
async def get_workflow(
    space: Space,
    uid: Uid,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.READ)
    return JSON(await run_in_threadpool(lambda: app.workflow_view(space, uid)))


@router.put(
    SPACE + "/workflows/{uid}",
    status_code=202,
    summary="Replace (DW-CRUD-2)",
    openapi_extra=_with_key(
        request_body(WorkflowReplaceBody, required=True, description='{"spec"} (and "name")')
    ),
    response_model=ControlOperation,
    responses={**_ACCEPTED, **errors(400, 403, 404, 409, 413)},
)
async def replace_workflow(
    space: Space,
    uid: Uid,
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
        ),
        request,
    )


@router.delete(
    SPACE + "/workflows/{uid}",
    status_code=202,
    summary="Delete (DW-DEL-1..5)",
    openapi_extra=_KEY,
    response_model=ControlOperation,
    responses={**_ACCEPTED, **errors(400, 403, 404, 409)},
)
async def delete_workflow(
    space: Space,
    uid: Uid,
    request: Request,
    who: Caller = Depends(caller),
    app: Application = Depends(application),
) -> Any:
    check_space(app, who, space, Action.DEPLOY)
    key = idempotency_key(request)
    return accepted(
        await run_in_threadpool(lambda: app.control.delete_workflow(space, uid, who.actor, key)),
        request,
    )
