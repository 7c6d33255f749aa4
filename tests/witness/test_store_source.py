"""``audit watch --store`` reads the journal's signed checkpoints and leaves directly, and the
cosignature book keeps its rows in the journal's database (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_processes import BLACKOPS, ROOT

from blackops.witness.cosigned import CosignatureBook
from blackops.witness.monitor import assess
from blackops.witness.sources import LogUnreadable
from blackops.witness.store_source import StoreSource
from domain.errors import BackendUnavailable
from domain.events import NewEvent
from journal.store import Append, EventStore
from replay import cosignature
from replay.merkle import root_of
from replay.notes import COSIGNATURE_KEY, Checkpoint, SigningKey, sign_note

ORIGIN = "example.test/log"


def append_some(store: EventStore, n: int) -> None:
    for i in range(n):
        event = NewEvent("test.happened", "2026-12-01T00:00:00.000000Z", {}, {"i": i})
        store.append(Append(f"test:{uuid.uuid4()}", 0, [event]))


def sign_checkpoint(store: EventStore, key: SigningKey) -> str:
    leaves = [leaf for _, leaf in store.read_leaves(0, 5000)]
    note = sign_note(Checkpoint(key.name, len(leaves), root_of(leaves)).body(), key)
    data = {"tree_size": len(leaves), "root": root_of(leaves).hex(), "note": note}
    event = NewEvent("journal.checkpoint", "2026-12-01T00:00:00.000000Z", {}, data)
    store.append(Append(f"custody:checkpoint:{uuid.uuid4()}", 0, [event]))
    return note


def watch(
    store: str, key: SigningKey, state: Path, *witness_keys: str
) -> tuple[int, dict[str, Any]]:
    required = [arg for k in witness_keys for arg in ("--witness-key", k)]
    done = subprocess.run(
        [*BLACKOPS, "audit", "watch", "--store", store, "--key", key.verifier().encode(),
         "--state", str(state), "--json", "--cosignature-grace", "0", *required],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def test_watch_a_store_then_a_smaller_checkpoint_is_rolled_back(
    store_url: str, tmp_path: Path
) -> None:
    key = SigningKey.generate(ORIGIN)
    store = EventStore(store_url)
    try:
        append_some(store, 5)
        small = sign_checkpoint(store, key)
        state = tmp_path / "monitor.json"
        assert watch(store_url, key, state)[0] == 0
        append_some(store, 6)
        sign_checkpoint(store, key)
        code, report = watch(store_url, key, state)
        assert (code, report["findings"]) == (0, [])
        # The operator journals an old, smaller (genuinely signed) checkpoint as the newest.
        event = NewEvent("journal.checkpoint", "2026-12-01T00:00:01.000000Z", {}, {"note": small})
        store.append(Append(f"custody:checkpoint:{uuid.uuid4()}", 0, [event]))
        code, report = watch(store_url, key, state)
        assert code == 1
        assert [f["kind"] for f in report["findings"]] == ["rolled_back"]
    finally:
        store.close()


def test_the_book_keeps_cosignatures_per_checkpoint_and_witness(store_url: str) -> None:
    store = EventStore(store_url)
    try:
        book = CosignatureBook(store)
        one = Checkpoint(ORIGIN, 3, bytes(32))
        two = Checkpoint(ORIGIN, 4, bytes([1]) * 32)
        witness = SigningKey.generate("w1.example", COSIGNATURE_KEY)
        first = cosignature.cosign(one.body(), witness, 10).line()
        again = cosignature.cosign(one.body(), witness, 11).line()
        book.save(one, "w1", first)
        book.save(one, "w1", again)  # the newest wins
        book.save(two, "w1", cosignature.cosign(two.body(), witness, 12).line())
        assert book.lines(one) == [again]
        assert book.cosigned_size(ORIGIN, "w1") == 4
        assert book.cosigned_size(ORIGIN, "w2") is None
        assert CosignatureBook(store).lines(one) == [again]  # another process sees it
    finally:
        store.close()


def test_follow_keeps_watching_and_stops_at_the_first_finding(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'journal.db'}"
    key = SigningKey.generate(ORIGIN)
    store = EventStore(store_url)
    try:
        append_some(store, 3)
        small = sign_checkpoint(store, key)
        state = tmp_path / "monitor.json"
        follower = subprocess.Popen(
            [*BLACKOPS, "audit", "watch", "--store", store_url, "--key",
             key.verifier().encode(), "--state", str(state), "--json", "--follow",
             "--interval", "0.1"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert follower.stdout is not None
        assert json.loads(follower.stdout.readline())["ok"]
        append_some(store, 4)
        grown = Checkpoint.parse(sign_checkpoint(store, key).split("\n\n")[0] + "\n").size
        while json.loads(follower.stdout.readline())["checkpoint"]["size"] < grown:
            pass  # checks made before the new checkpoint was journaled
        event = NewEvent("journal.checkpoint", "2026-12-01T00:00:01.000000Z", {}, {"note": small})
        store.append(Append(f"custody:checkpoint:{uuid.uuid4()}", 0, [event]))
        last: dict[str, Any] = {}
        for line in follower.stdout:
            last = json.loads(line)
        assert follower.wait(timeout=60) == 1
        assert [f["kind"] for f in last["findings"]] == ["rolled_back"]
    finally:
        store.close()


def has_cosignature_table(store: EventStore) -> bool:
    with store.transaction() as cursor:
        if store.location.kind == "postgresql":
            schema = store.location.settings["POSTGRES_SCHEMA"]
            cursor.execute("SELECT to_regclass(%s)", (f"{schema}.blackops_cosignatures",))
            row = cursor.fetchone()
            value = row[0] if isinstance(row, tuple) else next(iter(row.values()))
            return value is not None
        cursor.execute("SELECT 1 FROM sqlite_master WHERE name = 'blackops_cosignatures'")
        return cursor.fetchone() is not None


def read_note(store_url: str) -> str:
    # One store open at a time in this process: opening a SQLite journal read-only
    # (journal/store.py _journal_at) opens and closes the file, which drops the process's
    # POSIX locks on it, and another process may then delete the WAL under the open one.
    source = StoreSource(store_url)
    try:
        return source.note()
    finally:
        source.close()


def test_watch_a_store_checks_the_cosignatures_kept_beside_the_journal(
    store_url: str, tmp_path: Path
) -> None:
    key = SigningKey.generate(ORIGIN)
    witness = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    with EventStore(store_url) as store:
        append_some(store, 4)
        note = sign_checkpoint(store, key)
    # A monitor reads without creating the table: no table, no cosignatures.
    assert read_note(store_url) == note
    state = tmp_path / "monitor.json"
    code, report = watch(store_url, key, state, witness.verifier().encode())
    assert (code, [f["kind"] for f in report["findings"]]) == (1, ["missing_cosignature"])
    with EventStore(store_url) as store:
        assert not has_cosignature_table(store)
        # The service's pusher kept the witness's cosignature (decisions T5).
        checkpoint = Checkpoint.parse(note.split("\n\n")[0] + "\n")
        line = cosignature.cosign(checkpoint.body(), witness, 1_700_000_000).line()
        CosignatureBook(store).save(checkpoint, "w1", line)
    assert read_note(store_url) == note + line
    code, report = watch(store_url, key, state, witness.verifier().encode())
    assert (code, report["findings"]) == (0, []), report  # before: missing_cosignature
    assert list(report["cosignedBy"]) == [f"w1.example+{witness.key_id.hex()}"]


def test_a_store_it_cannot_read_is_no_finding_but_too_few_leaves_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_url = f"sqlite:///{tmp_path / 'journal.db'}"
    key = SigningKey.generate(ORIGIN)
    store = EventStore(store_url)
    try:
        append_some(store, 3)
        small = Checkpoint.parse(sign_checkpoint(store, key).split("\n\n")[0] + "\n")
        append_some(store, 3)
        note = sign_checkpoint(store, key)
    finally:
        store.close()
    source = StoreSource(store_url)

    def down(after: int, limit: int = 5000) -> list[tuple[int, bytes]]:
        raise BackendUnavailable("the journal store cannot be reached", "connection refused")

    monkeypatch.setattr(source.store, "read_leaves", down)
    with pytest.raises(LogUnreadable):  # before: reported "inconsistent"
        assess(note, key.verifier(), [], small, source.proof)
    monkeypatch.undo()
    grown = Checkpoint.parse(note.split("\n\n")[0] + "\n")
    assert assess(note, key.verifier(), [], small, source.proof).ok
    bigger = Checkpoint(ORIGIN, grown.size + 5, grown.root)
    report = assess(sign_note(bigger.body(), key), key.verifier(), [], small, source.proof)
    assert [f["kind"] for f in report.findings] == ["inconsistent"]
