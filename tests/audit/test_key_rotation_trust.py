"""Which journaled key rotations a signer trusts (decisions A7): only one signed by the key it
holds now, the new key, as well as by the old one, both named as the log. Whoever can write
the journal can make a key of the log's name; it was trusted on its own signature, and the
console marked a rewritten operation's receipt verified (found by a defect hunt)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_processes import run
from tampering import behind_the_journals_back, position_column, q

from blackops import Application, ExecutionContext
from blackops.audit.checkpoints import (
    CHECKPOINT,
    KEY_ROTATED,
    CheckpointService,
    rotate_key,
    rotation_text,
)
from blackops.audit.receipts import OPERATION_TERMINAL
from blackops.audit.tree import JournalTree
from blackops.console.views import terminal_receipt
from blackops.testing import FakeClock
from domain.context import Actor
from domain.events import NewEvent
from journal.backend_common import StoredRow
from journal.leaves import event_leaf
from journal.store import Append, EventStore
from replay.notes import Checkpoint, SigningKey, VerifierKey, add_signature_lines, sign_note
from replay.receipts import verify_receipt

ORIGIN = "example.com/blackops-test"
AT = "2026-12-01T09:00:00.000000Z"


@pytest.fixture
def app(store_url: str) -> Iterator[Application]:
    application = Application(store_url, clock=FakeClock(datetime(2026, 12, 1, 9, tzinfo=UTC)))

    @application.operation("t.ok")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"n": params["n"]}

    try:
        yield application
    finally:
        application.close()


def completed(store: EventStore) -> StoredRow:
    return next(r for r in store.read_raw_after(0, 10_000) if r.topic == "operation.completed")


def stream_of(store: EventStore, row: StoredRow) -> list[dict[str, Any]]:
    return [{"type": e.type, "position": e.position} for e in store.read_stream(row.originator_id)]


def rewrite(store: EventStore, row: StoredRow) -> None:
    """The event and its leaf rewritten, as someone with the database (no key) can."""
    forged = row.state[:-1] + b',"forged":true}'
    leaf = event_leaf(row.id, str(row.originator_id), row.originator_version, row.topic, forged)
    with behind_the_journals_back(store) as (conn, events, leaves):
        column = position_column(conn)
        conn.execute(q(conn, f"UPDATE {events} SET state = ? WHERE {column} = ?"),
                     (forged, row.id))  # fmt: skip
        conn.execute(q(conn, f"UPDATE {leaves} SET leaf = ? WHERE position = ?"), (leaf, row.id))


def journal(store: EventStore, topic: str, stream: str, data: dict[str, Any]) -> None:
    actor = {"actor": {"id": "x", "kind": "system"}}
    store.append(Append(stream, 0, [NewEvent(topic, AT, actor, data)]))


def journal_rotation(store: EventStore, old: VerifierKey, new: VerifierKey, statement: str) -> None:
    data = {"old": old.encode(), "new": new.encode(), "statement": statement}
    journal(store, KEY_ROTATED, f"custody:key-rotation:{uuid.uuid4()}", data)


def journal_checkpoint(store: EventStore, key: SigningKey) -> None:
    tree = JournalTree(store)
    tree.sync()
    note = sign_note(Checkpoint(key.name, tree.size, tree.root()).body(), key)
    data = {"tree_size": tree.size, "root": tree.root().hex(), "note": note,
            "key": key.verifier().encode()}  # fmt: skip
    journal(store, CHECKPOINT, f"custody:checkpoint:{uuid.uuid4()}", data)


def test_a_rotation_journaled_by_an_intruder_is_not_trusted(
    app: Application, tmp_path: Path
) -> None:
    real = SigningKey.generate(ORIGIN)
    for n in range(3):
        app.run("t.ok", {"n": n}, actor="a", tenant="default")
    first = CheckpointService(app.store, real, app.clock, key_path=tmp_path / "key").sign()
    assert first is not None
    # The intruder: the database, a key of the log's name, no log key.
    evil = SigningKey.generate(ORIGIN)
    text = rotation_text(evil.verifier(), real.verifier())
    journal_rotation(app.store, evil.verifier(), real.verifier(), sign_note(text, evil))
    # Nor with the real key's signature line of another text (its checkpoint) beside it.
    copied = first.split("\n\n")[1].splitlines()[0]
    pasted = add_signature_lines(sign_note(text, evil), [copied])
    journal_rotation(app.store, evil.verifier(), real.verifier(), pasted)
    victim = completed(app.store)
    rewrite(app.store, victim)
    journal_checkpoint(app.store, evil)

    service = CheckpointService(app.store, real, app.clock, key_path=tmp_path / "key")
    assert service.trusted_keys() == [real.verifier()]  # before: the intruder's key too
    view = terminal_receipt(service, stream_of(app.store, victim), OPERATION_TERMINAL)
    assert view.receipt is not None and '"forged":true' in view.receipt["entry"]
    assert not view.verified
    assert view.problem is not None and view.problem.startswith("unknown_key")


def test_a_rotation_signed_by_the_old_key_alone_or_of_another_name_is_not_trusted(
    app: Application,
) -> None:
    old, new = SigningKey.generate(ORIGIN), SigningKey.generate(ORIGIN)
    text = rotation_text(old.verifier(), new.verifier())
    # As journaled before the new key signed rotations too: not trusted automatically.
    journal_rotation(app.store, old.verifier(), new.verifier(), sign_note(text, old))
    service = CheckpointService(app.store, new, app.clock)
    assert service.trusted_keys() == [new.verifier()]  # before: [new, old]
    # Both keys sign, but the old one is another log's (its name is not the origin).
    other = SigningKey.generate("elsewhere.example/log")
    text = rotation_text(other.verifier(), new.verifier())
    by_new = sign_note(text, new).split("\n\n")[1]
    journal_rotation(
        app.store,
        other.verifier(),
        new.verifier(),
        add_signature_lines(sign_note(text, other), [by_new]),
    )
    assert service.trusted_keys() == [new.verifier()]  # before: [new, other]
    # Journaling the rotation again with both keys (keys rotate) trusts the old key.
    rotate_key(app.store, old, new, actor=Actor("ops"), clock=app.clock)
    assert service.trusted_keys() == [new.verifier(), old.verifier()]


def test_a_rotation_made_with_the_cli_keeps_old_receipts_verified(
    store_url: str, tmp_path: Path
) -> None:
    env = {"BLACKOPS_HOME": str(tmp_path / "home")}
    files = {name: tmp_path / f"{name}.key" for name in ("old", "new")}
    for path in files.values():
        made = subprocess.run(
            [sys.executable, "-m", "blackops", "keys", "generate", "--name", ORIGIN,
             "--output", str(path)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    old, new = (SigningKey.parse(files[n].read_text().strip()) for n in ("old", "new"))
    app = Application(store_url)
    app.operation("t.ok")(lambda ctx, params: {})
    operation = app.run("t.ok", {}, actor="a", tenant="default").operation_id
    app.close()
    receipt = run("op", "receipt", operation, "--json", "--signing-key", str(files["old"]),
                  store=store_url, env=env)  # fmt: skip
    assert receipt.returncode == 0, receipt.stderr
    rotated = run("keys", "rotate", "--signing-key", str(files["old"]),
                  "--new-key", str(files["new"]), store=store_url, env=env)  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    signed = run("journal", "checkpoint", "--signing-key", str(files["new"]),
                 store=store_url, env=env)  # fmt: skip  # consistent across the rotation
    assert signed.returncode == 0, signed.stderr
    with EventStore(store_url) as store:
        service = CheckpointService(store, new, FakeClock(datetime(2026, 12, 1, tzinfo=UTC)))
        assert service.trusted_keys() == [new.verifier(), old.verifier()]
        checked = verify_receipt(json.loads(receipt.stdout), service.trusted_keys())
        assert checked.origin == ORIGIN
        row = completed(store)
        # The console's mark, now under the new key's checkpoint.
        view = terminal_receipt(service, stream_of(store, row), OPERATION_TERMINAL)
        assert view.verified, view.problem
