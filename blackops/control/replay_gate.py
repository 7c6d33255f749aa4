"""The deploy gate: a Version checked against the recorded histories of its Workflows.

A Version's classes are loaded exactly as a worker loads them
(``blackops/control/bundles.py``), in a fresh interpreter stripped of the caller's
secrets (``replay_sandbox.py``, decisions C13), and run through the replay checker
(``blackops/workflows/replay_check.py``): nothing of the Version runs but ``run`` on
recorded results, no effect, nothing appended. The histories are those of every open
Workflow resource of the Version's Worker: every instance not yet terminal, and the
newest ``terminal`` terminal ones (decisions C7); an instance whose Workflow's class
the Version lacks or breaks is a ``class_missing`` finding (decisions C12).
The verdict, and who forced a promotion past it, is journaled on the Version's stream
(``version.replay_checked``) so an auditor sees which histories were checked, what was
found, and by whom a refusal was overridden.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackops.control.abi_check import verify_abi
from blackops.control.base import new_event
from blackops.control.bundle_source import BundleSource
from blackops.control.replay_sandbox import check_in_child
from blackops.ids import new_id
from blackops.workflows.replay_check import (
    Finding,
    History,
    InstanceReport,
    ReplayReport,
    newest_instances,
    workflow_of,
)
from domain.context import Actor
from domain.errors import FencingError, InvalidRequest, NotFound
from domain.resources import Topic, VersionState, is_uid, version_id
from domain.workflow import TERMINAL_STATUSES, fold
from domain.workflow import Topic as WorkflowTopic
from journal.instances import instance_stream
from journal.resources import catalog, load_version, load_workflow, version_stream
from journal.store import Append, EventStore

if TYPE_CHECKING:  # the gate needs a plane's Versions, not the whole ControlPlane
    from blackops.control.versions import VersionControl

#: Terminal histories checked per Workflow unless told otherwise (``--check-histories``).
DEFAULT_TERMINAL = 100
MAX_TERMINAL = 100_000


class Candidate:
    """Candidate code of a bundle (a Version, a folder): which class replays each
    Workflow's histories, and :meth:`check`, which runs them through it in a fresh
    interpreter (``replay_sandbox.py``, decisions C13): bundle code never runs here."""

    def __init__(
        self,
        key: str,
        modules: dict[str, str],
        main: str,
        env: dict[str, Any],
        bindings: tuple[str, ...],
        choose: Callable[[str], str],
    ) -> None:
        self.key, self.modules, self.main = key, modules, main
        self.env, self.bindings, self.choose = env, bindings, choose

    def source(self, workflow: str) -> BundleSource:
        class_name = self.choose(workflow)
        return BundleSource(self.key, self.modules, self.main, class_name, self.env, self.bindings)

    def check(
        self,
        histories: list[History],
        *,
        candidate: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> ReplayReport:
        """``histories`` through this code, in a child process; nothing runs here."""
        name = candidate or self.key
        if not histories:
            return ReplayReport(name)
        sources = {}
        for history in histories:
            workflow = workflow_of(history)
            if workflow not in sources:
                sources[workflow] = self.source(workflow)
        return check_in_child(name, sources, histories, progress=progress)


def _verified_classes(verification: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    classes = (verification or {}).get("classes", {})
    return classes if isinstance(classes, dict) else {}


def version_candidate(store: EventStore, vid: str) -> Candidate:
    """The Version's classes, as its ABI verification found them (nothing of it is
    loaded here): for a Workflow resource the class it names, else the Version's only
    verified class."""
    state = load_version(store, vid) if isinstance(vid, str) else VersionState("")
    if not state.exists or state.deleted:
        raise NotFound(f"no version {str(vid)[:80]!r}")
    verification = state.verification
    if verification is None:
        raise InvalidRequest(f"version {vid} is not verified yet: nothing to check it with")
    if not verification.get("loaded"):
        raise InvalidRequest(f"version {vid} does not load: {str(verification.get('error'))[:200]}")
    classes = _verified_classes(verification)
    provided = sorted(name for name, verdict in classes.items() if verdict.get("ok"))

    def choose(workflow: str) -> str:
        if is_uid(workflow, "wf"):
            class_name = str(load_workflow(store, workflow).spec.get("className", ""))
        elif len(provided) == 1:
            class_name = provided[0]
        else:
            raise InvalidRequest(
                f"workflow {workflow!r} is not a Workflow resource: which class of {vid} "
                f"replays it is ambiguous ({', '.join(provided) or 'none verified'})"
            )
        if class_name not in provided:
            raise InvalidRequest(f"version {vid} does not provide class {class_name!r}")
        return class_name

    bindings = tuple(b["name"] for b in state.bindings)
    return Candidate(vid, state.modules, state.main, dict(state.env), bindings, choose)


def bundle_candidate(
    store: EventStore | None,
    modules: dict[str, str],
    main: str,
    env: dict[str, Any] | None = None,
    class_name: str | None = None,
) -> tuple[str, Candidate]:
    """A folder's code as ``blackops deploy`` would upload it, under its content
    address; its classes are found by the ABI verifier (a child process: the folder's
    code never runs here). The class a history replays with is ``class_name``, else the
    class its Workflow resource names, else the main module's only verified class."""
    key = "bundle:" + version_id({"modules": modules, "main": main, "env": env or {}})
    verdict = verify_abi(key, modules, main)
    if not verdict["loaded"]:
        raise InvalidRequest(f"the bundle does not load: {verdict['error']}")
    classes = sorted(name for name, entry in verdict["classes"].items() if entry["ok"])

    def choose(workflow: str) -> str:
        chosen = class_name
        if chosen is None and store is not None and is_uid(workflow, "wf"):
            chosen = load_workflow(store, workflow).spec.get("className")
        if chosen is None:
            if len(classes) != 1:
                raise InvalidRequest(
                    f"choose the class that replays {workflow!r} with --class: one of "
                    f"{', '.join(classes) or '(no workflow class in the main module)'}"
                )
            chosen = classes[0]
        chosen = str(chosen)
        if chosen not in classes:
            raise InvalidRequest(f"the bundle does not provide workflow class {chosen!r}")
        return chosen

    return key, Candidate(key, modules, main, dict(env or {}), (), choose)


def workflows_of(store: EventStore, state: VersionState) -> list[str]:
    """Every open Workflow resource of the Version's Worker, whether or not the Version
    provides its class (a class it drops or breaks is a finding: decisions C12)."""
    _, changes = catalog(store, 0)
    open_uids: set[str] = set()
    for change, uid in changes:
        (open_uids.add if change == "added" else open_uids.discard)(uid)
    found = []
    for uid in sorted(open_uids):
        workflow = load_workflow(store, uid)
        if workflow.exists and not workflow.deleting and workflow.worker == state.worker:
            found.append(uid)
    return found


def class_missing(
    vid: str, class_name: str, verdict: dict[str, Any] | None, history: History
) -> InstanceReport:
    """The report of an instance whose Workflow's class the Version lacks or breaks:
    one ``class_missing`` finding at the instance's creation event."""
    state = fold(history.stream, history.events)
    report = InstanceReport(
        state.workflow, state.instance_id, history.stream, state.status, len(history.events)
    )
    created = next((e for e in history.events if e.type == WorkflowTopic.CREATED), None)
    if verdict is None:
        why = f"version {vid} has no class {class_name!r}"
    else:
        why = f"class {class_name!r} of version {vid} fails DW-ABI-1 ({verdict.get('reason')})"
    report.findings.append(
        Finding(
            "class_missing",
            None,
            None,
            created.position if created else None,
            created.version if created else None,
            f"{why[:300]}: this instance could not run on it",
        )
    )
    return report


def gate_histories(
    plane: VersionControl, space: str, workflow: str, terminal: int
) -> tuple[list[History], dict[str, int]]:
    """Every non-terminal instance of ``workflow`` (a Workflow resource of ``space``) and its
    newest ``terminal`` terminal ones; and how many of each were taken. Listed with their
    Space: the listing's indexes begin (workflow, space), so it is a range scan, where one
    without the Space sorted every instance of the workflow on every page (review, stop 40)."""
    projections = plane.runtime.projections
    picked: list[str] = []
    kept = {"inFlight": 0, "terminal": 0}
    for instance_id, status in newest_instances(projections, workflow, space=space):
        if status not in TERMINAL_STATUSES:
            picked.append(instance_id)
            kept["inFlight"] += 1
        elif kept["terminal"] < terminal:
            picked.append(instance_id)
            kept["terminal"] += 1
    store = plane.store
    histories = []
    for instance_id in picked:
        stream = instance_stream(workflow, instance_id)
        histories.append(History(stream, store.read_stream(stream)))
    return histories, kept


def check_version(
    plane: VersionControl,
    space: str,
    vid: str,
    *,
    terminal: int = DEFAULT_TERMINAL,
    progress: Callable[[int], None] | None = None,
) -> tuple[ReplayReport, dict[str, Any]]:
    """The gate's check of one Version: its report and what was checked (per Workflow,
    how many in-flight and terminal histories)."""
    if type(terminal) is not int or not 0 <= terminal <= MAX_TERMINAL:
        raise InvalidRequest(f"the number of terminal histories must be from 0 to {MAX_TERMINAL}")
    state = plane.version_in(space, vid)
    if state.verification is None:
        raise InvalidRequest(f"version {vid} is not verified yet: nothing to check it with")
    pick = version_candidate(plane.store, vid)
    classes = _verified_classes(state.verification)
    histories: list[History] = []
    missing: list[InstanceReport] = []
    scope: dict[str, Any] = {"terminalPerWorkflow": terminal, "workflows": {}}
    for workflow in workflows_of(plane.store, state):
        found, kept = gate_histories(plane, space, workflow, terminal)
        class_name = load_workflow(plane.store, workflow).class_name
        verdict = classes.get(class_name)
        if verdict is not None and verdict.get("ok"):
            histories += found
        else:
            missing += [class_missing(vid, class_name, verdict, h) for h in found]
            scope["workflows"][workflow] = {**kept, "classMissing": class_name}
            continue
        scope["workflows"][workflow] = kept
    report = pick.check(histories, candidate=vid, progress=progress)
    report.instances += missing
    return report, scope


def record_check(
    plane: VersionControl,
    space: str,
    vid: str,
    report: ReplayReport,
    scope: dict[str, Any],
    actor: Actor,
    *,
    purpose: str,
    forced: bool = False,
) -> int:
    """Journal the verdict on the Version's stream (who checked, which histories, what
    was found, whether a refusal was forced); answers the event's stream version."""
    state = plane.version_in(space, vid)
    summary = report.summary()
    data = {
        "version": vid,
        "purpose": purpose,
        "compatible": report.compatible,
        "forced": forced,
        "scope": scope,
        "checked": summary["checked"],
        "counts": summary["counts"],
        "instances": summary["instances"],
        "findings": summary["findings"],
    }
    context = {
        "tenant": space,
        "actor": actor.to_dict(),
        "correlation_id": new_id(plane.runtime.clock),
        "causation_id": None,
        "traceparent": None,
    }
    event = new_event(Topic.VERSION_REPLAY_CHECKED, plane._at(), context, data)
    for _ in range(20):
        try:
            plane.store.append(Append(version_stream(vid), state.version, [event]))
            return state.version + 1
        except FencingError:  # a concurrent append on the stream: read it again
            state = plane.version_in(space, vid)
    raise InvalidRequest("the Version kept changing; try again")
