"""Reads by event type through a topic index on the events table (both SQL backends).

The resource listings (Spaces, principals, Workers, Versions, Workflows), the tombstone
reads of purge and verify and the checkpoint reads all ask for the few events of one or
two types. Without an index each such read scanned the whole journal. The index is the
database's own, so the append's transaction keeps it exactly as current as the rows, and
``CREATE INDEX IF NOT EXISTS`` on open builds it for a journal written before it existed
(its presence is its marker; decisions F50).

Each topic is read as its own index range, ``topic = ? AND position > ? ORDER BY
position LIMIT ?``, and the ranges are merged by position: a shape every planner answers
from the index alone, however common the topics are, and whatever plan a prepared
statement settles on (``topic IN (...)`` let PostgreSQL's generic plan walk the position
index instead).
"""

from __future__ import annotations

INDEX = "blackops_events_topic"


def create_index(table: str, *, sqlite: bool) -> str:
    """The index: SQLite's rowid (the position) is in every index of a rowid table."""
    if sqlite:
        return f"CREATE INDEX IF NOT EXISTS {INDEX} ON {table} (topic)"
    return f"CREATE INDEX IF NOT EXISTS {INDEX} ON {table} (topic, notification_id)"


def select_topics(table: str, count: int, *, sqlite: bool) -> str:
    """Events of ``count`` topics after a position, by position, at most a limit.

    Parameters: for each topic ``(topic, after, limit)``, then ``limit`` once more.
    """
    position = "rowid" if sqlite else "notification_id"
    mark = "?" if sqlite else "%s"
    hint = f" INDEXED BY {INDEX}" if sqlite else ""
    one = (
        f"SELECT * FROM (SELECT {position} AS position, originator_id, originator_version, "
        f"topic, state FROM {table}{hint} WHERE topic = {mark} AND {position} > {mark} "
        f"ORDER BY {position} LIMIT {mark}) AS t{{n}}"
    )
    ranges = " UNION ALL ".join(one.format(n=n) for n in range(count))
    return f"SELECT * FROM ({ranges}) AS merged ORDER BY position LIMIT {mark}"


def parameters(topics: list[str], after: int, limit: int) -> list[object]:
    return [*(v for topic in topics for v in (topic, after, limit)), limit]
