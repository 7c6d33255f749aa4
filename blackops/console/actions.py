"""The console's actions: hold, release and redrive an operation, terminate an instance.

Each is two steps: GET shows a confirmation page (the form, with the session's CSRF token),
POST does it. The POST checks the CSRF token first (a missing or wrong one: 403, nothing
done), then the same access rule and the same ``Application`` call as the HTTP route; a
role too low is 403 and changes nothing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from blackops.console.render import (
    SECURITY_HEADERS,
    ConsoleRoute,
    CsrfRefused,
    instance_named,
    instance_url,
    page,
    require,
)
from blackops.console.session import Session, csrf_ok, form_of
from blackops.http.auth import served
from blackops.http.instances import workflow_in
from blackops.http.operations import operation_of
from domain.access import Action
from domain.context import Actor
from domain.errors import InvalidRequest, NotFound

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
#: action -> (the role's action, whether it takes a reason, what the button says)
OPERATION_ACTIONS = {
    "hold": (Action.OPERATE, True, "Hold this operation"),
    "release": (Action.ADMINISTER, True, "Release the hold"),
    "redrive": (Action.OPERATE, False, "Redrive: submit a new operation from this one"),
}
OperationId = Annotated[str, Path(max_length=64)]
ActionName = Annotated[str, Path(max_length=16)]
Name = Annotated[str, Path(max_length=128)]
#: ``.`` and ``..`` come as ``?id=`` (``render.instance_url``).
QueryId = Annotated[str | None, Query(alias="id", max_length=256)]


def _action(name: str) -> tuple[Action, bool, str]:
    found = OPERATION_ACTIONS.get(name)
    if found is None:
        raise NotFound(f"no action {name!r}")
    return found


def _checked(request: Request, session: Session, form: dict[str, str]) -> None:
    if not csrf_ok(request, session, form.get("csrf", "")):
        raise CsrfRefused()


@router.get("/ui/operations/{operation_id}/actions/{action}")
def confirm_operation_action(
    request: Request, operation_id: OperationId, action: ActionName
) -> Response:
    session = require(request)
    needed, reasoned, label = _action(action)
    app = served(request).application
    op = operation_of(app, operation_id, session.caller, needed)
    return page(
        request, "confirm.html", session, verb=action.capitalize(), name=operation_id,
        what=label, action=f"/ui/operations/{operation_id}/actions/{action}",
        reasoned=reasoned, subject=op, back=f"/ui/operations/{operation_id}",
    )  # fmt: skip


@router.post("/ui/operations/{operation_id}/actions/{action}")
async def operation_action(
    request: Request, operation_id: OperationId, action: ActionName
) -> Response:
    session = await run_in_threadpool(require, request)  # a token look-up: off the loop
    form = await form_of(request)
    _checked(request, session, form)
    needed, reasoned, _ = _action(action)
    app, who = served(request).application, session.caller
    reason = form.get("reason", "").strip()
    if reasoned and not reason:
        raise InvalidRequest("say why: a reason is required")

    def act() -> str:
        operation_of(app, operation_id, who, needed)
        if action == "hold":
            app.hold(operation_id, reason=reason, actor=who.actor)
        elif action == "release":
            # The Space's admin role was checked: the release is an admin's (R2), as the API.
            app.release(operation_id, reason=reason, actor=Actor(who.actor.id, "admin"))
        else:
            return str(app.redrive(operation_id, actor=who.actor))
        return operation_id

    shown = await run_in_threadpool(act)
    return RedirectResponse(f"/ui/operations/{shown}", status_code=303, headers=SECURITY_HEADERS)


@router.get("/ui/spaces/{space}/workflows/{uid}/terminate/{instance_id:any_path}")
def confirm_terminate(
    request: Request, space: Name, uid: Name, instance_id: str, query_id: QueryId = None
) -> Response:
    session = require(request)
    instance_id = instance_named(instance_id, query_id)
    app = served(request).application
    resource = workflow_in(app, space, uid, session.caller, Action.OPERATE)
    status = app.instances.status(resource, instance_id)
    back = instance_url(space, uid, instance_id)
    return page(
        request, "confirm.html", session, verb="Terminate", name=instance_id,
        what="Terminate this instance (its code is stopped; the status becomes terminated)",
        action=instance_url(space, uid, instance_id, "terminate"), reasoned=False,
        subject={"id": instance_id, **status}, back=back,
    )  # fmt: skip


@router.post("/ui/spaces/{space}/workflows/{uid}/terminate/{instance_id:any_path}")
async def terminate(
    request: Request, space: Name, uid: Name, instance_id: str, query_id: QueryId = None
) -> Response:
    session = await run_in_threadpool(require, request)  # a token look-up: off the loop
    instance_id = instance_named(instance_id, query_id)
    form = await form_of(request)
    _checked(request, session, form)
    app, who = served(request).application, session.caller

    def act() -> None:
        resource = workflow_in(app, space, uid, who, Action.OPERATE)
        app.instances.status(resource, instance_id)
        app.instances.terminate(resource, instance_id, who.actor)

    await run_in_threadpool(act)
    location = instance_url(space, uid, instance_id)
    return RedirectResponse(location, status_code=303, headers=SECURITY_HEADERS)
