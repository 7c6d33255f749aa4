"""``blackops serve`` (HTTP API, with an in-process worker) and ``blackops worker`` (a worker
process), and the development admin ``serve`` bootstraps."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackops.cli import control
from blackops.cli.common import (
    EXIT_OK,
    INTERRUPTED,
    OPENED,
    Commands,
    add_common,
    app_of,
    cli_actor,
    emit,
)
from blackops.cli.witness import start_witnesses, witness_options, witness_targets

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable
    from types import FrameType

    from blackops.application import Application
    from domain.context import Actor


def register(commands: Commands) -> None:
    serve = commands.add_parser("serve", help="HTTP API on uvicorn")
    add_common(serve)
    serve.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    # $PORT is read when serve runs, not when the parser is built: a bad one broke every
    # command (--help included) before.
    serve.add_argument("--port", type=int, help="0 to 65535 (default: $PORT, else 8080)")
    serve.add_argument(
        "--no-worker", dest="worker", action="store_false", help="no in-process worker"
    )
    serve.add_argument("--concurrency", type=int, default=4, help="in-process worker threads")
    serve.add_argument(
        "--grace-seconds",
        type=float,
        default=10.0,
        help="time running attempts and open connections get on SIGTERM/SIGINT (default 10)",
    )
    serve.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=15.0,
        help="keep-alive comment on an idle journal stream after this long (default 15)",
    )
    workflow_options(serve)
    checkpoint_options(serve)
    witness_options(serve)
    observability_options(serve)
    serve.set_defaults(handler=cmd_serve)

    worker = commands.add_parser(
        "worker", help="run a worker process; worker create|list: Worker resources"
    )
    add_common(worker)
    worker.add_argument("--concurrency", type=int, default=4, help="handler threads")
    worker.add_argument("--lease-seconds", type=float, default=30.0)
    worker.add_argument(
        "--grace-seconds", type=float, default=30.0, help="time to finish on SIGTERM"
    )
    worker.add_argument("--poll-seconds", type=float, help="fallback polling interval")
    workflow_options(worker)
    checkpoint_options(worker)
    witness_options(worker)
    observability_options(worker)
    worker.add_argument(
        "--metrics-port",
        type=int,
        help="serve GET /metrics on this port (0: any free one; default: no metrics server)",
    )
    worker.add_argument("--metrics-host", default="127.0.0.1", help="where --metrics-port listens")
    worker.set_defaults(handler=cmd_worker)
    control.add_worker_resource_commands(worker)


def observability_options(parser: argparse.ArgumentParser) -> None:
    """Logs and the metrics token (docs/operations-guide.md, decisions M4, M6)."""
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "text"),
        default=os.environ.get("BLACKOPS_LOG_FORMAT", "auto"),
        help="stderr logs: one JSON object per line, or readable text (auto: text on a "
        "terminal, JSON otherwise)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=os.environ.get("BLACKOPS_LOG_LEVEL", "info"),
    )
    parser.add_argument(
        "--metrics-token",
        default=os.environ.get("BLACKOPS_METRICS_TOKEN"),
        help="a bearer token that may read GET /metrics only (default $BLACKOPS_METRICS_TOKEN; "
        "the system token may too)",
    )


def _set_up_logs(args: argparse.Namespace) -> None:
    from blackops.observability.logs import configure
    from domain.errors import InvalidRequest

    try:
        configure(args.log_format, args.log_level)
    except ValueError as error:  # a bad $BLACKOPS_LOG_FORMAT / $BLACKOPS_LOG_LEVEL
        raise InvalidRequest(str(error)) from None


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; then stop claiming, give running attempts and open
    connections ``--grace-seconds``, hand the rest back, exit 0."""
    # SIGTERM stops as Ctrl-C does (decisions P16, H9). uvicorn takes both while it runs
    # and, once stopped, raises the signal again under the handler found before it: with
    # SIGTERM's default that killed the process before the worker drained (found by a
    # defect hunt: the running attempt was left `running`).
    # Until uvicorn takes the signals (and again while it runs) a SIGTERM or Ctrl-C only
    # asks for the stop: a KeyboardInterrupt landing inside start-up or asyncio's runner
    # could be swallowed there, and serve then ran on for ever (found by CI: Ctrl-C right
    # after the started line). Once started, uvicorn stops at once if one was asked. First
    # thing: a KeyboardInterrupt raised while a C extension initialises on import (orjson,
    # for the logs) crashed the interpreter (SIGSEGV), or hung it under load (found by the
    # suite, stop 34, once the CLI imported less before this point).
    _STOP_ASKED.clear()
    previous = {sig: signal.signal(sig, _ask_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    if INTERRUPTED:  # a Ctrl-C while the command loaded, its KeyboardInterrupt swallowed
        _STOP_ASKED.set()
    try:
        from domain.errors import InvalidRequest

        if not 0 < args.heartbeat_seconds <= 3600:
            raise InvalidRequest("--heartbeat-seconds must be more than 0 and at most 3600")
        if not 0 <= args.grace_seconds <= 86_400:  # NaN too; as `worker` checks it
            raise InvalidRequest("--grace-seconds must be a number of seconds from 0 to 86400")
        port = _serve_port(args.port)
        _set_up_logs(args)
        check_start_options(args, worker_options=_serve_worker_options(args))
        handed_back = _serve(args, port)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if handed_back:
        # Handler threads still running after the grace were handed back (interrupted and
        # fenced): the interpreter would wait for them at exit (60 s for a 60 s handler);
        # as `worker` does, close what is open and do not wait.
        while OPENED:
            OPENED.pop().close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_OK)
    return EXIT_OK


#: A SIGTERM or SIGINT came while `serve` was not yet (or no longer) uvicorn's.
_STOP_ASKED = threading.Event()


def _ask_stop(signum: int, _: object) -> None:
    _STOP_ASKED.set()


def _serve(args: argparse.Namespace, port: int) -> bool:
    """Serve until stopped; then drain. True when handler threads were left running."""
    import uvicorn

    from blackops.cli.devtoken import load_or_create_token
    from blackops.http.app import StreamSettings, create_http_app

    # Bound before anything is said: `started` names a server that listens (a port in use
    # was said after the started document, then exited 3, which P16 keeps for rejected).
    listener = _bind(args.host, port)
    OPENED.append(listener)
    port = listener.getsockname()[1]  # --port 0: the one the system chose
    application = app_of(args)
    # Opened (and created) before the state dir is written: a store refused here leaves no
    # token behind (found by review, stop 35); and before taking requests.
    application.store  # noqa: B018
    token = load_or_create_token()
    url = f"http://{_url_host(args.host)}:{port}"
    types = application.operation_types
    workflows = [resource.uid for resource in application.workflows()]
    example = types[0] if types else "TYPE"
    from blackops.observability.hub import observe

    observe(application.runtime)  # before the worker starts: it reads runtime.signals
    admin = bootstrap_dev_admin(application, cli_actor(args))
    pusher = signer = worker = None
    worker_options = _serve_worker_options(args)
    try:
        checkpoints, signer = start_signer(application, args, dev=True)
        pusher = start_witnesses(checkpoints, args, publish=True)
        verifier = checkpoints.key.verifier().encode() if checkpoints.key else None
        if worker_options is not None:  # also the control plane's operations and resources
            worker = application.worker(**worker_options).start()
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
            "verifierKey": verifier,
        }

        def banner() -> str:
            in_process = (
                f"{worker.id} (in-process, concurrency {args.concurrency})" if worker else "-"
            )
            return (
                f"BlackOps serving {args.app or '(no --app: no operation types)'}\n"
                f"  store     {application.store_display}\n"
                f"  url       {url}   (OpenAPI {url}/openapi.json, docs {url}/docs)\n"
                f"  console   {url}/ui/   (sign in with a token below; docs/console.md)\n"
                f"  token     {admin['token']}   (principal {admin['principal']}: role admin "
                f"in Space {admin['space']}; saved in {admin['path']})\n"
                f"  system    {token}   (system token: every Space, the whole journal)\n"
                f"  types     {', '.join(types) or '-'}\n"
                f"  workflows {', '.join(workflows) or '-'}\n"
                f"  worker    {in_process}\n"
                f"  log key   {verifier}   (checkpoints every {args.checkpoint_seconds:g} s; "
                f"GET {url}/v1/checkpoint)\n"
                f"Try it:\n"
                f"  export TOKEN={admin['token']}\n"
                f"  curl -s -X POST {url}/v1/spaces/{admin['space']}/operations/{example} \\\n"
                f"       -H \"Authorization: Bearer $TOKEN\" -H 'content-type: application/json' "
                f"\\\n"
                f"       -d '{{}}'\n"
                f'  curl -s {url}/v1/operations/OPERATION_ID -H "Authorization: Bearer $TOKEN"\n'
                f"  curl -s {url}/v1/spaces/{admin['space']}/workflows \\\n"
                f'       -H "Authorization: Bearer $TOKEN"'
                + _workflow_hint(application, url, admin["space"])
                + f"\nDeploy workflow code from a folder of .py files (docs/resources.md):\n"
                f"  blackops deploy ./flows --space {admin['space']} --worker flows "
                f"--create-worker --promote{_store_flag(args, application)}"
            )

        emit(started, args.json, banner)
        sys.stdout.flush()
        config = uvicorn.Config(
            create_http_app(
                application,
                token,
                stream_settings=StreamSettings(heartbeat_seconds=args.heartbeat_seconds),
                checkpoints=checkpoints,
                metrics_token=args.metrics_token,
            ),
            host=args.host,
            port=port,
            log_level=args.log_level,
            log_config=None,  # uvicorn's lines go through our handler, in our format
            access_log=not args.json,  # --json: stdout holds one document only
            # An open live stream never ends by itself: without a bound, SIGTERM waited for
            # every follower to hang up (found by a defect hunt). Requests get the grace the
            # worker's attempts get; then connections are closed (followers resume).
            timeout_graceful_shutdown=max(1, math.ceil(args.grace_seconds)),
        )
        _run_uvicorn(config, listener, on_stop=worker.request_stop if worker else None)
    finally:
        # A second SIGTERM or Ctrl-C interrupts the drain (exit 130).
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if pusher is not None:
            pusher.stop()
        if signer is not None:
            signer.stop()
        if worker is not None:
            worker.stop(args.grace_seconds)
    return worker is not None and _handlers_left(worker.id)


def _serve_worker_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """What ``serve``'s in-process worker is built with; None with ``--no-worker``."""
    return _worker_options(args) if args.worker else None


def check_start_options(args: argparse.Namespace, *, worker_options: dict[str, Any] | None) -> None:
    """Refuse now, before anything is created (the state dir's tokens and keys, the journal
    and its bootstrap events): every flag ``serve`` and ``worker`` check only later, when
    they start the worker, the signer and the witnesses. A refused ``serve`` had written
    the development secrets and bootstrapped the journal (found by a defect hunt, stop 35).
    The checks are those the later steps make, called here, not copies of their rules."""
    check_checkpoint_seconds(args)
    if getattr(args, "signing_key", None):
        from blackops.audit.keys import read_signing_key

        read_signing_key(args.signing_key)  # refused (invalid_request) if it is not one
    witness_targets(args)
    if worker_options is not None:
        check_worker_options(worker_options)


def check_worker_options(options: dict[str, Any]) -> None:
    """``invalid_request`` for options ``application.worker(**options)`` would refuse: the
    worker's own checks (`blackops.worker.WorkerOptions.checked`), before anything is created."""
    from blackops.worker import WorkerOptions

    WorkerOptions(**options).checked()


def _handlers_left(worker_id: str) -> bool:
    """Are handler threads of the in-process worker still running (after its drain)?"""
    import threading

    prefix = f"blackops-{worker_id}"  # its pool's thread names (blackops.worker)
    return any(t.name.startswith(prefix) and t.is_alive() for t in threading.enumerate())


def _serve_port(given: int | None) -> int:
    """``--port``, else ``$PORT``, else 8080: a TCP port (0: any free one)."""
    from domain.errors import InvalidRequest

    if given is None:
        raw = os.environ.get("PORT", "").strip() or "8080"
        if not raw.isascii() or not raw.isdigit() or not 0 <= int(raw) <= 65535:
            raise InvalidRequest(f"$PORT must be a port from 0 to 65535, not {raw!r}")
        return int(raw)
    if not 0 <= given <= 65535:
        raise InvalidRequest(f"--port must be from 0 to 65535, not {given}")
    return given


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port``, as uvicorn binds one (its backlog)."""
    return _listening(host, port, f"cannot listen on {host}:{port}", backlog=2048)


def _listening(host: str, port: int, said: str, backlog: int = 128) -> socket.socket:
    """A socket listening on ``host``:``port``; one that cannot be had (a port in use, a
    host this machine does not have, a host that is no name) is ``invalid_request`` saying
    ``said`` and why: nothing was started (``serve``'s port, ``worker --metrics-port``)."""
    from blackops.observability.listening import listen
    from domain.errors import InvalidRequest

    try:
        return listen(host, port, backlog=backlog)
    except (OSError, UnicodeError, ValueError, TypeError) as error:  # gaierror: an OSError
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise InvalidRequest(f"{said}: {reason}") from None


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _run_uvicorn(
    config: Any, listener: socket.socket, on_stop: Callable[[], None] | None = None
) -> None:
    """uvicorn on the socket ``serve`` bound, until SIGTERM or SIGINT (also one that came
    before uvicorn took the signals: `_STOP_ASKED`). ``on_stop`` is called as the stop
    begins: the in-process worker stops claiming then, not once the requests have drained
    (it claimed for the whole of uvicorn's grace, and then drained for its own)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and sockets:  # the line it says when it binds one itself
                self._log_started_message(sockets)
            if _STOP_ASKED.is_set():  # asked before uvicorn's handlers were in place
                self.should_exit = True
                if on_stop is not None:
                    on_stop()

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            if on_stop is not None:
                on_stop()

    with contextlib.suppress(KeyboardInterrupt):  # the stop it raises again once stopped
        Server(config).run(sockets=[listener])


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
    from blackops.observability.hub import observe

    # A signal only asks for the stop, from the start: one landing while a C extension
    # initialised on import crashed the interpreter (see `cmd_serve`).
    asked: list[Callable[[], None]] = []
    _STOP_ASKED.clear()

    def on_signal(signum: int, _: object) -> None:
        _STOP_ASKED.set()
        for stop in asked:
            stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if INTERRUPTED:  # a Ctrl-C while the command loaded, its KeyboardInterrupt swallowed
        _STOP_ASKED.set()
    tokens = _metrics_tokens(args)
    _set_up_logs(args)
    check_start_options(args, worker_options=_worker_options(args))
    metrics_socket = _metrics_socket(args)  # before anything opens: a port taken changes nothing
    # Without --app it still runs the control plane's operations (verification, deployment
    # updates, reconciling, deleting) and the instances of Workflow resources.
    application = app_of(args)
    worker = application.worker(**_worker_options(args))
    # After the worker, whose first executors forked as it was built: they would carry what
    # the observer imports (prometheus_client, OpenTelemetry: about 3 MB each).
    observer = observe(application.runtime)
    metrics_server = _metrics_server(observer, metrics_socket, tokens)
    asked.append(worker.request_stop)
    if _STOP_ASKED.is_set():  # asked while it was being built
        worker.request_stop()
    service, _ = start_signer(application, args, dev=False)  # only with --signing-key / the env
    start_witnesses(service, args, publish=False)  # pushes only with --witness
    worker.start()
    started = {
        "worker": worker.id,
        "types": application.operation_types,
        "workflows": [resource.uid for resource in application.workflows()],
        "store": application.store_display,
        "concurrency": args.concurrency,
        "metricsPort": metrics_server.port if metrics_server else None,
    }
    # --json: exactly one document on stdout; the human lines go to stderr then.
    emit(started, args.json, lambda: f"BlackOps worker {worker.id}: {_describe(started)}")
    sys.stdout.flush()
    while not worker.join(0.5):
        pass
    sys.stderr.write(f"BlackOps worker {worker.id} stopped\n")
    sys.stderr.flush()
    # Handler threads still running after the grace period were handed back (their
    # attempts are interrupted and fenced); do not wait for them.
    os._exit(EXIT_OK)


def _worker_options(args: argparse.Namespace) -> dict[str, Any]:
    """What ``blackops worker`` (and ``serve``'s in-process worker) is built with: the
    flags both take, and the lease and polling ``worker`` alone takes."""
    options = {
        "concurrency": args.concurrency,
        "grace_seconds": args.grace_seconds,
        "workflow_processes": args.workflow_processes,
        "contexts_per_process": args.contexts_per_process,
    }
    for name in ("lease_seconds", "poll_seconds"):
        if hasattr(args, name):
            options[name] = getattr(args, name)
    return options


def _metrics_tokens(args: argparse.Namespace) -> list[str]:
    """Who may read a worker's --metrics-port: the metrics token and the system token;
    checked before anything is opened (none at all: refused)."""
    if args.metrics_port is None:
        return []
    from blackops.cli.devtoken import read_secret, state_dir
    from domain.errors import InvalidRequest

    if not 0 <= args.metrics_port <= 65535:
        raise InvalidRequest("--metrics-port must be from 0 to 65535")
    # The system token serve uses, if this host has one.
    system = os.environ.get("BLACKOPS_DEV_TOKEN") or read_secret(state_dir() / "dev-token")
    tokens = [t for t in (args.metrics_token, system) if t]
    if not tokens:
        raise InvalidRequest(
            "--metrics-port needs --metrics-token (or $BLACKOPS_METRICS_TOKEN) or a system "
            "token ($BLACKOPS_DEV_TOKEN)"
        )
    return tokens


def _metrics_socket(args: argparse.Namespace) -> socket.socket | None:
    """The worker's --metrics-port, bound (None without it)."""
    if args.metrics_port is None:
        return None
    return _listening(args.metrics_host, args.metrics_port, f"--metrics-port {args.metrics_port}")


def _metrics_server(observer: Any, listening: socket.socket | None, tokens: list[str]) -> Any:
    """The worker's --metrics-port server on ``listening`` (started), or None."""
    if listening is None:
        return None
    from blackops.observability.server import MetricsServer

    return MetricsServer(observer.metrics, tokens, listening).start()


def checkpoint_options(parser: argparse.ArgumentParser) -> None:
    """The checkpoint signer (docs/audit.md, decisions A3)."""
    from blackops.cli.audit import signing_key_option

    signing_key_option(parser)
    parser.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=5.0,
        help="sign a checkpoint at most this often, when events were appended (default 5; "
        "0: never automatically)",
    )


def check_checkpoint_seconds(args: argparse.Namespace) -> None:
    from domain.errors import InvalidRequest

    if not 0 <= args.checkpoint_seconds <= 3600:  # NaN too
        raise InvalidRequest("--checkpoint-seconds must be from 0 to 3600")


def start_signer(application: Application, args: argparse.Namespace, *, dev: bool) -> Any:
    """The checkpoint service of this process and, unless disabled, its automatic signer."""
    from blackops.audit.checkpoints import AutoCheckpointer
    from blackops.cli.audit import checkpoint_service

    check_checkpoint_seconds(args)
    service = checkpoint_service(application.store, args, dev=dev)
    signer = None
    if service.key is not None:
        from blackops.audit.checkpoints import JournalRewritten

        with contextlib.suppress(JournalRewritten):  # refused loudly; serving goes on
            service.sign()  # a checkpoint of the journal as found at start-up
    if service.key is not None and args.checkpoint_seconds > 0:
        signer = AutoCheckpointer(service, args.checkpoint_seconds).start()
    return service, signer


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
    from blackops.cli.devtoken import read_secret, state_dir, write_secret
    from domain.access import Role, token_digest, token_id
    from domain.errors import Conflict, NotFound, Unauthorized

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
    # The Spaces the application's registered workflows live in exist too (a route
    # answers not_found for a Space nobody created, decisions Q2).
    for space in sorted({resource.space for resource in application.workflows()} - {DEV_SPACE}):
        if not access.space_exists(space):
            with contextlib.suppress(Conflict):
                access.create_space(space, application.access_context(actor, space))
    saved = read_secret(path)
    issued = False
    try:
        found = access.authenticate(saved)
        if found.id != DEV_ADMIN:
            raise Unauthorized()
        token, tid = saved, token_id(token_digest(saved))
    except Unauthorized:
        token, record = access.issue_token(DEV_ADMIN, ctx, label="blackops serve (dev admin)")
        tid, issued = record["tokenId"], True
        write_secret(path, token)
    return {
        "space": DEV_SPACE,
        "principal": DEV_ADMIN,
        "token": token,
        "tokenId": tid,
        "issued": issued,
        "path": str(path),
    }
