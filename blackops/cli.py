"""The ``blackops`` command (python-contract §5): serve, worker, op run / submit / status /
outcome / events / redrive, wf list / create / status / send / terminate; and the
control plane (docs/resources.md): space, principal, token, worker, version, deploy,
deployment, workflow.

Exit status: 0 success (an operation ``completed``), 1 an error with a taxonomy
code, 2 usage, 3 the operation was rejected, 4 the operation failed. ``--json``
prints exactly one JSON document on stdout, errors included.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from blackops.application import Application
from blackops.jsonbody import parse_document, render_json
from blackops.loading import load_application
from blackops.workflow_code import WorkflowResource
from domain.access import Role
from domain.context import Actor
from domain.errors import (
    BackendUnavailable,
    BlackOpsError,
    Conflict,
    InvalidRequest,
    NotFound,
    Unauthorized,
)
from domain.resources import RESOURCE_UID, check_name
from journal.resources import load_name, name_stream

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_REJECTED, EXIT_FAILED = 0, 1, 2, 3, 4
_RESULT_EXIT = {"completed": EXIT_OK, "rejected": EXIT_REJECTED, "failed": EXIT_FAILED}


def _emit(document: Any, as_json: bool, human: Callable[[], str]) -> None:
    if as_json:
        sys.stdout.write(render_json(document).decode() + "\n")
    else:
        sys.stdout.write(human() + "\n")


#: Applications a command opened; ``main`` closes them when it returns (in-process use).
_OPENED: list[Application] = []


def _application(args: argparse.Namespace) -> Application:
    """The ``--app`` application (or a bare one), pointed at ``--store`` if given."""
    target = getattr(args, "app", None) or os.environ.get("BLACKOPS_APP")
    application = load_application(target) if target else Application()
    if args.store:
        application.use_store(args.store)
    _OPENED.append(application)
    return application


def _cli_actor(args: argparse.Namespace) -> Actor:
    """Direct store access is a trusted operator: ``--actor``, else ``$USER``, else cli."""
    chosen = getattr(args, "actor", None)
    if not chosen:
        try:
            chosen = getpass.getuser()
        except (OSError, KeyError):
            chosen = None
    return Actor(chosen or "cli", "cli")


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
    admin = bootstrap_dev_admin(application, _cli_actor(args))
    worker = None
    if args.worker:  # also runs the control plane's operations and Workflow resources
        worker = application.worker(
            concurrency=args.concurrency,
            workflow_processes=args.workflow_processes,
            contexts_per_process=args.contexts_per_process,
        ).start()
    started = {
        "url": url,
        "openapi": f"{url}/openapi.json",
        "token": token,
        "adminToken": admin["token"],
        "adminPrincipal": admin["principal"],
        "space": admin["space"],
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
            f"  token     {admin['token']}   (principal {admin['principal']}: role admin "
            f"in Space {admin['space']}; saved in {admin['path']})\n"
            f"  system    {token}   (system token: every Space, the whole journal)\n"
            f"  types     {', '.join(types) or '-'}\n"
            f"  workflows {', '.join(workflows) or '-'}\n"
            f"  worker    {in_process}\n"
            f"Try it:\n"
            f"  export TOKEN={admin['token']}\n"
            f"  curl -s -X POST {url}/v1/spaces/{admin['space']}/operations/{example} \\\n"
            f"       -H \"Authorization: Bearer $TOKEN\" -H 'content-type: application/json' \\\n"
            f"       -d '{{}}'\n"
            f'  curl -s {url}/v1/operations/OPERATION_ID -H "Authorization: Bearer $TOKEN"\n'
            f"  curl -s {url}/v1/spaces/{admin['space']}/workflows \\\n"
            f'       -H "Authorization: Bearer $TOKEN"'
            + _workflow_hint(application, url, admin["space"])
            + f"\nDeploy workflow code from a folder of .py files (docs/resources.md):\n"
            f"  blackops deploy ./flows --space {admin['space']} --worker flows --create-worker "
            f"--promote{_store_flag(args, application)}"
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


def _store_flag(args: argparse.Namespace, application: Application) -> str:
    """`` --store URL`` for a hint, when the CLI would not find this store by itself (a
    URL with a password is never printed: STORE_URL stands for it)."""
    if not args.store:
        return ""
    shown = application.store_display
    return f" --store {shown if shown == args.store else 'STORE_URL'}"


def _workflow_hint(application: Application, url: str, space: str) -> str:
    """The banner's curl for the first workflow in ``space``, if the app registers any."""
    resources = [r for r in application.workflows() if r.space == space]
    if not resources:
        return ""
    first = resources[0]
    instances = f"{url}/v1/spaces/{first.space}/workflows/{first.uid}/instances"
    return (
        f"\n  curl -s -X POST {instances} \\\n"
        f'       -H "Authorization: Bearer $TOKEN" -d \'{{}}\'   # body: {{"id"?, "params"?}}'
    )


def _describe(started: dict[str, Any]) -> str:
    runs = ", ".join([*started["types"], *started["workflows"]]) or "the control plane"
    return f"{runs} on {started['store']} (concurrency {started['concurrency']})"


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker until SIGTERM/SIGINT, then drain for the grace period and exit."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # Without --app it still runs the control plane's operations (verification, deployment
    # updates, reconciling, deleting) and the instances of Workflow resources.
    application = _application(args)
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


# -- the dev admin of `blackops serve` -------------------------------------------------------

DEV_SPACE = "default"
DEV_ADMIN = "admin"


def bootstrap_dev_admin(
    application: Application, actor: Actor, path: Path | None = None
) -> dict[str, Any]:
    """What ``blackops serve`` does at start-up: Space ``default`` exists, principal
    ``admin`` holds role admin in it, and a working token of ``admin`` is returned.

    Tokens are journaled only as hashes, so the plaintext of this development token is
    kept in the state dir (``$BLACKOPS_HOME``, ``./.blackops``), mode 0600, and reused
    while it still authenticates as ``admin``; otherwise a new one is issued and saved.
    """
    from blackops.devtoken import state_dir
    from domain.access import token_digest, token_id

    access = application.access
    path = path or state_dir() / "admin-token"
    ctx = application.access_context(actor, DEV_SPACE)
    if not access.space_exists(DEV_SPACE):
        with contextlib.suppress(Conflict):  # another server's start-up won the race
            access.create_space(DEV_SPACE, ctx)
    try:
        access.principal(DEV_ADMIN)
    except NotFound:
        with contextlib.suppress(Conflict):
            access.create_principal(DEV_ADMIN, ctx)
    access.grant(DEV_ADMIN, DEV_SPACE, Role.ADMIN, ctx)  # appends nothing if held
    saved = path.read_text(encoding="ascii").strip() if path.exists() else ""
    issued = False
    try:
        found = access.authenticate(saved)
        if found.id != DEV_ADMIN:
            raise Unauthorized()
        token, tid = saved, token_id(token_digest(saved))
    except Unauthorized:
        token, record = access.issue_token(DEV_ADMIN, ctx, label="blackops serve (dev admin)")
        tid, issued = record["tokenId"], True
        _write_secret(path, token)
    return {
        "space": DEV_SPACE,
        "principal": DEV_ADMIN,
        "token": token,
        "tokenId": tid,
        "issued": issued,
        "path": str(path),
    }


def _write_secret(path: Path, text: str) -> None:
    """``text`` into ``path``, mode 0600, replaced atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(text + "\n")
    os.chmod(partial, 0o600)
    os.replace(partial, path)


# -- access: spaces, principals, tokens (docs/resources.md) ---------------------------------


def _store_application(args: argparse.Namespace) -> Application:
    """A bare application on ``--store`` (or ``$BLACKOPS_STORE``): the control plane
    needs no ``--app``; direct store access is a trusted operator."""
    application = Application()
    if args.store:
        application.use_store(args.store)
    _OPENED.append(application)
    return application


def _spaceless(application: Application, actor: Actor) -> dict[str, Any]:
    """The context of an access change that belongs to no Space (a principal, a token):
    no Space's journal lines show it."""
    return {**application.access_context(actor, DEV_SPACE), "tenant": None}


def cmd_space_create(args: argparse.Namespace) -> int:
    application = _store_application(args)
    ctx = application.access_context(_cli_actor(args), args.name)
    space = application.access.create_space(args.name, ctx)
    _emit(space, args.json, lambda: f"space {space['name']} created")
    return EXIT_OK


def cmd_space_list(args: argparse.Namespace) -> int:
    names = _store_application(args).access.spaces()
    _emit({"items": [{"name": n} for n in names]}, args.json, lambda: "\n".join(names))
    return EXIT_OK


def _principal_line(record: dict[str, Any]) -> str:
    roles = ", ".join(f"{space}={role}" for space, role in record["roles"].items())
    system = " (system)" if record["system"] else ""
    return f"{record['id']}{system}: {roles or 'no roles'}"


def cmd_principal_create(args: argparse.Namespace) -> int:
    application = _store_application(args)
    ctx = _spaceless(application, _cli_actor(args))
    record = application.access.create_principal(args.id, ctx, system=args.system)
    _emit(record, args.json, lambda: _principal_line(record))
    return EXIT_OK


def cmd_principal_grant(args: argparse.Namespace) -> int:
    application = _store_application(args)
    ctx = application.access_context(_cli_actor(args), args.space)
    record = application.access.grant(args.id, args.space, args.role, ctx)
    _emit(record, args.json, lambda: _principal_line(record))
    return EXIT_OK


def cmd_principal_revoke(args: argparse.Namespace) -> int:
    application = _store_application(args)
    ctx = application.access_context(_cli_actor(args), args.space)
    record = application.access.revoke(args.id, args.space, ctx)
    _emit(record, args.json, lambda: _principal_line(record))
    return EXIT_OK


def cmd_principal_list(args: argparse.Namespace) -> int:
    items = _store_application(args).access.principals(args.space)
    lines = [f"{row['id']:<32} {row['role']}" for row in items]
    _emit({"items": items}, args.json, lambda: "\n".join(lines) or "no principals")
    return EXIT_OK


def cmd_token_issue(args: argparse.Namespace) -> int:
    """The plaintext is printed here, once; the journal keeps only its hash."""
    application = _store_application(args)
    ctx = _spaceless(application, _cli_actor(args))
    token, record = application.access.issue_token(args.id, ctx, label=args.label)
    if not args.json:
        sys.stderr.write(
            f"token {record['tokenId']} of {args.id} (shown once; only its hash is kept)\n"
        )
    _emit({**record, "token": token}, args.json, lambda: token)
    return EXIT_OK


def cmd_token_revoke(args: argparse.Namespace) -> int:
    application = _store_application(args)
    ctx = _spaceless(application, _cli_actor(args))
    record = application.access.revoke_token(args.id, args.token_id, ctx)
    _emit(record, args.json, lambda: f"token {args.token_id} of {args.id} revoked")
    return EXIT_OK


# -- the control plane: Workers, Versions, Deployments, Workflow resources ------------------


def _plane(args: argparse.Namespace) -> Application:
    """The store's application, once ``--space`` is known to exist (``not_found``)."""
    application = _store_application(args)
    if not application.access.space_exists(args.space):
        raise NotFound(f"no space {args.space!r} (create it: blackops space create NAME)")
    return application


def resolve_worker(application: Application, space: str, worker: str) -> str:
    """``--worker``: a Worker UID of ``space`` or a Worker name there, resolved here, on
    the client side, to the UID; the spec sent holds the UID only (DW-SPEC-4, -6)."""
    if RESOURCE_UID.fullmatch(worker):
        return str(application.control.worker_in(space, worker)["uid"])
    try:
        check_name(worker, "worker")
    except InvalidRequest:
        raise NotFound(f"no worker {worker[:128]!r} in space {space!r}") from None
    holder = load_name(application.store, name_stream(space, "worker", worker)).holder
    if holder is None:
        raise NotFound(f"no worker {worker!r} in space {space!r}")
    return holder


def _wait(application: Application, args: argparse.Namespace, operation_ids: list[str]) -> None:
    """Run the accepted operations in this process until they finish (not with --no-wait)."""
    from blackops.control_plane import work_control_plane

    if getattr(args, "no_wait", False):
        return
    try:
        work_control_plane(application, operation_ids, args.timeout)
    except BackendUnavailable as late:
        if "did not finish" not in late.message:
            raise
        raise BackendUnavailable(
            f"operation {', '.join(operation_ids)} did not finish within {args.timeout:g} s; "
            "it goes on in any worker (blackops op status ID)"
        ) from None


def _finished(
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


def _exit_for(body: dict[str, Any]) -> int:
    """0 once completed (or accepted with --no-wait); 3 rejected; 4 failed; else 1."""
    if body["status"] in ("accepted", "running", "retry_scheduled"):
        return EXIT_OK
    return _RESULT_EXIT.get(body["status"], EXIT_ERROR)


def _why(body: dict[str, Any]) -> str:
    if "rejection" in body:
        return f" ({body['rejection'].get('code')}: {body['rejection'].get('message')})"
    if "failure" in body:
        return f" ({body['failure'].get('message')})"
    return ""


def cmd_worker_create(args: argparse.Namespace) -> int:
    application = _plane(args)
    created = application.control.create_worker(args.space, args.name, _cli_actor(args))
    view = application.control.operation_view(created["operationId"])
    body = _finished(application, view, application.control.worker_in(args.space, created["uid"]))
    _emit(body, args.json, lambda: f"worker {args.name} created: {created['uid']}")
    return _exit_for(body)


def cmd_worker_list(args: argparse.Namespace) -> int:
    items = _plane(args).control.workers(args.space)
    lines = [f"{w['uid']}  {w['name']:<24} {w['createdAt']}" for w in items]
    _emit({"items": items}, args.json, lambda: "\n".join(lines) or "no workers")
    return EXIT_OK


#: Folders never read into a Version.
_SKIPPED_DIRS = {"__pycache__"}


def read_modules(folder: str) -> dict[str, str]:
    """Every ``*.py`` file under ``folder``, recursively, as ``{module: source}``:
    ``a/b.py`` is ``a.b``, ``a/__init__.py`` is ``a``; ``__pycache__``, hidden folders
    and hidden files are skipped."""
    root = Path(folder)
    if not root.is_dir():
        raise InvalidRequest(f"{folder} is not a folder")
    modules: dict[str, str] = {}
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIPPED_DIRS and d[0] != ".")
        for name in sorted(files):
            if name.startswith(".") or not name.endswith(".py"):
                continue
            path = Path(directory, name)
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if not parts:
                raise InvalidRequest(
                    f"{path} makes {folder} itself a package; deploy the folder that holds it"
                )
            try:
                modules[".".join(parts)] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as unreadable:
                raise InvalidRequest(f"cannot read {path} as UTF-8 text: {unreadable}") from None
    if not modules:
        raise InvalidRequest(f"no .py files under {folder}")
    return modules


def choose_main(modules: dict[str, str], main: str | None) -> str:
    """``--main``, else the only top-level module (a ``.py`` file directly in the folder,
    not a package), else ``main`` or ``workflows``."""
    if main is not None:
        if main not in modules:
            listed = ", ".join(sorted(modules))
            raise InvalidRequest(f"--main {main!r} is not one of the modules: {listed}")
        return main
    packages = {name.rpartition(".")[0] for name in modules}
    top = sorted(name for name in modules if "." not in name and name not in packages)
    if len(top) == 1:
        return top[0]
    for preferred in ("main", "workflows"):
        if preferred in modules:
            return preferred
    candidates = top or sorted(name for name in modules if "." not in name)
    raise InvalidRequest(f"choose the main module with --main: one of {', '.join(candidates)}")


def _json_file(path: str | None, what: str) -> Any:
    if path is None:
        return None
    try:
        with open(path, "rb") as raw:
            return orjson.loads(raw.read())
    except OSError as unreadable:
        raise InvalidRequest(f"cannot read {path}: {unreadable.strerror}") from None
    except orjson.JSONDecodeError as bad:
        raise InvalidRequest(f"{what} {path} is not JSON: {bad}") from None


def _bundle(args: argparse.Namespace) -> dict[str, Any]:
    modules = read_modules(args.dir)
    bundle: dict[str, Any] = {"modules": modules, "main": choose_main(modules, args.main)}
    env = _json_file(args.env_file, "--env-file")
    if env is not None:
        bundle["env"] = env
    bindings = _json_file(args.bindings, "--bindings")
    if bindings is not None:
        bundle["workflowBindings"] = bindings
    return bundle


def _verdict_lines(verification: dict[str, Any] | None) -> list[str]:
    if verification is None:
        return ["classes  (verification still pending)"]
    if not verification.get("loaded"):
        return [f"classes  NOT LOADED: {verification.get('error')}"]
    lines = []
    for name, verdict in sorted(verification.get("classes", {}).items()):
        result = "ok" if verdict.get("ok") else f"FAILED: {verdict.get('reason')}"
        lines.append(f"  {name:<24} {result}")
    return ["classes  (DW-ABI-1)", *lines] if lines else ["classes  none in the main module"]


def _upload(
    application: Application, args: argparse.Namespace, worker_uid: str, bundle: dict[str, Any]
) -> tuple[dict[str, Any], float]:
    """Upload ``bundle`` as a Version and wait for its verification: the body and the
    seconds upload + verification took."""
    started = time.monotonic()
    view = application.control.upload_version(args.space, worker_uid, bundle, _cli_actor(args))
    _wait(application, args, [view["operationId"]])
    elapsed = time.monotonic() - started
    version = application.control.version_in(args.space, view["version"]).view()
    return _finished(application, view, version), elapsed


def _not_loaded(body: dict[str, Any]) -> bool:
    verification = body["resource"]["verification"]
    return verification is not None and not verification.get("loaded")


def cmd_version_upload(args: argparse.Namespace) -> int:
    """Exit 4 when the verification could not load the main module."""
    application = _plane(args)
    bundle = _bundle(args)
    worker_uid = resolve_worker(application, args.space, args.worker)
    body, elapsed = _upload(application, args, worker_uid, bundle)
    body["elapsedSeconds"] = round(elapsed, 3)

    def human() -> str:
        resource = body["resource"]
        head = f"version  {body['version']}  ({len(resource['modules'])} modules, main "
        return "\n".join(
            [
                head + f"{resource['main']}; {body['status']}{_why(body)} in {elapsed:.2f} s)",
                *_verdict_lines(resource["verification"]),
            ]
        )

    _emit(body, args.json, human)
    code = _exit_for(body)
    return EXIT_FAILED if code == EXIT_OK and _not_loaded(body) else code


def _promote(
    application: Application, args: argparse.Namespace, worker_uid: str, allocation: list[Any]
) -> dict[str, Any]:
    view = application.control.update_deployment(
        args.space, worker_uid, allocation, _cli_actor(args), getattr(args, "key", None)
    )
    _wait(application, args, [view["operationId"]])
    return _finished(application, view, application.control.deployment(args.space, worker_uid))


def cmd_deploy(args: argparse.Namespace) -> int:
    """The everyday path: (create the Worker,) upload the folder as a Version, wait for
    its ABI verification, (promote it to 100%). Exit 4 if the main module does not load."""
    application = _plane(args)
    bundle = _bundle(args)  # the folder is read (and may be refused) before any change
    created = False
    try:
        worker_uid = resolve_worker(application, args.space, args.worker)
    except NotFound:
        if not args.create_worker or RESOURCE_UID.fullmatch(args.worker):
            raise
        worker_uid = application.control.create_worker(args.space, args.worker, _cli_actor(args))[
            "uid"
        ]
        created = True
    worker = application.control.worker_in(args.space, worker_uid)
    upload, elapsed = _upload(application, args, worker_uid, bundle)
    version = upload["resource"]
    verification = version["verification"]
    body: dict[str, Any] = {
        "space": args.space,
        "worker": {**worker, "created": created},
        "version": upload["version"],
        "main": version["main"],
        "modules": version["modules"],
        "elapsedSeconds": round(elapsed, 3),
        "verification": {
            "operationId": upload["operationId"],
            "status": upload["status"],
            "loaded": verification.get("loaded") if verification else None,
            "error": verification.get("error") if verification else None,
            "classes": (verification or {}).get("classes", {}),
        },
    }
    code = _exit_for(upload)
    if code == EXIT_OK and _not_loaded(upload):
        code = EXIT_FAILED
    if args.promote and code == EXIT_OK and verification is not None:
        promoted = _promote(
            application, args, worker_uid, [{"version": upload["version"], "weight": 100}]
        )
        body["deployment"] = promoted
        code = _exit_for(promoted)

    def human() -> str:
        note = " (created)" if created else ""
        lines = [
            f"worker   {worker['name']} {worker_uid}{note}",
            f"version  {upload['version']}",
            f"         {len(version['modules'])} modules, main {version['main']}; uploaded "
            f"and verified in {elapsed:.2f} s ({upload['status']}{_why(upload)})",
            *_verdict_lines(verification),
        ]
        if "deployment" in body:
            deployment = body["deployment"]
            lines.append(
                f"deployed 100% of this version: {deployment['status']}{_why(deployment)} "
                f"(generation {deployment['resource']['generation']})"
            )
        elif not args.promote and code == EXIT_OK:
            lines.append(
                f"not deployed yet: blackops deployment set --space {args.space} "
                f"--worker {worker_uid} {upload['version']}=100"
            )
        passed = [n for n, c in body["verification"]["classes"].items() if c.get("ok")]
        if code == EXIT_OK and passed:
            lines.append(
                f"next     blackops workflow create NAME --space {args.space} "
                f"--worker {worker['name']} --class {passed[0]}"
            )
        return "\n".join(lines)

    _emit(body, args.json, human)
    return code


def _deployment_lines(deployment: dict[str, Any]) -> list[str]:
    lines = [f"generation {deployment['generation']}"]
    lines += [f"  {e['weight']:>3}%  {e['version']}" for e in deployment["allocation"]]
    if not deployment["allocation"]:
        lines.append("  (no Version selected)")
    for pending in deployment["pending"]:
        wanted = ", ".join(f"{e['version']}={e['weight']}" for e in pending["allocation"])
        lines.append(f"pending {pending['operationId']}: {wanted or '(empty)'}")
    return lines


def cmd_deployment_show(args: argparse.Namespace) -> int:
    application = _plane(args)
    worker_uid = resolve_worker(application, args.space, args.worker)
    deployment = application.control.deployment(args.space, worker_uid)
    _emit(deployment, args.json, lambda: "\n".join(_deployment_lines(deployment)))
    return EXIT_OK


def parse_allocation(entries: list[str]) -> list[dict[str, Any]]:
    """``VERSION=WEIGHT ...`` as ``[{"version", "weight"}]`` (checked by the server)."""
    allocation = []
    for entry in entries:
        version, equals, weight = entry.rpartition("=")
        if not equals or not version or not weight.strip().isdigit():
            raise InvalidRequest(f"{entry!r} is not VERSION=WEIGHT (a weight is 0-100)")
        allocation.append({"version": version, "weight": int(weight)})
    return allocation


def cmd_deployment_set(args: argparse.Namespace) -> int:
    application = _plane(args)
    worker_uid = resolve_worker(application, args.space, args.worker)
    body = _promote(application, args, worker_uid, parse_allocation(args.allocation))
    lines = [f"{body['operationId']} {body['status']}{_why(body)}"]
    _emit(body, args.json, lambda: "\n".join(lines + _deployment_lines(body["resource"])))
    return _exit_for(body)


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
    _wait(application, args, [view["operationId"]])
    uid = view["resource"]["uid"]
    try:
        resource = application.control.get_workflow(args.space, uid)
    except NotFound:
        resource = {**view["resource"], "deleted": True}
    body = _finished(application, view, resource)

    def human() -> str:
        head = f"{body['operationId']} {body['status']}{_why(body)}"
        if resource.get("deleted"):
            return f"{head}\n{uid} deleted"
        return "\n".join([head, *_workflow_lines(resource)])

    _emit(body, args.json, human)
    return _exit_for(body)


def cmd_workflow_create(args: argparse.Namespace) -> int:
    application = _plane(args)
    spec = _workflow_spec(application, args)
    view = application.control.create_workflow(
        args.space, {"name": args.name, "spec": spec}, _cli_actor(args), args.key
    )
    return _workflow_done(application, args, view)


def cmd_workflow_replace(args: argparse.Namespace) -> int:
    application = _plane(args)
    spec = _workflow_spec(application, args)
    view = application.control.replace_workflow(
        args.space, args.uid, {"spec": spec}, _cli_actor(args), args.key
    )
    return _workflow_done(application, args, view)


def cmd_workflow_delete(args: argparse.Namespace) -> int:
    application = _plane(args)
    view = application.control.delete_workflow(args.space, args.uid, _cli_actor(args), args.key)
    return _workflow_done(application, args, view)


def cmd_workflow_get(args: argparse.Namespace) -> int:
    view = _plane(args).control.get_workflow(args.space, args.uid)
    _emit(view, args.json, lambda: "\n".join(_workflow_lines(view)))
    return EXIT_OK


def cmd_workflow_list(args: argparse.Namespace) -> int:
    items = _plane(args).control.list_workflows(args.space)
    lines = [line for view in items for line in _workflow_lines(view)]
    _emit({"items": items}, args.json, lambda: "\n".join(lines) or "no workflows")
    return EXIT_OK


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

    worker = commands.add_parser(
        "worker", help="run a worker process; worker create|list: Worker resources"
    )
    common(worker)
    worker.add_argument("--concurrency", type=int, default=4, help="handler threads")
    worker.add_argument("--lease-seconds", type=float, default=30.0)
    worker.add_argument(
        "--grace-seconds", type=float, default=30.0, help="time to finish on SIGTERM"
    )
    worker.add_argument("--poll-seconds", type=float, help="fallback polling interval")
    workflow_options(worker)
    worker.set_defaults(handler=cmd_worker)
    add_worker_resource_commands(worker, common)

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
    add_resource_commands(commands, common)

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
        command.add_argument(
            "uid", help="a registered workflow's uid (see wf list) or a Workflow resource UID"
        )
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


def add_resource_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[..., None],
) -> None:
    """Access (space, principal, token) and control-plane commands (docs/resources.md)."""

    def group(name: str, summary: str) -> argparse._SubParsersAction[argparse.ArgumentParser]:
        parser = commands.add_parser(name, help=summary)
        return parser.add_subparsers(dest=name, required=True)

    def command(
        within: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        summary: str,
        handler: Callable[..., int],
        *,
        space: bool = False,
        acting: bool = False,
    ) -> argparse.ArgumentParser:
        parser = within.add_parser(name, help=summary)
        common(parser, app=False)
        if space:
            parser.add_argument("--space", required=True, help="the Space")
        if acting:
            parser.add_argument("--actor", help="id recorded as the actor (default: $USER)")
        parser.set_defaults(handler=handler)
        return parser

    def waiting(parser: argparse.ArgumentParser, *, no_wait: bool = True) -> None:
        if no_wait:
            parser.add_argument(
                "--no-wait", action="store_true", help="print the accepted operation; do not run it"
            )
        parser.add_argument(
            "--timeout", type=_seconds, default=120.0, help="seconds to wait for the operation"
        )

    def keyed(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--key", help="Idempotency-Key: the same key is the same operation")

    def worker_flag(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--worker", required=True, help="a Worker UID or name in the Space")

    def bundle_flags(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("dir", help="a folder of .py files (read recursively)")
        worker_flag(parser)
        parser.add_argument("--main", help="the main module (default: the only top-level one)")
        parser.add_argument("--env-file", help="a JSON object: the Version's env")
        parser.add_argument("--bindings", help="a JSON list: the Version's workflowBindings")

    spaces = group("space", "Spaces (tenants)")
    create = command(spaces, "create", "create a Space", cmd_space_create, acting=True)
    create.add_argument("name")
    command(spaces, "list", "every Space", cmd_space_list)

    principals = group("principal", "principals and their roles per Space")
    create = command(principals, "create", "create a principal", cmd_principal_create, acting=True)
    create.add_argument("id")
    create.add_argument("--system", action="store_true", help="every Space, the whole journal")
    grant = command(
        principals, "grant", "give a role in a Space", cmd_principal_grant, space=True, acting=True
    )
    grant.add_argument("id")
    grant.add_argument("--role", required=True, help="reader, operator, deployer or admin")
    revoke = command(
        principals, "revoke", "take the role away", cmd_principal_revoke, space=True, acting=True
    )
    revoke.add_argument("id")
    command(principals, "list", "principals with a role", cmd_principal_list, space=True)

    tokens = group("token", "bearer tokens (kept only as hashes)")
    issue = command(tokens, "issue", "issue a token: printed once", cmd_token_issue, acting=True)
    issue.add_argument("id", help="the principal")
    issue.add_argument("--label", help="what the token is for")
    revoke = command(tokens, "revoke", "revoke a token", cmd_token_revoke, acting=True)
    revoke.add_argument("id", help="the principal")
    revoke.add_argument("token_id", help="the token id (16 hex digits)")

    versions = group("version", "Versions: immutable, content-addressed code of a Worker")
    upload = command(
        versions, "upload", "upload a folder as a Version", cmd_version_upload,
        space=True, acting=True,
    )  # fmt: skip
    bundle_flags(upload)
    waiting(upload)

    deploy = command(
        commands, "deploy", "upload a folder, verify it, optionally promote it to 100%%",
        cmd_deploy, space=True, acting=True,
    )  # fmt: skip
    bundle_flags(deploy)
    deploy.add_argument("--promote", action="store_true", help="set the Deployment to it, 100%%")
    deploy.add_argument(
        "--create-worker", action="store_true", help="create the Worker --worker names if missing"
    )
    keyed(deploy)
    waiting(deploy, no_wait=False)

    deployments = group("deployment", "a Worker's Deployment: which Versions, by weight")
    show = command(deployments, "show", "the active allocation", cmd_deployment_show, space=True)
    worker_flag(show)
    update = command(
        deployments, "set", "set the allocation: VERSION=WEIGHT ... (weights sum to 100)",
        cmd_deployment_set, space=True, acting=True,
    )  # fmt: skip
    worker_flag(update)
    update.add_argument("allocation", nargs="*", metavar="VERSION=WEIGHT")
    keyed(update)
    waiting(update)

    workflows = group("workflow", "Workflow resources (create/get/replace/delete)")
    for name, handler, summary in (
        ("create", cmd_workflow_create, "create a Workflow resource"),
        ("replace", cmd_workflow_replace, "replace its spec: a new generation (DW-CRUD-2)"),
    ):
        parser = command(workflows, name, summary, handler, space=True, acting=True)
        parser.add_argument("name" if name == "create" else "uid")
        worker_flag(parser)
        parser.add_argument("--class", dest="class_name", required=True, help="spec.className")
        keyed(parser)
        waiting(parser)
    get = command(workflows, "get", "a Workflow resource and what is observed", cmd_workflow_get,
                  space=True)  # fmt: skip
    get.add_argument("uid")
    command(workflows, "list", "the Space's Workflow resources", cmd_workflow_list, space=True)
    delete = command(
        workflows, "delete", "delete: fence, stop, purge (DW-DEL)", cmd_workflow_delete,
        space=True, acting=True,
    )  # fmt: skip
    delete.add_argument("uid")
    keyed(delete)
    waiting(delete)


def add_worker_resource_commands(
    worker: argparse.ArgumentParser, common: Callable[..., None]
) -> None:
    """``blackops worker create|list``: Worker resources. ``blackops worker`` with no
    subcommand still runs a worker process."""
    units = worker.add_subparsers(dest="worker_resource", metavar="{create,list}")
    create = units.add_parser("create", help="create a Worker (a named code unit) in a Space")
    common(create, app=False)
    create.add_argument("name")
    create.add_argument("--space", required=True, help="the Space")
    create.add_argument("--actor", help="id recorded as the actor (default: $USER)")
    create.set_defaults(handler=cmd_worker_create)
    listing = units.add_parser("list", help="the Space's Workers")
    common(listing, app=False)
    listing.add_argument("--space", required=True, help="the Space")
    listing.set_defaults(handler=cmd_worker_list)


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
    finally:
        while _OPENED:
            _OPENED.pop().close()
    return code


if __name__ == "__main__":
    sys.exit(main())
