"""The ``blackops`` command (python-contract §5): serve, worker, op run / submit / status /
outcome / events / redrive, wf list / create / status / send / terminate.

Exit status: 0 success (an operation ``completed``), 1 an error with a taxonomy
code, 2 usage, 3 the operation was rejected, 4 the operation failed. ``--json``
prints exactly one JSON document on stdout, errors included.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from blackops.application import Application
from blackops.jsonbody import parse_document, render_json
from blackops.loading import load_application
from blackops.workflow_code import WorkflowResource
from domain.context import Actor
from domain.errors import BlackOpsError, InvalidRequest

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_REJECTED, EXIT_FAILED = 0, 1, 2, 3, 4
_RESULT_EXIT = {"completed": EXIT_OK, "rejected": EXIT_REJECTED, "failed": EXIT_FAILED}


def _emit(document: Any, as_json: bool, human: Callable[[], str]) -> None:
    if as_json:
        sys.stdout.write(render_json(document).decode() + "\n")
    else:
        sys.stdout.write(human() + "\n")


def _application(args: argparse.Namespace) -> Application:
    """The ``--app`` application (or a bare one), pointed at ``--store`` if given."""
    target = args.app or os.environ.get("BLACKOPS_APP")
    application = load_application(target) if target else Application()
    if args.store:
        application.use_store(args.store)
    return application


def _cli_actor(args: argparse.Namespace) -> Actor:
    return Actor(args.actor or getpass.getuser() or "cli", "cli")


# -- commands ------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from blackops.devtoken import load_or_create_token
    from blackops.http import create_http_app

    application = _application(args)
    token = load_or_create_token()
    url = f"http://{args.host}:{args.port}"
    types = application.operation_types
    workflows = [resource.uid for resource in application.workflows()]
    example = types[0] if types else "TYPE"
    application.store  # open (and create) the journal before taking requests  # noqa: B018
    worker = None
    if args.worker and (types or workflows):
        worker = application.worker(
            concurrency=args.concurrency,
            workflow_processes=args.workflow_processes,
            contexts_per_process=args.contexts_per_process,
        ).start()
    started = {
        "url": url,
        "openapi": f"{url}/openapi.json",
        "token": token,
        "store": application.store_display,
        "types": types,
        "workflows": workflows,
        "worker": worker.id if worker else None,
    }

    def banner() -> str:
        in_process = f"{worker.id} (in-process, concurrency {args.concurrency})" if worker else "-"
        return (
            f"BlackOps serving {args.app or '(no --app: no operation types)'}\n"
            f"  store     {application.store_display}\n"
            f"  url       {url}   (OpenAPI {url}/openapi.json, docs {url}/docs)\n"
            f"  token     {token}\n"
            f"  types     {', '.join(types) or '-'}\n"
            f"  workflows {', '.join(workflows) or '-'}\n"
            f"  worker    {in_process}\n"
            f"Try it:\n"
            f"  export TOKEN={token}\n"
            f"  curl -s -X POST {url}/v1/spaces/default/operations/{example} \\\n"
            f"       -H \"Authorization: Bearer $TOKEN\" -H 'content-type: application/json' \\\n"
            f"       -d '{{}}'\n"
            f'  curl -s {url}/v1/operations/OPERATION_ID -H "Authorization: Bearer $TOKEN"'
            + _workflow_hint(application, url)
        )

    _emit(started, args.json, banner)
    sys.stdout.flush()
    try:
        uvicorn.run(
            create_http_app(application, token),
            host=args.host,
            port=args.port,
            log_level="info",
            access_log=not args.json,  # --json: stdout holds one document only
        )
    finally:
        if worker is not None:
            worker.stop(args.grace_seconds)
    return EXIT_OK


def _workflow_hint(application: Application, url: str) -> str:
    """The banner's curl for the first workflow, if the app registers any."""
    resources = application.workflows()
    if not resources:
        return ""
    first = resources[0]
    instances = f"{url}/v1/spaces/{first.space}/workflows/{first.uid}/instances"
    return (
        f"\n  curl -s -X POST {instances} \\\n"
        f'       -H "Authorization: Bearer $TOKEN" -d \'{{}}\'   # body: {{"id"?, "params"?}}'
    )


def _describe(started: dict[str, Any]) -> str:
    runs = ", ".join([*started["types"], *started["workflows"]])
    return f"{runs} on {started['store']} (concurrency {started['concurrency']})"


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker until SIGTERM/SIGINT, then drain for the grace period and exit."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    application = _application(args)
    if not application.operation_types and not application.workflows():
        raise InvalidRequest("the worker's --app registers no operation types and no workflows")
    worker = application.worker(
        concurrency=args.concurrency,
        lease_seconds=args.lease_seconds,
        grace_seconds=args.grace_seconds,
        poll_seconds=args.poll_seconds,
        workflow_processes=args.workflow_processes,
        contexts_per_process=args.contexts_per_process,
    )

    def on_signal(signum: int, _: object) -> None:
        worker.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.start()
    started = {
        "worker": worker.id,
        "types": application.operation_types,
        "workflows": [resource.uid for resource in application.workflows()],
        "store": application.store_display,
        "concurrency": args.concurrency,
    }
    # --json: exactly one document on stdout; the human lines go to stderr then.
    _emit(started, args.json, lambda: f"BlackOps worker {worker.id}: {_describe(started)}")
    sys.stdout.flush()
    while not worker.join(0.5):
        pass
    sys.stderr.write(f"BlackOps worker {worker.id} stopped\n")
    sys.stderr.flush()
    # Handler threads still running after the grace period were handed back (their
    # attempts are interrupted and fenced); do not wait for them.
    os._exit(EXIT_OK)


def cmd_op_run(args: argparse.Namespace) -> int:
    application = _application(args)
    params = parse_document(args.params)
    result = application.run(
        args.type, params, actor=_cli_actor(args), tenant=args.tenant, traceparent=args.traceparent
    )
    body = result.to_dict()

    def human() -> str:
        if result.rejection is not None:
            r = result.rejection
            return f"{result.operation_id} rejected: {r.category}/{r.code}: {r.message}"
        if result.failure is not None:
            return f"{result.operation_id} failed: {result.failure.message}"
        return f"{result.operation_id} completed: {orjson.dumps(result.outcome).decode()}"

    _emit(body, args.json, human)
    return _RESULT_EXIT.get(result.status, EXIT_ERROR)


def cmd_op_submit(args: argparse.Namespace) -> int:
    application = _application(args)
    params = parse_document(args.params)
    operation_id = application.submit(
        args.type,
        params,
        actor=_cli_actor(args),
        tenant=args.tenant,
        idempotency_key=args.idempotency_key,
        traceparent=args.traceparent,
    )
    body = {"operationId": operation_id, "status": application.status(operation_id)["status"]}
    _emit(body, args.json, lambda: operation_id)
    return EXIT_OK


def cmd_op_outcome(args: argparse.Namespace) -> int:
    record = _application(args).outcome_record(args.operation_id)
    _emit(record.to_dict(), args.json, lambda: orjson.dumps(record.document).decode())
    return EXIT_OK


def cmd_op_redrive(args: argparse.Namespace) -> int:
    operation_id = _application(args).redrive(args.operation_id, actor=_cli_actor(args))
    body = {"operationId": operation_id, "redriveOf": args.operation_id}
    _emit(body, args.json, lambda: operation_id)
    return EXIT_OK


def cmd_journal_export(args: argparse.Namespace) -> int:
    """Observed JSONL on stdout or ``--output``, with a manifest, recorded in the journal.

    Progress on a terminal; Ctrl-C ends ``--follow`` (the manifest is written then).
    """
    from blackops.clocks import SystemClock
    from blackops.progress import progress
    from journal.store import EventStore
    from replay.custody import export_with_manifest
    from replay.export import export_journal

    if args.after < 0:
        raise InvalidRequest("--after must be a position >= 0")
    if args.json and not args.output:
        raise InvalidRequest("--json needs --output: stdout carries the JSONL")
    manifest_path = args.manifest or (f"{args.output}.manifest.json" if args.output else None)
    if manifest_path is None and not args.no_manifest:
        raise InvalidRequest(
            "an export to stdout needs --manifest FILE (or --no-manifest for a plain stream)"
        )
    store = EventStore(args.store)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    body: dict[str, Any] = {"output": args.output, "manifest": manifest_path}
    try:
        target = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
        try:
            with progress("exporting") as report:
                if manifest_path is None:
                    summary = export_journal(
                        store, target, after=args.after, follow=args.follow, stop=stop,
                        progress=report,
                    )  # fmt: skip
                    body.update(count=summary.count, lastPosition=summary.last_position)
                else:
                    manifest = export_with_manifest(
                        store, target, actor=_cli_actor(args), clock=SystemClock(),
                        after=args.after, follow=args.follow, stop=stop, progress=report,
                        output_name=args.output,
                    )  # fmt: skip
                    with open(manifest_path, "wb") as written:
                        written.write(render_json(manifest) + b"\n")
                    body.update(
                        count=manifest["count"],
                        lastPosition=manifest["lastPosition"],
                        root=manifest["root"],
                        custody=manifest["custody"],
                    )
        finally:
            if args.output:
                target.close()
    finally:
        store.close()
    if args.json:
        _emit(body, True, str)
    elif args.output:
        sys.stderr.write(f"{body['count']} events written to {args.output}\n")
    return EXIT_OK


def cmd_journal_checkpoint(args: argparse.Namespace) -> int:
    from blackops.clocks import SystemClock
    from journal.store import EventStore
    from replay.custody import record_checkpoint

    with EventStore(args.store) as store:
        head = record_checkpoint(store, actor=_cli_actor(args), clock=SystemClock())
    _emit(head, args.json, lambda: f"checkpoint: tree size {head['treeSize']}, root {head['root']}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 only when everything verifies (python-contract §5)."""
    from journal.store import EventStore
    from replay.verify import verify_export, verify_store

    if args.jsonl:
        manifest_path = args.manifest or f"{args.jsonl}.manifest.json"
        try:
            with open(manifest_path, "rb") as raw:
                manifest = orjson.loads(raw.read())
            with open(args.jsonl, "rb") as lines:
                report = verify_export(lines, manifest)
        except OSError as unreadable:
            raise InvalidRequest(
                f"cannot read {unreadable.filename}: {unreadable.strerror}"
            ) from None
        except orjson.JSONDecodeError:
            raise InvalidRequest(f"{manifest_path} is not a JSON manifest") from None
    else:
        with EventStore(args.store) as store:
            report = verify_store(store)
    body = report.to_dict()

    def human() -> str:
        if report.ok:
            size = report.tree_size
            return f"verified: {report.events} events, tree size {size}, root {report.root}"
        first = report.problems[0]
        return f"NOT VERIFIED: {first.kind} at position {first.position}: {first.message}"

    _emit(body, args.json, human)
    return EXIT_OK if report.ok else EXIT_ERROR


def cmd_replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from blackops.loading import load_object
    from blackops.progress import progress
    from replay.observed import ObservedLineError
    from replay.replayer import (
        Observer,
        ObserverLike,
        OnDuplicate,
        ReplayStopped,
        read_state,
        replay,
    )

    target = load_object(args.observer, "--observer")
    if isinstance(target, type):
        target = target()  # a class: one fresh observer
    if not isinstance(target, Observer) and not callable(target):
        raise InvalidRequest(f"{args.observer} is neither callable nor has observe(event)")
    observer: ObserverLike = target
    state = Path(args.state) if args.state else None
    after = max(args.after, read_state(state) if state else 0)
    try:
        source = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as unreadable:
        raise InvalidRequest(f"cannot read {args.file}: {unreadable.strerror}") from None
    on_duplicate: OnDuplicate = "skip" if args.on_duplicate == "skip" else "stop"
    try:
        with progress("replaying") as report:
            result = replay(
                source, observer, after=after, on_duplicate=on_duplicate,
                state_file=state, progress=lambda position: report(position, None),
            )  # fmt: skip
    except ReplayStopped as stopped:
        message = str(stopped)
        body = {**stopped.report.to_dict(), "stopped": message}
        _emit(body, args.json, lambda: f"replay stopped: {message}")
        return EXIT_ERROR
    except ObservedLineError as bad:
        raise InvalidRequest(str(bad)) from None
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    _emit(
        result.to_dict(),
        args.json,
        lambda: f"{result.delivered} events delivered, last position {result.last_position}",
    )
    return EXIT_OK


def cmd_hold(args: argparse.Namespace) -> int:
    application = _application(args)
    hold = application.hold(args.operation_id, reason=args.reason, actor=_cli_actor(args))
    _emit({"operationId": args.operation_id, "hold": hold}, args.json, lambda: "held")
    return EXIT_OK


def cmd_release(args: argparse.Namespace) -> int:
    application = _application(args)
    application.release(args.operation_id, reason=args.reason, actor=_cli_actor(args))
    _emit({"operationId": args.operation_id, "released": True}, args.json, lambda: "released")
    return EXIT_OK


def cmd_purge(args: argparse.Namespace) -> int:
    """Retention is the --app's (its Application and operation types' Retention)."""
    application = _application(args)
    report = application.purge(actor=_cli_actor(args), reason=args.reason, dry_run=args.dry_run)

    def human() -> str:
        verb = "would purge" if report.dry_run else "purged"
        lines = [f"{verb} {i.what} {i.operation_id} (due {i.due_at})" for i in report.items]
        lines += [f"held, kept: {operation_id}" for operation_id in report.held]
        lines += [
            f"{verb} workflow instance {i['workflow']}/{i['id']} ({i['status']}, due {i['dueAt']})"
            for i in report.instances
        ]
        return "\n".join(lines) or "nothing is due"

    _emit(report.to_dict(), args.json, human)
    return EXIT_OK


def cmd_op_list(args: argparse.Namespace) -> int:
    page = _application(args).list_operations(
        tenant=args.tenant, type=args.type, status=args.status, since=args.since,
        until=args.until, limit=args.limit, cursor=args.cursor,
    )  # fmt: skip

    def human() -> str:
        lines = [
            f"{i['operationId']}  {i['status']:<15} {i['type']:<24} {i['createdAt']}"
            for i in page["items"]
        ]
        if page["next"]:
            lines.append(f"(more: --cursor {page['next']})")
        return "\n".join(lines) or "no operations"

    _emit(page, args.json, human)
    return EXIT_OK


def cmd_projections_status(args: argparse.Namespace) -> int:
    states = _application(args).projections.status()
    _emit(
        {"projections": states},
        args.json,
        lambda: "\n".join(f"{s['name']:<20} position {s['position']:>10}  lag {s['lag']}"
                          for s in states),
    )  # fmt: skip
    return EXIT_OK


def cmd_projections_rebuild(args: argparse.Namespace) -> int:
    runner = _application(args).projections.runner(args.name)
    runner.batch = args.batch
    applied = runner.rebuild()
    body = {"name": args.name, "events": applied, "position": runner.position()}
    _emit(body, args.json, lambda: f"{args.name}: rebuilt from {applied} events")
    return EXIT_OK


def cmd_op_status(args: argparse.Namespace) -> int:
    status = _application(args).status(args.operation_id)
    _emit(status, args.json, lambda: "\n".join(f"{k:<14}{v}" for k, v in status.items()))
    return EXIT_OK


def cmd_op_events(args: argparse.Namespace) -> int:
    events = _application(args).events(args.operation_id)

    def human() -> str:
        return "\n".join(
            f"{e['position']:>8}  v{e['version']:<3} {e['at']}  {e['type']}" for e in events
        )

    _emit({"operationId": args.operation_id, "events": events}, args.json, human)
    return EXIT_OK


# -- workflow instances (wf) ---------------------------------------------------------------


def _workflow(args: argparse.Namespace) -> tuple[Application, WorkflowResource]:
    """The ``--app`` application and its workflow ``UID`` (``not_found`` if none)."""
    application = _application(args)
    return application, application.workflow(args.uid).resource


def _document_flag(text: str | None) -> dict[str, Any] | None:
    """``--params`` / ``--payload``: left out means none (DW-DOC-4); else a strict object."""
    return None if text is None else parse_document(text)


def cmd_wf_list(args: argparse.Namespace) -> int:
    resources = _application(args).workflows()
    body = {
        "workflows": [
            {"uid": r.uid, "space": r.space, "className": r.class_name} for r in resources
        ]
    }

    def human() -> str:
        lines = [f"{r.uid:<24} {r.space:<16} {r.class_name}" for r in resources]
        return "\n".join(lines) or "no workflows"

    _emit(body, args.json, human)
    return EXIT_OK


def cmd_wf_create(args: argparse.Namespace) -> int:
    application, resource = _workflow(args)
    params = _document_flag(args.params)
    instance_id = application.instances.create(resource, args.id, params, _cli_actor(args))
    # A new instance is queued (decisions D2), whatever a worker does next.
    _emit({"id": instance_id, "status": "queued"}, args.json, lambda: instance_id)
    return EXIT_OK


def cmd_wf_status(args: argparse.Namespace) -> int:
    """Exit 0 whenever status() answers, for an errored run too (DW-INST-4)."""
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

    _emit(status, args.json, human)
    return EXIT_OK


def cmd_wf_send(args: argparse.Namespace) -> int:
    application, resource = _workflow(args)
    payload = _document_flag(args.payload)
    sequence = application.instances.send_event(
        resource, args.instance_id, args.type, payload, _cli_actor(args)
    )
    body = {"id": args.instance_id, "type": args.type, "sequence": sequence}
    _emit(body, args.json, lambda: f"accepted as event {sequence}")
    return EXIT_OK


def cmd_wf_terminate(args: argparse.Namespace) -> int:
    """Returns once the instance's code has provably stopped (DW-TERM-1)."""
    application, resource = _workflow(args)
    application.instances.terminate(
        resource, args.instance_id, _cli_actor(args), timeout=args.timeout
    )
    # An instance that had already ended keeps its status (decisions P41).
    status = application.instances.status(resource, args.instance_id)["status"]
    _emit({"id": args.instance_id, "status": status}, args.json, lambda: status)
    return EXIT_OK


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError("must be a number of seconds from 0 to 86400")
    return value


# -- parser --------------------------------------------------------------------------------


def workflow_options(parser: argparse.ArgumentParser) -> None:
    """Where a worker runs workflow contexts (docs/workflows.md, decisions W3, W13)."""
    parser.add_argument(
        "--workflow-processes", type=int, default=4, help="executor processes for contexts"
    )
    parser.add_argument(
        "--contexts-per-process",
        type=int,
        help="replace an executor after this many contexts (1: a fresh process each)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="blackops", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, *, app: bool = True) -> None:
        p.add_argument("--store", help="journal store URL (default: $BLACKOPS_STORE or SQLite)")
        p.add_argument("--json", action="store_true", help="print exactly one JSON document")
        if app:
            p.add_argument("--app", help="module:attr of a blackops.Application ($BLACKOPS_APP)")

    serve = commands.add_parser("serve", help="HTTP API on uvicorn")
    common(serve)
    serve.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    serve.add_argument(
        "--no-worker", dest="worker", action="store_false", help="no in-process worker"
    )
    serve.add_argument("--concurrency", type=int, default=4, help="in-process worker threads")
    serve.add_argument("--grace-seconds", type=float, default=10.0)
    workflow_options(serve)
    serve.set_defaults(handler=cmd_serve)

    worker = commands.add_parser("worker", help="claim and run Deferred operations")
    common(worker)
    worker.add_argument("--concurrency", type=int, default=4, help="handler threads")
    worker.add_argument("--lease-seconds", type=float, default=30.0)
    worker.add_argument(
        "--grace-seconds", type=float, default=30.0, help="time to finish on SIGTERM"
    )
    worker.add_argument("--poll-seconds", type=float, help="fallback polling interval")
    workflow_options(worker)
    worker.set_defaults(handler=cmd_worker)

    op = commands.add_parser("op", help="operations").add_subparsers(dest="op", required=True)

    def asking(p: argparse.ArgumentParser) -> None:
        """What ``op run`` and ``op submit`` both take: the operation and who asks."""
        common(p)
        p.add_argument("type")
        p.add_argument("--params", default="{}", help="params document as JSON")
        p.add_argument("--tenant", default="default", help="Space (tenant); default 'default'")
        p.add_argument("--actor", help="principal id recorded as the actor (default: $USER)")
        p.add_argument("--traceparent", help="W3C traceparent to record")

    run = op.add_parser("run", help="run an operation Inline and print its completion")
    asking(run)
    run.set_defaults(handler=cmd_op_run)

    submit = op.add_parser("submit", help="accept an operation as Deferred; print its id")
    asking(submit)
    submit.add_argument("--idempotency-key", help="the same key returns the same operation")
    submit.set_defaults(handler=cmd_op_submit)

    def by_id(name: str, summary: str, handler: Callable[..., int]) -> argparse.ArgumentParser:
        """An ``op`` command about one operation: ``blackops op NAME ID``."""
        command = op.add_parser(name, help=summary)
        common(command)
        command.add_argument("operation_id")
        command.set_defaults(handler=handler)
        return command

    by_id("outcome", "a Deferred Completed operation's Outcome Record", cmd_op_outcome)
    redrive = by_id("redrive", "submit a new operation from a dead letter one", cmd_op_redrive)
    redrive.add_argument("--actor", help="principal id recorded as the actor (default: $USER)")

    listing = op.add_parser("list", help="operations by creation time, filtered")
    common(listing)
    for flag in ("--tenant", "--type", "--status", "--since", "--until", "--cursor"):
        listing.add_argument(flag)
    listing.add_argument("--limit", type=int, default=100)
    listing.set_defaults(handler=cmd_op_list)

    by_id("status", "an operation's public status", cmd_op_status)
    by_id("events", "an operation's lifecycle events", cmd_op_events)

    projections = commands.add_parser("projections", help="read models built from the journal")
    projection_commands = projections.add_subparsers(dest="projections", required=True)
    p_status = projection_commands.add_parser("status", help="each projection's position and lag")
    common(p_status)
    p_status.set_defaults(handler=cmd_projections_status)
    p_rebuild = projection_commands.add_parser("rebuild", help="drop and rebuild from position 0")
    common(p_rebuild)
    p_rebuild.add_argument("name")
    p_rebuild.add_argument("--batch", type=int, default=1000, help="events per transaction")
    p_rebuild.set_defaults(handler=cmd_projections_rebuild)

    add_wf_commands(commands, common)

    journal = commands.add_parser("journal", help="the canonical journal")
    journal_commands = journal.add_subparsers(dest="journal", required=True)
    export = journal_commands.add_parser("export", help="write Observed JSONL (OL-11)")
    common(export, app=False)
    export.add_argument("--after", type=int, default=0, help="start after this position")
    export.add_argument("--follow", action="store_true", help="keep writing new events")
    export.add_argument("--output", help="file to write (default: stdout)")
    export.add_argument("--manifest", help="manifest file (default: OUTPUT.manifest.json)")
    export.add_argument(
        "--no-manifest", action="store_true", help="a plain stream: no manifest, not recorded"
    )
    export.add_argument("--actor", help="principal id recorded as the exporter (default: $USER)")
    export.set_defaults(handler=cmd_journal_export)

    checkpoint = journal_commands.add_parser(
        "checkpoint", help="verify, then record the journal's tree head"
    )
    common(checkpoint, app=False)
    checkpoint.add_argument("--actor", help="principal id recorded (default: $USER)")
    checkpoint.set_defaults(handler=cmd_journal_checkpoint)

    for name, handler, summary in (
        ("hold", cmd_hold, "keep an operation whatever its retention"),
        ("release", cmd_release, "end a hold (privileged)"),
    ):
        retention = commands.add_parser(name, help=summary)
        common(retention)
        retention.add_argument("operation_id")
        retention.add_argument("--reason", required=True)
        retention.add_argument("--actor", help="principal id recorded (default: $USER)")
        retention.set_defaults(handler=handler)

    purge = commands.add_parser("purge", help="purge what is past retention (OL-10)")
    common(purge)
    purge.add_argument("--dry-run", action="store_true", help="list what would go")
    purge.add_argument("--reason", default="retention")
    purge.add_argument("--actor", help="principal id recorded (default: $USER)")
    purge.set_defaults(handler=cmd_purge)

    verify = commands.add_parser("verify", help="check the journal's integrity (exit 0 = ok)")
    common(verify, app=False)
    verify.add_argument("--jsonl", help="verify an exported file offline instead")
    verify.add_argument("--manifest", help="its manifest (default: JSONL.manifest.json)")
    verify.set_defaults(handler=cmd_verify)

    replay = commands.add_parser("replay", help="feed Observed JSONL to an observer")
    common(replay, app=False)
    replay.add_argument("file", help="an Observed JSONL file, or - for stdin")
    replay.add_argument("--observer", required=True, help="module:attr (callable or .observe)")
    replay.add_argument("--from", dest="after", type=int, default=0, help="resume after N")
    replay.add_argument("--on-duplicate", choices=("stop", "skip"), default="stop")
    replay.add_argument("--state", help="file keeping the last delivered position")
    replay.set_defaults(handler=cmd_replay)
    return parser


def add_wf_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    """``blackops wf ...``: the registered workflows of ``--app`` and their instances."""
    wf = commands.add_parser("wf", help="workflow instances")
    wf_commands = wf.add_subparsers(dest="wf", required=True)

    listing = wf_commands.add_parser("list", help="the workflows --app registers")
    common(listing)
    listing.set_defaults(handler=cmd_wf_list)

    def instance_command(
        name: str, summary: str, handler: Callable[..., int], *, with_id: bool = True
    ) -> argparse.ArgumentParser:
        command = wf_commands.add_parser(name, help=summary)
        common(command)
        command.add_argument("uid", help="the workflow's uid (see wf list)")
        if with_id:
            command.add_argument(
                "instance_id", help="the instance id (after -- if it starts with -)"
            )
        command.set_defaults(handler=handler)
        return command

    def acting(command: argparse.ArgumentParser) -> None:
        command.add_argument("--actor", help="principal id recorded as the actor (default: $USER)")

    create = instance_command("create", "create an instance (queued)", cmd_wf_create, with_id=False)
    create.add_argument("--id", help="instance id, 1-256 characters (default: a UUID)")
    create.add_argument("--params", help="params document as JSON (default: none)")
    acting(create)

    instance_command("status", "an instance's status()", cmd_wf_status)

    send = instance_command("send", "accept an event for an instance", cmd_wf_send)
    send.add_argument("--type", required=True, help="event type, 1-256 characters")
    send.add_argument("--payload", help="payload document as JSON (default: none)")
    acting(send)

    terminate = instance_command(
        "terminate", "terminate an instance once its code has stopped", cmd_wf_terminate
    )
    terminate.add_argument(
        "--timeout", type=_seconds, default=60.0, help="seconds to wait for the proof of stop"
    )
    acting(terminate)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except BlackOpsError as error:
        if getattr(args, "json", False):
            sys.stdout.write(orjson.dumps(error.to_body()).decode() + "\n")
        else:
            detail = getattr(error, "detail", "")  # the operator may see the driver's words
            suffix = f" ({detail.strip()})" if detail else ""
            sys.stderr.write(f"blackops: {error.code}: {error.message}{suffix}\n")
        return EXIT_ERROR
    return code


if __name__ == "__main__":
    sys.exit(main())
