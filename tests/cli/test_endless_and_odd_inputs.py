"""Inputs named on the command line that never end, or that name stdin (found by a defect
hunt, stop 40). A device such as ``/dev/zero`` given as a key, a receipt, a manifest, an
env file or a JSONL file was read whole into memory (a ``MemoryError`` traceback, or the
OOM killer); each kind is now read up to what it can hold and refused in one document.
Also: ``replay --follow`` with a malformed URL (a traceback) and ``replay --check -``
(stdin, which it opened as a file named "-")."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_processes import ROOT
from rich_journal import inline_runs

#: Address space for each command: a whole /dev/zero read runs out of it at once.
MEMORY = 2 << 30
VERIFIER = "example.com/log+8c7ffe8b+AUdY/7xe76dvHl4XZXMopfkwd/EK5mbR1X8RoXDq7zVi"


def blackops(*args: str, stdin: bytes | None = None, path: str = "") -> dict[str, Any]:
    """Run ``blackops ARGS --json`` under `MEMORY`; its one JSON document (exit 1)."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    done = subprocess.run(
        [sys.executable, "-m", "blackops", *args, "--json"],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
        preexec_fn=limited,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{path}"},
    )
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    return dict(json.loads(done.stdout)["error"])


def export_of(store_url: str, folder: Path, runs: int) -> Path:
    """A journal of ``runs`` Inline runs, exported with its manifest to ``folder``."""
    inline_runs(store_url, ["t"] * runs)
    exported = folder / "e.jsonl"
    subprocess.run(
        [sys.executable, "-m", "blackops", "journal", "export", "--store", store_url,
         "--output", str(exported)],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return exported


def test_keys_receipts_manifests_and_env_files_that_never_end(
    tmp_path: Path, store_url: str
) -> None:
    assert "larger than 65536 bytes" in blackops("verify-receipt", "-", "--key", "/dev/zero",
                                                  stdin=b"{}")["message"]  # fmt: skip
    for receipt in (["/dev/zero"], ["-"]):
        refused = blackops("verify-receipt", *receipt, "--key", VERIFIER, stdin=b"\0" * 5_000_000)
        assert refused["code"] == "invalid_request" and "larger than" in refused["message"]
    jsonl = tmp_path / "e.jsonl"
    jsonl.write_bytes(b"")
    refused = blackops("verify", "--jsonl", str(jsonl), "--manifest", "/dev/zero")
    assert refused["message"] == "/dev/zero is not a JSON manifest: it is no JSON object"
    for setup in (["space", "create", "acme"], ["worker", "create", "w", "--space", "acme"]):
        subprocess.run([sys.executable, "-m", "blackops", *setup, "--store", store_url],
                       cwd=ROOT, check=True, capture_output=True, timeout=120)  # fmt: skip
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "main.py").write_text("class Flow:\n    pass\n")
    refused = blackops("version", "upload", str(folder), "--space", "acme", "--worker", "w",
                       "--env-file", "/dev/zero", "--store", store_url)  # fmt: skip
    assert refused["message"].startswith("cannot read /dev/zero: larger than")


def test_jsonl_without_line_ends_is_refused_at_an_events_longest_line(
    tmp_path: Path, store_url: str
) -> None:
    (tmp_path / "seen.py").write_text("def observe(event):\n    pass\n")
    refused = blackops("replay", "/dev/zero", "--observer", "seen:observe", path=str(tmp_path))
    assert refused["message"] == "line 1: longer than 4195328 bytes: no event is"
    exported = export_of(store_url, tmp_path, 1)
    manifest = f"{exported}.manifest.json"
    refused = blackops("verify", "--jsonl", "/dev/zero", "--manifest", manifest)
    assert refused["message"] == "/dev/zero: line 1: longer than 4195328 bytes: no event is"


def test_replay_follow_with_a_malformed_url_is_refused(tmp_path: Path) -> None:
    (tmp_path / "seen.py").write_text("def observe(event):\n    pass\n")
    refused = blackops("replay", "--follow", "http://[::1", "--token", "t",
                       "--observer", "seen:observe", path=str(tmp_path))  # fmt: skip
    assert refused["message"] == "--follow needs an http(s) URL, not 'http://[::1'"


def test_replay_check_reads_histories_from_stdin(store_url: str, tmp_path: Path) -> None:
    """``replay --check -`` reads stdin, as ``replay -`` does: the same answer as the file."""
    from blackops import Application

    app = Application(store_url)
    app.close()
    history = tmp_path / "h.jsonl"
    history.write_bytes(b"")
    answers = []
    for source, stdin in ((str(history), None), ("-", b"")):
        done = subprocess.run(
            [sys.executable, "-m", "blackops", "replay", "--check", source, "--app",
             "examples.shop:app", "--store", store_url, "--json"],
            cwd=ROOT, input=stdin, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        answers.append(json.loads(done.stdout))
    assert answers[0] == answers[1] and answers[0]["compatible"] is True


@pytest.mark.parametrize("line", [b"not json\n", b'{"position":1}\n'])
def test_replay_check_from_stdin_names_a_bad_line(store_url: str, line: bytes) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "blackops", "replay", "--check", "-", "--app",
         "examples.shop:app", "--store", store_url, "--json"],
        cwd=ROOT, input=line, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_request" and error["message"].startswith("-: line 1")


def test_a_small_manifest_verifies_under_a_small_address_space(
    tmp_path: Path, store_url: str
) -> None:
    """Reading a manifest asks for its buffer a chunk at a time: ``read(1 GiB + 1)`` asked
    for the whole limit at once, and a 50-event export failed to verify as "too large"
    under `ulimit -v` (found by review, stop 40). White space alone is no manifest."""
    exported = export_of(store_url, tmp_path, 5)

    def small() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (900 << 20, 900 << 20))

    done = subprocess.run(
        [sys.executable, "-m", "blackops", "verify", "--jsonl", str(exported), "--json"],
        cwd=ROOT, capture_output=True, timeout=120, check=False, preexec_fn=small,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is True
    blank = tmp_path / "blank.json"
    blank.write_bytes(b" \n" * (1 << 20))
    refused = blackops("verify", "--jsonl", str(exported), "--manifest", str(blank))
    assert refused["message"] == f"{blank} is not a JSON manifest: it is no JSON object"
