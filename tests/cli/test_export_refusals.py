"""Observed JSONL export (OL-11): one that cannot finish is refused before it records itself
(decisions P34): a signing key that cannot be read, an --output that is a folder or in no
folder, a --manifest in no folder. Each is one line (`blackops: invalid_request: ...`, exit
1), no traceback, and leaves no file, no `.partial`, no manifest and no `journal.exported`
record (SQLite and PostgreSQL). And a signed export that starts past the journal's end
verifies (it is empty)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_processes import run
from rich_journal import inline_runs
from tampering import behind_the_journals_back, position_column, q

from journal.store import EventStore
from replay.notes import SigningKey


def _filled(store_url: str) -> None:
    inline_runs(store_url, ["t"] * 3)


def _exports_recorded(store_url: str) -> int:
    with EventStore(store_url, create=False) as store:
        return sum(1 for event in store.iter_after(0) if event.type == "journal.exported")


def _key(tmp_path: Path) -> tuple[Path, str]:
    key = SigningKey.generate("example.com/refusals")
    path = tmp_path / "log.key"
    path.write_text(key.encode() + "\n")
    return path, key.verifier().encode()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--signing-key", "{tmp}/no-such.key"], "invalid_request"),
        (["--output", "{out}"], "is a folder"),
        (["--output", "{tmp}/no-folder/j.jsonl"], "no folder"),
        (["--manifest", "{tmp}/no-folder/m.json"], "no folder"),
        (["--manifest", "{tmp}/dangling.json"], "a link to nothing"),
        (["--manifest", "/proc/version"], "cannot write it"),
    ],
    ids=[
        "missing-key", "output-is-a-folder", "output-in-no-folder", "manifest-in-no-folder",
        "manifest-a-broken-link", "manifest-not-writable",
    ],
)  # fmt: skip
def test_an_export_that_cannot_finish_is_refused_before_it_is_recorded(
    store_url: str, tmp_path: Path, flags: list[str], says: str
) -> None:
    _filled(store_url)
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone" / "m.json")
    given = [flag.format(tmp=tmp_path, out=out) for flag in flags]
    if "--output" not in given:
        given += ["--output", str(out / "j.jsonl")]
    done = run("journal", "export", *given, store=store_url)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("blackops: invalid_request: ") and says in done.stderr
    assert "Traceback" not in done.stderr
    assert list(out.iterdir()) == []  # no file, partial file or manifest in it
    assert not (tmp_path / "out.partial").exists() and not (tmp_path / "out.manifest.json").exists()
    assert _exports_recorded(store_url) == 0


def test_a_signed_export_past_the_journals_end_verifies(store_url: str, tmp_path: Path) -> None:
    """Empty (A9): its first index is the tree's size, not one past it (the export's own
    record, appended after it, is beyond the exported tree)."""
    _filled(store_url)
    key_file, verifier = _key(tmp_path)
    target = tmp_path / "empty.jsonl"
    done = run("journal", "export", "--output", str(target), "--after", "1000000",
               "--signing-key", str(key_file), store=store_url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads(Path(f"{target}.manifest.json").read_text())
    assert manifest["count"] == 0
    assert manifest["attestation"]["firstIndex"] == manifest["journalTreeSize"]
    checked = subprocess.run(
        [sys.executable, "-m", "blackops", "verify", "--jsonl", str(target), "--key", verifier],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_manifest_to_an_existing_writable_file_outside_a_writable_folder_is_fine(
    store_url: str, tmp_path: Path
) -> None:
    """`--manifest /dev/null` (an existing file in a folder nobody may write): tried in place,
    not refused for its folder; the export is written and recorded."""
    _filled(store_url)
    target = tmp_path / "j.jsonl"
    done = run("journal", "export", "--output", str(target), "--manifest", "/dev/null",
               store=store_url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert target.read_bytes().count(b"\n") > 0 and _exports_recorded(store_url) == 1


def test_a_manifest_that_fails_after_the_record_keeps_the_lines_and_says_so(
    store_url: str, tmp_path: Path
) -> None:
    """`/dev/full` stands for a disk that fills between the check and the write: the export
    is recorded, so its lines stay in place and the message says where (found by review:
    the lines were deleted while the record stayed)."""
    _filled(store_url)
    target = tmp_path / "j.jsonl"
    done = run("journal", "export", "--output", str(target), "--manifest", "/dev/full",
               store=store_url)  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "could not be written" in done.stderr and f"its lines are in {target}" in done.stderr
    assert target.read_bytes().count(b"\n") > 0 and _exports_recorded(store_url) == 1


def test_a_manifest_to_a_pipe_is_written_once_not_used_up_by_the_check(
    store_url: str, tmp_path: Path
) -> None:
    """A FIFO: trying it would hand its reader an end of file and leave the export waiting
    for a reader for ever (found by review); it is written once, whole."""
    import os
    import threading

    _filled(store_url)
    fifo = tmp_path / "manifest.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = subprocess.run(
        [sys.executable, "-m", "blackops", "journal", "export", "--output",
         str(tmp_path / "j.jsonl"), "--manifest", str(fifo), "--store", store_url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    reader.join(10)
    assert done.returncode == 0, done.stderr
    assert json.loads(got[0])["count"] > 0


def test_a_manifest_on_the_exports_own_stdout_is_refused(store_url: str) -> None:
    """`--manifest /dev/stdout` without --output would write the manifest into the lines
    (or, to a file, truncate them): refused before anything is written or recorded."""
    _filled(store_url)
    done = run("journal", "export", "--manifest", "/dev/stdout", store=store_url)
    assert done.returncode == 1 and "would overwrite the exported lines" in done.stderr
    assert done.stdout == "" and _exports_recorded(store_url) == 0


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--output", "{db}", "--no-manifest"], "--output"),
        (["--output", "{db}-wal", "--no-manifest"], "--output"),
        (["--output", "{tmp}/out.jsonl", "--manifest", "{db}"], "--manifest"),
        (["--output", "{key}", "--no-manifest", "--signing-key", "{key}"], "--output"),
        (["--output", "{tmp}/o", "--manifest", "{key}", "--signing-key", "{key}"], "--manifest"),
        (["--output", "{key}.checkpoint", "--signing-key", "{key}"], "--output"),
    ],
    ids=["database", "its-wal", "manifest-database", "key", "manifest-key", "saved-checkpoint"],
)  # fmt: skip
def test_an_export_never_writes_over_the_journal_or_its_signers_files(
    tmp_path: Path, flags: list[str], names: str
) -> None:
    """``--output`` naming the journal's own SQLite file replaced it with its export (exit
    0, the journal gone); a manifest or a key file likewise (found by a defect hunt, stop
    38)."""
    db = tmp_path / "j.sqlite3"
    store_url = f"sqlite:///{db}"
    _filled(store_url)
    key, _ = _key(tmp_path)
    (tmp_path / "log.key.checkpoint").write_text("")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    given = [flag.format(tmp=tmp_path, db=db, key=key) for flag in flags]
    done = run("journal", "export", *given, store=store_url)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"blackops: invalid_request: {names} ")
    assert "a file of the journal or its signer" in done.stderr
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert {n: after.get(n) for n in before} == before
    assert _exports_recorded(store_url) == 0
    assert run("verify", store=store_url).returncode == 0


def test_a_signed_export_the_signer_refuses_is_not_recorded(store_url: str, tmp_path: Path) -> None:
    """P34: an export is whole and recorded or absent. The journal's tail was cut after a
    signed checkpoint (with its leaves): the signer refuses to attest (`journal_rewritten`),
    and no `journal.exported` record names the export that is not there (one was appended
    per refused try: found by a defect hunt against the operator, stop 39)."""
    _filled(store_url)
    key_file, _ = _key(tmp_path)
    signed = run("journal", "checkpoint", "--signing-key", str(key_file), store=store_url)
    assert signed.returncode == 0, signed.stderr
    with (
        EventStore(store_url, create=False) as store,
        behind_the_journals_back(store) as (
            conn,
            events,
            leaves,
        ),
    ):
        column = position_column(conn)
        last = store.last_position()
        conn.execute(q(conn, f"DELETE FROM {events} WHERE {column} >= ?"), (last - 1,))
        conn.execute(q(conn, f"DELETE FROM {leaves} WHERE position >= ?"), (last - 1,))
    target = tmp_path / "j.jsonl"
    for _ in range(2):
        done = run("journal", "export", "--output", str(target), "--signing-key",
                   str(key_file), store=store_url)  # fmt: skip
        assert done.returncode == 1 and "journal_rewritten" in done.stderr, done.stderr
    assert not target.exists() and not Path(f"{target}.manifest.json").exists()
    assert _exports_recorded(store_url) == 0
