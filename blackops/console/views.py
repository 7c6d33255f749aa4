"""What the pages show, built from the same reads the HTTP routes make: an operation's
timeline and receipt (verified here), an instance's step history, the journal's signed
checkpoints with the consistency of each to the one before, exports, the recent lines."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from blackops.application import Application
from blackops.audit.checkpoints import CheckpointService
from blackops.audit.receipts import (
    INSTANCE_TERMINAL,
    OPERATION_TERMINAL,
    receipt_for,
    terminal_position,
)
from blackops.http.auth import Caller
from blackops.http.journal import PAGE_BYTES, event_of, tenant_of
from domain.access import Action
from domain.errors import BlackOpsError
from replay.export import observed_lines
from replay.merkle import EMPTY_ROOT, verify_consistency
from replay.notes import VerifierKey
from replay.receipts import ReceiptError, open_checkpoint, verify_receipt

#: How a step kind reads on a page (the authors' API names).
STEP_KINDS = {"do": "do", "sleep": "sleep", "wait": "wait_for_event"}
#: The lifecycle stages a timeline marks, in order (python-contract's states).
STAGES = {
    "operation.received": "Received",
    "operation.accepted": "Accepted",
    "attempt.started": "Attempt started",
    "attempt.failed": "Attempt failed",
    "attempt.supervising": "Supervising the failure",
    "attempt.retry_scheduled": "Retry scheduled",
    "attempt.finalizing": "Finalizing",
    "operation.completed": "Completed",
    "operation.rejected": "Rejected",
    "operation.failed": "Failed",
    "operation.dead_lettered": "Dead Letter",
    "operation.held": "Held",
    "operation.released": "Released",
    "operation.purged": "Purged (tombstone)",
    "outcome.purged": "Outcome purged (tombstone)",
}
TERMINAL_CLASS = {
    "operation.completed": "ok",
    "operation.rejected": "bad",
    "operation.failed": "bad",
    "operation.dead_lettered": "bad",
}


def may(who: Caller, space: str, action: Action) -> bool:
    """Whether the caller's role in ``space`` covers ``action`` (what buttons to offer)."""
    return who.principal.may(space, action)


def verifier_keys(service: CheckpointService) -> list[VerifierKey]:
    """The keys a checkpoint is checked with here: the signer's own and those a journaled
    rotation hands over from; a server without a signing key trusts the keys its journaled
    checkpoints name (shown as such on the page)."""
    return service.trusted_keys() or service.named_keys()


@dataclass
class ReceiptView:
    """A receipt and what checking it here found."""

    receipt: dict[str, Any] | None = None
    position: int | None = None
    verified: bool = False
    tree_size: int | None = None
    problem: str | None = None
    #: No receipt because the journal no longer holds what was appended (an event changed
    #: behind its back): an alarm, not "not yet" (found by a defect hunt, stop 36).
    rewritten: bool = False
    keys: list[str] = field(default_factory=list)


def operation_receipt(service: CheckpointService, events: list[dict[str, Any]]) -> ReceiptView:
    """The receipt of the operation's terminal event (see `terminal_receipt`)."""
    return terminal_receipt(service, events, OPERATION_TERMINAL)


def instance_receipt(service: CheckpointService, events: list[dict[str, Any]]) -> ReceiptView:
    """The receipt of the instance's terminal event (see `terminal_receipt`)."""
    return terminal_receipt(service, events, INSTANCE_TERMINAL)


def terminal_receipt(
    service: CheckpointService, events: list[dict[str, Any]], terminal: frozenset[str]
) -> ReceiptView:
    """The receipt of the stream's terminal event, checked with ``verify_receipt`` (the
    offline verifier ``blackops verify-receipt`` runs) against this server's keys."""
    view = ReceiptView()
    try:
        view.position = terminal_position(events, terminal)
        view.receipt = receipt_for(service, view.position)
    except BlackOpsError as error:
        view.problem, view.rewritten = error.message, error.code == "journal_rewritten"
        return view
    keys = verifier_keys(service)
    view.keys = [key.encode() for key in keys]
    try:
        checkpoint = verify_receipt(view.receipt, keys)
    except ReceiptError as error:
        view.problem = f"{error.code}: {error}"
        return view
    view.verified, view.tree_size = True, checkpoint.size
    return view


@dataclass
class CheckpointRow:
    position: int
    at: str
    size: int
    root: str
    note: str
    signature_ok: bool
    consistent: bool | None  # with the previous row; None for the first
    matches_tree: bool


def checkpoint_history(
    service: CheckpointService, limit: int = 50, *, keys: list[VerifierKey] | None = None
) -> list[CheckpointRow]:
    """The journaled checkpoints (newest first, at most ``limit``), as the service keeps them
    (decisions U19): each one's signature checked (with ``keys``, by default
    `verifier_keys`), its root against the tree the server holds, and the consistency proof
    from the one before it verified."""
    keys = verifier_keys(service) if keys is None else keys
    tree = service.synced_tree()
    rows: list[CheckpointRow] = []
    previous: tuple[int, bytes] | None = None
    for event in service.recent(limit + 1):
        note = str(event.data["note"])
        try:
            checkpoint = open_checkpoint(note, keys)
            signed = True
            size, root = checkpoint.size, checkpoint.root
        except ReceiptError:
            signed = False
            size = int(event.data.get("tree_size", 0))
            root = bytes.fromhex(str(event.data.get("root", "")))
        if size == 0:  # a signer's first checkpoint of an empty journal
            matches = root == EMPTY_ROOT
        else:
            matches = 0 < size <= tree.size and tree.root(size) == root
        consistent: bool | None = None
        # From the empty tree there is nothing to prove (RFC 9162 has no such proof); asking
        # for one raised, and the page answered 500 (found by a defect hunt, stop 35).
        if previous is not None and previous[0] > 0 and matches:
            old_size, old_root = previous
            proof = tree.consistency(old_size, size) if old_size < size else []
            consistent = verify_consistency(old_size, size, old_root, root, proof)
        encoded = base64.b64encode(root).decode()
        row = CheckpointRow(event.position, event.at, size, encoded, note, signed, consistent,
                            matches)  # fmt: skip
        rows.append(row)
        previous = (size, root)
    return list(reversed(rows[-limit:]))


def exports(app: Application, who: Caller, limit: int = 20) -> list[dict[str, Any]]:
    """The journaled exports (chain of custody) the caller may know of, newest first:
    every one for a system principal, else those of its Spaces (the record's ``space``; it
    was read from the output's name, which a whole-journal export to a file named
    "... (space S)" matched too: found by a defect hunt, stop 36)."""
    found = []
    for event in app.store.read_topics(["journal.exported"]):
        if not who.principal.system:
            space = event.data.get("space")
            if type(space) is not str or who.principal.role_in(space) is None:
                continue
        found.append({"position": event.position, "at": event.at,
                      "actor": event.context.get("actor"), **event.data})  # fmt: skip
    return list(reversed(found[-limit:]))


#: Positions read back, at most, for a Space's latest lines (there is no per-Space index,
#: F168): a quiet Space's lines further back are left to the live tail and the exports.
RECENT_LOOK_BACK: Final = 20_000
_RECENT_WINDOW: Final = 500


def recent_lines(
    app: Application, space: str | None, last: int, limit: int = 20
) -> list[dict[str, Any]]:
    """The last ``limit`` lines of the journal up to position ``last`` (of ``space`` only,
    if given), read back a window at a time among the `RECENT_LOOK_BACK` positions up to
    it: the live tail starts after ``last``, so no line falls between. (Only the 500 up
    to it were read: a quiet Space's page listed nothing; found by a defect hunt.)"""
    kept: list[tuple[int, bytes]] = []
    end = last
    while end > 0 and len(kept) < limit and last - end < RECENT_LOOK_BACK:
        start = max(0, end - _RECENT_WINDOW)
        found: list[tuple[int, bytes]] = []
        at = start
        while at < end:  # a window in pages of bounded bytes, keeping only its last lines
            page = list(observed_lines(app.store, at, _RECENT_WINDOW, until=end,
                                       max_bytes=PAGE_BYTES))  # fmt: skip
            if not page:
                break
            found += [(p, line) for p, line in page if space is None or tenant_of(line) == space]
            found, at = found[-limit:], page[-1][0]
        kept = [*found, *kept][-limit:]
        end = start
    rows = []
    for position, line in kept[-limit:]:
        event = event_of(line) or {}  # tolerant of a line deeper than orjson reads
        rows.append({"position": position, "type": event.get("type"), "at": event.get("at"),
                     "stream": event.get("stream"),
                     "tenant": tenant_of(line)})  # fmt: skip
    return rows


@dataclass
class Step:
    """One step of an instance as its events tell it."""

    name: str
    kind: str
    status: str = "started"
    events: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    retries: list[dict[str, Any]] = field(default_factory=list)
    event_consumed: Any = None
    config: Any = None
    result: Any = None
    error: Any = None
    due_at: Any = None


def _seconds(at: str, data: Any) -> float | None:
    """The retry delay: from the event's instant to the retry's ``due_at``, in seconds."""
    try:
        start = datetime.fromisoformat(at.replace("Z", "+00:00"))
        due = datetime.fromisoformat(str(data.get("due_at")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return round((due - start).total_seconds(), 6)


def step_history(events: list[Any]) -> tuple[list[Step], list[Any]]:
    """(the steps in first-seen order, every event) of an instance's stream events."""
    steps: dict[str, Step] = {}
    for event in events:
        data = event.data
        if not event.type.startswith("workflow.step_"):
            continue
        name = str(data.get("name"))
        kind = str(data.get("kind", "?"))
        step = steps.setdefault(name, Step(name, STEP_KINDS.get(kind, kind)))
        step.events.append({"position": event.position, "type": event.type, "at": event.at})
        step.config = data.get("config", step.config)
        if event.type == "workflow.step_completed":
            step.status = str(data.get("outcome", "completed"))
            # A failed step's failed_attempts already counts its final try (DW-DO-4); a
            # succeeded one's counts only the tries before the one that succeeded.
            succeeded = step.kind == "do" and step.status == "succeeded"
            step.attempts = int(data.get("failed_attempts", 0)) + succeeded
            step.result = data.get("result")
            step.error = data.get("error")
            if "event" in data:
                step.event_consumed = data["event"]
        elif event.type == "workflow.step_retry_scheduled":
            step.status = "retry scheduled"
            step.retries.append({**data, "at": event.at, "delay": _seconds(event.at, data)})
            step.attempts = max(step.attempts, int(data.get("attempt", len(step.retries))))
        elif event.type == "workflow.step_suspended":
            step.status = "sleeping" if step.kind == "sleep" else "waiting"
            step.due_at = data.get("due_at")
    if any(event.type in INSTANCE_TERMINAL for event in events):
        # A step the instance ended during (a terminate, say) waits for nothing now: it
        # was shown "waiting · until ..." for ever (found by a defect hunt, stop 36).
        for step in steps.values():
            if step.status in ("sleeping", "waiting", "retry scheduled"):
                step.status, step.due_at = "unfinished", None  # the page says the instance ended
    return list(steps.values()), events
