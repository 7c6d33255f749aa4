"""The projections BlackOps ships, by name, and queries over them."""

from __future__ import annotations

import re
import threading
from typing import Any

from domain.access import SPACE_NAME
from domain.clock import format_instant, parse_instant
from domain.errors import InvalidRequest, NotFound
from domain.operation_types import check_operation_type
from journal.store import EventStore
from projections.framework import Projection, ProjectionRunner
from projections.instances import InstanceCounts, InstanceStatus, empty_counts, read_id
from projections.operations import STATUS_AFTER, OperationCounts, OperationStatus

SHIPPED: dict[str, type[Any]] = {
    "operation_status": OperationStatus,
    "operation_counts": OperationCounts,
    "instance_status": InstanceStatus,
    "instance_counts": InstanceCounts,
}
STATUSES = sorted(set(STATUS_AFTER.values()))


class Projections:
    """One runner per shipped projection, on one store; queries catch up first."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.runners: dict[str, ProjectionRunner] = {}
        self._creating = threading.Lock()  # concurrent first queries make one runner

    def runner(self, name: str) -> ProjectionRunner:
        if name not in SHIPPED:
            raise NotFound(f"no projection named {name!r}; there are {', '.join(sorted(SHIPPED))}")
        found = self.runners.get(name)
        if found is None:
            with self._creating:
                found = self.runners.get(name)
                if found is None:
                    projection: Projection = SHIPPED[name]()
                    found = self.runners[name] = ProjectionRunner(self.store, projection)
        return found

    def status(self) -> list[dict[str, Any]]:
        return [self.runner(name).status() for name in sorted(SHIPPED)]

    def list_operations(
        self,
        *,
        tenant: str | None = None,
        type: str | None = None,
        status: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """Operations by creation time (then id), filtered; ``next`` continues the list."""
        _check_tenant(tenant)
        _check_type(type)
        _check_status(status, STATUSES)
        _check_limit(limit)
        runner = self.runner("operation_status")
        runner.catch_up()
        where, params = ["1 = 1"], []
        for column, value in (("tenant", tenant), ("type", type), ("status", status)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        _time_range(where, params, since, until)
        columns = ["operation_id", "tenant", "type", "mode", "status", "attempt",
                   "created_at", "updated_at"]  # fmt: skip
        rows, next_cursor = _page(
            runner,
            "blackops_operation_status",
            columns,
            "operation_id",
            where,
            params,
            limit,
            cursor,
        )
        items = [
            {"operationId": r[0], "tenant": r[1], "type": r[2], "mode": r[3], "status": r[4],
             "attempt": int(r[5]), "createdAt": r[6], "updatedAt": r[7]}
            for r in rows
        ]  # fmt: skip
        return {"items": items, "next": next_cursor}

    def counts(self, tenant: str | None = None) -> dict[str, dict[str, dict[str, int]]]:
        """``{tenant: {type: {status: count}}}`` with every public status present."""
        return self.operation_counts(tenant)["counts"]  # type: ignore[no-any-return]

    def operation_counts(self, tenant: str | None = None) -> dict[str, Any]:
        """:meth:`counts` with the journal position they are as of (``observedPosition``),
        both from one snapshot."""
        _check_tenant(tenant)
        runner = self.runner("operation_counts")
        runner.catch_up()
        where, params = ("WHERE tenant = %s", (tenant,)) if tenant is not None else ("", ())
        rows, position = runner.query_as_of(
            f"SELECT tenant, type, status, count FROM {{p}}blackops_operation_counts {where}",
            params,
        )
        counts: dict[str, dict[str, dict[str, int]]] = {}
        for row_tenant, kind, status, count in rows:
            per_type = counts.setdefault(row_tenant, {}).setdefault(
                kind, dict.fromkeys(STATUSES, 0)
            )
            per_type[status] = int(count)
        return {"counts": counts, "observedPosition": position}

    def instance_counts(self, workflow: str, space: str) -> dict[str, Any]:
        """``instanceCounts`` of one workflow of ``space`` (all seven statuses, DW-OBS-1) and
        the journal position they are as of (``observedPosition``), from one snapshot."""
        runner = self.runner("instance_counts")
        runner.catch_up()
        rows, position = runner.query_as_of(
            "SELECT status, count FROM {p}blackops_instance_counts_by_space "
            "WHERE workflow = %s AND space = %s",
            (workflow, space),
        )
        counts = empty_counts()
        for status, count in rows:
            counts[str(status)] = int(count)
        return {"instanceCounts": counts, "observedPosition": position}

    def instance_counts_by_workflow(self) -> dict[str, dict[str, int]]:
        """``{workflow: {status: count}}`` of every Workflow with instances (metrics)."""
        runner = self.runner("instance_counts")
        runner.catch_up()
        found: dict[str, dict[str, int]] = {}
        for workflow, status, count in runner.query(
            "SELECT workflow, status, SUM(count) FROM {p}blackops_instance_counts_by_space "
            "GROUP BY workflow, status"
        ):
            found.setdefault(str(workflow), empty_counts())[str(status)] = int(count)
        return found

    def list_instances(
        self,
        workflow: str,
        *,
        space: str | None = None,
        status: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """Instances of one workflow by creation time (those of ``space`` only, when given:
        a code-registered uid may name a workflow in several Spaces), optionally by status
        and creation time (``since`` inclusive, ``until`` exclusive, RFC 3339)."""
        _check_status(status, list(empty_counts()))
        _check_limit(limit)
        runner = self.runner("instance_status")
        runner.catch_up()
        where, params = ["workflow = %s"], [workflow]
        if space is not None:
            where.append("space = %s")
            params.append(space)
        if status is not None:
            where.append("status = %s")
            params.append(status)
        _time_range(where, params, since, until)
        columns = ["stream", "instance_id_json", "status", "created_at", "updated_at"]
        rows, next_cursor = _page(
            runner, "blackops_instance_status", columns, "stream", where, params, limit, cursor
        )
        items = [
            {"id": read_id(r[1]), "status": r[2], "createdAt": r[3], "updatedAt": r[4]}
            for r in rows
        ]
        return {"items": items, "next": next_cursor}


def _time_range(where: list[str], params: list[Any], since: object, until: object) -> None:
    """``created_at`` from ``since`` (inclusive) to ``until`` (exclusive): RFC 3339 instants
    with any offset, compared as instants (the column holds fixed-width UTC text)."""
    for name, value, operator in (("since", since, ">="), ("until", until, "<")):
        if value is None:
            continue
        try:
            instant = format_instant(parse_instant(value))
        except ValueError as error:
            raise InvalidRequest(f"{name} must be an RFC 3339 date-time: {error}") from None
        where.append(f"created_at {operator} %s")
        params.append(instant)


# The filters are checked here, the one door every reader passes (the Python API, HTTP, the
# console, the CLI), by the rules their values were written with: a value that no row can
# hold is a refusal, never an empty answer (SQLite) or a driver's error (PostgreSQL refuses
# NUL as "the journal store failed"; a lone surrogate raised UnicodeEncodeError).


def _check_tenant(tenant: object) -> None:
    if tenant is not None and (not isinstance(tenant, str) or not SPACE_NAME.fullmatch(tenant)):
        raise InvalidRequest("tenant (Space) must be 1-63 letters, digits, '_', '.', '-'")


def _check_type(kind: object) -> None:
    if kind is not None:
        check_operation_type(kind)  # the registry's rule


def _check_status(status: object, allowed: list[str]) -> None:
    # A string first: `in` a dict of an unhashable value raised TypeError.
    if status is not None and (not isinstance(status, str) or status not in allowed):
        raise InvalidRequest(f"status must be one of {', '.join(allowed)}")


def _check_limit(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise InvalidRequest("limit must be from 1 to 1000")


def _page(
    runner: ProjectionRunner,
    table: str,
    columns: list[str],
    key: str,
    where: list[str],
    params: list[Any],
    limit: int,
    cursor: str | None,
) -> tuple[list[tuple[Any, ...]], str | None]:
    """One page of ``table`` by (created_at, ``key``) after ``cursor``, and the next cursor."""
    if cursor is not None:
        after_at, after_key = _decode_cursor(cursor)
        # A row value: both SQLite and PostgreSQL seek the index to it (an OR would scan
        # from the start, so page n would cost n pages).
        where = [*where, f"(created_at, {key}) > (%s, %s)"]
        params = [*params, after_at, after_key]
    rows = runner.query(
        f"SELECT {', '.join(columns)} FROM {{p}}{table} WHERE {' AND '.join(where)} "
        f"ORDER BY created_at, {key} LIMIT %s",
        (*params, limit + 1),
    )
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    at, key_value = last[columns.index("created_at")], last[columns.index(key)]
    return rows[:limit], _encode_cursor(at, key_value)


#: A cursor is a position in the listing's order, readable: ``<created_at>~<key>``. Any
#: value of this shape is a valid position (the order is by text), so the pattern is
#: the whole rule, and the published schema says exactly what is accepted.
CURSOR = re.compile(r"^[0-9TZ:.\-]{1,32}~[A-Za-z0-9_.:\-]{1,256}$")


def _encode_cursor(created_at: str, key: str) -> str:
    return f"{created_at}~{key}"


def _decode_cursor(cursor: str) -> tuple[str, str]:
    if not isinstance(cursor, str) or not CURSOR.fullmatch(cursor):
        raise InvalidRequest("cursor is not one this API gave out (the `next` of a page)")
    created_at, _, key = cursor.partition("~")
    return created_at, key
