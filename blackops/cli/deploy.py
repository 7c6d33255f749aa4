"""``blackops version upload``, ``blackops deploy`` (the everyday path) and ``blackops
deployment show|set``: a folder of .py files as a Version, verified, and promoted."""

from __future__ import annotations

import argparse
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackops.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REJECTED,
    Commands,
    cli_actor,
    emit,
    strict_json,
)
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
from domain.errors import InvalidRequest, NotFound

if TYPE_CHECKING:
    from blackops.application import Application
    from blackops.workflows.replay_check import ReplayReport


def register(commands: Commands) -> None:
    def bundle_flags(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("dir", help="a folder of .py files (read recursively)")
        worker_flag(parser)
        parser.add_argument("--main", help="the main module (default: the only top-level one)")
        parser.add_argument("--env-file", help="a JSON object: the Version's env")
        parser.add_argument("--bindings", help="a JSON list: the Version's workflowBindings")

    versions = commands.add_parser(
        "version", help="Versions: immutable, content-addressed code of a Worker"
    ).add_subparsers(dest="version", required=True)
    upload = space_command(
        versions, "upload", "upload a folder as a Version", cmd_version_upload, actor=True
    )
    bundle_flags(upload)
    waiting(upload)

    deploy = space_command(
        commands, "deploy", "upload a folder, verify it, optionally promote it to 100%%",
        cmd_deploy, actor=True,
    )  # fmt: skip
    bundle_flags(deploy)
    deploy.add_argument("--promote", action="store_true", help="set the Deployment to it, 100%%")
    history_flags(deploy)
    deploy.add_argument(
        "--force",
        action="store_true",
        help="with --promote: promote even if the replay check finds an incompatibility "
        "(journaled with the actor)",
    )
    deploy.add_argument(
        "--create-worker", action="store_true", help="create the Worker --worker names if missing"
    )
    keyed(deploy)
    waiting(deploy, no_wait=False)

    deployments = commands.add_parser(
        "deployment", help="a Worker's Deployment: which Versions, by weight"
    ).add_subparsers(dest="deployment", required=True)
    show = space_command(deployments, "show", "the active allocation", cmd_deployment_show)
    worker_flag(show)
    update = space_command(
        deployments, "set", "set the allocation: VERSION=WEIGHT ... (weights sum to 100)",
        cmd_deployment_set, actor=True,
    )  # fmt: skip
    worker_flag(update)
    update.add_argument("allocation", nargs="*", metavar="VERSION=WEIGHT")
    update.add_argument(
        "--dry-run",
        action="store_true",
        help="change nothing: check the Versions it weighs against recorded histories",
    )
    history_flags(update)
    keyed(update)
    waiting(update)


def history_count(text: str) -> int:
    """``--check-histories N``, checked while the arguments are read: ``deploy --promote``
    refused an N out of range only after it had created the Worker and uploaded and
    verified the Version (found by a defect hunt, stop 40)."""
    from blackops.control.replay_gate import MAX_TERMINAL

    if not (text.isascii() and text.isdigit()) or int(text) > MAX_TERMINAL:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to {MAX_TERMINAL}")
    return int(text)


def history_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check-histories",
        type=history_count,
        default=None,
        metavar="N",
        help="the replay check takes every in-flight instance and the newest N terminal "
        "ones of each Workflow (default 100)",
    )


def _gate(
    application: Application, args: argparse.Namespace, vid: str
) -> tuple[ReplayReport, dict[str, Any]]:
    from blackops.cli.progress import progress

    with progress("checking histories", enabled=None if not args.json else False) as report:
        return application.control.check_version(
            args.space, vid, terminal=args.check_histories,
            progress=lambda done: report(done, None),
        )  # fmt: skip


def _gate_lines(gate: dict[str, Any], report: ReplayReport) -> list[str]:
    if not report.instances:
        return ["replay   no recorded histories yet: nothing to check (allowed)"]
    head = f"replay   {len(report.instances)} histories checked: "
    if report.compatible:
        return [head + "all compatible"]
    verdict = "FORCED past the incompatibility" if gate["forced"] else "REFUSED, not promoted"
    return [head + verdict, *("  " + line for line in report.human().splitlines()[1:])]


#: Folders never read into a Version.
_SKIPPED_DIRS = {"__pycache__"}


def read_modules(folder: str) -> dict[str, str]:
    """Every ``*.py`` file under ``folder``, recursively, as ``{module: source}``:
    ``a/b.py`` is ``a.b``, ``a/__init__.py`` is ``a``; ``__pycache__``, hidden folders
    and hidden files are skipped."""
    from blackops.control.bundles import MAX_SOURCE_BYTES

    root = Path(folder)
    if not root.is_dir():
        raise InvalidRequest(f"{folder} is not a folder")
    inside = root.resolve()
    modules: dict[str, str] = {}
    size = 0
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
            # Found by a defect hunt (stop 34): a FIFO hung the upload for ever, a link
            # uploaded a file from outside the folder, and a huge file was read whole.
            try:
                info = path.stat()
            except OSError as error:
                raise InvalidRequest(f"cannot read {path}: {error.strerror}") from None
            if not stat.S_ISREG(info.st_mode):
                raise InvalidRequest(f"{path} is not a regular file")
            if path.is_symlink() and not path.resolve().is_relative_to(inside):
                raise InvalidRequest(f"{path} links to a file outside {folder}")
            size += info.st_size
            if size > MAX_SOURCE_BYTES:
                raise InvalidRequest(
                    f"the .py files under {folder} exceed {MAX_SOURCE_BYTES} bytes"
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
    """The JSON value of a file, read strictly: a key given twice is refused (orjson would
    keep the last silently, and the Version would hold other content than the file says)."""
    from blackops.input_files import read_at_most
    from blackops.jsonbody import MAX_RAW_BYTES

    if path is None:
        return None
    try:
        data = read_at_most(path, MAX_RAW_BYTES)  # a device (/dev/zero) never ends
    except OSError as unreadable:
        raise InvalidRequest(f"cannot read {path}: {unreadable.strerror}") from None
    return strict_json(data, f"{what} {path} is not JSON")


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
    view = application.control.upload_version(args.space, worker_uid, bundle, cli_actor(args))
    wait_for(application, args, [view["operationId"]])
    elapsed = time.monotonic() - started
    version = application.control.version_in(args.space, view["version"]).view()
    return finished(application, view, version), elapsed


def _not_loaded(body: dict[str, Any]) -> bool:
    verification = body["resource"]["verification"]
    return verification is not None and not verification.get("loaded")


def cmd_version_upload(args: argparse.Namespace) -> int:
    """Exit 4 when the verification could not load the main module."""
    application = plane_of(args)
    bundle = _bundle(args)
    worker_uid = resolve_worker(application, args.space, args.worker)
    body, elapsed = _upload(application, args, worker_uid, bundle)
    body["elapsedSeconds"] = round(elapsed, 3)

    def human() -> str:
        resource = body["resource"]
        head = f"version  {body['version']}  ({len(resource['modules'])} modules, main "
        return "\n".join(
            [
                head + f"{resource['main']}; {body['status']}{why(body)} in {elapsed:.2f} s)",
                *_verdict_lines(resource["verification"]),
            ]
        )

    emit(body, args.json, human)
    code = exit_for(body)
    return EXIT_FAILED if code == EXIT_OK and _not_loaded(body) else code


def _promote(
    application: Application, args: argparse.Namespace, worker_uid: str, allocation: list[Any]
) -> dict[str, Any]:
    view = application.control.update_deployment(
        args.space, worker_uid, allocation, cli_actor(args), getattr(args, "key", None)
    )
    wait_for(application, args, [view["operationId"]])
    return finished(application, view, application.control.deployment(args.space, worker_uid))


def cmd_deploy(args: argparse.Namespace) -> int:
    """The everyday path: (create the Worker,) upload the folder as a Version, wait for
    its ABI verification, (promote it to 100%). Exit 4 if the main module does not load."""
    from domain.resources import RESOURCE_UID

    # Before any change: refused after the Worker was created and the Version uploaded
    # and verified, it left them journaled (found by a defect hunt).
    if args.force and not args.promote:
        raise InvalidRequest("--force goes with --promote")
    if args.check_histories is not None and not args.promote:  # it was silently ignored
        raise InvalidRequest("--check-histories goes with --promote")
    application = plane_of(args)
    bundle = _bundle(args)  # the folder is read (and may be refused) before any change
    created = False
    try:
        worker_uid = resolve_worker(application, args.space, args.worker)
    except NotFound:
        if not args.create_worker or RESOURCE_UID.fullmatch(args.worker):
            raise
        worker_uid = application.control.create_worker(args.space, args.worker, cli_actor(args))[
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
    code = exit_for(upload)
    if code == EXIT_OK and _not_loaded(upload):
        code = EXIT_FAILED
    gate: dict[str, Any] | None = None
    report: ReplayReport | None = None
    if args.promote and code == EXIT_OK and verification is not None:
        vid = upload["version"]
        report, scope = _gate(application, args, vid)
        forced = not report.compatible and args.force
        application.control.record_replay_check(
            args.space, vid, report, scope, cli_actor(args), purpose="promote", forced=forced
        )
        gate = {"compatible": report.compatible, "forced": forced, "scope": scope,
                "report": report.to_document()}  # fmt: skip
        body["replayCheck"] = gate
        if report.compatible or forced:
            promoted = _promote(application, args, worker_uid, [{"version": vid, "weight": 100}])
            body["deployment"] = promoted
            code = exit_for(promoted)
        else:
            code = EXIT_REJECTED

    def human() -> str:
        note = " (created)" if created else ""
        lines = [
            f"worker   {worker['name']} {worker_uid}{note}",
            f"version  {upload['version']}",
            f"         {len(version['modules'])} modules, main {version['main']}; uploaded "
            f"and verified in {elapsed:.2f} s ({upload['status']}{why(upload)})",
            *_verdict_lines(verification),
        ]
        if gate is not None and report is not None:
            lines += _gate_lines(gate, report)
        if "deployment" in body:
            deployment = body["deployment"]
            lines.append(
                f"deployed 100% of this version: {deployment['status']}{why(deployment)} "
                f"(generation {deployment['resource']['generation']})"
            )
        elif gate is not None and not gate["compatible"]:
            lines.append("not deployed: fix the code, or --force to promote anyway")
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

    emit(body, args.json, human)
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
    application = plane_of(args)
    worker_uid = resolve_worker(application, args.space, args.worker)
    deployment = application.control.deployment(args.space, worker_uid)
    emit(deployment, args.json, lambda: "\n".join(_deployment_lines(deployment)))
    return EXIT_OK


def parse_allocation(entries: list[str]) -> list[dict[str, Any]]:
    """``VERSION=WEIGHT ...`` as ``[{"version", "weight"}]`` (checked by the server)."""
    allocation = []
    for entry in entries:
        version, equals, weight = entry.rpartition("=")
        weight = weight.strip()
        # ASCII digits only: str.isdigit() takes "²", which int() then refuses (a traceback).
        if not equals or not version or not (weight.isascii() and weight.isdigit()):
            raise InvalidRequest(f"{entry!r} is not VERSION=WEIGHT (a weight is 0-100)")
        allocation.append({"version": version, "weight": int(weight)})
    return allocation


def cmd_deployment_set(args: argparse.Namespace) -> int:
    application = plane_of(args)
    worker_uid = resolve_worker(application, args.space, args.worker)
    if args.dry_run:
        checked = application.control.check_deployment(
            args.space, worker_uid, parse_allocation(args.allocation),
            terminal=args.check_histories,
        )  # fmt: skip

        def report_lines() -> str:
            lines = []
            for entry in checked["versions"]:
                document = entry["report"]
                verdict = "compatible" if document["compatible"] else "INCOMPATIBLE"
                lines.append(f"{entry['version']} ({entry['weight']}%): {verdict}, "
                             f"{document['checked']} histories")  # fmt: skip
                for instance in document["instances"]:
                    for finding in instance["findings"]:
                        lines.append(f"  {finding['kind']:<24} {instance['instanceId'][:40]!r} "
                                     f"{finding['step']!r}: {finding['reason']}")  # fmt: skip
            return "\n".join(lines or ["nothing to check (no Version weighed)"])

        emit(checked, args.json, report_lines)
        return EXIT_OK if checked["compatible"] else EXIT_REJECTED
    if args.check_histories is not None:
        raise InvalidRequest("--check-histories goes with --dry-run here")
    body = _promote(application, args, worker_uid, parse_allocation(args.allocation))
    lines = [f"{body['operationId']} {body['status']}{why(body)}"]
    emit(body, args.json, lambda: "\n".join(lines + _deployment_lines(body["resource"])))
    return exit_for(body)
