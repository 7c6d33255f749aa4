"""A worker's leases on PostgreSQL as server-side functions, one round trip each.

``blackops_reserve_tails_v1`` reserves due rows and reads their streams from their
snapshots on (journal/snapshot_sql.py's statement, unchanged), in a transaction whose
commit does not wait for the WAL flush: a reservation is a hint, and one lost in a crash is
a row due again at once (decisions F9, F91). ``blackops_renew_leases_v1`` extends the
leases a worker still holds, one primary-key update per lease as ``WorkTables.renew`` does,
in the order given. One autocommitted call is each one's whole transaction: no BEGIN, SET
LOCAL and COMMIT round trips around it (decisions F124). Created on open and never
replaced, as the append function (journal/append_sql.py): a changed body is a new name.
"""

from __future__ import annotations

from psycopg.sql import Composed

from journal.append_sql import casts, qualified, signature

RESERVE = "blackops_reserve_tails_v1"
RENEW = "blackops_renew_leases_v1"

#: The reservation statement's placeholders, in order, as the function's parameters.
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
RENEW_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("ids", "text[]"),
    ("tokens", "bigint[]"),
    ("holder", "text"),
    ("now_us", "bigint"),
    ("hold_until", "bigint"),
)


def reserve_create_statement(schema: str, reserve_tails: str) -> str:
    """``reserve_tails``: the statement, with ``%s`` for each of ``RESERVE_PARAMETERS``."""
    parts = reserve_tails.split("%s")
    if len(parts) != len(RESERVE_PARAMETERS) + 1:
        raise ValueError("the reservation statement's placeholders do not match its parameters")
    statement = parts[0] + "".join(
        name + part for (name, _), part in zip(RESERVE_PARAMETERS, parts[1:], strict=True)
    )
    return (
        f"CREATE FUNCTION {qualified(schema, RESERVE)}({signature(RESERVE_PARAMETERS)}) "
        f"RETURNS TABLE ({TAIL_COLUMNS}) LANGUAGE plpgsql AS $reserve$\n"
        # The output columns are variables too; in the statement a name is the column's.
        "#variable_conflict use_column\n"
        "BEGIN\n"
        "    PERFORM set_config('synchronous_commit', 'off', true);  -- SET LOCAL\n"
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


def reserve_call_statement(schema: str) -> str:
    return f"SELECT * FROM {qualified(schema, RESERVE)}({casts(RESERVE_PARAMETERS)})"


def renew_call_statement(schema: str) -> str:
    return f"SELECT renewed FROM {qualified(schema, RENEW)}({casts(RENEW_PARAMETERS)}) AS renewed"
