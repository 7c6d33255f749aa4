"""A worker's leases on PostgreSQL as server-side functions, one round trip each.

``blackops_reserve_streams_v1`` (Deferred operations) reserves due rows and reads their
streams (journal/work_sql.py's statement); ``blackops_reserve_tails_v2`` (workflow
instances) reads them from their snapshots on (journal/snapshot_sql.py's). Both commit
without waiting for the WAL flush: a reservation is a hint, and one lost in a crash is a
row due again at once (decisions F9, F91, F161). ``blackops_renew_leases_v1`` extends the
leases a worker still holds, one primary-key update per lease as ``WorkTables.renew`` does,
in the order given. One autocommitted call is each one's whole transaction: no BEGIN, SET
LOCAL and COMMIT round trips around it (decisions F124). Created on open and never
replaced, as the append function (journal/append_sql.py): a changed body is a new name.
"""

from __future__ import annotations

from psycopg.sql import Composed

from journal.append_sql import casts, qualified, signature
from journal.work_sql import reserved_ids

RESERVE = "blackops_reserve_tails_v2"
RESERVE_STREAMS = "blackops_reserve_streams_v1"
RENEW = "blackops_renew_leases_v1"

#: The reservation functions' parameters (their statements name them: journal/work_sql.py's
#: ``reserved_rows``).
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


def reserve_create_statement(
    schema: str, due: str, statement: str, name: str = RESERVE, columns: str = TAIL_COLUMNS
) -> str:
    """A reservation function: the due rows of ``due`` it takes (journal/work_sql.py's
    ``reserved_ids``, locked), then ``statement``, which holds them (``= ANY(reserved)``)
    and reads their streams; both name ``RESERVE_PARAMETERS``. Two statements, so that the
    hold is planned for the few ids taken (the primary key) rather than joined with the
    whole table, as one statement was planned."""
    return (
        f"CREATE FUNCTION {qualified(schema, name)}({signature(RESERVE_PARAMETERS)}) "
        f"RETURNS TABLE ({columns}) LANGUAGE plpgsql AS $reserve$\n"
        # The output columns are variables too; in the statement a name is the column's.
        "#variable_conflict use_column\n"
        "DECLARE\n"
        "    reserved text[];\n"
        "BEGIN\n"
        "    PERFORM set_config('synchronous_commit', 'off', true);  -- SET LOCAL\n"
        f"    reserved := ARRAY({reserved_ids(due)});\n"
        f"    RETURN QUERY {statement};\n"
        "END\n$reserve$"
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


def reserve_call_statement(schema: str, name: str = RESERVE) -> str:
    return f"SELECT * FROM {qualified(schema, name)}({casts(RESERVE_PARAMETERS)})"


def renew_call_statement(schema: str) -> str:
    return f"SELECT renewed FROM {qualified(schema, RENEW)}({casts(RENEW_PARAMETERS)}) AS renewed"
