"""`--json` prints one document even when what it says holds text that is no Unicode (a
file name of non-UTF-8 bytes, read by Python with surrogateescape), and a SQLite journal
whose files cannot be made is a refusal, not a traceback (found by a defect hunt, stop 35:
the error's own answer raised; a finished export was reported as failed)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_processes import BLACKOPS, ROOT

NOT_UTF8 = b"\xed\xa0\x80"  # one byte string, never UTF-8 text


def blackops(tmp: Path, *argv: str | bytes) -> subprocess.CompletedProcess[bytes]:
    args = [os.fsencode(a) if isinstance(a, str) else a for a in argv]
    env = {**os.environ, "BLACKOPS_HOME": str(tmp / "home")}
    return subprocess.run([*BLACKOPS, *args], capture_output=True, cwd=ROOT, env=env,
                          timeout=120, check=False)  # fmt: skip


def one_document(done: subprocess.CompletedProcess[bytes]) -> dict[str, object]:
    assert b"Traceback" not in done.stderr, done.stderr[-1500:]
    document: dict[str, object] = json.loads(done.stdout)  # zero or two documents: raises
    return document


@pytest.mark.parametrize(
    "argv",
    [
        ["verify", "--jsonl", b"/nonexistent/x" + NOT_UTF8, "--store", "STORE"],
        ["journal", "export", "--output", b"/nonexistent/x" + NOT_UTF8, "--store", "STORE"],
        ["keys", "generate", "--name", "ok", "--output", b"/nonexistent/x" + NOT_UTF8],
    ],
)
def test_an_error_naming_text_that_is_no_unicode_is_one_document(
    tmp_path: Path, argv: list[str | bytes]
) -> None:
    store = f"sqlite:///{tmp_path}/j.db"
    assert blackops(tmp_path, "space", "create", "acme", "--store", store).returncode == 0
    done = blackops(tmp_path, *(store if word == "STORE" else word for word in argv), "--json")
    assert done.returncode == 1
    error = one_document(done)["error"]
    assert isinstance(error, dict) and error["code"] == "invalid_request"
    assert "\\udced" in str(error["message"])  # the byte spelled out, not dropped


def test_an_export_to_a_name_that_is_no_unicode_reports_what_it_wrote(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/j.db"
    assert blackops(tmp_path, "space", "create", "acme", "--store", store).returncode == 0
    target = os.fsencode(str(tmp_path)) + b"/p" + NOT_UTF8
    done = blackops(tmp_path, "journal", "export", "--output", target, "--no-manifest", "--json",
                    "--store", store)  # fmt: skip
    assert done.returncode == 0, done.stderr[-1500:]
    assert one_document(done)["count"] == Path(os.fsdecode(target)).read_bytes().count(b"\n")


@pytest.mark.parametrize("where", ["under-a-file", "name-too-long"])
def test_a_sqlite_journal_that_cannot_be_made_is_refused(tmp_path: Path, where: str) -> None:
    (tmp_path / "afile").write_text("")
    path = tmp_path / "afile" / "j.db" if where == "under-a-file" else tmp_path / ("j" * 250)
    done = blackops(tmp_path, "op", "counts", "--json", "--store", f"sqlite:///{path}")
    assert done.returncode == 1
    error = one_document(done)["error"]
    assert isinstance(error, dict) and error["code"] == "invalid_request"
    assert "cannot create the journal" in str(error["message"])
