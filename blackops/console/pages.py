"""The console's read pages (GET only; nothing here changes the journal) and sign-in.

Every page takes the session's principal and reads through the same calls and access rule
as the HTTP route showing the same thing: ``operation_of`` for an operation, ``workflow_in``
for a workflow, ``check_space`` for a Space, ``checkpoints`` for the signer's view.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from blackops.audit.checkpoints import CheckpointService
from blackops.console.render import (
    NEXT_MAX,
    SECURITY_HEADERS,
    ConsoleRoute,
    CsrfRefused,
    NoSession,
    instance_named,
    page,
    require,
)
from blackops.console.session import (
    clear_session_cookie,
    csrf_ok,
    form_of,
    login_csrf,
    login_csrf_ok,
    same,
    session_csrf,
    session_of,
    set_login_cookie,
    set_session_cookie,
)
from blackops.console.views import (
    RECENT_LOOK_BACK,
    STAGES,
    STEP_KINDS,
    TERMINAL_CLASS,
    ReceiptView,
    checkpoint_history,
    exports,
    instance_receipt,
    may,
    operation_receipt,
    recent_lines,
    step_history,
    verifier_keys,
)
from blackops.http.audit import checkpoints
from blackops.http.auth import SESSION_COOKIE, Caller, authenticate, check_space, served
from blackops.http.instances import workflow_in
from blackops.http.operations import operation_of
from domain.access import Action
from domain.errors import BlackOpsError, NotFound
from journal.instances import instance_stream
from journal.outcomes import outcome_stream

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
Text = Annotated[str | None, Query(max_length=256)]
_STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
STATUSES = ("received", "accepted", "running", "retry_scheduled", "completed", "rejected",
            "failed", "dead_letter")  # fmt: skip


def _app(request: Request) -> Any:
    return served(request).application


def visible_spaces(request: Request, who: Caller) -> list[str]:
    """The Spaces the principal has a role in (every Space for a system principal)."""
    if who.principal.system:
        return sorted(_app(request).access.spaces())
    return sorted(who.principal.roles)


#: What a browser takes for dot segments (the WHATWG URL standard: %2e is a dot, any case).
_SINGLE_DOT = frozenset({".", "%2e"})
_DOUBLE_DOT = frozenset({"..", ".%2e", "%2e.", "%2e%2e"})


def resolved_path(target: str) -> str:
    """The path a browser requests for ``target`` (an absolute path of printable ASCII
    without a backslash): its dot segments removed as the WHATWG URL standard does."""
    segments = re.split(r"[?#]", target, maxsplit=1)[0].split("/")[1:]
    kept: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment.lower() in _DOUBLE_DOT:
            if kept:
                kept.pop()
            if last:  # "/a/b/.." is "/a/"
                kept.append("")
        elif segment.lower() in _SINGLE_DOT:
            if last:
                kept.append("")
        else:
            kept.append(segment)
    return "/" + "/".join(kept)


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only (never another site), judged as
    the browser will follow it, so no dot segment leads out of /ui/ (decisions U7)."""
    if (
        target
        and len(target) <= NEXT_MAX
        # A browser drops tabs and newlines from a URL and reads "\\" as "/"; a next the
        # console makes is percent-encoded printable ASCII.
        and all("!" <= c <= "~" for c in target)
        and "\\" not in target
        and target.startswith("/ui/")
        and resolved_path(target).startswith("/ui/")
    ):
        return target
    return "/ui/operations"


# -- sign-in -----------------------------------------------------------------------------------


@router.get("/ui")
def console_root() -> Response:
    """``/ui`` as typed: the console's address (the API answers no trailing-slash guesses)."""
    return RedirectResponse("/ui/", status_code=303, headers=SECURITY_HEADERS)


@router.get("/ui/")
def home(request: Request) -> Response:
    require(request)
    return RedirectResponse("/ui/operations", status_code=303, headers=SECURITY_HEADERS)


@router.get("/ui/login")
def login_form(request: Request, next: str | None = None) -> Response:
    return _login_page(request, next, None, 200)


def _login_page(request: Request, next: str | None, problem: str | None, status: int) -> Response:
    nonce, csrf = login_csrf(request)
    response = page(
        request, "login.html", session_of(request), status_code=status, login_csrf=csrf,
        next=_safe_next(next), problem=problem,
    )  # fmt: skip
    set_login_cookie(request, response, nonce)
    return response


# The POSTs are async to read their form; every token look-up (a store read) goes to the
# thread pool, as the API's ``caller`` does, so that it does not stall the event loop.


@router.post("/ui/login")
async def login(request: Request) -> Response:
    form = await form_of(request)
    if not login_csrf_ok(request, form.get("csrf", "")):
        raise CsrfRefused()
    token = form.get("token", "").strip()

    def signed_in() -> Response:
        try:
            authenticate(served(request), token)
        except BlackOpsError:
            return _login_page(request, form.get("next"), "That token was not accepted.", 401)
        response = RedirectResponse(
            _safe_next(form.get("next")), status_code=303, headers=SECURITY_HEADERS
        )
        set_session_cookie(request, response, token)
        return response

    return await run_in_threadpool(signed_in)


@router.post("/ui/logout")
async def logout(request: Request) -> Response:
    session = await run_in_threadpool(session_of, request)  # a token look-up: off the loop
    form = await form_of(request)
    supplied = form.get("csrf", "")
    if session is None:
        # A token that no longer signs in (revoked, expired) still gets its cookie cleared
        # when the form is that token's own page's: its CSRF token derives from the token,
        # not from whether it is valid. Anything else has no session to end.
        token = request.cookies.get(SESSION_COOKIE, "")
        if not (token and same(session_csrf(token), supplied)):
            raise NoSession()
    elif not csrf_ok(request, session, supplied):
        raise CsrfRefused()
    response = RedirectResponse("/ui/login", status_code=303, headers=SECURITY_HEADERS)
    clear_session_cookie(request, response)
    return response


@router.get("/ui/static/{name}")
def static(name: str) -> Response:
    media = _STATIC.get(name)
    if media is None:
        raise NotFound("no such file")
    body = resources.files("blackops.console").joinpath("static", name).read_bytes()
    return Response(
        body,
        media_type=media,
        headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
    )


# -- operations --------------------------------------------------------------------------------


@router.get("/ui/operations")
def operations(
    request: Request,
    tenant: Text = None,
    type: Text = None,
    status: Text = None,
    since: Text = None,
    until: Text = None,
    cursor: Text = None,
) -> Response:
    session = require(request)
    who, app = session.caller, _app(request)
    spaces = visible_spaces(request, who)
    if not tenant and not who.principal.system:
        if not spaces:
            raise NotFound("this principal has no Space")
        tenant = spaces[0]  # a principal of several Spaces starts in its first (U4)
    tenant = tenant or None
    if tenant is not None:
        check_space(app, who, tenant, Action.READ)
    filters = {
        "tenant": tenant,
        "type": type or None,
        "status": status or None,
        "since": since or None,
        "until": until or None,
        "cursor": cursor or None,
    }
    listing = app.list_operations(**filters, limit=50)
    counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
    for space, types in app.operation_counts(tenant).items():
        if tenant is None or space == tenant:
            for name, by_status in types.items():
                if filters["type"] is None or name == filters["type"]:
                    for status_name, count in by_status.items():
                        counts[status_name] = counts.get(status_name, 0) + count
    shown = {k: v for k, v in filters.items() if k != "cursor" and v}
    # The counts projection has no creation time: a count's link lists what it counts, so
    # it keeps only the filters the counts honour (the page says the others are ignored).
    counted = {k: v for k, v in shown.items() if k in ("tenant", "type")}
    return page(
        request, "operations.html", session, spaces=spaces, filters=filters, shown=shown,
        counted=counted, listing=listing, counts=counts, statuses=STATUSES,
        system=who.principal.system,
    )  # fmt: skip


OperationId = Annotated[str, Path(max_length=64)]


@router.get("/ui/operations/{operation_id}")
def operation(request: Request, operation_id: OperationId) -> Response:
    session = require(request)
    who, app = session.caller, _app(request)
    status = operation_of(app, operation_id, who, Action.READ)
    events = app.events(operation_id)
    service: CheckpointService = checkpoints(request)
    receipt = operation_receipt(service, events)
    # A Deferred operation's Outcome Record, else the outcome its status carries (Inline).
    outcome, no_outcome = status.get("outcome"), None
    if status.get("status") == "completed" and status.get("mode") == "deferred":
        try:
            outcome = app.outcome(operation_id)
        except BlackOpsError as error:  # why there is none (its Outcome Record was purged)
            outcome, no_outcome = None, error.message
    holds = [e for e in events if e["type"] in ("operation.held", "operation.released")]
    # The Outcome Record's stream is its own: the tombstone of its purge is there (it was
    # left out, so a purged outcome showed as none, unexplained: found by a defect hunt).
    # Read only when the record is missing: a record that is there has no tombstone.
    outcome_events = app.store.read_stream(outcome_stream(operation_id)) if no_outcome else []
    recorded = [e.to_observed() for e in outcome_events]
    tombstones = sorted(
        (e for e in [*events, *recorded] if e["type"].endswith(".purged")),
        key=lambda e: int(e["position"]),
    )
    space = status["tenant"]
    held = "hold" in status  # an active hold (the status view drops it on release)
    # A purged operation can be neither held nor redriven (its params are gone): not offered.
    kept = not status.get("purged")
    actions = {
        "hold": may(who, space, Action.OPERATE) and not held and kept,
        "release": may(who, space, Action.ADMINISTER) and held,
        "redrive": may(who, space, Action.OPERATE)
        and status.get("status") == "dead_letter"
        and kept,
    }
    return page(
        request, "operation.html", session, op=status, events=events, stages=STAGES,
        terminal=TERMINAL_CLASS, receipt=receipt, outcome=outcome, no_outcome=no_outcome,
        holds=holds, tombstones=tombstones, actions=actions,
        receipt_name=receipt_name(operation_id),
    )  # fmt: skip


@router.get("/ui/operations/{operation_id}/receipt.json")
def operation_receipt_file(request: Request, operation_id: OperationId) -> Response:
    """The receipt file ``blackops verify-receipt FILE --key K`` checks."""
    session = require(request)
    app = _app(request)
    operation_of(app, operation_id, session.caller, Action.READ)
    view = operation_receipt(checkpoints(request), app.events(operation_id))
    return _receipt_file(view, receipt_name(operation_id))


def receipt_name(subject_id: str) -> str:
    """The receipt file's name, as the download gives it and the page's command names it."""
    # A hint only: quotes and path separators of an instance id are left out.
    name = f"receipt-{subject_id}.json"
    return "".join(c for c in name if c.isalnum() or c in "-._")[:120] or "receipt.json"


def _receipt_file(view: ReceiptView, name: str) -> Response:
    """The receipt file ``blackops verify-receipt FILE --key K`` checks, as a download."""
    if view.receipt is None:
        raise NotFound(view.problem or "no receipt")
    body = orjson.dumps(view.receipt, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    headers = {**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="{name}"'}
    return Response(body + b"\n", media_type="application/json", headers=headers)


# -- workflows and instances ---------------------------------------------------------------------


@router.get("/ui/workflows")
def workflows_home(request: Request) -> Response:
    session = require(request)
    spaces = visible_spaces(request, session.caller)
    if len(spaces) == 1:
        location = f"/ui/spaces/{spaces[0]}/workflows"
        return RedirectResponse(location, status_code=303, headers=SECURITY_HEADERS)
    return page(request, "spaces.html", session, spaces=spaces)


Space = Annotated[str, Path(max_length=128)]
Uid = Annotated[str, Path(max_length=128)]


@router.get("/ui/spaces/{space}/workflows")
def workflows(request: Request, space: Space) -> Response:
    session = require(request)
    who, app = session.caller, _app(request)
    check_space(app, who, space, Action.READ)
    views = app.workflow_views(space)
    workers = []
    for worker in app.control.workers(space):
        name = str(worker["uid"])
        try:
            versions = app.control.versions(space, name)
            deployment = app.control.deployment(space, name)
        except BlackOpsError as error:
            versions, deployment = [], {"problem": error.message}
        workers.append({"worker": worker, "versions": versions, "deployment": deployment})
    return page(request, "workflows.html", session, space=space, workflows=views,
                workers=workers)  # fmt: skip


@router.get("/ui/spaces/{space}/workflows/{uid}")
def workflow(
    request: Request, space: Space, uid: Uid, status: Text = None, cursor: Text = None
) -> Response:
    session = require(request)
    who, app = session.caller, _app(request)
    resource = workflow_in(app, space, uid, who, Action.READ)
    view = app.workflow_view(space, resource.uid)
    listing = app.list_instances(
        resource.uid, status=status or None, cursor=cursor or None, limit=50
    )
    return page(request, "workflow.html", session, space=space, uid=resource.uid, view=view,
                listing=listing, status=status or "")  # fmt: skip


#: ``.`` and ``..`` come as ``?id=`` (``render.instance_url``).
QueryId = Annotated[str | None, Query(alias="id", max_length=256)]


@router.get("/ui/spaces/{space}/workflows/{uid}/instances/{instance_id:any_path}")
def instance(
    request: Request, space: Space, uid: Uid, instance_id: str, query_id: QueryId = None
) -> Response:
    session = require(request)
    instance_id = instance_named(instance_id, query_id)
    who, app = session.caller, _app(request)
    resource = workflow_in(app, space, uid, who, Action.READ)
    status = app.instances.status(resource, instance_id)
    events = app.store.read_stream(instance_stream(resource.uid, instance_id))
    steps, _ = step_history(events)
    why = _why(status, events)
    receipt = instance_receipt(checkpoints(request), _positions(events))
    return page(
        request, "instance.html", session, space=space, uid=resource.uid,
        instance_id=instance_id, status=status, steps=steps, events=events, why=why,
        receipt=receipt, receipt_name=receipt_name(instance_id),
        may_terminate=may(who, space, Action.OPERATE)
        and status.get("status") not in ("complete", "errored", "terminated"),
    )  # fmt: skip


@router.get("/ui/spaces/{space}/workflows/{uid}/receipts/{instance_id:any_path}")
def instance_receipt_file(
    request: Request, space: Space, uid: Uid, instance_id: str, query_id: QueryId = None
) -> Response:
    """The instance's receipt file (its terminal event's inclusion proof)."""
    session = require(request)
    instance_id = instance_named(instance_id, query_id)
    app = _app(request)
    resource = workflow_in(app, space, uid, session.caller, Action.READ)
    app.instances.status(resource, instance_id)  # unknown (or purged): unknown_instance
    events = app.store.read_stream(instance_stream(resource.uid, instance_id))
    view = instance_receipt(checkpoints(request), _positions(events))
    return _receipt_file(view, receipt_name(instance_id))


def _positions(events: list[Any]) -> list[dict[str, Any]]:
    """What `terminal_position` reads of a stream's events."""
    return [{"type": e.type, "position": e.position} for e in events]


#: Events that leave an instance where it was (its "why" is told by the ones before).
_ASIDE = frozenset({"workflow.event_accepted", "workflow.termination_requested"})


def _why(status: dict[str, Any], events: list[Any]) -> str:
    """A sentence saying why the instance is in its status, from its last events."""
    name = status.get("status")
    last = events[-1] if events else None
    if name == "queued":
        return "created; no context has started yet"
    # The last event may be one accepted without waking the instance: the suspension is
    # the last step_suspended event.
    suspended = next((e for e in reversed(events) if e.type == "workflow.step_suspended"), None)
    if name in ("sleeping", "waiting") and suspended is not None:
        data = suspended.data
        kind = STEP_KINDS.get(str(data.get("kind")), data.get("kind"))
        return f"{kind} step {data.get('name')!r} until {data.get('due_at')}"
    # An event accepted or a termination asked for meanwhile does not move the instance:
    # what it waits for is told by the event before them.
    moved = next((e for e in reversed(events) if e.type not in _ASIDE), None)
    if name == "running" and moved is not None and moved.type == "workflow.step_retry_scheduled":
        return f"step {moved.data.get('name')!r} retries at {moved.data.get('due_at')}"
    if name == "errored":
        error = status.get("error") or {}
        return f"{error.get('reason', '')}: {error.get('message', '')}".strip(": ")
    if last is not None:
        return f"last event: {last.type} at {last.at}"
    return ""


# -- the journal -------------------------------------------------------------------------------


@router.get("/ui/journal")
def journal(request: Request, space: Text = None) -> Response:
    session = require(request)
    who, app = session.caller, _app(request)
    spaces = visible_spaces(request, who)
    if not space and not who.principal.system:
        if not spaces:
            raise NotFound("this principal has no Space")
        space = spaces[0]
    space = space or None
    if space is not None:
        check_space(app, who, space, Action.READ)
    service: CheckpointService = checkpoints(request)
    trusted = verifier_keys(service)
    history = checkpoint_history(service, keys=trusted)
    keys = [key.encode() for key in trusted]
    refusal = service.refusal.message if service.refusal is not None else None
    stream = f"/v1/spaces/{space}/journal/stream" if space else "/v1/journal/stream"
    # The position first, then the lines up to it: a line committed meanwhile is in the
    # live tail (which starts after it), not lost between the list and the tail.
    after = app.store.last_position()
    lines = recent_lines(app, space, after)
    return page(
        request, "journal.html", session, spaces=spaces, space=space or "",
        history=history, current=history[0] if history else None, keys=keys,
        signing=service.key is not None, refusal=refusal, exports=exports(app, who),
        lines=lines, look_back=RECENT_LOOK_BACK, stream=stream, after=after,
        system=who.principal.system,
    )  # fmt: skip
