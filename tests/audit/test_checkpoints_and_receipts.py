"""Signed checkpoints, proofs and receipts on SQLite and PostgreSQL (blackops/audit).

The signer signs C2SP checkpoints of the journal's tree and journals them; it refuses
(``journal_rewritten``) when SQL behind the journal's back rewrote an event together with
its leaf, or deleted the tail with its leaves. Proofs from the kept tree equal those of
replay.merkle's reference over all leaves; receipts verify offline, also after the
operation is purged, and still verify against their own checkpoint after an attack.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_processes import run
from tampering import behind_the_journals_back, position_column, q

from blackops import Application, ExecutionContext
from blackops.audit.checkpoints import (
    RECENT_CHECKPOINTS,
    CheckpointService,
    JournalRewritten,
    rotate_key,
)
from blackops.audit.receipts import OPERATION_TERMINAL, receipt_for, terminal_position
from blackops.audit.tree import JournalTree
from blackops.testing import FakeClock
from domain.context import Actor
from domain.documents import canonical_envelope
from domain.retention import Retention
from journal.codec import decode_state
from journal.leaves import event_leaf
from journal.store import EventStore
from replay.merkle import (
    Frontier,
    consistency_proof,
    inclusion_proof,
    root_of,
    verify_consistency,
)
from replay.notes import Checkpoint, SigningKey, open_note, parse_note, sign_note
from replay.receipts import ReceiptError, TlogProof, open_checkpoint, verify_receipt
from replay.verify import verify_store

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ORIGIN = "example.com/blackops-test"


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate(ORIGIN)


@pytest.fixture
def app(store_url: str) -> Iterator[Application]:
    retention = Retention(journal_seconds=3600, outcome_seconds=3600)
    application = Application(store_url, clock=FakeClock(START), retention=retention)

    @application.operation("t.ok")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"n": params["n"]}

    try:
        yield application
    finally:
        application.close()


def run_ops(app: Application, count: int) -> list[str]:
    return [
        app.run("t.ok", {"n": n}, actor="a", tenant="default").operation_id for n in range(count)
    ]


def service_for(app: Application, key: SigningKey | None, tmp_path: Path) -> CheckpointService:
    return CheckpointService(app.store, key, app.clock, key_path=tmp_path / "key")


def verify_receipt_cli(path: Path, document: str, key: str) -> subprocess.CompletedProcess[str]:
    """``blackops verify-receipt FILE --key K --json`` on ``document`` written to ``path``,
    as an auditor runs it."""
    path.write_text(document)
    return subprocess.run(
        [sys.executable, "-m", "blackops", "verify-receipt", str(path), "--key", key, "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def all_leaves(store: EventStore) -> list[bytes]:
    return [leaf for _, leaf in store.read_leaves(0, 1_000_000)]


def test_a_signed_checkpoint_is_a_c2sp_note_journaled_and_verified(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    run_ops(app, 3)
    service = service_for(app, key, tmp_path)
    seen: list[str] = []
    service.listeners.append(seen.append)
    note = service.sign()
    assert note is not None and seen == [note]
    opened, _ = open_note(note, [key.verifier()])
    checkpoint = Checkpoint.parse(opened.text)
    leaves = all_leaves(app.store)
    assert checkpoint.origin == ORIGIN and checkpoint.size == len(leaves) - 1  # + its own event
    assert checkpoint.root == root_of(leaves[:-1])
    [event] = app.store.read_topics(["journal.checkpoint"])
    assert event.data["note"] == note and event.data["tree_size"] == checkpoint.size
    assert service.published() == note
    assert verify_store(app.store).ok  # its tree head is re-checked like every other
    assert service.sign() is None  # nothing new: nothing signed
    run_ops(app, 1)
    second = service.sign()
    assert second is not None and second != note
    saved = (tmp_path / "key.checkpoint").read_text()
    assert saved.startswith(second + "\ncompact-range\n")
    nodes = [base64.b64decode(line) for line in saved.split("\ncompact-range\n")[1].split()]
    size = Checkpoint.parse(parse_note(second).text).size
    assert Frontier.restore(size, nodes).root() == Checkpoint.parse(parse_note(second).text).root


def test_readers_get_the_newest_signed_checkpoints_of_every_signer(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    """Decisions U19: ``recent`` keeps the newest ``RECENT_CHECKPOINTS`` journaled notes (an
    unsigned tree head is not one), ``latest`` is the newest, whichever service signed."""
    from replay.custody import record_checkpoint

    signers = [service_for(app, key, tmp_path), service_for(app, key, tmp_path)]
    reader = service_for(app, None, tmp_path)
    assert reader.recent(1) == [] and reader.latest() is None
    for n in range(RECENT_CHECKPOINTS + 2):
        run_ops(app, 1)
        signers[n % 2].sign()
        if n == RECENT_CHECKPOINTS:
            record_checkpoint(app.store, actor=Actor("ops"), clock=app.clock)
    notes = [e for e in app.store.read_topics(["journal.checkpoint"]) if "note" in e.data]
    kept = reader.recent(RECENT_CHECKPOINTS)
    assert [e.position for e in kept] == [e.position for e in notes[-RECENT_CHECKPOINTS:]]
    assert reader.latest() == notes[-1].data["note"] == signers[1].latest()
    assert [e.position for e in reader.recent(2)] == [e.position for e in notes[-2:]]
    for wrong in (0, RECENT_CHECKPOINTS + 1):
        with pytest.raises(ValueError, match="count must be"):
            reader.recent(wrong)


def test_a_reader_does_not_wait_for_a_signing_in_progress(
    app: Application, key: SigningKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decisions U19: ``latest`` (``GET /v1/checkpoint``, the journal page) answers while a
    signing checks its leaves (the first one of a process checks every leaf)."""
    import threading

    run_ops(app, 2)
    service = service_for(app, key, tmp_path)
    first = service.sign()
    run_ops(app, 1)
    checking, release = threading.Event(), threading.Event()
    recheck = service.tree.recheck

    def slow(start: int, end: int) -> None:
        checking.set()
        release.wait(60)
        recheck(start, end)

    monkeypatch.setattr(service.tree, "recheck", slow)
    signer = threading.Thread(target=service.sign)
    signer.start()
    found: list[str | None] = []
    reader = threading.Thread(target=lambda: found.append(service.latest()))
    try:
        assert checking.wait(60)
        reader.start()
        reader.join(30)
        assert found == [first]  # not blocked behind the signing
    finally:
        release.set()
        signer.join()
        reader.join()
    assert service.latest() not in (None, first)  # the signing went on


def test_tree_proofs_equal_the_reference_over_all_leaves(app: Application, key: SigningKey) -> None:
    # Enough events for complete 256-leaf tiles and a ragged edge.
    for _ in range(3):
        run_ops(app, 60)
    tree = JournalTree(app.store)
    tree.sync()
    leaves = all_leaves(app.store)
    n = len(leaves)
    assert n > 512 and tree.size == n and tree.root() == root_of(leaves)
    for size in (1, 2, 255, 256, 257, 511, 512, n - 1, n):
        assert tree.root(size) == root_of(leaves[:size])
        for index in {0, size // 2, size - 1}:
            assert tree.inclusion(index, size) == inclusion_proof(index, leaves[:size])
        for old in {1, size // 3 or 1, size}:
            assert tree.consistency(old, size) == consistency_proof(old, leaves[:size])
    positions = [p for p, _ in app.store.read_leaves(0, 1_000_000)]
    assert [tree.index_of(p) for p in positions[:5]] == [0, 1, 2, 3, 4]
    assert tree.index_of(positions[-1] + 1) is None


def test_a_receipt_verifies_offline_and_after_purge(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    [operation] = run_ops(app, 1)
    run_ops(app, 2)
    service = service_for(app, key, tmp_path)
    position = terminal_position(app.events(operation), OPERATION_TERMINAL)
    receipt = receipt_for(service, position)  # no checkpoint yet: one is signed for it
    checkpoint = verify_receipt(json.loads(json.dumps(receipt)), [key.verifier()])
    assert json.loads(receipt["entry"])["position"] == position
    assert json.loads(receipt["entry"])["type"] == "operation.completed"
    assert checkpoint.size > receipt["index"]
    # Tampering with any part is refused.
    forged = {**receipt, "entry": receipt["entry"].replace("completed", "rejected")}
    with pytest.raises(ReceiptError) as refused:
        verify_receipt(forged, [key.verifier()])
    assert refused.value.code == "not_included"
    with pytest.raises(ReceiptError) as refused:
        verify_receipt({**receipt, "index": receipt["index"] + 1}, [key.verifier()])
    assert refused.value.code == "malformed_receipt"
    with pytest.raises(ReceiptError) as refused:
        verify_receipt(receipt, [SigningKey.generate(ORIGIN).verifier()])
    assert refused.value.code == "unknown_key"
    # Purged: the events are gone, the leaves stay, the receipt still verifies.
    app.clock.advance(7200)  # type: ignore[attr-defined]
    assert app.purge(actor=Actor("ops", "admin")).items
    assert not [e for e in app.store.read_raw_after(position - 1, 1) if e.id == position]
    assert verify_receipt(receipt, [key.verifier()]) == checkpoint
    assert verify_store(app.store).ok


def test_the_signer_refuses_a_rewritten_history(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    run_ops(app, 4)
    service = service_for(app, key, tmp_path)
    first = service.sign()
    assert first is not None
    [operation] = run_ops(app, 1)
    position = terminal_position(app.events(operation), OPERATION_TERMINAL)
    receipt = receipt_for(service, position)
    rewrite_event(app, 2)  # an early event and its recorded leaf
    run_ops(app, 1)
    # The live signer (its tree folded the old leaf in) and a fresh one both refuse.
    for signer in (service, service_for(app, key, tmp_path)):
        with pytest.raises(JournalRewritten) as refused:
            signer.sign()
        assert refused.value.code == "journal_rewritten"
    assert app.store.read_topics(["journal.checkpoint"])[-1].data["note"] != ""
    assert len(app.store.read_topics(["journal.checkpoint"])) == 2  # nothing more signed
    # The receipt taken before the attack still verifies against its own checkpoint.
    verify_receipt(receipt, [key.verifier()])


def test_the_signer_refuses_a_truncated_tail(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    run_ops(app, 4)
    service = service_for(app, key, tmp_path)
    service.sign()
    signed = Checkpoint.parse(service.published().split("\n\n")[0] + "\n")
    cut = app.store.read_raw_after(0, 10_000)[signed.size - 3].id
    with behind_the_journals_back(app.store) as (conn, events, leaves):
        # Deleting the tail with its leaves (and the checkpoint event in it).
        column = position_column(conn)
        conn.execute(q(conn, f"DELETE FROM {events} WHERE {column} >= ?"), (cut,))
        conn.execute(q(conn, f"DELETE FROM {leaves} WHERE position >= ?"), (cut,))
    assert verify_store(app.store).ok  # the old verify cannot see a truncation
    with pytest.raises(JournalRewritten, match="gone"):  # the live signer's tree
        service.sign(force=True)
    with pytest.raises(JournalRewritten, match="fewer"):  # a fresh one: the state file
        service_for(app, key, tmp_path).sign(force=True)


def test_old_checkpoints_stay_verifiable_after_a_key_rotation(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    run_ops(app, 2)
    old_note = service_for(app, key, tmp_path).sign()
    assert old_note is not None
    new_key = SigningKey.generate(ORIGIN)
    rotate_key(app.store, key, new_key, actor=Actor("ops"), clock=app.clock)
    run_ops(app, 1)
    (tmp_path / "new").mkdir()
    rotated = service_for(app, new_key, tmp_path / "new")
    assert rotated.trusted_keys() == [new_key.verifier(), key.verifier()]
    new_note = rotated.sign()  # it checks consistency with the old key's checkpoint
    assert new_note is not None
    open_checkpoint(old_note, [key.verifier()])
    new = open_checkpoint(new_note, [new_key.verifier()])
    old = open_checkpoint(old_note, [key.verifier()])
    tree = rotated.synced_tree()
    assert verify_consistency(old.size, new.size, old.root, new.root,
                              tree.consistency(old.size, new.size))  # fmt: skip


def test_tlog_proof_text_round_trips() -> None:
    proof = TlogProof(
        index=5, path=(b"\x01" * 32, b"\x02" * 32), checkpoint="o\n1\nx\n\n— o AA==\n"
    )
    text = proof.text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nindex 5\nAQEB")
    assert TlogProof.parse(text) == proof
    for bad in ("c2sp.org/tlog-proof@v1\nindex 05\n\nx", "nope\nindex 1\n\nx",
                "c2sp.org/tlog-proof@v1\nindex 1\nAAAA\n\nx"):  # fmt: skip
        with pytest.raises(ReceiptError):
            TlogProof.parse(bad)


def test_cli_keys_checkpoint_consistency_receipt(store_url: str, tmp_path: Path) -> None:
    env = {"BLACKOPS_HOME": str(tmp_path / "home")}
    key_file = tmp_path / "log.key"

    made = subprocess.run(
        [sys.executable, "-m", "blackops", "keys", "generate", "--name", ORIGIN,
         "--output", str(key_file), "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    body = json.loads(made.stdout)
    assert set(body) == {"name", "verifierKey", "keyId"} and body["name"] == ORIGIN
    assert key_file.stat().st_mode & 0o777 == 0o600
    app = Application(store_url)
    app.operation("t.ok")(lambda ctx, params: {})
    ids = [app.run("t.ok", {}, actor="a", tenant="default").operation_id for _ in range(3)]
    app.close()
    signed = run("journal", "checkpoint", "--json", "--signing-key", str(key_file),
                 store=store_url, env=env)  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    first = json.loads(signed.stdout)
    open_checkpoint(first["note"], [SigningKey.parse(key_file.read_text().strip()).verifier()])
    no_key = run("journal", "checkpoint", store=store_url, env=env)
    assert no_key.returncode == 1 and "no signing key" in no_key.stderr
    again = run("journal", "checkpoint", "--json", store=store_url,
                env={**env, "BLACKOPS_SIGNING_KEY": str(key_file)})  # fmt: skip
    second = json.loads(again.stdout)
    proof = run("journal", "consistency", str(first["treeSize"]), str(second["treeSize"]),
                store=store_url, env=env)  # fmt: skip
    assert proof.returncode == 0, proof.stderr
    old, new = (
        Checkpoint.parse(first["note"].split("\n\n")[0] + "\n"),
        Checkpoint.parse(second["note"].split("\n\n")[0] + "\n"),
    )

    path = [base64.b64decode(line) for line in proof.stdout.split()]
    assert verify_consistency(old.size, new.size, old.root, new.root, path)
    receipt = run("op", "receipt", ids[0], "--json", "--signing-key", str(key_file),
                  store=store_url, env=env)  # fmt: skip
    assert receipt.returncode == 0, receipt.stderr
    receipt_file = tmp_path / "r.json"
    checked = verify_receipt_cli(receipt_file, receipt.stdout, body["verifierKey"])
    assert checked.returncode == 0 and json.loads(checked.stdout)["ok"] is True
    tampered = json.loads(receipt.stdout)
    tampered["entry"] = tampered["entry"].replace("completed", "rejected")
    refused = verify_receipt_cli(receipt_file, json.dumps(tampered), body["verifierKey"])
    assert refused.returncode == 1 and json.loads(refused.stdout)["problem"] == "not_included"


def test_the_automatic_signer_signs_after_appends_and_only_then(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    import time

    from blackops.audit.checkpoints import AutoCheckpointer

    service = service_for(app, key, tmp_path)
    signer = AutoCheckpointer(service, cadence=0.05).start()
    try:
        run_ops(app, 2)
        deadline = time.monotonic() + 60

        def settled() -> list[Any]:
            """The checkpoints, once the newest covers every other event (the signer may
            have signed between the two operations: then it signs once more)."""
            while True:
                found = app.store.read_topics(["journal.checkpoint"])
                if found and found[-1].position == app.store.last_position():
                    return found
                assert time.monotonic() < deadline, "no checkpoint after the appends"
                time.sleep(0.05)

        first = settled()
        time.sleep(0.5)  # ten more ticks with nothing appended: nothing more signed
        assert len(app.store.read_topics(["journal.checkpoint"])) == len(first)
        run_ops(app, 1)
        while len(app.store.read_topics(["journal.checkpoint"])) <= len(first):
            assert time.monotonic() < deadline, "no checkpoint after an append"
            time.sleep(0.05)
    finally:
        signer.stop()
    second = app.store.read_topics(["journal.checkpoint"])[len(first)]
    assert second.data["tree_size"] > first[-1].data["tree_size"]


def overwrite(store: EventStore, stored: Any, state: bytes) -> None:
    """Replace a stored event's state and its recorded leaf, as someone holding the database
    could (the leaf recomputed, so the tree agrees with the events)."""
    leaf = event_leaf(
        stored.id, str(stored.originator_id), stored.originator_version, stored.topic, state
    )
    with behind_the_journals_back(store) as (conn, events, leaves):
        conn.execute(
            q(conn, f"UPDATE {events} SET state = ? WHERE originator_id = ? AND "
                    "originator_version = ?"),
            (state, stored.originator_id, stored.originator_version),
        )  # fmt: skip
        conn.execute(q(conn, f"UPDATE {leaves} SET leaf = ? WHERE position = ?"), (leaf, stored.id))


def rewrite_event(app: Application, index: int, key: SigningKey | None = None) -> int:
    """Rewrite the event at ``index`` with its leaf, as someone holding the database could;
    with ``key`` (the signer's, stolen) also re-sign every journaled checkpoint over it."""
    victim = app.store.read_raw_after(0, 10_000)[index]
    forged = victim.state.replace(b'"attempt":1}}', b'"attempt":7}}')
    if forged == victim.state:
        forged = victim.state[:-1] + b',"zz":1}'
    overwrite(app.store, victim, forged)
    if key is not None:
        tree = all_leaves(app.store)
        for stored in app.store.read_raw_after(0, 10_000):
            if stored.topic != "journal.checkpoint":
                continue
            at, context, data = decode_state(stored.state)
            size = int(data["tree_size"])
            note = sign_note(Checkpoint(key.name, size, root_of(tree[:size])).body(), key)
            data = {**data, "root": root_of(tree[:size]).hex(), "note": note}
            overwrite(app.store, stored, canonical_envelope({"at": at, "context": context,
                                                             "data": data}))  # fmt: skip
            tree = all_leaves(app.store)
    return victim.id


def test_a_re_signed_history_of_equal_size_is_refused_by_a_fresh_signer(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    run_ops(app, 4)
    service = service_for(app, key, tmp_path)
    assert service.sign() is not None
    # The attacker holds the database and the key: the journaled checkpoint is re-signed
    # over the rewritten leaves, so it agrees with the store; only the one saved beside
    # the key (same size) remembers the real root.
    rewrite_event(app, 2, key)
    assert verify_store(app.store).ok  # the rewrite is thorough
    fresh = service_for(app, key, tmp_path)
    with pytest.raises(JournalRewritten, match="disagree") as refused:
        fresh.sign(force=True)
    assert refused.value.code == "journal_rewritten"
    assert len(app.store.read_topics(["journal.checkpoint"])) == 1  # nothing signed


def test_a_live_signer_finds_an_older_rewrite_within_one_sweep(
    app: Application, key: SigningKey, tmp_path: Path
) -> None:
    run_ops(app, 40)
    service = service_for(app, key, tmp_path)
    service.recheck_per_signing = 16
    assert service.sign() is not None  # the start-up check reads every leaf
    size = service.tree.size
    rewrite_event(app, size - 20)  # far from the first windows, before the signed size
    signed, rounds, refusal = 0, size // 16 + 2, None  # one sweep, and the wrapping round
    for _ in range(rounds):
        try:
            service.sign(force=True)
        except JournalRewritten as error:
            refusal = error
            break
        signed += 1
    assert refusal is not None, f"no refusal within {rounds} signings"
    assert "differs" in str(refusal) or "hashes" in str(refusal)
    assert signed > 0  # the window is bounded: found by the sweep, not by a full re-read
    with pytest.raises(JournalRewritten):  # and refused again, and by a fresh signer
        service_for(app, key, tmp_path).sign(force=True)


def test_cli_wf_receipt_of_an_instance_verifies_offline(store_url: str, tmp_path: Path) -> None:
    """``blackops wf receipt UID ID``: the receipt of the instance's terminal event (the
    document ``GET .../instances/{id}/receipt`` answers), or of ``--position``."""

    from blackops.audit.keys import write_signing_key
    from domain.documents import canonical_json
    from journal.instances import instance_stream

    key = SigningKey.generate(ORIGIN)
    key_file = tmp_path / "log.key"
    write_signing_key(str(key_file), key)
    env = {"BLACKOPS_HOME": str(tmp_path / "home"), "USER": "ops"}

    def wf(*args: str) -> subprocess.CompletedProcess[str]:
        return run("wf", *args, "--app", "examples.shop:app", store=store_url, env=env)

    def verified(document: str) -> bool:
        checked = verify_receipt_cli(tmp_path / "receipt.json", document, key.verifier().encode())
        return checked.returncode == 0 and json.loads(checked.stdout)["ok"] is True

    assert wf("create", "OrderApproval", "--id", "o-1").returncode == 0
    early = wf("receipt", "OrderApproval", "o-1", "--json", "--signing-key", str(key_file))
    assert early.returncode == 1 and json.loads(early.stdout)["error"]["code"] == "not_found"
    assert wf("terminate", "OrderApproval", "o-1").returncode == 0
    with EventStore(store_url) as store:
        events = store.read_stream(instance_stream("OrderApproval", "o-1"))
    assert events[-1].type == "workflow.terminated"
    answer = wf("receipt", "OrderApproval", "o-1", "--json", "--signing-key", str(key_file))
    assert answer.returncode == 0, answer.stderr
    receipt = json.loads(answer.stdout)
    assert set(receipt) == {"entry", "index", "proof"}
    assert json.loads(receipt["entry"])["position"] == events[-1].position
    assert json.loads(receipt["entry"])["type"] == "workflow.terminated"
    assert verified(answer.stdout)
    forged = {**receipt, "entry": receipt["entry"].replace("terminated", "completed")}
    assert not verified(json.dumps(forged))
    # Any event of the instance with --position; the human form is the same document.
    created = wf("receipt", "OrderApproval", "o-1", "--position", str(events[0].position),
                 "--signing-key", str(key_file))  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["entry"] == canonical_json(events[0].to_observed()).decode()
    assert verified(created.stdout)
    with EventStore(store_url) as store:
        before = store.last_position()
        other = next(p for p, _ in store.read_leaves(0, 10_000) if p not in
                     {e.position for e in events})  # fmt: skip
    for args, code in (
        (("o-1", "--position", str(other)), "invalid_request"),
        (("nope",), "unknown_instance"),
    ):
        refused = wf("receipt", "OrderApproval", *args, "--json", "--signing-key", str(key_file))
        assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["code"] == code
    with EventStore(store_url) as store:
        assert store.last_position() == before  # bad input changes nothing
    # The HTTP route answers the same document (a read-only server: the CLI's checkpoint).
    import importlib

    from conftest import spaces
    from fastapi.testclient import TestClient

    from blackops.http.app import create_http_app

    served = Application(store_url)
    try:
        served.register_workflow(importlib.import_module("examples.shop").OrderApproval)
        spaces(served, "default")
        with TestClient(create_http_app(served, "t-123")) as http:
            got = http.get(
                "/v1/spaces/default/workflows/OrderApproval/instances/o-1/receipt",
                headers={"Authorization": "Bearer t-123"},
            )
    finally:
        served.close()
    assert got.status_code == 200, got.text
    assert got.json() == receipt


def test_a_key_name_outside_ascii_is_written_read_and_signs(tmp_path: Path) -> None:
    """C2SP key names are UTF-8: ``keys generate --name é.example/log`` wrote an empty key
    file and a traceback (the file was opened as ASCII after its create; found by a defect
    hunt, stop 38). Now it writes the key, and the key signs a checkpoint its verifier
    key opens."""
    from replay.notes import VerifierKey

    env = {"BLACKOPS_HOME": str(tmp_path / "home")}
    key_file, name = tmp_path / "log.key", "\u00e9.example/log"
    made = subprocess.run(
        [sys.executable, "-m", "blackops", "keys", "generate", "--name", name,
         "--output", str(key_file), "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0 and "Traceback" not in made.stderr, made.stderr
    body = json.loads(made.stdout)
    assert body["name"] == name
    store_url = f"sqlite:///{tmp_path}/j.sqlite3"
    app = Application(store_url)
    app.operation("t.ok")(lambda ctx, params: {})
    app.run("t.ok", {}, actor="a", tenant="default")
    app.close()
    signed = run("journal", "checkpoint", "--json", "--signing-key", str(key_file),
                 store=store_url, env=env)  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    note = json.loads(signed.stdout)["note"]
    assert open_checkpoint(note, [VerifierKey.parse(body["verifierKey"])]).size >= 1
