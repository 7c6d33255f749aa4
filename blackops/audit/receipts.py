"""Receipts for events: the event's Observed line, its leaf index and a tlog-proof@v1 text
whose audit path leads to a signed checkpoint that covers it (``replay/receipts.py`` has the
format and the offline verifier)."""

from __future__ import annotations

from typing import Any

from blackops.audit.checkpoints import CheckpointService, JournalRewritten
from domain.errors import NotFound
from journal.leaves import leaf_hash
from replay.observed import observed_line
from replay.receipts import TlogProof

OPERATION_TERMINAL = frozenset(
    {"operation.completed", "operation.rejected", "operation.failed", "operation.dead_lettered"}
)
INSTANCE_TERMINAL = frozenset({"workflow.completed", "workflow.errored", "workflow.terminated"})


def receipt_for(service: CheckpointService, position: int) -> dict[str, Any]:
    """The receipt of the event at ``position`` (``not_found`` if no event is there)."""
    rows = service.store.read_raw_after(position - 1, 1) if position > 0 else []
    if not rows or rows[0].id != position:
        raise NotFound(f"no event at position {position}")
    entry = observed_line(rows[0])[:-1]
    tree = service.synced_tree()
    index = tree.index_of(position)
    if index is None or tree.leaf(index) != leaf_hash(entry):
        raise JournalRewritten(f"position {position}: the event differs from its recorded leaf")
    note, checkpoint = service.covering(index)
    if tree.root(checkpoint.size) != checkpoint.root:
        raise JournalRewritten(
            f"the journal no longer has the root signed at size {checkpoint.size}"
        )
    path = tuple(tree.inclusion(index, checkpoint.size))
    proof = TlogProof(index=index, path=path, checkpoint=service.with_cosignatures(note))
    return {"entry": entry.decode("utf-8"), "index": index, "proof": proof.text()}


def terminal_position(events: list[dict[str, Any]], terminal: frozenset[str]) -> int:
    """The position of the terminal event among an aggregate's events (Observed shape)."""
    for event in reversed(events):
        if event["type"] in terminal:
            return int(event["position"])
    if events and str(events[-1]["type"]).endswith(".purged"):
        at = int(events[-1]["position"])
        raise NotFound(
            f"it was purged: its terminal event is no longer in the journal (the tombstone "
            f"at position {at} has a receipt: ask for that position)"
        )
    raise NotFound("it has no terminal event yet: a receipt names a terminal event")
