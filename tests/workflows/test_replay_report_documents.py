"""``ReplayReport.from_document`` reads what a replay child answered (decisions C13):
anything that is not a report's document, a missing answer included, is None (the
caller's "gave no readable report"), never an exception."""

from __future__ import annotations

from typing import Any

import pytest

from blackops.workflows.replay_check import InstanceReport, ReplayReport


@pytest.mark.parametrize(
    "document",
    [None, "report", 7, [], ["candidate"], {}, {"candidate": "c"}, {"candidate": "c",
     "hashSeedVaried": False, "instances": ["not an instance"]}],
    ids=["none", "str", "int", "list", "list-of-keys", "empty", "partial", "bad-instance"],
)  # fmt: skip
def test_what_is_not_a_report_document_is_none(document: Any) -> None:
    assert ReplayReport.from_document(document) is None


def test_a_report_document_reads_back() -> None:
    report = ReplayReport("c", [InstanceReport("wf", "i-1", "wf-s", "complete", 3)])
    again = ReplayReport.from_document(report.to_document())
    assert again is not None and again.to_document() == report.to_document()
