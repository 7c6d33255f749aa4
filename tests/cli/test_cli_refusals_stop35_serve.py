"""``serve`` and ``worker`` refused for a flag they check only when they start the worker,
the signer or the witnesses: refused before anything is created (found by a defect hunt,
stop 35: a refused ``serve`` had bootstrapped the journal, a Space, a principal, a token and
a checkpoint, and written the admin token, the system token and the signing key into the
state dir). Exit 1, one ``invalid_request`` document, no journal events, no files."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_refusals import journal_types, run_in

BAD_FLAGS = [
    ["--concurrency", "0"],
    ["--workflow-processes", "0"],
    ["--checkpoint-seconds", "nan"],
    ["--witness", "bogus"],
    ["--signing-key", "{tmp}/no-such.key"],
]
IDS = ["concurrency", "workflow-processes", "checkpoint-seconds", "witness", "signing-key"]


def _assert_refused_and_nothing_changed(
    done: subprocess.CompletedProcess[str], tmp: Path, store_url: str
) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "invalid_request"  # one document
    assert not (tmp / "home").exists(), sorted(os.listdir(tmp / "home"))
    assert not (tmp / ".blackops").exists()
    if store_url.startswith("sqlite:"):
        assert not Path(store_url.removeprefix("sqlite:///")).exists()
    assert journal_types(store_url) == []


@pytest.mark.parametrize("bad", BAD_FLAGS, ids=IDS)
def test_a_serve_refused_for_a_flag_creates_nothing(
    store_url: str, tmp_path: Path, bad: list[str]
) -> None:
    flags = [flag.replace("{tmp}", str(tmp_path)) for flag in bad]
    done = run_in(tmp_path, "serve", "--port", "0", *flags, "--json", "--store", store_url)
    _assert_refused_and_nothing_changed(done, tmp_path, store_url)


@pytest.mark.parametrize("bad", BAD_FLAGS, ids=IDS)
def test_a_worker_refused_for_a_flag_creates_nothing(
    store_url: str, tmp_path: Path, bad: list[str]
) -> None:
    flags = [flag.replace("{tmp}", str(tmp_path)) for flag in bad]
    done = run_in(tmp_path, "worker", *flags, "--json", "--store", store_url)
    _assert_refused_and_nothing_changed(done, tmp_path, store_url)
