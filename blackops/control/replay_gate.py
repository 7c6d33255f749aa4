"""The deploy gate: a Version checked against the recorded histories of its Workflows.

A Version's classes are loaded in isolation exactly as a worker loads them
(``blackops/control/bundles.py``) and run through the replay checker
(``blackops/workflows/replay_check.py``): nothing of the Version runs but ``run`` on
recorded results, no effect, nothing appended. The histories are those of every
Workflow resource of the Version's Worker whose class the Version provides: every
instance not yet terminal, and the newest ``terminal`` terminal ones (decisions C7).
The verdict, and who forced a promotion past it, is journaled on the Version's stream
(``version.replay_checked``) so an auditor sees which histories were checked, what was
found, and by whom a refusal was overridden.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackops.control.base import new_event
from blackops.control.bundle_source import BundleSource
from blackops.control.bundles import load_version as load_bundle
from blackops.ids import new_id
from blackops.workflows.code import WorkflowCode
from blackops.workflows.replay_check import (
    History,
    ReplayReport,
    check_histories,
    newest_instances,
)
from domain.context import Actor
from domain.errors import FencingError, InvalidRequest, NotFound
from domain.resources import Topic, VersionState, is_uid, version_id
from domain.workflow import TERMINAL_STATUSES
from journal.instances import instance_stream
from journal.resources import catalog, load_version, load_workflow, version_stream
from journal.store import Append, EventStore

if TYPE_CHECKING:
    from blackops.control.plane import ControlPlane

#: Terminal histories checked per Workflow unless told otherwise (``--check-histories``).
DEFAULT_TERMINAL = 100
MAX_TERMINAL = 100_000


class Candidate:
    """Candidate code of a bundle: ``candidate(workflow)`` is the class that replays that
    Workflow's histories (loaded once per class), ``source(workflow)`` how a child
    process loads the same (the second replay, under another hash seed)."""

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
        self._loaded: dict[str, WorkflowCode] = {}

    def source(self, workflow: str) -> BundleSource:
        class_name = self.choose(workflow)
        return BundleSource(self.key, self.modules, self.main, class_name, self.env, self.bindings)

    def __call__(self, workflow: str) -> WorkflowCode:
        source = self.source(workflow)
        code = self._loaded.get(source.class_name)
        if code is None:
            try:
                code = self._loaded[source.class_name] = source.load(workflow)
            except LookupError as missing:
                raise InvalidRequest(str(missing)) from None
        return code


def version_candidate(store: EventStore, vid: str) -> Candidate:
    """The Version's classes, loaded in isolation: for a Workflow resource the class it
    names, else the Version's only verified class."""
    state = load_version(store, vid) if isinstance(vid, str) else VersionState("")
    if not state.exists or state.deleted:
        raise NotFound(f"no version {str(vid)[:80]!r}")
    load_bundle(vid, state.modules, state.main)  # a Version that does not load: say so now
    provided = sorted(
        name for name, verdict in (state.verification or {}).get("classes", {}).items()
        if verdict.get("ok")
    )  # fmt: skip

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
    """A folder's code as ``blackops deploy`` would upload it, loaded in isolation under
    its content address; the class a history replays with is ``class_name``, else the
    class its Workflow resource names, else the main module's only workflow class."""
    key = "bundle:" + version_id({"modules": modules, "main": main, "env": env or {}})
    bundle = load_bundle(key, modules, main)
    classes = sorted(
        name
        for name, value in vars(bundle.main).items()
        if isinstance(value, type)
        and value.__module__ == bundle.main.__name__
        and callable(getattr(value, "run", None))
    )

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
        return str(chosen)

    return key, Candidate(key, modules, main, dict(env or {}), (), choose)


def workflows_of(store: EventStore, state: VersionState) -> list[str]:
    """The open Workflow resources of the Version's Worker whose class it provides."""
    provided = {
        name
        for name, verdict in (state.verification or {}).get("classes", {}).items()
        if verdict.get("ok")
    }
    _, changes = catalog(store, 0)
    open_uids: set[str] = set()
    for change, uid in changes:
        (open_uids.add if change == "added" else open_uids.discard)(uid)
    found = []
    for uid in sorted(open_uids):
        workflow = load_workflow(store, uid)
        if (
            workflow.exists
            and not workflow.deleting
            and workflow.worker == state.worker
            and workflow.class_name in provided
        ):
            found.append(uid)
    return found


def gate_histories(
    plane: ControlPlane, workflow: str, terminal: int
) -> tuple[list[History], dict[str, int]]:
    """Every non-terminal instance of ``workflow`` and its newest ``terminal`` terminal
    ones; and how many of each were taken."""
    projections = plane.runtime.projections
    picked: list[str] = []
    kept = {"inFlight": 0, "terminal": 0}
    for instance_id, status in newest_instances(projections, workflow):
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
    plane: ControlPlane,
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
    histories: list[History] = []
    scope: dict[str, Any] = {"terminalPerWorkflow": terminal, "workflows": {}}
    for workflow in workflows_of(plane.store, state):
        found, kept = gate_histories(plane, workflow, terminal)
        histories += found
        scope["workflows"][workflow] = kept
    report = check_histories(pick, histories, candidate=vid, progress=progress, sources=pick.source)
    return report, scope


def record_check(
    plane: ControlPlane,
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
