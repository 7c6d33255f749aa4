"""The PostgreSQL append as one server-side function, called in one autocommitted statement.

``blackops_append_v<VERSION>`` does what the append's pipeline of nine statements did, in
the same order and in one transaction (decisions F120-F122): the transaction's lock wait,
the gap check and the fresh-stream check (before the lock), ``LOCK TABLE ... IN EXCLUSIVE
MODE``, the wake-up NOTIFY, the insert with its Merkle leaves (journal/leaves.py, built in
SQL by exactly the expression the pipeline used) and the due-work index's tracked
position, then the due-work and retention rows, each found by its key, with exactly the
meaning of ``WorkTables.apply`` and ``RetentionTables.apply``. It returns the positions in input
order. A refusal raises ``GAP_OR_RESTART``; any error rolls everything back.

The function is created when a store opens, never replaced: a change to its body is a new
``VERSION`` (a new name), so processes of two releases appending to one journal each call
their own, and an open never rewrites a catalog row another session may be using.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import orjson
from eventsourcing.persistence import DataError
from psycopg.sql import SQL, Composed, Identifier, Literal

from journal.retention_sql import UPDATE_COLUMNS, update_values
from journal.work_index import RowChange

VERSION = 1
NAME = f"blackops_append_v{VERSION}"
#: SQLSTATE of a refused append (class 23, integrity constraint violation): a predecessor
#: is missing (a gap) or a stream it starts already has rows (a restart).
GAP_OR_RESTART = "23G01"
GAP_MESSAGE = "an append would leave a gap or restart a stream"

#: The parameters, in order, with their SQL types (the call casts each one: psycopg picks
#: int2/int4/int8 by value and cannot type a list of None).
PARAMETERS: tuple[tuple[str, str], ...] = (
    ("streams", "text[]"),
    ("versions", "bigint[]"),
    ("topics", "text[]"),
    ("states", "bytea[]"),
    ("needed_streams", "text[]"),  # predecessors that must exist (NULL: none)
    ("needed_versions", "bigint[]"),
    ("fresh", "text[]"),  # streams this append starts (NULL: none)
    ("wake", "text"),  # the NOTIFY payload (NULL: no waking topic)
    ("lock_wait", "text"),  # lock_timeout for this transaction, e.g. '30s'
    # The due-work and retention indexes' net changes, each a JSON array of rows (NULL:
    # none). JSON, not an array per column: psycopg dumps each list in Python (~10 µs a
    # list, 19 lists), orjson one document in ~1 µs (decisions F121).
    ("work", "json"),
    ("kept", "json"),
)

#: The Merkle leaf of each inserted row (``ins``), byte for byte journal/leaves.py's
#: ``event_leaf``: SHA-256 of 0x00 and the stored state with its closing brace replaced by
#: position, stream, type and version (names are JSON-safe, so no escaping is needed).
LEAF = (
    "sha256('\\x00'::bytea "
    "|| substring(state from 1 for octet_length(state) - 1) "
    "|| convert_to(',\"position\":' || notification_id::text "
    '|| \',"stream":"\' || originator_id::text '
    '|| \'","type":"\' || topic '
    "|| '\",\"version\":' || originator_version::text || '}', 'UTF8'))"
)

#: The checks, run before the lock (tests/journal/test_append_plans.py reads their plans,
#: planned generically). The version an append follows must exist (no gap): one
#: predecessor is a primary-key probe, several are joined with the arrays. A predecessor
#: disappears only in a retention purge, which appends a tombstone (a later version) first,
#: so an append racing it meets the primary key: staleness is the key's job. A stream the
#: append starts must have no rows at all (a purged history keeps its tombstone), or
#: version 1 of a purged stream could be written again: a count, never NOT EXISTS, which
#: planned generically expects to meet a row soon and scans the events table (F94).
GAP_ONE = (
    "EXISTS (SELECT 1 FROM {events} "
    "WHERE originator_id = needed_streams[1] AND originator_version = needed_versions[1])"
)
GAP_MANY = (
    "(SELECT count(*) FROM {events} AS t "
    "JOIN unnest(needed_streams, needed_versions) AS p(id, v) "
    "ON t.originator_id = p.id AND t.originator_version = p.v) = cardinality(needed_streams)"
)
FRESH = "(SELECT count(*) FROM {events} WHERE originator_id = ANY(fresh)) = 0"

_REFUSE = f"RAISE EXCEPTION USING ERRCODE = '{GAP_OR_RESTART}', MESSAGE = '{GAP_MESSAGE}';"

_BODY = f"""
DECLARE
    positions bigint[];
    w record;
    k record;
BEGIN
    -- SET LOCAL: this transaction only. The statement runs from its first check to its
    -- commit without waiting on the client, so no idle-in-transaction limit is needed.
    PERFORM set_config('lock_timeout', lock_wait, true);
    IF cardinality(needed_streams) = 1 THEN
        IF NOT {GAP_ONE} THEN
            {_REFUSE}
        END IF;
    ELSIF cardinality(needed_streams) > 1 THEN
        IF NOT {GAP_MANY} THEN
            {_REFUSE}
        END IF;
    END IF;
    IF fresh IS NOT NULL THEN
        IF NOT {FRESH} THEN
            {_REFUSE}
        END IF;
    END IF;
    -- Every writer takes this lock: positions are committed in order, without gaps.
    LOCK TABLE {{events}} IN EXCLUSIVE MODE;
    IF wake IS NOT NULL THEN
        PERFORM pg_notify({{channel}}, wake);
    END IF;
    -- Rows come back in position order, which is the order they were given in (the lock
    -- makes this transaction's positions one run, taken row by row).
    WITH ins AS (
        INSERT INTO {{events}} AS t (originator_id, originator_version, topic, state)
        SELECT r.originator_id, r.originator_version, r.topic, r.state
        FROM unnest(streams, versions, topics, states)
            AS r(originator_id, originator_version, topic, state)
        RETURNING t.notification_id, t.originator_id, t.originator_version, t.topic, t.state
    ), leaves AS (
        INSERT INTO {{leaves}} (position, leaf)
        SELECT notification_id, {LEAF} FROM ins
    ), tracked AS (
        INSERT INTO {{positions}} (name, position)
        SELECT {{tracked}}, max(notification_id) FROM ins
        ON CONFLICT (name) DO UPDATE SET position = excluded.position
    )
    SELECT array_agg(notification_id ORDER BY notification_id) INTO positions FROM ins;

    -- WorkTables.apply: deletes, then creations (an upsert), then updates of rows neither
    -- created nor deleted here; each operation id appears once. A delete or an update is
    -- one statement per row on the primary key, as the row-by-row statements were: joined
    -- with the document instead, planned generically, the planner expects 100 rows from
    -- it and scans a mid-sized table (seen at 2,000 and 20,000 rows).
    IF work IS NOT NULL THEN
        FOR w IN SELECT * FROM json_to_recordset(work) AS r(operation_id text, doomed boolean)
        LOOP
            IF w.doomed THEN
                DELETE FROM {{due}} WHERE operation_id = w.operation_id;
            END IF;
        END LOOP;
        INSERT INTO {{due}}
            (operation_id, operation_type, tenant, due_at, fencing_token, worker)
        SELECT r.operation_id, r.operation_type, r.tenant, r.due_at, r.fencing_token, r.worker
        FROM json_to_recordset(work) AS r(operation_id text, created boolean,
            operation_type text, tenant text, due_at bigint, fencing_token bigint, worker text)
        WHERE r.created
        ON CONFLICT (operation_id) DO UPDATE SET due_at = excluded.due_at,
            fencing_token = excluded.fencing_token, worker = excluded.worker;
        FOR w IN SELECT * FROM json_to_recordset(work) AS r(operation_id text,
            created boolean, doomed boolean, due_at bigint, fencing_token bigint,
            set_worker boolean, worker text)
        LOOP
            IF NOT w.created AND NOT w.doomed THEN
                UPDATE {{due}} SET due_at = w.due_at,
                    fencing_token = COALESCE(w.fencing_token, fencing_token),
                    worker = CASE WHEN w.set_worker THEN w.worker ELSE worker END
                WHERE operation_id = w.operation_id;
            END IF;
        END LOOP;
    END IF;

    -- RetentionTables.apply: every row exists (an insert that probes the key), then each
    -- given column is set, one row at a time on the key (as above).
    IF kept IS NOT NULL THEN
        INSERT INTO {{retention}} (operation_id)
        SELECT r.operation_id FROM json_to_recordset(kept) AS r(operation_id text)
        ON CONFLICT (operation_id) DO NOTHING;
        FOR k IN SELECT * FROM json_to_recordset(kept) AS r(operation_id text,
            operation_type text, terminal_at text, terminal_us bigint, completed_at text,
            completed_us bigint, held integer, outcome integer, purged integer, pending integer)
        LOOP
            UPDATE {{retention}} SET
                operation_type = COALESCE(k.operation_type, operation_type),
                terminal_at = COALESCE(k.terminal_at, terminal_at),
                terminal_us = COALESCE(k.terminal_us, terminal_us),
                completed_at = COALESCE(k.completed_at, completed_at),
                completed_us = COALESCE(k.completed_us, completed_us),
                held = COALESCE(k.held, held),
                outcome = COALESCE(k.outcome, outcome),
                purged = COALESCE(k.purged, purged),
                pending = COALESCE(k.pending, pending)
            WHERE operation_id = k.operation_id;
        END LOOP;
    END IF;
    RETURN positions;
END
"""


class Tables(NamedTuple):
    """Where the function writes: the schema, the tables' names in it and the NOTIFY
    channel (our own literals, never user text)."""

    schema: str
    events: str  # the events table's name in ``schema``
    leaves: str
    positions: str
    due: str
    retention: str
    channel: str  # the schema's work channel (NOTIFY)
    tracked: str  # the due-work index's name in ``positions``


def _table(schema: str, name: str) -> Composed:
    return SQL("{}.{}").format(Identifier(schema), Identifier(name))


def qualified(schema: str, name: str) -> str:
    """``"schema"."name"``: a table or function of one journal's schema."""
    return _table(schema, name).as_string()


def signature(parameters: tuple[tuple[str, str], ...]) -> str:
    """A function's parameter list: ``name type, ...``."""
    return ", ".join(f"{name} {kind}" for name, kind in parameters)


def casts(parameters: tuple[tuple[str, str], ...], placeholder: str = "%s") -> str:
    """A call's arguments, each placeholder cast to its parameter's type (psycopg picks
    int2/int4/int8 by value and cannot type a list of None)."""
    return ", ".join(f"{placeholder}::{kind}" for _, kind in parameters)


def body(tables: Tables) -> str:
    """The function's PL/pgSQL body for one schema."""
    names = {
        name: _table(tables.schema, getattr(tables, name)).as_string()
        for name in ("events", "leaves", "positions", "due", "retention")
    }
    names["channel"] = Literal(tables.channel).as_string()
    names["tracked"] = Literal(tables.tracked).as_string()
    text = _BODY
    for name, value in names.items():  # not str.format: the leaf expression holds a brace
        text = text.replace("{" + name + "}", value)
    return text


def create_statement(tables: Tables) -> str:
    """``CREATE FUNCTION`` (not OR REPLACE: see the module's docstring)."""
    return (
        f"CREATE FUNCTION {qualified(tables.schema, NAME)}({signature(PARAMETERS)}) "
        f"RETURNS bigint[] LANGUAGE plpgsql AS $append$\n{body(tables)}$append$"
    )


def call_statement(schema: str) -> str:
    """The call: one autocommitted statement is the append's whole transaction."""
    return f"SELECT {qualified(schema, NAME)}({casts(PARAMETERS, '%b')}) AS positions"


class Checks(NamedTuple):
    needed_streams: list[str] | None
    needed_versions: list[int] | None
    fresh: list[str] | None


def checks(needed: Iterable[tuple[str, int]], fresh: Iterable[str]) -> Checks:
    """The gap and fresh-stream checks' arguments (journal/backend_common.py)."""
    needed = list(needed)
    streams, versions = [s for s, _ in needed], [v for _, v in needed]
    return Checks(streams or None, versions or None, list(fresh) or None)


def work_rows(changes: Sequence[RowChange]) -> str | None:
    """The due-work changes as the function's ``work`` document (NULL when none)."""
    if not changes:
        return None
    return _json(
        [
            {
                "operation_id": c.operation_id,
                "created": c.create is not None,
                "operation_type": _text(None if c.create is None else c.create[0]),
                "tenant": _text(None if c.create is None else c.create[1]),
                "due_at": c.due_at,
                "fencing_token": c.fencing_token,
                "set_worker": c.set_worker,
                "worker": _text(c.worker),
                "doomed": c.delete,
            }
            for c in changes
        ]
    )


def retention_rows(kept: dict[str, dict[str, Any]]) -> str | None:
    """The retention changes as the function's ``kept`` document (NULL when none)."""
    if not kept:
        return None
    rows = []
    for operation_id, change in kept.items():
        row = dict(zip(UPDATE_COLUMNS, update_values(change), strict=True))
        for name in ("operation_type", "terminal_at", "completed_at"):
            _text(row[name])
        row["operation_id"] = operation_id
        rows.append(row)
    return _json(rows)


def _text(value: Any) -> Any:
    """A text column's value: another type is refused, as the row-by-row statements
    refused it (JSON would quietly turn a number into text)."""
    if value is not None and type(value) is not str:
        raise DataError(f"a text column of the journal's indexes got {type(value).__name__}")
    return value


def _json(rows: list[dict[str, Any]]) -> str:
    try:
        return orjson.dumps(rows).decode()
    except TypeError as error:  # an integer beyond 64 bits: no bigint holds it either
        raise DataError(str(error)) from None
