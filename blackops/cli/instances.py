"""``blackops wf ...``: workflows the ``--app`` registers (or Workflow resources by UID) and
their instances: create, status, send, terminate."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackops.cli import audit
from blackops.cli.common import (
    EXIT_OK,
    Commands,
    acting,
    add_common,
    app_of,
    cli_actor,
    emit,
    flush_stdout,
    seconds,
    write_stdout,
)

if TYPE_CHECKING:
    from blackops.application import Application
    from blackops.workflows.code import WorkflowResource


def register(commands: Commands) -> None:
    wf = commands.add_parser("wf", help="workflow instances")
    wf_commands = wf.add_subparsers(dest="wf", required=True)

    listing = wf_commands.add_parser(
        "list", help="the workflows --app registers; with a UID, that workflow's instances"
    )
    add_common(listing)
    listing.add_argument("uid", nargs="?", help="a workflow: list its instances")
    listing.add_argument("--status", help="instances in this status only")
    listing.add_argument("--since", help="created at or after this RFC 3339 instant")
    listing.add_argument("--until", help="created before this RFC 3339 instant")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--cursor", help="the `next` of the previous page")
    listing.set_defaults(handler=cmd_wf_list)

    counts = wf_commands.add_parser("counts", help="a workflow's instanceCounts (DW-OBS-1)")
    add_common(counts)
    counts.add_argument("uid", help="a registered workflow's uid or a Workflow resource UID")
    counts.set_defaults(handler=cmd_wf_counts)

    def instance_command(
        name: str, summary: str, handler: Callable[..., int], *, with_id: bool = True
    ) -> argparse.ArgumentParser:
        command = wf_commands.add_parser(name, help=summary)
        add_common(command)
        command.add_argument(
            "uid", help="a registered workflow's uid (see wf list) or a Workflow resource UID"
        )
        if with_id:
            command.add_argument(
                "instance_id", help="the instance id (after -- if it starts with -)"
            )
        command.set_defaults(handler=handler)
        return command

    create = instance_command("create", "create an instance (queued)", cmd_wf_create, with_id=False)
    create.add_argument("--id", help="instance id, 1-256 characters (default: a UUID)")
    create.add_argument("--params", help="params document as JSON (default: none)")
    acting(create)

    instance_command("status", "an instance's status()", cmd_wf_status)

    history = instance_command(
        "history", "an instance's history as Observed JSONL (a replay fixture)", cmd_wf_history
    )
    history.add_argument("--output", help="file to write (default: stdout)")

    receipt = instance_command(
        "receipt", "the receipt of an instance's terminal event (docs/audit.md)", cmd_wf_receipt
    )
    receipt.add_argument("--position", type=int, help="another event of the instance instead")
    audit.signing_key_option(receipt)

    send = instance_command("send", "accept an event for an instance", cmd_wf_send)
    send.add_argument("--type", required=True, help="event type, 1-256 characters")
    send.add_argument("--payload", help="payload document as JSON (default: none)")
    acting(send)

    terminate = instance_command(
        "terminate", "terminate an instance once its code has stopped", cmd_wf_terminate
    )
    terminate.add_argument(
        "--timeout", type=seconds, default=60.0, help="seconds to wait for the proof of stop"
    )
    acting(terminate)


def _workflow(args: argparse.Namespace) -> tuple[Application, WorkflowResource]:
    """The ``--app`` application and its workflow ``UID`` (``not_found`` if none)."""
    application = app_of(args)
    return application, application.workflow(args.uid).resource


def document_flag(text: str | None) -> dict[str, Any] | None:
    """``--params`` / ``--payload``: left out means none (DW-DOC-4); else a strict object."""
    from blackops.jsonbody import parse_document

    return None if text is None else parse_document(text)


def cmd_wf_counts(args: argparse.Namespace) -> int:
    counts = app_of(args).instance_counts(args.uid)

    def human() -> str:
        listed = "  ".join(f"{status} {n}" for status, n in counts["instanceCounts"].items())
        return f"{listed}\n(as of position {counts['observedPosition']})"

    emit(counts, args.json, human)
    return EXIT_OK


def cmd_wf_list(args: argparse.Namespace) -> int:
    """Without a UID: the registered workflows; with one: its instances, paged."""
    if args.uid is not None:
        return _list_instances(args)
    resources = app_of(args).workflows()
    body = {
        "workflows": [
            {"uid": r.uid, "space": r.space, "className": r.class_name} for r in resources
        ]
    }

    def human() -> str:
        lines = [f"{r.uid:<24} {r.space:<16} {r.class_name}" for r in resources]
        return "\n".join(lines) or "no workflows"

    emit(body, args.json, human)
    return EXIT_OK


def _list_instances(args: argparse.Namespace) -> int:
    page = app_of(args).list_instances(
        args.uid, status=args.status, since=args.since, until=args.until, limit=args.limit,
        cursor=args.cursor,
    )  # fmt: skip

    def human() -> str:
        lines = [f"{i['id']:<40} {i['status']:<11} {i['createdAt']}" for i in page["items"]]
        if page["next"]:
            lines.append(f"(more: --cursor {page['next']})")
        return "\n".join(lines) or "no instances"

    emit(page, args.json, human)
    return EXIT_OK


def cmd_wf_create(args: argparse.Namespace) -> int:
    application, resource = _workflow(args)
    params = document_flag(args.params)
    instance_id = application.instances.create(resource, args.id, params, cli_actor(args))
    # A new instance is queued (decisions D2), whatever a worker does next.
    emit({"id": instance_id, "status": "queued"}, args.json, lambda: instance_id)
    return EXIT_OK


def cmd_wf_status(args: argparse.Namespace) -> int:
    """Exit 0 whenever status() answers, for an errored run too (DW-INST-4)."""
    from blackops.jsonbody import render_json

    application, resource = _workflow(args)
    status = application.instances.status(resource, args.instance_id)

    def human() -> str:
        lines = [status["status"]]
        if "output" in status:
            lines.append(f"output  {render_json(status['output']).decode()}")
        if "error" in status:
            error = status["error"]
            message = f": {error['message']}" if "message" in error else ""
            lines.append(f"error   {error['reason']}{message}")
        return "\n".join(lines)

    emit(status, args.json, human)
    return EXIT_OK


def cmd_wf_send(args: argparse.Namespace) -> int:
    application, resource = _workflow(args)
    payload = document_flag(args.payload)
    sequence = application.instances.send_event(
        resource, args.instance_id, args.type, payload, cli_actor(args)
    )
    body = {"id": args.instance_id, "type": args.type, "sequence": sequence}
    emit(body, args.json, lambda: f"accepted as event {sequence}")
    return EXIT_OK


def cmd_wf_terminate(args: argparse.Namespace) -> int:
    """Returns once the instance's code has provably stopped (DW-TERM-1)."""
    application, resource = _workflow(args)
    application.instances.terminate(
        resource, args.instance_id, cli_actor(args), timeout=args.timeout
    )
    # An instance that had already ended keeps its status (decisions P41).
    status = application.instances.status(resource, args.instance_id)["status"]
    emit({"id": args.instance_id, "status": status}, args.json, lambda: status)
    return EXIT_OK


def cmd_wf_history(args: argparse.Namespace) -> int:
    """One instance's events as Observed JSONL lines, each the canonical form of its
    event (as ``journal export`` writes them): keep it as a ``replay_histories`` fixture."""

    from domain.documents import canonical_json
    from domain.errors import InvalidRequest

    if args.json and args.output is None:  # as `journal export`: one document, or the JSONL
        raise InvalidRequest("--json needs --output: stdout carries the JSONL")
    application, resource = _workflow(args)
    stream = application.instances.load(resource, args.instance_id).stream
    events = application.store.read_stream(stream)
    lines = b"".join(canonical_json(event.to_observed()) + b"\n" for event in events)
    if args.output is None:
        write_stdout(lines)
        flush_stdout()
        return EXIT_OK
    try:
        with open(args.output, "wb") as out:
            out.write(lines)
    except OSError as unwritable:
        raise InvalidRequest(f"cannot write {args.output}: {unwritable.strerror}") from None
    body = {"id": args.instance_id, "events": len(events), "output": args.output}
    emit(body, args.json, lambda: f"{len(events)} events written to {args.output}")
    return EXIT_OK


def cmd_wf_receipt(args: argparse.Namespace) -> int:
    """The receipt of the instance's terminal event (or of ``--position``, one of its
    events): the document ``GET .../instances/{id}/receipt`` answers."""
    from blackops.audit.receipts import INSTANCE_TERMINAL, receipt_for, terminal_position
    from domain.errors import InvalidRequest

    application, resource = _workflow(args)
    application.instances.status(resource, args.instance_id)  # unknown: unknown_instance
    stream = application.instances.load(resource, args.instance_id).stream
    observed: list[dict[str, Any]] = [
        {"type": e.type, "position": e.position} for e in application.store.read_stream(stream)
    ]
    position = args.position
    if position is None:
        position = terminal_position(observed, INSTANCE_TERMINAL)
    elif position not in {int(e["position"]) for e in observed}:
        raise InvalidRequest(f"position {position} is not an event of {args.instance_id}")
    receipt = receipt_for(audit.checkpoint_service(application.store, args), position)
    emit(receipt, args.json, lambda: audit.receipt_text(receipt))
    return EXIT_OK
