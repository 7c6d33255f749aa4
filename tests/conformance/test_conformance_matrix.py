"""docs/conformance.md stays honest: every spec ID once, named files exist and name the ID."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "docs" / "conformance.md"
SPECS = ROOT / "docs" / "spec"  # the published specs, copied into the repository
STATUSES = {"proven", "partial", "open"}


def rows() -> dict[str, tuple[str, list[str]]]:
    table: dict[str, tuple[str, list[str]]] = {}
    for line in MATRIX.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.match(r"^(DW|OL)-", cells[0]):
            continue
        assert cells[0] not in table, f"{cells[0]} has two rows"
        table[cells[0]] = (cells[1], re.findall(r"`(tests/[\w/]+\.py)`", cells[2]))
    return table


def mentions(text: str, requirement: str) -> bool:
    """``OL-1`` is named as ``OL-1`` or in a test name as ``ol1`` / ``dw_doc_1`` (not OL-12)."""
    snake = requirement.lower().replace("-", "_")
    patterns = [re.escape(requirement), re.escape(snake), re.escape(snake.replace("_", ""))]
    return any(re.search(rf"(?<![A-Za-z0-9-]){p}(?!\d)", text, re.IGNORECASE) for p in patterns)


def test_every_row_has_a_status_and_real_test_files() -> None:
    table = rows()
    assert len(table) >= 69
    for requirement, (status, files) in table.items():
        assert status in STATUSES, requirement
        if status == "open":
            assert files == [], f"{requirement} is open but names tests"
            continue
        assert files, f"{requirement} is {status} but names no test file"
        for name in files:
            path = ROOT / name
            assert path.is_file(), f"{requirement}: {name} does not exist"
            assert mentions(path.read_text(), requirement), f"{name} never names {requirement}"


def committed_ids() -> list[str]:
    lines = (ROOT / "tests" / "spec_ids.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_every_spec_id_has_exactly_one_row() -> None:
    expected = committed_ids()
    assert len(expected) == len(set(expected)) == 69
    assert set(rows()) == set(expected), sorted(set(rows()) ^ set(expected))


def test_the_committed_id_list_matches_the_specs() -> None:
    """The specs in docs/spec decide which IDs there are."""
    found: list[str] = []
    for spec in ("operation-lifecycle.md", "durable-workflow.md"):
        path = SPECS / spec
        found += re.findall(r"\*\*((?:DW|OL)-[A-Z0-9-]+)\*\*", path.read_text())
    assert found == committed_ids()


def test_the_matcher_tells_ol1_from_ol12() -> None:
    assert mentions("def test_ol1_ol4_inline(): ...", "OL-1")
    assert not mentions("OL-12 only", "OL-1")
    assert mentions("def test_dw_doc_5_codes(): ...", "DW-DOC-5")
    assert not mentions("DW-DOC-5", "DW-DOC-1")
