"""Group commit: many writers' appends in one transaction, each acknowledged by its own.

Deferred attempts and workflow contexts both commit through :func:`commit_group`: a
worker turn's claims, step results and attempt ends go to the journal together, and an
item whose stream moved (a lost race) is dropped without failing the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from domain.errors import BackendUnavailable, BlackOpsError, FencingError
from journal.store import Append, EventStore

T = TypeVar("T")
log = logging.getLogger("blackops.journal")


#: How often one item's append is moved past other writers' harmless events per commit.
MAX_REBASES = 5


def commit_group(
    store: EventStore,
    group: list[tuple[list[Append], T]],
    on_refused: Callable[[T], None] | None = None,
    rebase: Callable[[Append, T], Append | None] | None = None,
) -> list[T]:
    """Append every item's streams in one transaction; drop items that lost a race.

    Returns the payloads of the items that were committed. ``backend_unavailable``
    propagates (the caller retries the same appends). Any other refusal would fail the
    whole group for ever, so the group is committed item by item instead and an item the
    journal refuses is dropped and handed to ``on_refused`` (its attempt is abandoned,
    and its lease ends like a crashed worker's, bounded by P23).

    ``rebase(append, payload)``: for an append refused because its stream moved, the same
    events at the stream's version now when what moved it cannot have made them wrong (an
    operation's hold), else None (the item is dropped); it may update the payload's own
    idea of the version. The item's list is updated in place, so a caller retrying after
    ``backend_unavailable`` retries the rebased append.
    """
    pending = [item for item in group if any(a.events for a in item[0])]
    rebases: dict[str, int] = {}  # per stream: a group may hold many held operations
    while pending:
        try:
            store.append(*(a for appends, _ in pending for a in appends))
        except FencingError as refused:
            moved = rebases.get(refused.stream, 0)
            if rebase is not None and moved < MAX_REBASES and _rebased(pending, refused, rebase):
                rebases[refused.stream] = moved + 1
                continue
            keep = [i for i in pending if all(a.stream != refused.stream for a in i[0])]
            if len(keep) == len(pending):
                raise
            if on_refused is not None:  # its attempt is never ended by us (a lost race)
                for appends, payload in pending:
                    if any(a.stream == refused.stream for a in appends):
                        on_refused(payload)
            pending = keep
            continue
        except BackendUnavailable:
            raise
        except BlackOpsError as refused:
            if len(pending) == 1:
                log.error("journal refused %s: %s", pending[0][1], refused)
                if on_refused is not None:
                    on_refused(pending[0][1])
                return []
            return [p for item in pending for p in commit_group(store, [item], on_refused, rebase)]
        return [payload for _, payload in pending]
    return []


def _rebased(
    pending: list[tuple[list[Append], T]],
    refused: FencingError,
    rebase: Callable[[Append, T], Append | None],
) -> bool:
    """Replace the refused stream's append by its rebase; False if there is none."""
    for appends, payload in pending:
        for index, append in enumerate(appends):
            if append.stream == refused.stream:
                moved = rebase(append, payload)
                if moved is None:
                    return False
                appends[index] = moved
                return True
    return False
