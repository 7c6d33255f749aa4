"""The published JSON Schema of an Observed JSONL line (replay/schemas/observed-line.v1.json),
on SQLite and PostgreSQL: every line of a real export with one of nearly everything in it
validates, the schema refuses lines that miss or add fields, and every surface serves the
very bytes the package ships (the file, ``blackops journal schema``)."""

from __future__ import annotations

import copy
import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cli_processes import BLACKOPS, ROOT
from rich_journal import fill

from blackops import Application
from blackops.testing import FakeClock
from replay.export import export_journal
from replay.schema import observed_line_schema, observed_line_schema_bytes

#: The event families the schema names (the part of ``type`` before the first dot).
FAMILIES = {
    "operation", "attempt", "outcome", "workflow", "workflow_resource", "worker", "version",
    "deployment", "name", "catalog", "space", "principal", "token", "journal",
}  # fmt: skip


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        observed_line_schema(), format_checker=jsonschema.FormatChecker()
    )


def problems(line: dict[str, Any]) -> list[str]:
    return [error.message for error in validator().iter_errors(line)]


@pytest.fixture(scope="module")
def sample_lines(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The lines of a rich journal on SQLite (for the refusal tests: one store is enough)."""
    from datetime import UTC, datetime

    clock = FakeClock(datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC))
    path = tmp_path_factory.mktemp("schema") / "journal.sqlite3"
    with Application(f"sqlite:///{path}", clock=clock) as app:
        fill(app, clock)
        out = io.BytesIO()
        export_journal(app.store, out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def one_per_family(lines: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    seen: set[str] = set()
    for line in lines:
        family = line["type"].split(".")[0]
        if family not in seen:
            seen.add(family)
            yield line


def test_the_schema_is_a_draft_2020_12_schema_with_a_versioned_id() -> None:
    schema = observed_line_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == "urn:blackops:schema:observed-line:v1"
    assert set(schema["required"]) == {
        "at", "context", "data", "position", "stream", "type", "version"
    }  # fmt: skip
    assert schema["additionalProperties"] is False


def test_every_line_of_a_real_export_validates(app: Application, clock: FakeClock) -> None:
    """Operations of every outcome, workflow instances, the control plane, retention
    tombstones and custody records: all of them, every line, on this store."""
    ids = fill(app, clock)
    out = io.BytesIO()
    summary = export_journal(app.store, out)
    raw = out.getvalue().splitlines()
    assert summary.count == len(raw) > 150
    check = validator()
    failures = []
    for text in raw:
        line = json.loads(text)
        failures += [f"{line['type']} @{line['position']}: {e.message}" for e in
                     check.iter_errors(line)]  # fmt: skip
    assert failures == []
    lines = [json.loads(text) for text in raw]
    types = {line["type"] for line in lines}
    # The sample really covers the schema: every family, every kind of tombstone, each
    # terminal outcome of operations and instances.
    assert {t.split(".")[0] for t in types} == FAMILIES
    assert {"operation.purged", "outcome.purged", "workflow.purged"} <= types
    assert {
        "operation.completed",
        "operation.rejected",
        "operation.failed",
        "operation.dead_lettered",
        "operation.held",
        "operation.released",
    } <= types
    assert {"workflow.completed", "workflow.errored", "workflow.terminated"} <= types
    digests = [
        line for line in lines
        if line["type"] == "workflow.purged" and line["data"]["reason"] == "workflow_deleted"
    ]  # fmt: skip
    assert digests and all(d["context"]["instance_id"].startswith("sha256:") for d in digests)
    assert ids["purge"].items and ids["purge"].instances


def test_the_schema_refuses_lines_that_miss_or_add_fields(
    sample_lines: list[dict[str, Any]],
) -> None:
    """Each required member dropped, in the line and in each family's context, is refused;
    so are an extra member, wrong types and a tombstone that does not say what it replaces."""
    families = list(one_per_family(sample_lines))
    assert {line["type"].split(".")[0] for line in families} == FAMILIES
    for line in families:
        assert problems(line) == []
        for key in line:
            broken = {k: v for k, v in line.items() if k != key}
            assert problems(broken), f"{line['type']} without {key} passed"
        for key in line["context"]:
            broken = copy.deepcopy(line)
            del broken["context"][key]
            assert problems(broken), f"{line['type']} without context.{key} passed"
        extra = copy.deepcopy(line)
        extra["context"]["unexpected"] = 1
        assert problems(extra), f"{line['type']} with an extra context member passed"
    first = families[0]
    for key, bad in [
        ("position", 0), ("position", "1"), ("version", 0), ("version", 1.5),
        ("stream", 'quote"d'), ("stream", ""), ("type", "Operation.Completed"),
        ("type", "nosuchfamily.created"), ("at", "2026-11-30T09:00:00Z"),
        ("at", "2026-11-30 09:00:00.000000+00:00"), ("context", []), ("data", None),
    ]:  # fmt: skip
        assert problems({**first, key: bad}), f"{key}={bad!r} passed"
    assert problems({**first, "extra": True})
    actor = copy.deepcopy(first)
    actor["context"]["actor"] = {"id": "x", "kind": "robot"}
    assert problems(actor)
    tombstone = next(line for line in sample_lines if line["type"].endswith(".purged"))
    for key in ("versions", "positions"):
        broken = copy.deepcopy(tombstone)
        del broken["data"][key]
        assert problems(broken), f"a tombstone without data.{key} passed"


def test_the_package_and_the_cli_give_the_same_bytes(tmp_path: Path) -> None:
    """``blackops journal schema`` prints the shipped file (the HTTP route is tested with
    the stream routes, tests/http/test_journal_stream.py)."""
    shipped = (ROOT / "replay" / "schemas" / "observed-line.v1.json").read_bytes()
    assert observed_line_schema_bytes() == shipped
    for flags in ([], ["--json"]):  # --json as on every command: the same one document
        printed = subprocess.run(
            [*BLACKOPS, "journal", "schema", *flags], cwd=tmp_path, capture_output=True, timeout=60
        )
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout == shipped
        assert json.loads(printed.stdout) == observed_line_schema()


def test_the_package_metadata_ships_the_schema() -> None:
    """pyproject.toml names the schema files as package data of ``replay`` (a wheel and
    an editable install both carry them)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["replay"]
    assert "schemas/*.json" in patterns
    assert sorted(p.name for p in (ROOT / "replay" / "schemas").glob("*.json")) == [
        "observed-line.v1.json"
    ]
