"""``blackops workflow create|replace|get|list|delete``: Workflow resources (DW-CRUD, DW-DEL)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from blackops.cli.common import EXIT_OK, Commands, cli_actor, emit
from blackops.cli.control import (
    exit_for,
    finished,
    keyed,
    plane_of,
    resolve_worker,
    space_command,
    wait_for,
    waiting,
    why,
    worker_flag,
)
from domain.errors import NotFound

if TYPE_CHECKING:
    from blackops.application import Application


def register(commands: Commands) -> None:
    workflows = commands.add_parser(
        "workflow", help="Workflow resources (create/get/replace/delete)"
    ).add_subparsers(dest="workflow", required=True)
    for name, handler, summary in (
        ("create", cmd_workflow_create, "create a Workflow resource"),
        ("replace", cmd_workflow_replace, "replace its spec: a new generation (DW-CRUD-2)"),
    ):
        parser = space_command(workflows, name, summary, handler, actor=True)
        parser.add_argument("name" if name == "create" else "uid")
        worker_flag(parser)
        parser.add_argument("--class", dest="class_name", required=True, help="spec.className")
        keyed(parser)
        waiting(parser)
    get = space_command(
        workflows, "get", "a Workflow resource and what is observed", cmd_workflow_get
    )
    get.add_argument("uid")
    space_command(workflows, "list", "the Space's Workflow resources", cmd_workflow_list)
    delete = space_command(
        workflows, "delete", "delete: fence, stop, purge (DW-DEL)", cmd_workflow_delete, actor=True
    )
    delete.add_argument("uid")
    keyed(delete)
    waiting(delete)


def _workflow_lines(view: dict[str, Any]) -> list[str]:
    observed = view["observed"]
    if observed:
        counts = ", ".join(f"{k} {v}" for k, v in observed["instanceCounts"].items() if v)
        state = "ready" if observed["ready"] else f"not ready: {observed['reason']}"
        seen = f"{state}; instances: {counts or 'none'}"
    else:
        seen = "not observed yet"
    deleting = " (being deleted)" if view["deleting"] else ""
    return [
        f"{view['uid']}  {view['name']}{deleting}",
        f"  class {view['spec']['className']} of worker {view['spec']['worker']['resourceUid']}",
        f"  generation {view['generation']}, observed {view['observedGeneration']}: {seen}",
    ]


def _workflow_spec(application: Application, args: argparse.Namespace) -> dict[str, Any]:
    worker_uid = resolve_worker(application, args.space, args.worker)
    return {"worker": {"resourceUid": worker_uid}, "className": args.class_name}


def _workflow_done(application: Application, args: argparse.Namespace, view: dict[str, Any]) -> int:
    wait_for(application, args, [view["operationId"]])
    uid = view["resource"]["uid"]
    try:
        resource = application.control.get_workflow(args.space, uid)
    except NotFound:
        resource = {**view["resource"], "deleted": True}
    body = finished(application, view, resource)

    def human() -> str:
        head = f"{body['operationId']} {body['status']}{why(body)}"
        if resource.get("deleted"):
            return f"{head}\n{uid} deleted"
        return "\n".join([head, *_workflow_lines(resource)])

    emit(body, args.json, human)
    return exit_for(body)


def cmd_workflow_create(args: argparse.Namespace) -> int:
    application = plane_of(args)
    spec = _workflow_spec(application, args)
    view = application.control.create_workflow(
        args.space, {"name": args.name, "spec": spec}, cli_actor(args), args.key
    )
    return _workflow_done(application, args, view)


def cmd_workflow_replace(args: argparse.Namespace) -> int:
    application = plane_of(args)
    spec = _workflow_spec(application, args)
    view = application.control.replace_workflow(
        args.space, args.uid, {"spec": spec}, cli_actor(args), args.key
    )
    return _workflow_done(application, args, view)


def cmd_workflow_delete(args: argparse.Namespace) -> int:
    application = plane_of(args)
    view = application.control.delete_workflow(args.space, args.uid, cli_actor(args), args.key)
    return _workflow_done(application, args, view)


def cmd_workflow_get(args: argparse.Namespace) -> int:
    view = plane_of(args).control.get_workflow(args.space, args.uid)
    emit(view, args.json, lambda: "\n".join(_workflow_lines(view)))
    return EXIT_OK


def cmd_workflow_list(args: argparse.Namespace) -> int:
    items = plane_of(args).control.list_workflows(args.space)
    lines = [line for view in items for line in _workflow_lines(view)]
    emit({"items": items}, args.json, lambda: "\n".join(lines) or "no workflows")
    return EXIT_OK
