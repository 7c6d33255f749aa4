"""``journal export`` refused before it records itself (decisions P34), for what only trying
finds (found by a defect hunt, stop 35): a default manifest name too long for the file
system (``OUTPUT.manifest.json`` past NAME_MAX while OUTPUT and its ``.partial`` fit), a
``--manifest`` that cannot be created; and ``--json`` with an ``--output`` that is stdout
(the lines and the summary document both went to stdout). Exit 1, one ``invalid_request``
document, no file, no ``journal.exported``, nothing appended."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_refusals import journal_types, refused, run_in
from rich_journal import inline_runs


@pytest.mark.parametrize("where", ["default-manifest-name", "manifest-flag"])
def test_a_manifest_name_that_cannot_be_created_is_refused_before_the_record(
    store_url: str, tmp_path: Path, where: str
) -> None:
    inline_runs(store_url, ["t"] * 2)
    before = journal_types(store_url)
    work = tmp_path / "work"
    work.mkdir()
    if where == "default-manifest-name":
        output = "a" * 245  # + ".partial" fits in NAME_MAX (255), + ".manifest.json" does not
        flags = ["--output", output]
    else:
        output = "j.jsonl"
        flags = ["--output", output, "--manifest", "m" * 256 + ".json"]
    done = run_in(work, "journal", "export", *flags, "--json", "--store", store_url)
    assert "--manifest" in refused(done)
    assert sorted(os.listdir(work)) == [], "a refused export left a file behind"
    assert journal_types(store_url) == before, "a refused export was recorded"
    assert "journal.exported" not in journal_types(store_url)


@pytest.mark.parametrize("manifest", [False, True])
def test_json_with_the_output_on_stdout_is_refused(
    store_url: str, tmp_path: Path, manifest: bool
) -> None:
    inline_runs(store_url, ["t"] * 2)
    before = journal_types(store_url)
    flags = ["--manifest", str(tmp_path / "m.json")] if manifest else ["--no-manifest"]
    done = run_in(
        tmp_path, "journal", "export", "--output", "/dev/stdout", *flags, "--json",
        "--store", store_url,
    )  # fmt: skip
    assert "--json" in refused(done)  # stdout held the lines, then the summary
    assert not (tmp_path / "m.json").exists()
    assert journal_types(store_url) == before
