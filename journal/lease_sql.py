"""A worker's leases on PostgreSQL as server-side functions, one round trip each.

``blackops_reserve_v1`` reserves due rows: the earliest due rows of the worker's types not
locked by another reservation, held for it (decisions F161). ``blackops_reserve_streams_v1``
(Deferred operations) reserves the same way and reads the reserved streams (journal/work_sql.py's
statement); ``blackops_reserve_tails_v2`` (workflow instances) reads them from their
snapshots on (journal/snapshot_sql.py's). A reservation commits without waiting for the
WAL flush: it is a hint, and one lost in a crash is a row due again at once (decisions F9,
F91, F161). ``blackops_renew_leases_v1`` extends the
leases a worker still holds, one primary-key update per lease as ``WorkTables.renew`` does,
in the order given. One autocommitted call is each one's whole transaction: no BEGIN, SET
LOCAL and COMMIT round trips around it (decisions F124). Created on open and never
replaced, as the append function (journal/append_sql.py): a changed body is a new name.
"""

from __future__ import annotations

from psycopg.sql import Composed

from journal.append_sql import casts, qualified, signature
from journal.work_sql import due_candidates

RESERVE_IDS = "blackops_reserve_v1"
RESERVE = "blackops_reserve_tails_v2"
RESERVE_STREAMS = "blackops_reserve_streams_v1"
RENEW = "blackops_renew_leases_v1"

#: The reservation functions' parameters.
RESERVE_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("hold_until", "bigint"),
    ("holder", "text"),
    ("due_by", "bigint"),
    ("wanted_types", "text[]"),
    ("most", "integer"),
)
#: What ``SnapshotTables.tail_columns`` reads, typed, in its order (journal/snapshot_sql.py
#: ``tails`` reads them by place).
TAIL_COLUMNS = (
    "event_position bigint, event_stream text, event_version bigint, event_topic text, "
    "event_state bytea, snapshot_position bigint, snapshot_digest text, snapshot_body bytea"
)
#: What ``blackops_reserve_streams_v1`` returns: the events' columns, by their names.
STREAM_COLUMNS = (
    "notification_id bigint, originator_id text, originator_version bigint, topic text, state bytea"
)
RENEW_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("ids", "text[]"),
    ("tokens", "bigint[]"),
    ("holder", "text"),
    ("now_us", "bigint"),
    ("hold_until", "bigint"),
)


#: A session plans a function's statements once and keeps the plans (generic ones after a
#: few calls): planned while few rows were due, reading all of them (a sequential or
#: bitmap scan, then a sort) was cheapest, and stayed the plan while the backlog grew
#: (3-5 ms a reservation after 10 s of steady load, against 0.45 in a fresh session).
#: Every statement of a reservation has a key or an ordered index range to go by, so
#: those scans are off for the call.
_PLANNED = "SET enable_seqscan = off SET enable_bitmapscan = off"


def _reserving(due: str) -> tuple[str, str]:
    """The declarations and statements that reserve due rows of ``due`` and leave their
    ids in ``reserved`` (the body every reservation function starts with).

    The ``most`` earliest due rows of ``wanted_types`` not locked by another reservation,
    held for ``holder`` until ``hold_until``. Candidates are found without locks
    (journal/work_sql.py's ``due_candidates``), then what can be of them is locked by key
    (``SKIP LOCKED``, their ``due_at`` checked again per row): only the rows taken are
    locked (locking each type's earliest rows as they were read held up to ``most`` rows
    per type for the call, and kept a reservation beside it off rows nobody took). When
    some candidates were passed over (held by another reservation, or moved on), the next
    candidates past all those seen are looked at, until enough are taken or none is left:
    what the single statement before F161 took, ``SKIP LOCKED`` going on past locked
    rows. The hold is one update by key.
    """
    declarations = (
        "    reserved text[] := '{}';\n"
        "    seen text[] := '{}';\n"
        "    candidates text[];\n"
        "    taken text[];\n"
        "    need integer := greatest(coalesce(most, 0), 0);\n"
    )
    statements = (
        "    PERFORM set_config('synchronous_commit', 'off', true);  -- SET LOCAL\n"
        "    WHILE need > 0 LOOP\n"
        f"        candidates := ARRAY({due_candidates(due)});\n"
        "        EXIT WHEN cardinality(candidates) = 0;\n"
        # Locked by key; ``due_at + 0``: checked on each row, never an index range (a
        # plan made while the table was small ranged over every due row of the due_at
        # index, and kept doing so as the backlog grew).
        "        taken := ARRAY(SELECT d.operation_id "
        f"FROM {due} AS d WHERE d.operation_id = ANY(candidates) AND d.due_at + 0 <= due_by "
        "FOR UPDATE SKIP LOCKED);\n"
        "        reserved := reserved || taken;\n"
        # Every candidate taken: there were enough, or no more are due.
        "        EXIT WHEN cardinality(taken) = cardinality(candidates);\n"
        "        seen := seen || candidates;\n"
        "        need := need - cardinality(taken);\n"
        "    END LOOP;\n"
        f"    UPDATE {due} SET due_at = hold_until, worker = holder "
        "WHERE operation_id = ANY(reserved);\n"
    )
    return declarations, statements


def reserve_ids_create_statement(schema: str, due: str) -> str:
    """``blackops_reserve_v1``: the ids of the due rows it reserved (``_reserving``)."""
    return _reservation(schema, RESERVE_IDS, due, "text[]", "    RETURN reserved;\n")


def reserve_create_statement(
    schema: str, due: str, statement: str, name: str = RESERVE, columns: str = TAIL_COLUMNS
) -> str:
    """A reservation that reads what it reserved (``_reserving``): ``statement`` reads the
    streams of ``reserved``."""
    return _reservation(
        schema,
        name,
        due,
        f"TABLE ({columns})",
        f"    RETURN QUERY {statement};\n",
        # The output columns are variables too; in the statement a name is the column's.
        "#variable_conflict use_column\n",
    )


def _reservation(
    schema: str, name: str, due: str, returns: str, ending: str, options: str = ""
) -> str:
    """A function that reserves (``_reserving``), then ends with ``ending``."""
    declarations, statements = _reserving(due)
    return (
        f"CREATE FUNCTION {qualified(schema, name)}({signature(RESERVE_PARAMETERS)}) "
        f"RETURNS {returns} LANGUAGE plpgsql {_PLANNED} AS $reserve$\n"
        f"{options}DECLARE\n{declarations}BEGIN\n{statements}{ending}END\n$reserve$"
    )


def renew_create_statement(schema: str, due: Composed | str) -> str:
    """``due``: the due-work table, schema-qualified."""
    return (
        f"CREATE FUNCTION {qualified(schema, RENEW)}({signature(RENEW_PARAMETERS)}) "
        "RETURNS SETOF text LANGUAGE plpgsql AS $renew$\n"
        "DECLARE\n"
        "    n integer;\n"
        "    renewed text;\n"
        "BEGIN\n"
        # One statement per lease on the key (a join with the arrays, planned generically,
        # took a range of the due_at index on a small table), in the order given.
        "    FOR n IN 1 .. coalesce(cardinality(ids), 0) LOOP\n"
        f"        UPDATE {due} SET due_at = hold_until WHERE operation_id = ids[n]\n"
        "            AND fencing_token = tokens[n] AND worker = holder AND due_at > now_us\n"
        "            RETURNING operation_id INTO renewed;\n"
        "        IF FOUND THEN\n"
        "            RETURN NEXT renewed;\n"
        "        END IF;\n"
        "    END LOOP;\n"
        "END\n$renew$"
    )


def reserve_ids_call_statement(schema: str) -> str:
    return f"SELECT {qualified(schema, RESERVE_IDS)}({casts(RESERVE_PARAMETERS)}) AS reserved"


def reserve_call_statement(schema: str, name: str = RESERVE) -> str:
    return f"SELECT * FROM {qualified(schema, name)}({casts(RESERVE_PARAMETERS)})"


def renew_call_statement(schema: str) -> str:
    return f"SELECT renewed FROM {qualified(schema, RENEW)}({casts(RENEW_PARAMETERS)}) AS renewed"
