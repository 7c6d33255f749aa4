"""Tamper evidence (OL-11, Journal page): Merkle leaves recorded at append time, verify,
manifests, vectors.

Live verification on SQLite and PostgreSQL against real tampering done with SQL behind
the journal's back (a modified event, a deleted one, an inserted one, a swapped pair,
and a rewrite that also forges the recorded leaves, caught by an earlier tree head);
offline verification of an export against its manifest with no database; RFC 6962
arithmetic checked against an independent recursive definition; fixed vectors in
tests/vectors/ that any other implementation can check itself against.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_processes import run
from tampering import behind_the_journals_back, position_column, q

from blackops import Application, ExecutionContext, Retryable, Supervision
from blackops.audit.checkpoints import CheckpointService, JournalRewritten
from blackops.testing import FakeClock
from domain.context import Actor
from domain.events import NewEvent
from journal.leaves import entry_bytes, leaf_hash
from journal.store import Append, EventStore
from replay.custody import export_with_manifest, record_checkpoint
from replay.integrity import IntegrityError
from replay.merkle import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    node_hash,
    root_of,
    verify_consistency,
    verify_inclusion,
)
from replay.notes import SigningKey
from replay.verify import verify_export, verify_store

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
CLOCK_START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def fill(app: Application) -> list[str]:
    @app.operation("t.ok")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"n": params["n"]}

    @app.operation("t.flaky", supervision=Supervision(max_attempts=2))
    def flaky(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        if ctx.attempt == 1:
            raise Retryable("once")

    ids = [
        app.submit("t.ok", {"n": n, "\u00e9": "\U0001f600"}, actor="a", tenant="t")
        for n in range(4)
    ]
    ids.append(app.submit("t.flaky", {}, actor="a", tenant="t"))
    ids.append(app.run("t.ok", {"n": 9}, actor="a", tenant="t").operation_id)
    asyncio.run(app.work_until_idle())
    return ids


def rows(store: EventStore) -> list[Any]:
    return store.read_raw_after(0, 10_000)


@pytest.fixture
def filled(store_url: str) -> Iterator[Application]:
    app = Application(store_url, clock=FakeClock(CLOCK_START))
    fill(app)
    try:
        yield app
    finally:
        app.close()


def test_a_clean_journal_verifies_and_its_root_is_recomputable(filled: Application) -> None:
    report = verify_store(filled.store)
    assert report.ok, report.problems
    events = rows(filled.store)
    assert report.events == report.tree_size == len(events)
    # The recorded leaves are exactly the hashes of the observed lines' canonical bytes.
    recomputed = [
        leaf_hash(entry_bytes(r.id, str(r.originator_id), r.originator_version, r.topic, r.state))
        for r in events
    ]
    assert [leaf for _, leaf in filled.store.read_leaves(0, 10_000)] == recomputed
    assert report.root == root_of(recomputed).hex()


def tamper_position(store: EventStore) -> Any:
    """An event in the middle of some stream (its version 2)."""
    return next(r for r in rows(store) if r.originator_version == 2 and r.id > 3)


def test_a_modified_event_is_named(filled: Application) -> None:
    victim = tamper_position(filled.store)
    forged = victim.state.replace(b"attempt", b"atempt")
    with behind_the_journals_back(filled.store) as (conn, events, _):
        conn.execute(
            q(
                conn,
                f"UPDATE {events} SET state = ? WHERE originator_id = ? AND originator_version = ?",
            ),
            (forged, victim.originator_id, 2),
        )
    report = verify_store(filled.store)
    assert not report.ok
    first = report.problems[0]
    assert (first.kind, first.position) == ("modified", victim.id)


@pytest.mark.parametrize("value", [7, 2.5, "abc"], ids=["integer", "real", "text"])
def test_a_leaf_or_state_of_another_type_is_named_modified(tmp_path: Path, value: Any) -> None:
    """SQLite keeps whatever type is written behind the journal's back (PostgreSQL refuses
    it): read as bytes, it is a modified event to verify and export, never a crash."""
    filled = Application(f"sqlite:///{tmp_path}/journal.db", clock=FakeClock(CLOCK_START))
    try:
        fill(filled)
        victim = tamper_position(filled.store)
        leaf = dict(filled.store.read_leaves(0, 10_000))[victim.id]
        places = (("leaf", "blackops_leaves", "position"), ("state", "stored_events", "rowid"))
        for column, table, key in places:
            with behind_the_journals_back(filled.store) as (conn, _, _):
                conn.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (value, victim.id))
            first = verify_store(filled.store).problems[0]
            assert (first.kind, first.position) == ("modified", victim.id), column
            with pytest.raises(IntegrityError) as refused:
                export_with_manifest(
                    filled.store, io.BytesIO(), actor=Actor("auditor"), clock=FakeClock(CLOCK_START)
                )
            assert refused.value.position == victim.id, column
            with behind_the_journals_back(filled.store) as (conn, events, leaves):  # put it back
                conn.execute(f"UPDATE {leaves} SET leaf = ? WHERE position = ?", (leaf, victim.id))
                conn.execute(
                    f"UPDATE {events} SET state = ? WHERE rowid = ?", (victim.state, victim.id)
                )
            assert verify_store(filled.store).ok
    finally:
        filled.close()


def test_a_deleted_event_is_named(filled: Application) -> None:
    victim = tamper_position(filled.store)
    with behind_the_journals_back(filled.store) as (conn, events, _):
        conn.execute(
            q(conn, f"DELETE FROM {events} WHERE originator_id = ? AND originator_version = ?"),
            (victim.originator_id, 2),
        )
    first = verify_store(filled.store).problems[0]
    assert (first.kind, first.position) == ("deleted", victim.id)


def test_an_inserted_event_is_named(filled: Application) -> None:
    state = b'{"at":"2026-11-30T09:00:00.000000Z","context":{},"data":{"forged":true}}'
    with behind_the_journals_back(filled.store) as (conn, events, _):
        conn.execute(
            q(
                conn,
                f"INSERT INTO {events} (originator_id, originator_version, topic, "
                "state) VALUES (?, ?, ?, ?)",
            ),
            ("forged", 1, "operation.received", state),
        )
    inserted = rows(filled.store)[-1]
    assert str(inserted.originator_id) == "forged"
    first = verify_store(filled.store).problems[0]
    assert (first.kind, first.position) == ("inserted", inserted.id)


@pytest.mark.parametrize("position", [0, -7])
def test_an_event_below_position_one_is_named_inserted(filled: Application, position: int) -> None:
    """Appends give positions from 1; a row placed below is in no tree, yet its stream's
    readers see it (here as the next version of a real operation), so verify must name it."""
    victim = tamper_position(filled.store)
    stream = str(victim.originator_id)
    next_version = len(filled.store.read_stream(stream)) + 1
    with behind_the_journals_back(filled.store) as (conn, events, _):
        column = position_column(conn)
        conn.execute(
            q(
                conn,
                f"INSERT INTO {events} ({column}, originator_id, originator_version, topic, "
                "state) VALUES (?, ?, ?, ?, ?)",
            ),
            (position, victim.originator_id, next_version, "operation.forged", victim.state),
        )
    assert filled.store.read_stream(stream)[-1].type == "operation.forged"
    report = verify_store(filled.store)
    assert not report.ok
    first = report.problems[0]
    assert (first.kind, first.position) == ("inserted", position)


def test_a_swapped_pair_is_named_at_the_first(filled: Application) -> None:
    events_before = rows(filled.store)
    a, b = events_before[4], events_before[5]
    with behind_the_journals_back(filled.store) as (conn, events, _):
        for target, source in ((a, b), (b, a)):
            conn.execute(
                q(
                    conn,
                    f"UPDATE {events} SET state = ? WHERE originator_id = ? AND "
                    "originator_version = ?",
                ),
                (source.state, target.originator_id, target.originator_version),
            )
    first = verify_store(filled.store).problems[0]
    assert (first.kind, first.position) == ("modified", a.id)


def rewrite_with_its_leaf(store: EventStore, victim: Any, forged: bytes) -> None:
    """``victim``'s state replaced by ``forged``, and its recorded leaf by the one that
    matches: what someone with database access and no signing key can do."""
    version = victim.originator_version
    leaf = leaf_hash(
        entry_bytes(victim.id, str(victim.originator_id), version, victim.topic, forged)
    )
    with behind_the_journals_back(store) as (conn, events, leaves):
        conn.execute(
            q(
                conn,
                f"UPDATE {events} SET state = ? WHERE originator_id = ? AND originator_version = ?",
            ),
            (forged, victim.originator_id, version),
        )
        conn.execute(q(conn, f"UPDATE {leaves} SET leaf = ? WHERE position = ?"), (leaf, victim.id))


def test_a_forged_history_is_caught_by_an_earlier_tree_head(filled: Application) -> None:
    """Rewriting an event *and* its recorded leaf passes the leaf check, but not the tree
    head a checkpoint recorded before (a consistency failure)."""
    head = record_checkpoint(filled.store, actor=Actor("auditor"), clock=FakeClock(CLOCK_START))
    victim = tamper_position(filled.store)
    forged = victim.state.replace(b"attempt", b"atempt")
    rewrite_with_its_leaf(filled.store, victim, forged)
    report = verify_store(filled.store)
    assert [p.kind for p in report.problems] == ["tree_head"]
    assert report.problems[0].position == head["position"]


def test_export_refuses_a_journal_that_no_longer_verifies(filled: Application) -> None:
    victim = tamper_position(filled.store)
    with behind_the_journals_back(filled.store) as (conn, events, _):
        conn.execute(
            q(
                conn,
                f"UPDATE {events} SET state = ? WHERE originator_id = ? AND originator_version = ?",
            ),
            (victim.state.replace(b"attempt", b"atempt"), victim.originator_id, 2),
        )
    with pytest.raises(IntegrityError) as refused:
        export_with_manifest(filled.store, io.BytesIO(), actor=Actor("a"), clock=FakeClock())
    assert refused.value.position == victim.id and refused.value.code == "conflict"


# -- offline: an export and its manifest -----------------------------------------------------


def exported(app: Application) -> tuple[list[bytes], dict[str, Any]]:
    out = io.BytesIO()
    manifest = export_with_manifest(
        app.store, out, actor=Actor("auditor"), clock=FakeClock(CLOCK_START)
    )
    return out.getvalue().splitlines(keepends=True), manifest


def test_an_export_verifies_offline_and_is_recorded(filled: Application) -> None:
    lines, manifest = exported(filled)
    report = verify_export(lines, manifest)
    assert report.ok and report.events == manifest["count"] == len(lines)
    assert manifest["root"] == report.root
    recorded = filled.store.read_leaves(0, 10_000)
    upto = [leaf for p, leaf in recorded if p <= manifest["lastPosition"]]
    assert manifest["journalTreeSize"] == len(upto)
    assert manifest["journalRoot"] == root_of(upto).hex()
    custody = filled.store.read_stream(manifest["custody"]["stream"])
    assert [e.type for e in custody] == ["journal.exported"]
    assert custody[0].data["range_root"] == manifest["root"]
    assert custody[0].context["actor"] == {"id": "auditor", "kind": "principal"}
    assert verify_store(filled.store).ok  # the custody event's tree head still holds


def numbered(line: bytes) -> int:
    return int(json.loads(line)["position"])


@pytest.mark.parametrize("damage", ["modified", "deleted", "inserted", "reordered"])
def test_offline_verification_names_the_first_bad_position(
    filled: Application, damage: str
) -> None:
    lines, manifest = exported(filled)
    i = 7
    if damage == "modified":
        body = json.loads(lines[i])
        body["data"]["attempt"] = 99
        lines[i] = json.dumps(body).encode() + b"\n"  # respelled too: only content counts
        expected = ("modified", numbered(lines[i]))
    elif damage == "deleted":
        expected = ("deleted", numbered(lines[i]))
        del lines[i]
    elif damage == "inserted":
        body = json.loads(lines[i])
        body["position"] = numbered(lines[i]) * 1000
        lines.insert(i + 1, json.dumps(body).encode() + b"\n")
        expected = ("inserted", body["position"])
    else:
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
        expected = ("reordered", numbered(lines[i + 1]))
    report = verify_export(lines, manifest)
    assert not report.ok
    first = report.problems[0]
    assert (first.kind, first.position) == expected


def test_a_respelled_but_equal_line_still_verifies(filled: Application) -> None:
    """The verifier re-canonicalises: whitespace or key order in the file prove nothing."""
    lines, manifest = exported(filled)
    lines[3] = (
        json.dumps(json.loads(lines[3]), indent=1, sort_keys=False).replace("\n", " ").encode()
        + b"\n"
    )
    assert verify_export(lines, manifest).ok


def test_a_manifest_that_does_not_rebuild_its_root_is_refused(filled: Application) -> None:
    lines, manifest = exported(filled)
    manifest["leaves"][2][1] = hashlib.sha256(b"x").hexdigest()
    report = verify_export(lines, manifest)
    assert [p.kind for p in report.problems] == ["manifest"]


@pytest.mark.parametrize("change", ["repeated", "swapped"])
def test_a_manifest_changed_with_its_root_and_count_is_named(
    filled: Application, change: str
) -> None:
    """Leaves, root and count made consistent again: a position listed twice describes no
    export (found by a defect hunt: an AssertionError traceback); two swapped ones are out of
    the file's order."""
    lines, manifest = exported(filled)
    leaves = manifest["leaves"]
    if change == "repeated":
        leaves.append(list(leaves[-1]))
    else:
        leaves[2], leaves[3] = leaves[3], leaves[2]
    manifest["root"] = root_of([bytes.fromhex(leaf) for _, leaf in leaves]).hex()
    manifest["count"] = len(leaves)
    report = verify_export(lines, manifest)
    expected = "manifest" if change == "repeated" else "reordered"
    assert [p.kind for p in report.problems] == [expected]


def test_cli_checkpoint_export_and_verify(store_url: str, tmp_path: Path) -> None:
    app = Application(store_url)
    fill(app)
    app.close()
    key = tmp_path / "log.key"
    key.write_text(SigningKey.generate("example.com/test").encode() + "\n")
    head = run("journal", "checkpoint", "--json", "--signing-key", str(key), store=store_url)
    assert head.returncode == 0, head.stderr
    assert json.loads(head.stdout)["treeSize"] > 0
    live = run("verify", "--json", store=store_url)
    assert live.returncode == 0 and json.loads(live.stdout)["treeHeadsChecked"] == 1
    target = tmp_path / "j.jsonl"
    done = run("journal", "export", "--output", str(target), "--json", store=store_url)
    assert done.returncode == 0, done.stderr
    offline = run("verify", "--jsonl", str(target), "--json", store="sqlite:///unused.db")
    assert offline.returncode == 0, offline.stdout
    lines = target.read_bytes().splitlines(keepends=True)
    target.write_bytes(b"".join(lines[:3] + lines[4:]))
    broken = run("verify", "--jsonl", str(target), "--json", store="sqlite:///unused.db")
    assert broken.returncode == 1
    assert json.loads(broken.stdout)["firstProblem"]["kind"] == "deleted"
    assert json.loads(broken.stdout)["firstProblem"]["position"] == numbered(lines[3])
    # A manifest naming a member twice says two things (the last "root" to one reader, the
    # first to another): refused as input, whichever would verify.
    target.write_bytes(b"".join(lines))
    manifest = Path(f"{target}.manifest.json")
    manifest.write_bytes(b'{"root": "00", ' + manifest.read_bytes().lstrip()[1:])
    doubled = run("verify", "--jsonl", str(target), "--json", store="sqlite:///unused.db")
    assert doubled.returncode != 0 and "Traceback" not in doubled.stderr
    error = json.loads(doubled.stdout or doubled.stderr)["error"]
    assert error["code"] == "invalid_request" and "duplicate object key" in error["message"]


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no manifest"])
def test_cli_export_that_fails_leaves_no_partial_file(
    store_url: str, tmp_path: Path, manifest: bool
) -> None:
    """``journal export --output F`` over a journal changed behind its back: a ``conflict``
    naming the position, no traceback, and F as it was (absent here, or an earlier whole
    export), with nothing left beside it; F is written whole only by an export that ends."""
    app = Application(store_url)
    fill(app)
    app.close()
    target = tmp_path / "j.jsonl"
    options = [] if manifest else ["--no-manifest"]
    whole = run("journal", "export", "--output", str(target), *options, store=store_url)
    assert whole.returncode == 0, whole.stderr
    earlier = target.read_bytes()
    store = EventStore(store_url)
    victim = tamper_position(store)
    with behind_the_journals_back(store) as (conn, events, _):
        column = position_column(conn)
        conn.execute(
            q(conn, f"UPDATE {events} SET state = ? WHERE {column} = ?"), (b"{}", victim.id)
        )
    store.close()
    for output in (target, tmp_path / "new.jsonl"):
        failed = run("journal", "export", "--output", str(output), *options, store=store_url)
        assert failed.returncode != 0
        assert "conflict" in failed.stderr and f"position {victim.id}" in failed.stderr
        assert "Traceback" not in failed.stderr
    assert target.read_bytes() == earlier
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("j.", "new."))) == [
        "j.jsonl",
        *(["j.jsonl.manifest.json"] if manifest else []),
    ]


# -- RFC 6962 arithmetic and fixed vectors ---------------------------------------------------


def reference_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH, written the recursive way, as an independent check."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return node_hash(reference_root(leaves[:k]), reference_root(leaves[k:]))


def test_rfc6962_roots_and_proofs() -> None:
    leaves = [leaf_hash(bytes([i])) for i in range(33)]
    assert (
        root_of([])
        == EMPTY_ROOT
        == bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    )
    for n in range(34):
        assert root_of(leaves[:n]) == reference_root(leaves[:n])
    for n in range(1, 34):
        root = root_of(leaves[:n])
        for i in range(n):
            proof = inclusion_proof(i, leaves[:n])
            assert verify_inclusion(i, n, leaves[i], proof, root)
            assert not verify_inclusion(i, n, leaf_hash(b"other"), proof, root)
        for m in range(1, n + 1):
            proof = consistency_proof(m, leaves[:n])
            assert verify_consistency(m, n, root_of(leaves[:m]), root, proof)
            if m < n:
                forged = root_of([leaf_hash(b"x"), *leaves[1:m]])
                assert not verify_consistency(m, n, forged, root, proof)


def vector_journal() -> tuple[list[bytes], dict[str, Any]]:
    """A journal built the same way every time (fixed streams, times and contents)."""
    store = EventStore("memory://")
    at = "2026-11-30T09:00:00.000000Z"
    for n in range(5):
        context = {"actor": {"id": "ana", "kind": "principal"}, "n": n}
        events = [
            NewEvent("vector.created", at, context, {"params": {"n": n, "\u00e9": 1.5e-7}}),
            NewEvent("vector.noted", at, context, {}),
        ]
        store.append(Append(f"op-{n}", 0, events))
    out = io.BytesIO()
    manifest = export_with_manifest(
        store, out, actor=Actor("vectors"), clock=FakeClock(CLOCK_START)
    )
    return out.getvalue().splitlines(keepends=True), manifest


def test_fixed_vectors_match(tmp_path: Path) -> None:
    """tests/vectors/journal-v1.jsonl and its manifest: this implementation reproduces
    them byte for byte, and they verify."""
    lines, manifest = vector_journal()
    manifest.pop("custody")  # where the export was recorded: not part of the vector
    committed_lines = (VECTORS / "journal-v1.jsonl").read_bytes()
    committed = json.loads((VECTORS / "journal-v1.manifest.json").read_text())
    assert b"".join(lines) == committed_lines
    assert manifest["root"] == committed["root"]
    assert manifest["leaves"] == committed["leaves"]
    assert verify_export(committed_lines.splitlines(keepends=True), committed).ok
    expected_root = (VECTORS / "journal-v1.root").read_text().strip()
    assert (
        committed["root"]
        == expected_root
        == reference_root([bytes.fromhex(h) for _, h in committed["leaves"]]).hex()
    )


def test_offline_verification_names_unreadable_and_repeated_lines(filled: Application) -> None:
    lines, manifest = exported(filled)
    truncated = [*lines[:4], lines[4][:20] + b"\n", *lines[5:]]
    first = verify_export(truncated, manifest).problems[0]
    assert (first.kind, first.position) == ("modified", numbered(lines[4]))
    repeated = [*lines[:4], lines[2], *lines[4:]]
    first = verify_export(repeated, manifest).problems[0]
    assert (first.kind, first.position) == ("inserted", numbered(lines[2]))
    assert verify_export([b"\n", *lines, b"\n"], manifest).ok  # blank lines carry nothing


@pytest.mark.parametrize(
    "change",
    ["state = NULL", "topic = NULL", "originator_version = 'x'", "state = CAST('no' AS BLOB)"],
)
def test_a_column_emptied_or_retyped_is_named_modified_by_verify(
    tmp_path: Path, change: str
) -> None:
    """SQLite keeps whatever is written behind the journal's back: verify names the row
    (found by a defect hunt: each was an AttributeError or TypeError traceback)."""
    filled = Application(f"sqlite:///{tmp_path}/journal.db", clock=FakeClock(CLOCK_START))
    try:
        fill(filled)
        victim = tamper_position(filled.store)
        with behind_the_journals_back(filled.store) as (conn, _, _):
            conn.execute(f"UPDATE stored_events SET {change} WHERE rowid = ?", (victim.id,))
        first = verify_store(filled.store).problems[0]
        assert (first.kind, first.position) == ("modified", victim.id)
        done = run("verify", "--json", store=f"sqlite:///{tmp_path}/journal.db")
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert json.loads(done.stdout)["firstProblem"]["position"] == victim.id
        key = tmp_path / "log.key"
        key.write_text(SigningKey.generate("example.com/tamper").encode() + "\n")
        signed = run("journal", "checkpoint", "--signing-key", str(key),
                     store=f"sqlite:///{tmp_path}/journal.db")  # fmt: skip
        if "originator_version" not in change:  # a text version still hashes (to another leaf)
            assert signed.returncode == 1, signed.stdout
            assert "blackops: journal_rewritten: " in signed.stderr
        assert "Traceback" not in signed.stderr
    finally:
        filled.close()


@pytest.mark.parametrize(
    "state", [b"not json", b'{"at":"x","context":{},"data":{"tree_size":"x","root":"r"}}']
)
def test_an_unreadable_tree_head_is_named_not_raised(filled: Application, state: bytes) -> None:
    head = record_checkpoint(filled.store, actor=Actor("auditor"), clock=FakeClock(CLOCK_START))
    with behind_the_journals_back(filled.store) as (conn, events, _):
        where = position_column(conn)
        conn.execute(q(conn, f"UPDATE {events} SET state = ? WHERE {where} = ?"),
                     (state, head["position"]))  # fmt: skip
    kinds = {(p.kind, p.position) for p in verify_store(filled.store).problems}
    assert ("tree_head", head["position"]) in kinds
    assert ("modified", head["position"]) in kinds  # its leaf no longer matches either


@pytest.mark.parametrize("value", [None, "text"], ids=["null", "text"])
def test_a_tree_head_emptied_or_made_text_is_named_not_raised(tmp_path: Path, value: Any) -> None:
    """SQLite keeps NULL or text where the state was (found by review: the store's own
    read of the row raised before the verifier saw it)."""
    filled = Application(f"sqlite:///{tmp_path}/journal.db", clock=FakeClock(CLOCK_START))
    try:
        fill(filled)
        head = record_checkpoint(filled.store, actor=Actor("a"), clock=FakeClock(CLOCK_START))
        with behind_the_journals_back(filled.store) as (conn, _, _):
            conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?",
                         (value, head["position"]))  # fmt: skip
        kinds = {(p.kind, p.position) for p in verify_store(filled.store).problems}
        assert ("tree_head", head["position"]) in kinds
    finally:
        filled.close()


@pytest.mark.parametrize(
    "respell",
    [
        # A reader keeping the first "attempt" reads 1, one keeping the last reads 7.
        lambda state: state.replace(b'"attempt":', b'"attempt":7,"attempt":', 1),
        lambda state: state.replace(b'"context":', b'"context": ', 1),  # not RFC 8785's
    ],
    ids=["duplicate-key", "whitespace"],
)
def test_a_stored_event_that_is_not_canonical_is_named_even_with_its_leaf(
    filled: Application, respell: Any
) -> None:
    """An event rewritten with its recorded leaf, where no tree head covers it yet, into a
    state with a duplicate key (or another spelling): the leaf matches, so `verify` passed
    it and the checkpoint signer signed over it, while the offline check of its export
    refused it (found by a defect hunt against the operator, stop 37)."""
    victim = tamper_position(filled.store)
    forged = respell(victim.state)
    assert forged != victim.state
    rewrite_with_its_leaf(filled.store, victim, forged)
    report = verify_store(filled.store)
    assert [(p.kind, p.position) for p in report.problems] == [("modified", victim.id)]
    assert "the stored event is not" in report.problems[0].message
    with pytest.raises(IntegrityError):
        record_checkpoint(filled.store, actor=Actor("auditor"), clock=FakeClock(CLOCK_START))
    # Nor does the service's signer sign over it (it rechecks every leaf once, then the new).
    signer = CheckpointService(filled.store, SigningKey.generate("example.com/t"), FakeClock())
    with pytest.raises(JournalRewritten) as refused:
        signer.sign()
    assert f"position {victim.id}" in str(refused.value)
