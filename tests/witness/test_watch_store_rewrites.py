"""``audit watch --store`` recomputes the signed roots from the store's leaves at every check
(decisions T9): a journal truncated or rewritten under a checkpoint it already saw is
``inconsistent`` at the next check, though no new checkpoint is signed and the size did not
grow (found by a defect hunt: both said ``ok``)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from cli_processes import BLACKOPS, ROOT
from tampering import behind_the_journals_back, position_column, q

from blackops.witness.monitor import assess
from blackops.witness.store_source import StoreSource
from domain.events import NewEvent
from journal.leaves import event_leaf
from journal.store import Append, EventStore
from replay.merkle import root_of
from replay.notes import Checkpoint, SigningKey, sign_note

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
         "--state", str(state), "--json", "--cosignature-grace", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def findings(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["kind"], f["message"]) for f in report["findings"]]


def test_a_store_truncated_under_the_saved_checkpoint_is_inconsistent(
    store_url: str, tmp_path: Path
) -> None:
    key = SigningKey.generate(ORIGIN)
    state = tmp_path / "monitor.json"
    with EventStore(store_url) as store:
        append_some(store, 8)
        sign_checkpoint(store, key)  # size 8
        rows = store.read_raw_after(0, 100)
        cut, last = rows[4].id, rows[7].id
    assert watch(store_url, key, state)[0] == 0
    saved = state.read_text()
    with EventStore(store_url) as store, behind_the_journals_back(store) as (conn, events, leaves):
        # The tail under the checkpoint deleted with its leaves; the checkpoint event kept.
        column = position_column(conn)
        conn.execute(q(conn, f"DELETE FROM {events} WHERE {column} BETWEEN ? AND ?"), (cut, last))
        conn.execute(q(conn, f"DELETE FROM {leaves} WHERE position BETWEEN ? AND ?"), (cut, last))
    code, report = watch(store_url, key, state)
    assert (code, findings(report)) == (1, [(
        "inconsistent",
        "the journal has 5 leaves, fewer than the 8 of the current checkpoint: it was truncated",
    )])  # fmt: skip  # before: ok, size 8
    assert state.read_text() == saved  # the evidence is kept


def test_an_early_leaf_rewritten_with_its_event_is_inconsistent(
    store_url: str, tmp_path: Path
) -> None:
    key = SigningKey.generate(ORIGIN)
    state = tmp_path / "monitor.json"
    with EventStore(store_url) as store:
        append_some(store, 6)
        sign_checkpoint(store, key)
    assert watch(store_url, key, state)[0] == 0
    with EventStore(store_url) as store:
        victim = store.read_raw_after(0, 100)[1]
        forged = victim.state[:-1] + b',"forged":true}'
        leaf = event_leaf(
            victim.id, str(victim.originator_id), victim.originator_version, victim.topic, forged
        )
        with behind_the_journals_back(store) as (conn, events, leaves):
            column = position_column(conn)
            conn.execute(q(conn, f"UPDATE {events} SET state = ? WHERE {column} = ?"),
                         (forged, victim.id))  # fmt: skip
            conn.execute(q(conn, f"UPDATE {leaves} SET leaf = ? WHERE position = ?"),
                         (leaf, victim.id))  # fmt: skip
    code, report = watch(store_url, key, state)
    message = (
        "the journal's first 6 leaves do not hash to the root of the current checkpoint: "
        "its history was rewritten"
    )
    assert (code, findings(report)) == (1, [("inconsistent", message)])  # before: ok
    # A fresh monitor (no state) is not fooled either: the store is not its signed tree.
    code, report = watch(store_url, key, tmp_path / "fresh.json")
    assert (code, findings(report)) == (1, [("inconsistent", message)])
    assert not (tmp_path / "fresh.json").exists()


def test_a_rewrite_below_the_saved_size_is_named_with_a_grown_checkpoint(
    tmp_path: Path,
) -> None:
    """The tail grown and re-signed over a rewritten early leaf (the stolen key): the new
    checkpoint's root is the store's, the saved one's is not."""
    store_url = f"sqlite:///{tmp_path / 'journal.db'}"
    key = SigningKey.generate(ORIGIN)
    with EventStore(store_url) as store:
        append_some(store, 5)
        saved = Checkpoint.parse(sign_checkpoint(store, key).split("\n\n")[0] + "\n")
        with behind_the_journals_back(store) as (conn, _, leaves):
            conn.execute(f"UPDATE {leaves} SET leaf = ? WHERE position = 2", (bytes(32),))
        append_some(store, 3)
        note = sign_checkpoint(store, key)
    source = StoreSource(store_url)
    try:
        assert source.note() == note
        report = assess(note, key.verifier(), [], saved, source.proof, source.leaves())
    finally:
        source.close()
    assert [(f["kind"], f["message"]) for f in report.findings] == [(
        "inconsistent",
        "the journal's first 5 leaves do not hash to the root of the checkpoint saved by the "
        "last check: its history was rewritten",
    )]  # fmt: skip


def test_an_honest_growing_journal_stays_ok(store_url: str, tmp_path: Path) -> None:
    key = SigningKey.generate(ORIGIN)
    state = tmp_path / "monitor.json"
    with EventStore(store_url) as store:
        append_some(store, 3)
        sign_checkpoint(store, key)
    assert watch(store_url, key, state)[0] == 0
    for _ in range(3):
        with EventStore(store_url) as store:
            append_some(store, 4)  # appended after the checkpoint: not under it
        code, report = watch(store_url, key, state)
        assert (code, report["findings"]) == (0, [])
        with EventStore(store_url) as store:
            sign_checkpoint(store, key)
        code, report = watch(store_url, key, state)
        assert (code, report["findings"]) == (0, [])
        assert report["checkpoint"]["size"] > report["previous"]["size"]
