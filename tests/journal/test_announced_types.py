"""The operation types an announcement names (journal/work_index.py, decisions F164): a
worker counts another process's submits toward a trickle only when it serves their type."""

from __future__ import annotations

from journal.work_index import (
    ANNOUNCED_TYPES_MAX_CHARS,
    RowChange,
    accepted_type_names,
    announced_types,
    workflow_row_type,
)


def accepted(*types: str) -> list[RowChange]:
    return [RowChange(f"op-{n}", create=(name, "acme")) for n, name in enumerate(types)]


def test_the_types_accepted_are_named_once_each_and_read_back() -> None:
    rows = [*accepted("mail.send", "report.build", "mail.send"), RowChange("op-x", due_at=1)]
    names = accepted_type_names(rows)
    assert names == ["=mail.send", "=report.build"]
    topics = frozenset({"operation.accepted", *names})
    assert announced_types(topics) == frozenset({"mail.send", "report.build"})


def test_workflow_rows_are_no_operation_types() -> None:
    rows = [RowChange("wf-1", create=(workflow_row_type("flow"), "acme")), *accepted("a.b")]
    assert accepted_type_names(rows) == ["=a.b"]


def test_types_that_do_not_fit_or_would_split_the_payload_name_none() -> None:
    """None named means "any type" to a listener: never a wrong subset."""
    many = [f"t.{n:04d}" for n in range(ANNOUNCED_TYPES_MAX_CHARS // 7 + 1)]
    assert accepted_type_names(accepted(*many)) == []
    assert accepted_type_names(accepted("a.b", "bad,type")) == []
    assert announced_types(frozenset({"operation.accepted"})) is None


def test_the_bound_counts_each_name_with_its_comma() -> None:
    """The types' share of the payload is each name, its ``=`` and a comma."""
    width = 127  # "=" + 126 characters, then a comma: 128 a name
    fit = [f"t.{n}".ljust(width - 1, "x") for n in range(ANNOUNCED_TYPES_MAX_CHARS // 128)]
    assert len(accepted_type_names(accepted(*fit))) == len(fit)
    assert accepted_type_names(accepted(*fit, "a.b")) == []
