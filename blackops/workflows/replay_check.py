"""The replay checker: recorded instance histories run through candidate workflow code.

Each history is folded with the engine's own fold (``domain.workflow.fold``), given to
the candidate as the plan a worker would give it (``engine.plan_for``), and run by the
worker's own :func:`~blackops.workflows.context.run_context`: the same step-name and
step-kind rules, the same recorded results, failures, sleeps and consumed events. Two
things differ from a worker, and only two:

* ``replay_only``: the first call the history holds no result for ends the context
  before its effect runs or any host is asked (``left_history``). No effect is ever
  executed, and the host answers nothing: nothing can be appended.
* ``trace``: every call is recorded as ``(name, kind)`` in call order, so the checker
  can say where the code leaves the history, which recorded steps it never calls,
  and whether two replays under different clocks and seeds call the same sequence.

Findings (decisions C1-C6): ``kind_changed``, ``new_step_inside_history``,
``history_step_unused``, ``output_changed``, ``outcome_changed``, ``nondeterministic``;
none means ``compatible`` (``extends_history`` is a note, never a failure).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from blackops.workflows.code import WorkflowCode
from blackops.workflows.context import ContextEnd, run_context
from blackops.workflows.engine import plan_for
from blackops.workflows.replay_clock import NO_HOST, shifted_clock
from domain.documents import canonical_json
from domain.events import RecordedEvent
from domain.workflow import InstanceState, Topic, fold
from journal.instances import PREFIX as INSTANCE_PREFIX

FINDING_KINDS = (
    "kind_changed",
    "new_step_inside_history",
    "history_step_unused",
    "output_changed",
    "outcome_changed",
    "nondeterministic",
    "class_missing",
)
#: How far the second replay's wall clock is moved: a day, an hour, a minute and 1.5 s,
#: so the date, the hour, the minute, the second and its fraction all differ.
CLOCK_SHIFT_SECONDS = 90_061.5
_SEEDS = (0x5EED_0001, 0x5EED_0002)
_STEP_TOPICS = frozenset({Topic.STEP_COMPLETED, Topic.STEP_RETRY_SCHEDULED, Topic.STEP_SUSPENDED})
#: Failure reasons only the host decides (a clock, not the code): a replay cannot
#: reproduce them, so a terminal instance errored so is not compared by its end.
_HOST_REASONS = frozenset({"lifetime_exceeded"})


# -- the report --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding (or note) about one instance: which step, of which kind, at which
    event of the history (its journal ``position`` and stream ``version``)."""

    kind: str
    step: str | None
    step_kind: str | None
    position: int | None
    version: int | None
    reason: str

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step,
            "stepKind": self.step_kind,
            "position": self.position,
            "version": self.version,
            "reason": self.reason,
        }


@dataclass(slots=True)
class InstanceReport:
    workflow: str
    instance_id: str
    stream: str
    status: str
    events: int
    findings: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    end: dict[str, Any] = field(default_factory=dict)

    @property
    def compatible(self) -> bool:
        return not self.findings

    @property
    def verdict(self) -> str:
        return "compatible" if self.compatible else "incompatible"

    def to_document(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "instanceId": self.instance_id,
            "stream": self.stream,
            "status": self.status,
            "events": self.events,
            "verdict": self.verdict,
            "findings": [f.to_document() for f in self.findings],
            "notes": [n.to_document() for n in self.notes],
            "replayEnd": self.end,
        }


@dataclass(slots=True)
class ReplayReport:
    """What :func:`replay_histories` answers: one :class:`InstanceReport` per history."""

    candidate: str
    instances: list[InstanceReport] = field(default_factory=list)
    #: Whether the second replay also ran under another hash seed (a separate process).
    hash_seed_varied: bool = False

    @property
    def compatible(self) -> bool:
        return all(i.compatible for i in self.instances)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("compatible", *FINDING_KINDS), 0)
        for instance in self.instances:
            if instance.compatible:
                counts["compatible"] += 1
            for kind in {f.kind for f in instance.findings}:
                counts[kind] += 1
        return counts

    def findings(self) -> list[tuple[InstanceReport, Finding]]:
        return [(i, f) for i in self.instances for f in i.findings]

    def to_document(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "compatible": self.compatible,
            "checked": len(self.instances),
            "counts": self.counts(),
            "hashSeedVaried": self.hash_seed_varied,
            "instances": [i.to_document() for i in self.instances],
        }

    @classmethod
    def from_document(cls, document: object) -> ReplayReport | None:
        """A report from :meth:`to_document`'s shape (what a replay child answers), or
        None when ``document`` is not one (a child that died answered nothing: None)."""
        if not isinstance(document, dict):
            return None
        try:
            report = cls(
                str(document["candidate"]), hash_seed_varied=bool(document["hashSeedVaried"])
            )
            for item in document["instances"]:
                instance = InstanceReport(
                    str(item["workflow"]), str(item["instanceId"]), str(item["stream"]),
                    str(item["status"]), int(item["events"]),
                    findings=[_finding(f) for f in item["findings"]],
                    notes=[_finding(n) for n in item["notes"]],
                    end=dict(item["replayEnd"]),
                )  # fmt: skip
                report.instances.append(instance)
        except (KeyError, TypeError, ValueError):
            return None
        return report

    def summary(self) -> dict[str, Any]:
        """The report without the compatible instances (what a Version's journal keeps)."""
        document = self.to_document()
        document["instances"] = [
            {"workflow": i.workflow, "instanceId": i.instance_id, "status": i.status}
            for i in self.instances
        ]
        document["findings"] = [
            {"workflow": i.workflow, "instanceId": i.instance_id, **f.to_document()}
            for i, f in self.findings()
        ]
        return document

    def human(self, *, limit: int = 50) -> str:
        """A short table, then one line per finding: instance, step, reason."""
        counts = self.counts()
        verdict = "COMPATIBLE" if self.compatible else "INCOMPATIBLE"
        lines = [f"{verdict}: {len(self.instances)} histories checked against {self.candidate}"]
        lines += [f"  {kind:<24} {n:>7}" for kind, n in counts.items() if n or kind == "compatible"]
        extended = sum(1 for i in self.instances for n in i.notes if n.kind == "extends_history")
        if extended:
            lines.append(f"  (extends_history: {extended}, new steps after the history: ok)")
        found = self.findings()
        for instance, finding in found[:limit]:
            step = f"{finding.step!r} ({finding.step_kind})" if finding.step else "-"
            where = f" @{finding.position}" if finding.position is not None else ""
            lines.append(
                f"{finding.kind:<24} {instance.instance_id[:40]!r} {step}{where}: {finding.reason}"
            )
        if len(found) > limit:
            lines.append(f"... {len(found) - limit} more findings (--json shows all)")
        return "\n".join(lines)


def _finding(document: Any) -> Finding:
    def optional(value: Any, kind: type) -> Any:
        if value is not None and type(value) is not kind:
            raise TypeError("not a finding")
        return value

    kind = document["kind"]
    if not isinstance(kind, str) or not isinstance(document["reason"], str):
        raise TypeError("not a finding")
    return Finding(
        kind,
        optional(document["step"], str),
        optional(document["stepKind"], str),
        optional(document["position"], int),
        optional(document["version"], int),
        document["reason"],
    )


# -- histories ---------------------------------------------------------------------------------


@dataclass(slots=True)
class History:
    """One instance's recorded events, in stream order."""

    stream: str
    events: list[RecordedEvent]


def histories_from_events(events: Iterable[RecordedEvent]) -> list[History]:
    """Group events (a journal export, Observed JSONL lines) into instance histories,
    in the order each stream first appears; streams that are not workflow instances
    (operations, resources, ...) are left out."""
    grouped: dict[str, list[RecordedEvent]] = {}
    for event in events:
        if event.stream.startswith(INSTANCE_PREFIX) and event.type.startswith("workflow."):
            grouped.setdefault(event.stream, []).append(event)
    return [
        History(stream, sorted(found, key=lambda e: e.version)) for stream, found in grouped.items()
    ]


def as_histories(histories: object) -> list[History]:
    """What :func:`replay_histories` accepts: Histories, per-instance event lists, or a
    flat iterable of events (RecordedEvent or Observed line documents)."""
    items = list(histories) if isinstance(histories, Iterable) else None
    if items is None:
        raise TypeError("histories must be an iterable")
    if all(isinstance(item, History) for item in items):
        return list(items)
    flat: list[RecordedEvent] = []
    for item in items:
        if isinstance(item, History):
            flat += item.events
        elif isinstance(item, RecordedEvent | Mapping):
            flat.append(_event(item))
        elif isinstance(item, Iterable):
            flat += [_event(e) for e in item]
        else:
            raise TypeError(f"not a history nor an event: {type(item).__name__}")
    return histories_from_events(flat)


def _event(item: object) -> RecordedEvent:
    if isinstance(item, RecordedEvent):
        return item
    if isinstance(item, Mapping):
        try:
            return RecordedEvent(
                int(item["position"]),
                str(item["stream"]),
                int(item["version"]),
                str(item["type"]),
                str(item["at"]),
                dict(item["context"]),
                dict(item["data"]),
            )
        except (KeyError, TypeError, ValueError) as bad:
            raise TypeError(f"not an Observed event: {bad}") from None
    raise TypeError(f"not an event: {type(item).__name__}")


class InstanceLister(Protocol):
    def list_instances(
        self,
        workflow: str,
        *,
        space: str | None = None,
        status: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> dict[str, Any]: ...


def newest_instances(
    lister: InstanceLister,
    workflow: str,
    *,
    status: str | None = None,
    space: str | None = None,
) -> list[tuple[str, str]]:
    """``(instance id, status)`` of ``workflow``'s instances (optionally of one status, of
    one Space: a code-registered uid may be another Space's too, W15), newest first."""
    found: list[tuple[str, str]] = []
    cursor: str | None = None
    while True:
        page = lister.list_instances(
            workflow, space=space, status=status, limit=1000, cursor=cursor
        )
        found += [(item["id"], item["status"]) for item in page["items"]]
        cursor = page["next"]
        if not cursor:
            break
    found.reverse()  # listings are oldest first
    return found


def newest_instance_ids(
    lister: InstanceLister,
    workflow: str,
    *,
    status: str | None = None,
    limit: int | None = None,
    space: str | None = None,
) -> list[str]:
    """Instance ids of ``workflow`` (optionally of one status, of one Space), newest first."""
    found = newest_instances(lister, workflow, status=status, space=space)
    ids = [instance_id for instance_id, _ in found]
    return ids if limit is None else ids[:limit]


# -- checking ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Recorded:
    """Where each recorded step's event is in the history, and their order."""

    state: InstanceState
    at: dict[str, RecordedEvent]
    completed: list[str]
    last: RecordedEvent | None
    terminal: RecordedEvent | None


def _recorded(history: History) -> _Recorded:
    state = fold(history.stream, history.events)
    at: dict[str, RecordedEvent] = {}
    completed: list[str] = []
    terminal = None
    for event in history.events:
        if event.type in _STEP_TOPICS:
            name = event.data["name"]
            at[name] = event
            if event.type == Topic.STEP_COMPLETED:
                completed.append(name)
        elif event.type in (Topic.COMPLETED, Topic.ERRORED, Topic.TERMINATED):
            terminal = event
    last = history.events[-1] if history.events else None
    return _Recorded(state, at, completed, last, terminal)


def _replay(state: InstanceState, code: WorkflowCode) -> tuple[list[tuple[str, str]], ContextEnd]:
    trace: list[tuple[str, str]] = []
    plan = plan_for(state, code, state.contexts + 1)
    end = run_context(plan, code.cls, code.env, NO_HOST, trace=trace, replay_only=True)
    return trace, end


def _end_document(end: ContextEnd) -> dict[str, Any]:
    document: dict[str, Any] = {"kind": end.kind}
    if end.reason is not None:
        document["reason"] = end.reason
    if end.kind == "errored":
        document["message"] = end.message
    if end.kind == "complete":
        document["output"] = end.output
    return document


def check_history(
    code: WorkflowCode,
    history: History,
    other: tuple[list[tuple[str, str]], ContextEnd] | None = None,
    recorded: _Recorded | None = None,
) -> InstanceReport:
    """One history through ``code``: its findings (see the module's docstring).
    ``other``: the second replay, made elsewhere (another process, another hash seed);
    else it is made here, under the shifted clock and the second seed."""
    if recorded is None:
        recorded = _recorded(history)
    state = recorded.state
    report = InstanceReport(
        state.workflow, state.instance_id, history.stream, state.status, len(history.events)
    )
    if not state.exists or state.purged:
        report.status = "purged" if state.purged else "missing"
        report.notes.append(Finding("skipped", None, None, None, None, "no history to replay"))
        return report
    random.seed(_SEEDS[0])
    trace, end = _replay(state, code)
    report.end = _end_document(end)
    if other is None:
        with shifted_clock(CLOCK_SHIFT_SECONDS):
            random.seed(_SEEDS[1])
            other = _replay(state, code)
    _judge(report, recorded, trace, end)
    _compare(report, recorded, (trace, end), other)
    return report


def workflow_of(history: History) -> str:
    """The workflow uid a history's creation event names ("" when it has none)."""
    for event in history.events:
        if event.type == Topic.CREATED:
            return str(event.data.get("workflow", ""))
    return ""


def _where(event: RecordedEvent | None) -> tuple[int | None, int | None]:
    return (event.position, event.version) if event is not None else (None, None)


def _judge(
    report: InstanceReport, recorded: _Recorded, trace: list[tuple[str, str]], end: ContextEnd
) -> None:
    state = recorded.state
    called = {name for name, _ in trace}
    unreached = [name for name in recorded.completed if name not in called]
    last_name, last_kind = trace[-1] if trace else (None, None)
    if end.kind == "errored" and end.reason == "step_definition_mismatch" and last_name:
        record = state.steps.get(last_name)
        if record is not None and record.kind != last_kind:
            report.findings.append(
                Finding(
                    "kind_changed",
                    last_name,
                    last_kind,
                    *_where(recorded.at.get(last_name)),
                    f"recorded as a {record.kind} step, now called as {last_kind} "
                    "(a worker would fail the instance: step_definition_mismatch)",
                )
            )
            return
    if end.kind == "stopped" and end.reason == "left_history":
        assert last_name is not None and last_kind is not None
        record = state.steps.get(last_name)
        if record is None and unreached:
            first = recorded.at[unreached[0]]
            listed = ", ".join(repr(n[:40]) for n in unreached[:3])
            more = f" and {len(unreached) - 3} more" if len(unreached) > 3 else ""
            report.findings.append(
                Finding(
                    "new_step_inside_history",
                    last_name,
                    last_kind,
                    *_where(first),
                    f"not in the history, called before recorded {listed}{more}: "
                    "a fresh effect would run in the middle of recorded work",
                )
            )
        elif record is None:
            report.notes.append(
                Finding(
                    "extends_history",
                    last_name,
                    last_kind,
                    *_where(recorded.last),
                    "a new step after the last recorded one (new work, compatible)",
                )
            )
        else:
            report.notes.append(
                Finding(
                    "reaches_frontier",
                    last_name,
                    last_kind,
                    *_where(recorded.at.get(last_name)),
                    "the history's unfinished step: a worker continues from here",
                )
            )
        return
    for name in unreached:
        record = state.steps[name]
        report.findings.append(
            Finding(
                "history_step_unused",
                name,
                record.kind,
                *_where(recorded.at[name]),
                f"recorded, but the run ended ({end.kind}) without calling it",
            )
        )
    _judge_end(report, recorded, end)


def _judge_end(report: InstanceReport, recorded: _Recorded, end: ContextEnd) -> None:
    """The run ended on recorded results alone: does it end as the history did?"""
    state = recorded.state
    position, version = _where(recorded.terminal or recorded.last)
    if state.status == "complete":
        if end.kind == "complete":
            if canonical_json(end.output) != canonical_json(state.output):
                report.findings.append(
                    Finding(
                        "output_changed",
                        None,
                        None,
                        position,
                        version,
                        "the run now returns another output document",
                    )
                )
            return
        report.findings.append(
            Finding(
                "outcome_changed",
                None,
                None,
                position,
                version,
                f"completed in the history; the run now ends {end.kind} "
                f"({end.reason}: {end.message[:120]})",
            )
        )
    elif state.status == "errored":
        assert state.error is not None
        was = state.error["reason"]
        if was in _HOST_REASONS:
            return
        if end.kind == "errored" and end.reason == was:
            return
        now = f"ends {end.kind}" + (f" ({end.reason})" if end.kind == "errored" else "")
        report.findings.append(
            Finding(
                "outcome_changed",
                None,
                None,
                position,
                version,
                f"errored ({was}) in the history; the run now {now}",
            )
        )
    elif state.status != "terminated" and end.kind == "errored":
        # In flight: the live instance has not ended, but on recorded results alone the
        # new code already fails it (decisions C3).
        report.findings.append(
            Finding(
                "outcome_changed",
                None,
                None,
                position,
                version,
                f"{state.status} in the history; on recorded results alone the run now "
                f"fails ({end.reason}: {end.message[:120]})",
            )
        )


def _compare(
    report: InstanceReport,
    recorded: _Recorded,
    first: tuple[list[tuple[str, str]], ContextEnd],
    second: tuple[list[tuple[str, str]], ContextEnd],
) -> None:
    (trace_a, end_a), (trace_b, end_b) = first, second
    same_end = (end_a.kind, end_a.reason) == (end_b.kind, end_b.reason)
    if trace_a == trace_b and same_end:
        return
    index = next(
        (i for i, (a, b) in enumerate(zip(trace_a, trace_b, strict=False)) if a != b),
        min(len(trace_a), len(trace_b)),
    )
    name, kind = trace_a[index] if index < len(trace_a) else (None, None)
    event = recorded.at.get(name) if name else None
    other = trace_b[index] if index < len(trace_b) else None
    said = f"{other[0][:40]!r} ({other[1]})" if other else f"an end ({end_b.kind})"
    report.findings.append(
        Finding(
            "nondeterministic",
            name,
            kind,
            *_where(event or recorded.last),
            f"call {index + 1} differs between two replays under other wall-clock times "
            f"and seeds: then {said}; code outside steps reads time or randomness",
        )
    )


class Source(Protocol):
    """How another process loads a candidate (picklable): ``load(workflow)``."""

    def load(self, workflow: str) -> WorkflowCode: ...


@dataclass(frozen=True, slots=True)
class ImportSource:
    """A class another process can import by module and qualified name."""

    module: str
    qualname: str
    env: dict[str, Any]

    def load(self, workflow: str) -> WorkflowCode:
        import importlib

        value: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            value = getattr(value, part)
        return code_for(value, self.env, workflow=workflow)


def import_source(cls: type, env: Any) -> ImportSource | None:
    """An :class:`ImportSource` for ``cls`` if another process can import it and pickle
    its env (a class defined inside a function cannot be imported)."""
    import pickle

    if "<locals>" in cls.__qualname__ or cls.__module__ in ("__main__", "builtins"):
        return None
    values = dict(vars(env)) if env is not None and not isinstance(env, Mapping) else env
    try:
        pickle.dumps(values or {})
    except Exception:
        return None
    return ImportSource(cls.__module__, cls.__qualname__, dict(values or {}))


def check_histories(
    code: WorkflowCode | Callable[[str], WorkflowCode],
    histories: Iterable[History],
    *,
    candidate: str | None = None,
    progress: Callable[[int], None] | None = None,
    sources: Callable[[str], Source | None] | None = None,
) -> ReplayReport:
    """Every history through ``code`` (or ``code(workflow uid)``, the candidate of each
    history's workflow); ``progress(done)`` after each. With ``sources`` (how another
    process loads each workflow's candidate), the second replay of every history runs in
    one child process under another hash seed (decisions C5); if that cannot be done,
    it runs here."""
    pick = (lambda _: code) if isinstance(code, WorkflowCode) else code
    if sources is None and isinstance(code, WorkflowCode):
        found = import_source(code.cls, code.env)
        sources = lambda _: found  # noqa: E731
    name = candidate or (code.version if isinstance(code, WorkflowCode) else "candidate")
    report = ReplayReport(name)
    items = [(history, workflow_of(history)) for history in histories]
    folded = [_recorded(history) for history, _ in items]
    seconds = _second_replays(items, folded, sources)
    report.hash_seed_varied = seconds is not None and bool(items)
    state = random.getstate()
    try:
        for done, (history, workflow) in enumerate(items, 1):
            other = seconds[done - 1] if seconds is not None else None
            code_now = pick(workflow)
            report.instances.append(check_history(code_now, history, other, folded[done - 1]))
            if progress is not None:
                progress(done)
    finally:
        random.setstate(state)
    return report


def _second_replays(
    items: list[tuple[History, str]],
    folded: list[_Recorded],
    sources: Callable[[str], Source | None] | None,
) -> list[tuple[list[tuple[str, str]], ContextEnd] | None] | None:
    """The second replay of every history in a child process with another hash seed,
    or None when a candidate cannot be loaded there (or the child fails)."""
    import os
    import pickle
    import subprocess
    import sys

    if sources is None or not items:
        return None
    loads: dict[str, Source] = {}
    jobs: list[tuple[str, Any] | None] = []
    for (_, workflow), recorded in zip(items, folded, strict=True):
        if workflow not in loads:
            source = sources(workflow)
            if source is None:
                return None
            loads[workflow] = source
        state = recorded.state
        if not state.exists or state.purged:
            jobs.append(None)
            continue
        jobs.append(
            (workflow, plan_for(state, WorkflowCode(workflow, "", type, None), state.contexts + 1))
        )
    payload = pickle.dumps(
        {"path": list(sys.path), "sources": loads, "jobs": jobs, "seed": _SEEDS[1],
         "shift": CLOCK_SHIFT_SECONDS}
    )  # fmt: skip
    seed = random.SystemRandom().randrange(1, 2**32)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "blackops.workflows.replay_child"],
            input=payload,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            check=False,
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    try:
        results: list[Any] = pickle.loads(done.stdout)
    except Exception:
        return None
    return results if len(results) == len(items) else None


def code_for(cls: type, env: Any = None, *, workflow: str = "", version: str = "") -> WorkflowCode:
    """A candidate class as the checker runs it (``env``: what ``cls(env)`` gets)."""
    from blackops.workflows.code import Env, local_version

    if not isinstance(cls, type) or not callable(getattr(cls, "run", None)):
        raise TypeError("a candidate is a class whose instances have a callable run")
    if env is None or isinstance(env, Mapping):
        env = Env(dict(env or {}))
    return WorkflowCode(workflow, version or local_version(cls), cls, env)


def read_jsonl(path: str) -> list[History]:
    """The instance histories of an Observed JSONL file (an export, or ``wf history``);
    ``-`` reads stdin (it was opened as a file named "-": found by a defect hunt, stop 40)."""
    from blackops.input_files import open_input
    from replay.observed import parse_line, read_lines

    events = []
    with open_input(path) as file:
        for number, line in enumerate(read_lines(file), 1):
            text = line.rstrip(b"\n")
            if text:
                events.append(parse_line(text, number))
    return histories_from_events(events)
