"""What the control-plane commands share (the Space's application, resolving a Worker,
running accepted operations in this process, exit codes from an operation's end) and
``blackops worker create|list``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from blackops.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    RESULT_EXIT,
    acting,
    add_common,
    cli_actor,
    emit,
    store_app,
)
from domain.errors import BackendUnavailable, NotFound

if TYPE_CHECKING:
    from blackops.application import Application


def add_worker_resource_commands(worker: argparse.ArgumentParser) -> None:
    """``blackops worker create|list``: Worker resources. ``blackops worker`` with no
    subcommand still runs a worker process."""
    units = worker.add_subparsers(dest="worker_resource", metavar="{create,list}")
    create = units.add_parser("create", help="create a Worker (a named code unit) in a Space")
    add_common(create, app=False, nested=True)
    create.add_argument("name")
    create.add_argument("--space", required=True, help="the Space")
    acting(create)
    create.set_defaults(handler=cmd_worker_create)
    listing = units.add_parser("list", help="the Space's Workers")
    add_common(listing, app=False, nested=True)
    listing.add_argument("--space", required=True, help="the Space")
    listing.set_defaults(handler=cmd_worker_list)


def waiting(parser: argparse.ArgumentParser, *, no_wait: bool = True) -> None:
    from blackops.cli.common import seconds

    if no_wait:
        parser.add_argument(
            "--no-wait", action="store_true", help="print the accepted operation; do not run it"
        )
    parser.add_argument(
        "--timeout", type=seconds, default=120.0, help="seconds to wait for the operation"
    )


def keyed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", help="Idempotency-Key: the same key is the same operation")


def worker_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--worker", required=True, help="a Worker UID or name in the Space")


def space_command(
    within: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    handler: Any,
    *,
    actor: bool = False,
) -> argparse.ArgumentParser:
    """A control-plane command: ``--space`` required, ``--store``, ``--json``."""
    parser = within.add_parser(name, help=summary)
    add_common(parser, app=False)
    parser.add_argument("--space", required=True, help="the Space")
    if actor:
        acting(parser)
    parser.set_defaults(handler=handler)
    return parser


def plane_of(args: argparse.Namespace) -> Application:
    """The store's application, once ``--space`` is known to exist (``not_found``)."""
    application = store_app(args)
    if not application.access.space_exists(args.space):
        raise NotFound(f"no space {args.space!r} (create it: blackops space create NAME)")
    return application


def resolve_worker(application: Application, space: str, worker: str) -> str:
    """``--worker``: a Worker UID of ``space`` or a Worker name there, resolved here, on
    the client side, to the UID; the spec sent holds the UID only (DW-SPEC-4, -6)."""
    return application.control.worker_uid(space, worker)


def wait_for(application: Application, args: argparse.Namespace, operation_ids: list[str]) -> None:
    """Run the accepted operations in this process until they finish (not with --no-wait)."""
    if getattr(args, "no_wait", False):
        return
    try:
        application.control.work(operation_ids, args.timeout)
    except BackendUnavailable as late:
        if "did not finish" not in late.message:
            raise
        raise BackendUnavailable(
            f"operation {', '.join(operation_ids)} did not finish within {args.timeout:g} s; "
            "it goes on in any worker (blackops op status ID)"
        ) from None


def finished(
    application: Application, view: dict[str, Any], resource: dict[str, Any] | None
) -> dict[str, Any]:
    """The operation's body with its current status (and why, when it did not complete),
    and ``resource`` as it is now."""
    status = application.status(view["operationId"])
    body = {**view, "status": status["status"]}
    for why in ("rejection", "failure"):
        if why in status:
            body[why] = status[why]
    if resource is not None:
        body["resource"] = resource
    return body


def exit_for(body: dict[str, Any]) -> int:
    """0 once completed (or accepted with --no-wait); 3 rejected; 4 failed; else 1."""
    if body["status"] in ("accepted", "running", "retry_scheduled"):
        return EXIT_OK
    return RESULT_EXIT.get(body["status"], EXIT_ERROR)


def why(body: dict[str, Any]) -> str:
    if "rejection" in body:
        return f" ({body['rejection'].get('code')}: {body['rejection'].get('message')})"
    if "failure" in body:
        return f" ({body['failure'].get('message')})"
    return ""


def cmd_worker_create(args: argparse.Namespace) -> int:
    application = plane_of(args)
    created = application.control.create_worker(args.space, args.name, cli_actor(args))
    view = application.control.operation_view(created["operationId"])
    body = finished(application, view, application.control.worker_in(args.space, created["uid"]))
    emit(body, args.json, lambda: f"worker {args.name} created: {created['uid']}")
    return exit_for(body)


def cmd_worker_list(args: argparse.Namespace) -> int:
    items = plane_of(args).control.workers(args.space)
    lines = [f"{w['uid']}  {w['name']:<24} {w['createdAt']}" for w in items]
    emit({"items": items}, args.json, lambda: "\n".join(lines) or "no workers")
    return EXIT_OK
