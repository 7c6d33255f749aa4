"""``audit watch --store`` reads the journal's signed checkpoints and leaves directly, and the
cosignature book keeps its rows in the journal's database (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from cli_processes import BLACKOPS, ROOT

from blackops.witness.cosigned import CosignatureBook
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


def watch(store: str, key: SigningKey, state: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [*BLACKOPS, "audit", "watch", "--store", store, "--key", key.verifier().encode(),
         "--state", str(state), "--json"],
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
