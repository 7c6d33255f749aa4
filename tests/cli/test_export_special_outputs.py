"""``journal export --output X`` when X is not a plain file (found by a defect hunt: the
export was written to ``X.partial`` and renamed over X, whatever X was, so a link became a
file, its target got nothing, and a FIFO's reader waited for ever; ``--output /dev/stdout``
as root replaced the system's link). A link stays a link and its target gets the lines (the
``.partial`` is written beside the target and renamed onto it); a FIFO or a device is
written straight, as ``--follow`` writes; a regular file is still replaced whole (P37)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_processes import ROOT
from rich_journal import inline_runs


def _export(store_url: str, output: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blackops", "journal", "export", "--output", str(output),
         "--store", store_url, "--json", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("manifest", [False, True])
def test_an_export_through_a_link_writes_its_target_and_keeps_the_link(
    store_url: str, tmp_path: Path, manifest: bool
) -> None:
    inline_runs(store_url, ["t"] * 3)
    archive = tmp_path / "archive"
    archive.mkdir()
    target = archive / "2026-12.jsonl"
    target.write_text("old\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(Path("archive") / "2026-12.jsonl")  # relative, as operators make them
    done = _export(store_url, link, *([] if manifest else ["--no-manifest"]))
    assert done.returncode == 0, done.stderr
    count = json.loads(done.stdout)["count"]
    assert link.is_symlink() and os.readlink(link) == "archive/2026-12.jsonl"
    assert len(target.read_text().splitlines()) == count > 0
    assert sorted(p.name for p in archive.iterdir()) == ["2026-12.jsonl"]  # no .partial left
    if manifest:
        verified = subprocess.run(
            [sys.executable, "-m", "blackops", "verify", "--jsonl", str(link), "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("through_link", [False, True])
def test_an_export_to_a_fifo_feeds_its_reader_and_leaves_the_fifo(
    store_url: str, tmp_path: Path, through_link: bool
) -> None:
    inline_runs(store_url, ["t"] * 3)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    output = fifo
    if through_link:
        output = tmp_path / "to-pipe.jsonl"
        output.symlink_to(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = _export(store_url, output, "--no-manifest")
    reader.join(10)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert through_link is output.is_symlink()
    assert len(got[0].splitlines()) == json.loads(done.stdout)["count"] > 0
    assert not (tmp_path / "pipe.jsonl.partial").exists()


def test_an_export_to_a_fifo_nobody_reads_ends_on_sigterm(tmp_path: Path) -> None:
    """Opening a FIFO for writing waits for a reader; SIGTERM ends that wait (143)."""
    store_url = f"sqlite:///{tmp_path}/j.db"
    inline_runs(store_url, ["t"])
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    process = subprocess.Popen(
        [sys.executable, "-m", "blackops", "journal", "export", "--output", str(fifo),
         "--no-manifest", "--store", store_url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Until it waits in open() for a reader (its signal handlers are installed then).
        wchan = Path(f"/proc/{process.pid}/wchan")
        deadline = time.monotonic() + 60
        while wchan.read_text() != "wait_for_partner" and time.monotonic() < deadline:
            time.sleep(0.05)
        process.terminate()
        _, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert "export interrupted" in err and "Traceback" not in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_regular_file_is_still_replaced_whole(store_url: str, tmp_path: Path) -> None:
    inline_runs(store_url, ["t"] * 2)
    output = tmp_path / "j.jsonl"
    output.write_text("old\n" * 100)
    done = _export(store_url, output, "--no-manifest")
    assert done.returncode == 0, done.stderr
    assert "old" not in output.read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("j.")) == ["j.jsonl"]
