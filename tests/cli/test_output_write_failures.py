"""Output that cannot be written: a full disk (``/dev/full``), a file over the process's
size limit, stdout closed. Each is one line (or ``--json`` document) with a stable code and
no traceback; an export leaves no ``.partial`` file and records nothing (P37). Found by a
defect hunt, stop 40: every command printed an ``OSError`` traceback, and an export that
failed while writing left its ``.partial`` behind."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from cli_processes import ROOT
from rich_journal import inline_runs

from journal.store import EventStore

#: Large enough for the journal's own files, small enough for the export to exceed it.
FILE_LIMIT = 64 * 1024


def blackops(
    *args: str, stdout: int | None = None, limit: int | None = None
) -> tuple[int, str, str]:
    def limited() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "blackops", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        timeout=120,
        check=False,
        preexec_fn=limited,
    )
    out = done.stdout.decode() if done.stdout is not None else ""
    return done.returncode, out, done.stderr.decode()


@pytest.fixture
def journal(store_url: str) -> str:
    inline_runs(store_url, ["t"] * 60)  # ~100 KB of JSONL
    return store_url


def test_a_full_stdout_is_one_line_not_a_traceback(journal: str) -> None:
    for args in (
        ("op", "list", "--store", journal),
        ("op", "list", "--store", journal, "--json"),
        ("journal", "schema"),
    ):
        with open("/dev/full", "wb") as full:
            code, _, err = blackops(*args, stdout=full.fileno())
        assert code == 1, (args, err)
        assert err == "blackops: invalid_request: cannot write stdout (No space left on device)\n"


def test_a_closed_stdout_runs_the_command_without_a_traceback(journal: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "blackops", "op", "list", "--json", "--store", journal],
        cwd=ROOT, stderr=subprocess.PIPE, timeout=120, check=False,
        preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("manifest", [False, True])
def test_an_export_over_the_size_limit_leaves_nothing_and_records_nothing(
    journal: str, tmp_path: Path, manifest: bool
) -> None:
    with EventStore(journal) as store:
        before = store.last_position()
    output = tmp_path / "out.jsonl"
    flags = [] if manifest else ["--no-manifest"]
    code, out, err = blackops(
        "journal", "export", "--store", journal, "--output", str(output), "--json", *flags,
        limit=FILE_LIMIT,
    )  # fmt: skip
    assert code == 1 and "Traceback" not in err, err
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_request"
    assert error["message"] == (
        f"cannot write {output} (File too large): nothing written, nothing recorded"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == []
    with EventStore(journal) as store:
        assert store.last_position() == before  # no journal.exported


def test_an_export_to_a_full_stdout_says_what_it_left(journal: str, tmp_path: Path) -> None:
    manifest = tmp_path / "m.json"
    with open("/dev/full", "wb") as full:
        code, _, err = blackops(
            "journal", "export", "--store", journal, "--manifest", str(manifest),
            stdout=full.fileno(),
        )  # fmt: skip
    assert code == 1, err
    assert err == (
        "blackops: invalid_request: cannot write stdout (No space left on device): stdout "
        "took any lines before it; no manifest, nothing recorded\n"
    )
    assert not manifest.exists()
