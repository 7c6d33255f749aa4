"""``blackops replay --check``: recorded workflow histories through candidate code.

Candidate code: ``--app module:attr`` (the workflow classes it registers), ``--version
VID`` (a Version of the journal, loaded in isolation as a worker loads it) or
``--bundle DIR`` (a folder as ``blackops deploy`` reads it). Histories: ``--workflow
UID`` (its instances in the journal: ``--instances``, ``--status``, ``--limit`` newest
first) or an Observed JSONL FILE (an export, or ``blackops wf history --output``).
Exit 0 only when every history is compatible, 3 when any is not, 1 on an error.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackops.cli.common import EXIT_OK, EXIT_REJECTED, emit
from domain.errors import InvalidRequest

if TYPE_CHECKING:
    from blackops.application import Application
    from blackops.control.replay_gate import Candidate
    from blackops.workflows.code import WorkflowCode
    from blackops.workflows.replay_check import History, Source


def check_flags(replay: argparse.ArgumentParser) -> None:
    group = replay.add_argument_group("--check: workflow histories through new code")
    group.add_argument(
        "--check", action="store_true", help="check candidate code against recorded histories"
    )
    group.add_argument("--app", help="candidate: module:attr of an Application that registers it")
    group.add_argument("--version", dest="candidate_version", help="candidate: a Version id")
    group.add_argument("--bundle", help="candidate: a folder of .py files, as deploy reads it")
    group.add_argument("--main", help="with --bundle: the main module")
    group.add_argument("--class", dest="class_name", help="with --bundle: the workflow class")
    group.add_argument("--env-file", help="with --bundle: a JSON object, the env")
    group.add_argument("--workflow", help="histories: this workflow's instances in the journal")
    group.add_argument("--instances", nargs="+", metavar="ID", help="only these instances")
    group.add_argument("--status", help="only instances in this status")
    group.add_argument("--limit", type=int, help="at most N instances, newest first")


def _histories(args: argparse.Namespace, application: Application) -> list[History]:
    from blackops.testing import recorded_histories
    from blackops.workflows.replay_check import read_jsonl
    from replay.observed import ObservedLineError

    if (args.file is None) == (args.workflow is None):
        raise InvalidRequest("replay --check needs a FILE of Observed JSONL or --workflow UID")
    if args.file is not None:
        if args.instances or args.status or args.limit is not None:
            raise InvalidRequest("--instances, --status and --limit go with --workflow")
        try:
            return read_jsonl(args.file)
        except OSError as unreadable:
            raise InvalidRequest(f"cannot read {args.file}: {unreadable.strerror}") from None
        except ObservedLineError as bad:
            raise InvalidRequest(f"{args.file}: {bad}") from None
    if args.limit is not None and args.limit < 1:
        raise InvalidRequest("--limit must be at least 1")
    if args.instances and (args.status or args.limit is not None):
        raise InvalidRequest("--instances names the instances: no --status or --limit with it")
    return recorded_histories(
        application, args.workflow, instances=args.instances, status=args.status, limit=args.limit
    )


def _candidate(
    args: argparse.Namespace, application: Application
) -> tuple[str, Callable[[str], WorkflowCode] | Candidate, Callable[[str], Source | None]]:
    chosen = [f for f in ("app", "candidate_version", "bundle") if getattr(args, f)]
    if len(chosen) != 1:
        raise InvalidRequest("replay --check needs exactly one of --app, --version, --bundle")
    if args.bundle is None and (args.main or args.class_name or args.env_file):
        raise InvalidRequest("--main, --class and --env-file go with --bundle")
    if args.candidate_version:
        from blackops.control.replay_gate import version_candidate

        vid = args.candidate_version
        version = version_candidate(application.runtime.store, vid)
        return vid, version, version.source  # checked in a child process (decisions C13)
    if args.bundle:
        from blackops.cli.deploy import _json_file, choose_main, read_modules
        from blackops.control.replay_gate import bundle_candidate

        modules = read_modules(args.bundle)
        env = _json_file(args.env_file, "--env-file")
        key, bundle = bundle_candidate(
            application.runtime.store, modules, choose_main(modules, args.main), env,
            args.class_name,
        )  # fmt: skip
        return key, bundle, bundle.source
    from blackops.workflows.replay_check import import_source

    pick = _registered(application)
    return args.app, pick, lambda workflow: import_source(pick(workflow).cls, pick(workflow).env)


def _registered(application: Application) -> Callable[[str], WorkflowCode]:
    """The class the ``--app`` registers under the history's workflow uid, or (for a
    Workflow resource's history) the registered class of the resource's className."""
    from blackops.workflows.replay_check import code_for

    registered = {r.uid: r for r in application.workflows()}
    by_class = {r.class_name: r.uid for r in registered.values()}

    def pick(workflow: str) -> WorkflowCode:
        uid = workflow
        if uid not in registered and workflow:
            resource = application.workflow(workflow).resource
            uid = by_class.get(resource.class_name, "")
        if uid not in registered:
            raise InvalidRequest(f"the --app registers no workflow that replays {workflow!r}")
        code = application.registered_code(uid)
        return code_for(code.cls, code.env, workflow=workflow, version=code.version)

    return pick


def cmd_replay_check(args: argparse.Namespace) -> int:
    from blackops.cli.common import app_of, store_app
    from blackops.cli.progress import progress
    from blackops.control.replay_gate import Candidate
    from blackops.workflows.replay_check import check_histories

    if args.observer or args.follow:
        raise InvalidRequest("--check replays through candidate code: no --observer or --follow")
    application = app_of(args) if args.app else store_app(args)
    name, pick, sources = _candidate(args, application)
    histories = _histories(args, application)
    with progress("checking histories", enabled=None if not args.json else False) as report:
        total = len(histories)
        if isinstance(pick, Candidate):  # a Version's or a folder's code: never run here
            result = pick.check(
                histories, candidate=name, progress=lambda done: report(done, total)
            )
        else:
            result = check_histories(
                pick, histories, candidate=name, progress=lambda done: report(done, total),
                sources=sources,
            )  # fmt: skip
    document: dict[str, Any] = result.to_document()
    emit(document, args.json, result.human)
    return EXIT_OK if result.compatible else EXIT_REJECTED
