"""Signed exports (OL-11): the manifest names a signed checkpoint covering the export, offline
``verify --jsonl --key`` checks it, and a line forged together with its manifest (leaves and
root recomputed, as a forger would) is caught; HTTP exports are journaled too."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_processes import run
from fastapi.testclient import TestClient
from rich_journal import inline_runs

from blackops import Application
from blackops.http.app import create_http_app
from journal.leaves import leaf_hash
from replay.merkle import root_of
from replay.notes import SigningKey

ORIGIN = "example.com/export-test"


def filled(store_url: str) -> None:
    inline_runs(store_url, ["other", "default"] * 3)


def verify(jsonl: Path, *keys: str) -> subprocess.CompletedProcess[str]:
    flags = [part for key in keys for part in ("--key", key)]
    return subprocess.run(
        [sys.executable, "-m", "blackops", "verify", "--jsonl", str(jsonl), "--json", *flags],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def forge(jsonl: Path) -> None:
    """Change one line and recompute the manifest's leaves, root and count to match (and
    its journal root, where that is the range's: a manifest's own leaves must rebuild it)."""
    lines = jsonl.read_bytes().splitlines(keepends=True)
    victim = json.loads(lines[2])
    victim["data"] = {"forged": True}
    text = json.dumps(victim, separators=(",", ":"), sort_keys=True).encode()
    lines[2] = text + b"\n"
    jsonl.write_bytes(b"".join(lines))
    manifest_path = Path(f"{jsonl}.manifest.json")
    manifest = json.loads(manifest_path.read_text())
    manifest["leaves"][2][1] = leaf_hash(text).hex()
    root = root_of(bytes.fromhex(h) for _, h in manifest["leaves"]).hex()
    if manifest["journalRoot"] == manifest["root"]:  # the whole journal: one tree, one root
        manifest["journalRoot"] = root
    manifest["root"] = root
    manifest_path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("after", [0, 3])
def test_cli_export_is_signed_and_a_forged_pair_is_caught(
    store_url: str, tmp_path: Path, after: int
) -> None:
    target, key = signed_export(store_url, tmp_path, "--after", str(after), "--json")
    manifest = json.loads(Path(f"{target}.manifest.json").read_text())
    assert manifest["attestation"]["checkpoint"].startswith(ORIGIN + "\n")
    vkey = key.verifier().encode()
    good = verify(target, vkey)
    assert good.returncode == 0, good.stdout
    assert json.loads(good.stdout)["hiddenLeaves"] == {"purged": 0, "unaccounted": 0}
    assert json.loads(verify(target).stdout)["hiddenLeaves"] is None  # without a key: unread
    other = verify(target, SigningKey.generate(ORIGIN).verifier().encode())
    assert other.returncode == 1 and json.loads(other.stdout)["firstProblem"]["kind"] == "signature"
    forge(target)
    unsigned = verify(target)  # without a key the forged pair passes: nothing is signed
    assert unsigned.returncode == 0
    caught = verify(target, vkey)
    assert caught.returncode == 1
    problem = json.loads(caught.stdout)["firstProblem"]
    assert problem["kind"] == "signature" and "not_in_signed_log" in problem["message"]


def test_http_export_per_space_is_signed_and_journaled(store_url: str, tmp_path: Path) -> None:
    filled(store_url)
    key = SigningKey.generate(ORIGIN)
    from blackops.audit.checkpoints import CheckpointService
    from blackops.runtime import SystemClock

    with Application(store_url) as app:
        service = CheckpointService(app.store, key, SystemClock())
        client = TestClient(create_http_app(app, "systok", checkpoints=service))
        system = {"Authorization": "Bearer systok"}
        assert client.post("/v1/spaces", json={"name": "default"}, headers=system).is_success
        answer = client.get("/v1/spaces/default/journal/export", headers=system)
        assert answer.status_code == 200, answer.text
        link = answer.headers["link"]
        assert link.endswith('; rel="describedby"')
        manifest = client.get(link[1 : link.index(">")], headers=system).json()
        lines = answer.content.splitlines(keepends=True)
        assert lines and all(json.loads(x)["context"]["tenant"] == "default" for x in lines)
        assert manifest["count"] == len(lines) and manifest["attestation"]["hidden"]
        exported = app.store.read_topics(["journal.exported"])
        assert exported[-1].data["output"].startswith("GET /v1/journal/export")
        whole = client.get("/v1/journal/export?after=0&until=5", headers=system)
        assert whole.status_code == 200
        assert max(json.loads(x)["position"] for x in whole.content.splitlines()) <= 5
    jsonl = tmp_path / "space.jsonl"
    jsonl.write_bytes(answer.content)
    Path(f"{jsonl}.manifest.json").write_text(json.dumps(manifest))
    good = verify(jsonl, key.verifier().encode())
    assert good.returncode == 0, good.stdout
    # The other Spaces' events of the range: in the signed log, hashes only, and said so.
    hidden = len(manifest["attestation"]["hidden"])
    assert json.loads(good.stdout)["hiddenLeaves"] == {"purged": 0, "unaccounted": hidden}
    said = subprocess.run(
        [sys.executable, "-m", "blackops", "verify", "--jsonl", str(jsonl), "--key",
         key.verifier().encode()], capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    assert f"; {hidden} more events of the range are not in the file" in said
    forge(jsonl)
    assert verify(jsonl, key.verifier().encode()).returncode == 1
    assert hashlib.sha256(jsonl.read_bytes()).hexdigest()  # the file is still readable


@pytest.mark.parametrize("route", ["/v1/journal/export", "/v1/spaces/default/journal/export"])
def test_an_export_ending_before_it_starts_is_refused_and_not_journaled(
    store_url: str, route: str
) -> None:
    filled(store_url)
    from blackops.audit.checkpoints import CheckpointService
    from blackops.runtime import SystemClock

    with Application(store_url) as app:
        service = CheckpointService(app.store, SigningKey.generate(ORIGIN), SystemClock())
        client = TestClient(create_http_app(app, "systok", checkpoints=service))
        system = {"Authorization": "Bearer systok"}
        assert client.post("/v1/spaces", json={"name": "default"}, headers=system).is_success
        before = app.store.last_position()
        answer = client.get(f"{route}?after=10&until=5", headers=system)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "invalid_request"
        assert app.store.last_position() == before  # no journal.exported
        empty = client.get(f"{route}?after=5&until=5", headers=system)
        assert empty.status_code == 200 and empty.content == b""


def test_the_cli_refuses_an_export_ending_before_it_starts(store_url: str, tmp_path: Path) -> None:
    filled(store_url)
    with Application(store_url) as app:
        before = app.store.last_position()
    target = tmp_path / "j.jsonl"
    done = run("journal", "export", "--output", str(target), "--after", "10", "--until", "5",
               store=store_url)  # fmt: skip
    assert done.returncode != 0 and "--until 5 is before --after 10" in done.stderr
    with Application(store_url) as app:
        assert app.store.last_position() == before


def signed_export(store_url: str, tmp_path: Path, *flags: str) -> tuple[Path, SigningKey]:
    """A journal, a key, and the CLI's signed export of it (``flags`` added): the file and key."""
    filled(store_url)
    key = SigningKey.generate(ORIGIN)
    key_file = tmp_path / "log.key"
    key_file.write_text(key.encode() + "\n")
    target = tmp_path / "j.jsonl"
    done = run("journal", "export", "--output", str(target), "--signing-key", str(key_file),
               *flags, store=store_url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return target, key


def test_lines_reordered_with_their_manifest_are_caught(store_url: str, tmp_path: Path) -> None:
    """Swap two lines and their manifest leaves, recompute the root: every line is still
    authentic and in the signed log, so the order alone gives it away (found by a defect
    hunt: `verify --key` passed such a file)."""
    target, key = signed_export(store_url, tmp_path)
    lines = target.read_bytes().splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    target.write_bytes(b"".join(lines))
    manifest_path = Path(f"{target}.manifest.json")
    manifest = json.loads(manifest_path.read_text())
    manifest["leaves"][0], manifest["leaves"][1] = manifest["leaves"][1], manifest["leaves"][0]
    manifest["root"] = root_of(bytes.fromhex(h) for _, h in manifest["leaves"]).hex()
    manifest_path.write_text(json.dumps(manifest))
    for keys in ((), (key.verifier().encode(),)):
        caught = verify(target, *keys)
        assert caught.returncode == 1, caught.stdout
        assert json.loads(caught.stdout)["firstProblem"]["kind"] == "reordered"


@pytest.mark.parametrize("field", ["prefix", "consistency"])
def test_a_manifest_with_a_number_for_a_hash_is_refused_not_a_traceback(
    store_url: str, tmp_path: Path, field: str
) -> None:
    target, key = signed_export(store_url, tmp_path, "--after", "3")
    manifest_path = Path(f"{target}.manifest.json")
    manifest = json.loads(manifest_path.read_text())
    manifest["attestation"][field] = [5]
    manifest_path.write_text(json.dumps(manifest))
    checked = verify(target, key.verifier().encode())
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    assert json.loads(checked.stdout)["firstProblem"]["kind"] == "signature"


@pytest.mark.parametrize("route", ["/v1/journal/export", "/v1/spaces/default/journal/export"])
def test_a_server_without_the_key_exports_through_the_newest_checkpoint(
    store_url: str, tmp_path: Path, route: str
) -> None:
    """A server without the signing key attests with what another process signed, and a
    checkpoint is journaled after the events it signs: the newest never covered the
    journal's end, so every whole-journal export was journaled and then refused with 404
    (found by a defect hunt, stop 35). It now ends at the newest checkpoint, verifies with
    the signer's key, and a range past it is refused (409) before anything is journaled."""
    filled(store_url)
    from blackops.audit.checkpoints import CheckpointService
    from blackops.runtime import SystemClock

    key = SigningKey.generate(ORIGIN)
    with Application(store_url) as signer, Application(store_url) as app:
        system = {"Authorization": "Bearer systok"}
        client = TestClient(create_http_app(app, "systok"))  # no key in this process
        assert client.post("/v1/spaces", json={"name": "default"}, headers=system).is_success
        CheckpointService(signer.store, key, SystemClock()).sign()  # another process signs
        signed_end = app.store.last_position() - 1  # the checkpoint is the last event
        answer = client.get(route, headers=system)
        assert answer.status_code == 200, answer.text
        link = answer.headers["link"]
        manifest = client.get(link[1 : link.index(">")], headers=system).json()
        assert manifest["journalTreeSize"] == signed_end and manifest["attestation"]
        before = app.store.last_position()
        past = client.get(f"{route}?until={before}", headers=system)
        assert past.status_code == 409, past.text
        assert past.json()["error"]["code"] == "conflict" and str(signed_end) in past.text
        assert app.store.last_position() == before  # nothing journaled
    jsonl = tmp_path / "keyless.jsonl"
    jsonl.write_bytes(answer.content)
    Path(f"{jsonl}.manifest.json").write_text(json.dumps(manifest))
    good = verify(jsonl, key.verifier().encode())
    assert good.returncode == 0, good.stdout


def test_a_receipt_asked_while_another_process_signs_names_its_checkpoint(
    store_url: str,
) -> None:
    """The tree is synced, then the newest checkpoint read: one another process appended and
    signed in between is larger than the tree, whose proofs then raised ValueError (a 500;
    found by a defect hunt, stop 35). The interleaving is forced: the other process commits
    and signs when the server reads the newest checkpoint."""
    from blackops.audit.checkpoints import CheckpointService
    from blackops.audit.receipts import receipt_for
    from blackops.runtime import SystemClock
    from replay.receipts import verify_receipt

    key = SigningKey.generate(ORIGIN)
    with Application(store_url) as app, Application(store_url) as other:
        app.operation("t.ok")(lambda ctx, params: {})
        app.run("t.ok", {}, actor="a", tenant="default")
        signer = CheckpointService(other.store, key, SystemClock())
        signer.sign()
        server = CheckpointService(app.store, None, SystemClock())
        newest = server.latest

        def signed_meanwhile() -> str | None:
            app.run("t.ok", {}, actor="a", tenant="default")
            signer.sign()
            return newest()

        server.latest = signed_meanwhile  # type: ignore[method-assign]
        receipt = receipt_for(server, 1)
    assert verify_receipt(receipt, [key.verifier()])


def test_a_server_without_the_key_and_only_an_empty_checkpoint_exports_nothing_signed(
    store_url: str,
) -> None:
    """Only the empty journal's checkpoint (a signer's first on a fresh store): the empty
    range needs no checkpoint and is answered (it was refused 409: found by review, stop
    35); a range with an event in it is refused."""
    from blackops.audit.checkpoints import CheckpointService
    from blackops.runtime import SystemClock

    with Application(store_url) as signer, Application(store_url) as app:
        CheckpointService(signer.store, SigningKey.generate(ORIGIN), SystemClock()).sign()
        client = TestClient(create_http_app(app, "systok"))
        system = {"Authorization": "Bearer systok"}
        for query in ("?until=0", ""):
            answer = client.get(f"/v1/journal/export{query}", headers=system)
            assert answer.status_code == 200 and answer.content == b"", answer.text
        assert client.get("/v1/journal/export?until=1", headers=system).status_code == 409


def test_verify_tells_purged_hidden_leaves_from_unaccounted_ones(tmp_path: Path) -> None:
    """A whole-journal export's hidden leaves are the purged events, which its tombstone
    lines name; a line taken out of the file and listed as hidden is not named by any, and
    is said apart (found by review, stop 36: one count mixed them, so a purge read as
    tampering and a line taken out hid among the purged)."""
    from datetime import UTC, datetime

    from blackops.testing import FakeClock
    from domain.retention import Retention

    url = f"sqlite:///{tmp_path}/j.sqlite3"
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    with Application(url, clock=clock, retention=Retention(journal_seconds=3600)) as app:
        app.operation("t.ok")(lambda ctx, p: {"n": p["n"]})
        for n in range(3):
            app.run("t.ok", {"n": n}, actor="a", tenant="default")
        clock.advance(7200)
        assert len(app.purge(actor="ops").items) == 3
        app.run("t.ok", {"n": 9}, actor="a", tenant="default")
    key = SigningKey.generate(ORIGIN)
    (tmp_path / "log.key").write_text(key.encode() + "\n")
    target = tmp_path / "j.jsonl"
    done = run("journal", "export", "--output", str(target), "--signing-key",
               str(tmp_path / "log.key"), store=url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads(Path(f"{target}.manifest.json").read_text())
    purged = len(manifest["attestation"]["hidden"])
    assert purged >= 3  # the purged operations' events
    checked = verify(target, key.verifier().encode())
    assert checked.returncode == 0, checked.stdout
    assert json.loads(checked.stdout)["hiddenLeaves"] == {"purged": purged, "unaccounted": 0}
    # Take the last line out and list it as hidden: still in the signed log, and said so.
    lines = target.read_bytes().splitlines(keepends=True)
    last = manifest["leaves"].pop()
    manifest["attestation"]["hidden"].append(last)
    manifest["count"] -= 1
    manifest["lastPosition"] = manifest["leaves"][-1][0]
    manifest["root"] = root_of([bytes.fromhex(h) for _, h in manifest["leaves"]]).hex()
    target.write_bytes(b"".join(lines[:-1]))
    Path(f"{target}.manifest.json").write_text(json.dumps(manifest))
    taken = verify(target, key.verifier().encode())
    assert taken.returncode == 0, taken.stdout  # what hidden leaves can prove: no more
    assert json.loads(taken.stdout)["hiddenLeaves"] == {"purged": purged, "unaccounted": 1}


def test_an_http_export_the_signer_refuses_is_not_journaled(store_url: str) -> None:
    """P34: the signer refuses to attest a journal whose tail was cut after it signed
    (`journal_rewritten`); the answer is that refusal and no `journal.exported` record
    names the export (found by a defect hunt against the operator, stop 39: the record was
    appended before the signer was asked)."""
    from tampering import behind_the_journals_back, position_column, q

    from blackops.audit.checkpoints import CheckpointService
    from blackops.runtime import SystemClock

    filled(store_url)
    with Application(store_url) as app:
        service = CheckpointService(app.store, SigningKey.generate(ORIGIN), SystemClock())
        assert service.sign() is not None
        with behind_the_journals_back(app.store) as (conn, events, leaves):
            last = app.store.last_position()
            column = position_column(conn)
            conn.execute(q(conn, f"DELETE FROM {events} WHERE {column} >= ?"), (last - 1,))
            conn.execute(q(conn, f"DELETE FROM {leaves} WHERE position >= ?"), (last - 1,))
        client = TestClient(create_http_app(app, "systok", checkpoints=service))
        system = {"Authorization": "Bearer systok"}
        answer = client.get("/v1/journal/export", headers=system)
        assert answer.json()["error"]["code"] == "journal_rewritten", answer.text
        exported = [e for e in app.store.iter_after(0) if e.type == "journal.exported"]
        assert exported == []
