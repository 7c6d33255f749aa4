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


def commit_group(
    store: EventStore,
    group: list[tuple[list[Append], T]],
    on_refused: Callable[[T], None] | None = None,
) -> list[T]:
    """Append every item's streams in one transaction; drop items that lost a race.

    Returns the payloads of the items that were committed. ``backend_unavailable``
    propagates (the caller retries the same appends). Any other refusal would fail the
    whole group for ever, so the group is committed item by item instead and an item the
    journal refuses is dropped and handed to ``on_refused`` (its attempt is abandoned,
    and its lease ends like a crashed worker's, bounded by P23).
    """
    pending = [item for item in group if any(a.events for a in item[0])]
    while pending:
        try:
            store.append(*(a for appends, _ in pending for a in appends))
        except FencingError as refused:
            keep = [i for i in pending if all(a.stream != refused.stream for a in i[0])]
            if len(keep) == len(pending):
                raise
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
            return [p for item in pending for p in commit_group(store, [item], on_refused)]
        return [payload for _, payload in pending]
    return []
