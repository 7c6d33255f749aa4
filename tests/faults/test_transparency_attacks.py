"""The operator attacks its own journal, and the outside parties catch it (issue 13).

Real processes: a log (``blackops serve`` with a signing key and two ``--witness``), two
``blackops witness serve`` processes, and the auditor's ``blackops audit watch``. While the
log runs, its checkpoints are cosigned by both witnesses and the monitor saves what it saw;
receipts are taken. Then the database holder (who also holds the signing key) attacks in
SQL, the service stopped:

- **rewrite**: change one event, recompute its leaf, and recompute every stored tree head
  after it (the roots and the notes of ``journal.checkpoint``, re-signed with the real key,
  and those records' own leaves), so ``blackops verify`` finds nothing;
- **truncate**: delete the journal's tail together with its leaves.

Then: both witnesses refuse what the attacker pushes (the rewrite re-signs the size they
cosigned with another root: 409 in plain text, a fork; the truncation: 409 naming their
size, ``text/x.tlog.size``), the monitor exits 1 naming ``inconsistent`` / ``rolled_back``,
every receipt taken earlier still verifies offline against its own checkpoint, and the
restarted service refuses to sign a checkpoint over the journal (``journal_rewritten``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from cli_processes import BLACKOPS, ROOT, free_port
from witness_process import WitnessProcess, witness_serve

from domain.documents import canonical_envelope
from journal.codec import decode_state
from journal.leaves import event_leaf
from journal.store import EventStore
from replay import tlog_witness
from replay.merkle import consistency_proof, root_of
from replay.notes import Checkpoint, SigningKey, parse_note, sign_note

pytestmark = pytest.mark.faults
ORIGIN = "example.test/blackops"
SPACE = "default"


@dataclass
class Planned:
    """A witness the log is told about that is not running (yet)."""

    url: str
    verifier_key: str


@dataclass
class Log:
    url: str
    system_token: str
    admin_token: str
    process: subprocess.Popen[str]


def say(party: str, text: str) -> None:
    """One line of the transcript (``pytest -s`` shows it)."""
    print(f"[{party}] {text}")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BLACKOPS, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@contextlib.contextmanager
def log_serve(
    store: str, home: Path, key: Path, witnesses: Sequence[WitnessProcess | Planned]
) -> Iterator[Log]:
    port = free_port()
    env = {**os.environ, "BLACKOPS_HOME": str(home), "BLACKOPS_DEV_TOKEN": ""}
    args = [*BLACKOPS, "serve", "--app", "examples.shop:app", "--port", str(port),
            "--store", store, "--signing-key", str(key), "--checkpoint-seconds", "0.5",
            "--workflow-processes", "1"]  # fmt: skip
    for witness in witnesses:
        args += ["--witness", f"{witness.url}={witness.verifier_key}"]
    out = open(home.parent / f"log-{port}.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True, env=env
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                out.flush()
                raise RuntimeError((home.parent / f"log-{port}.log").read_text()[-3000:])
            time.sleep(0.1)
        yield Log(
            url,
            (home / "dev-token").read_text().strip(),
            (home / "admin-token").read_text().strip(),
            process,
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        out.close()


def run_operations(log: Log, names: list[str]) -> list[str]:
    ids = []
    for name in names:
        answer = httpx.post(
            f"{log.url}/v1/spaces/{SPACE}/operations/greeting.say",
            json={"name": name},
            headers={"Authorization": f"Bearer {log.admin_token}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        ids.append(answer.json()["operationId"])
    return ids


def cosigned_checkpoint(
    log: Log, witnesses: Sequence[WitnessProcess | Planned], at_least: int
) -> Checkpoint:
    """Wait until GET /v1/checkpoint covers ``at_least`` leaves, cosigned by every witness."""
    names = [w.verifier_key.split("+")[0] for w in witnesses]
    for _ in range(1200):  # up to 2 minutes: the push backs off up to 60 s
        answer = httpx.get(
            f"{log.url}/v1/checkpoint",
            headers={"Authorization": f"Bearer {log.system_token}"},
            timeout=10,
        )
        if answer.status_code == 200:
            note = parse_note(answer.text)
            checkpoint = Checkpoint.parse(note.text)
            signers = {s.name for s in note.signatures}
            if checkpoint.size >= at_least and all(n in signers for n in names):
                return checkpoint
        time.sleep(0.1)
    raise AssertionError(f"no cosigned checkpoint of {at_least} leaves: {answer.text}")


def watch(log: Log, key: str, witnesses: list[WitnessProcess], state: Path) -> dict[str, Any]:
    args = ["audit", "watch", "--url", log.url, "--token", log.system_token, "--key", key,
            "--state", str(state), "--json", "--cosignature-grace", "20"]  # fmt: skip
    for witness in witnesses:
        args += ["--witness-key", witness.verifier_key]
    done = cli(*args)
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    report["exit"] = done.returncode
    return report


def receipt(log: Log, operation_id: str, path: Path) -> Path:
    for _ in range(300):
        answer = httpx.get(
            f"{log.url}/v1/operations/{operation_id}/receipt",
            headers={"Authorization": f"Bearer {log.admin_token}"},
            timeout=10,
        )
        if answer.status_code == 200:
            path.write_text(answer.text)
            return path
        time.sleep(0.1)
    raise AssertionError(f"no receipt for {operation_id}: {answer.text}")


# -- the attacker, who holds the database and the signing key -------------------------------


@contextlib.contextmanager
def database(store: EventStore) -> Iterator[tuple[Any, str, str, str]]:
    """(connection, events table, leaves table, placeholder) behind the journal's back."""
    location = store.location
    if location.kind == "sqlite":
        assert location.sqlite_path is not None
        conn: Any = sqlite3.connect(location.sqlite_path, isolation_level=None)
        try:
            yield conn, "stored_events", "blackops_leaves", "?"
        finally:
            conn.close()
        return
    settings = location.settings
    with psycopg.connect(
        host=settings["POSTGRES_HOST"], port=settings["POSTGRES_PORT"],
        user=settings["POSTGRES_USER"], dbname=settings["POSTGRES_DBNAME"], autocommit=True,
    ) as pg:  # fmt: skip
        schema = settings["POSTGRES_SCHEMA"]
        yield pg, f"{schema}.blackops_events", f"{schema}.blackops_leaves", "%s"


def all_leaves(store: EventStore) -> list[tuple[int, bytes]]:
    found: list[tuple[int, bytes]] = []
    while page := store.read_leaves(found[-1][0] if found else 0, 5000):
        found.extend(page)
    return found


def rewrite_history(store: EventStore, key: SigningKey, needle: bytes) -> int:
    """Change the first event holding ``needle``; recompute its leaf and every stored tree
    head after it (re-signed), with their leaves. Returns the rewritten position."""
    events = store.read_raw_after(0, 10_000)
    victim = next(e for e in events if needle in e.state)
    leaves = dict(all_leaves(store))
    order = sorted(leaves)
    with database(store) as (conn, table, leaf_table, p):

        def put(event: Any, state: bytes) -> None:
            conn.execute(
                f"UPDATE {table} SET state = {p} WHERE originator_id = {p} "
                f"AND originator_version = {p}",
                (state, event.originator_id, event.originator_version),
            )
            leaf = event_leaf(event.id, str(event.originator_id), event.originator_version,
                              event.topic, state)  # fmt: skip
            conn.execute(
                f"UPDATE {leaf_table} SET leaf = {p} WHERE position = {p}", (leaf, event.id)
            )
            leaves[event.id] = leaf

        put(victim, victim.state.replace(needle, needle.upper()))
        for event in events:
            if event.id <= victim.id or event.topic != "journal.checkpoint":
                continue
            at, context, data = decode_state(event.state)
            if "note" in data:  # exports would be re-rooted alike; this journal has none
                size = int(data["tree_size"])
                root = root_of(leaves[pos] for pos in order[:size])
                note = sign_note(Checkpoint(key.name, size, root).body(), key)
                data = {**data, "root": root.hex(), "note": note}
                put(event, canonical_envelope({"at": at, "context": context, "data": data}))
    return victim.id


def truncate_tail(store: EventStore, after_position: int) -> None:
    with database(store) as (conn, table, leaf_table, p):
        conn.execute(f"DELETE FROM {leaf_table} WHERE position > {p}", (after_position,))
        column = "rowid" if p == "?" else "notification_id"
        conn.execute(f"DELETE FROM {table} WHERE {column} > {p}", (after_position,))


def push(witness: WitnessProcess, store: EventStore, note: str, old: int) -> httpx.Response:
    """The attacker asks a witness to cosign, with a proof from its own (forged) leaves."""
    leaves = [leaf for _, leaf in all_leaves(store)]
    size = Checkpoint.parse(parse_note(note).text).size
    proof = consistency_proof(old, leaves[:size]) if 0 < old < size else []
    return httpx.post(
        f"{witness.url}/add-checkpoint", content=tlog_witness.encode(old, proof, note), timeout=10
    )


def latest_note(store: EventStore) -> str:
    notes = [e.data["note"] for e in store.read_topics(["journal.checkpoint"]) if "note" in e.data]
    return str(notes[-1])


# -- the scenario -------------------------------------------------------------------------


@dataclass
class World:
    store: str
    home: Path
    key_path: Path
    verifier: str
    witnesses: list[WitnessProcess]
    monitor: Path
    receipts: list[Path]
    seen: Checkpoint


@contextlib.contextmanager
def world(store: str, tmp_path: Path) -> Iterator[World]:
    made = cli(
        "keys", "generate", "--name", ORIGIN, "--output", str(tmp_path / "log.key"), "--json"
    )
    assert made.returncode == 0, made.stderr
    verifier = json.loads(made.stdout)["verifierKey"]
    keys = []
    for name in ("w1.example", "w2.example"):
        path = tmp_path / f"{name}.key"
        assert cli("witness", "generate-key", "--name", name, "--output", str(path)).returncode == 0
        keys.append(path)
    with contextlib.ExitStack() as stack:
        witnesses = [
            stack.enter_context(witness_serve(path, [verifier], tmp_path / f"state-{i}"))
            for i, path in enumerate(keys)
        ]
        home = tmp_path / "home"
        monitor = tmp_path / "monitor.json"
        with log_serve(store, home, tmp_path / "log.key", witnesses) as log:
            first = run_operations(log, [f"journal {n}" for n in range(4)])
            cosigned_checkpoint(log, witnesses, 10)
            receipts = [receipt(log, first[0], tmp_path / "r0.json")]
            report = watch(log, verifier, witnesses, monitor)
            assert (report["exit"], report["findings"]) == (0, []), report
            say("monitor", f"ok at size {report['checkpoint']['size']}, cosigned by "
                f"{sorted(report['cosignedBy'])}")  # fmt: skip
            more = run_operations(log, [f"later {n}" for n in range(3)])
            seen = cosigned_checkpoint(log, witnesses, report["checkpoint"]["size"] + 1)
            receipts.append(receipt(log, more[-1], tmp_path / "r1.json"))
            report = watch(log, verifier, witnesses, monitor)
            assert (report["exit"], report["findings"]) == (0, []), report
            say("monitor", f"ok at size {report['checkpoint']['size']} (consistent)")
            seen = Checkpoint(
                ORIGIN, report["checkpoint"]["size"], _b64(report["checkpoint"]["root"])
            )
        yield World(store, home, tmp_path / "log.key", verifier, witnesses, monitor, receipts, seen)


def _b64(text: str) -> bytes:
    import base64

    return base64.b64decode(text)


def after_the_attack(w: World, kind: str, refused_with: int, content_type: str) -> None:
    """What every party says once the attacker is done (the service restarted)."""
    store = EventStore(w.store)
    try:
        note = latest_note(store)
        for witness in w.witnesses:
            before = witness_checkpoint(witness)
            answer = push(witness, store, note, before.size)
            if answer.status_code == 400:  # old above the (smaller) size: ask as the log would
                answer = push(witness, store, note, Checkpoint.parse(parse_note(note).text).size)
            assert answer.status_code == refused_with, answer.text
            assert answer.headers["content-type"].startswith(content_type), answer.headers
            say(f"witness {witness.url}", f"{answer.status_code} {answer.text.strip()}")
            assert witness_checkpoint(witness) == before  # nothing cosigned, nothing moved
    finally:
        store.close()
    for path in w.receipts:
        checked = cli("verify-receipt", str(path), "--key", w.verifier)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        say("auditor", f"verify-receipt {path.name}: {checked.stdout.strip()[:120]}")
    with log_serve(w.store, w.home, w.key_path, w.witnesses) as log:
        report = watch(log, w.verifier, w.witnesses, w.monitor)
        assert report["exit"] == 1
        assert kind in [f["kind"] for f in report["findings"]], report
        for finding in report["findings"]:
            say("monitor", f"exit 1: {finding['kind']}: {finding['message']}")
        refused = cli("journal", "checkpoint", "--store", w.store, "--signing-key",
                      str(w.key_path), "--json", env={"BLACKOPS_HOME": str(w.home)})  # fmt: skip
        assert refused.returncode == 1, refused.stdout
        error = json.loads(refused.stdout)["error"]
        assert error["code"] == "journal_rewritten"
        say("log", f"journal checkpoint: {error['code']}: {error['message']}")


def witness_checkpoint(witness: WitnessProcess) -> Checkpoint:
    import hashlib

    origin_hash = hashlib.sha256(ORIGIN.encode()).hexdigest()
    kept = httpx.get(f"{witness.url}/{origin_hash}/checkpoint", timeout=10)
    assert kept.status_code == 200
    return Checkpoint.parse(parse_note(kept.text).text)


def test_a_rewritten_history_is_refused_by_the_witnesses_and_caught_by_the_monitor(
    store_url: str, tmp_path: Path
) -> None:
    with world(store_url, tmp_path) as w:
        key = SigningKey.parse(w.key_path.read_text())
        store = EventStore(w.store)
        try:
            rewrite_history(store, key, b"journal 2")
        finally:
            store.close()
        verified = cli("verify", "--store", w.store, "--json")
        assert json.loads(verified.stdout)["ok"], verified.stdout  # the rewrite is thorough
        after_the_attack(w, "inconsistent", 409, "text/plain")  # a fork: no size to resend


def test_a_truncated_tail_is_refused_by_the_witnesses_and_caught_by_the_monitor(
    store_url: str, tmp_path: Path
) -> None:
    with world(store_url, tmp_path) as w:
        store = EventStore(w.store)
        try:
            checkpoints = [e for e in store.read_topics(["journal.checkpoint"]) if "note" in e.data]
            # Cut right after the first signed checkpoint: the tree shrinks below what the
            # witnesses and the monitor saw.
            truncate_tail(store, checkpoints[0].position)
        finally:
            store.close()
        after_the_attack(w, "rolled_back", 409, "text/x.tlog.size")


def test_a_witness_that_is_down_delays_cosigning_never_the_journal(
    store_url: str, tmp_path: Path
) -> None:
    made = cli(
        "keys", "generate", "--name", ORIGIN, "--output", str(tmp_path / "log.key"), "--json"
    )
    verifier = json.loads(made.stdout)["verifierKey"]
    key = tmp_path / "w1.key"
    assert (
        cli("witness", "generate-key", "--name", "w1.example", "--output", str(key)).returncode == 0
    )
    printed = cli("witness", "key", "--key", str(key)).stdout.strip()
    down = Planned(f"http://127.0.0.1:{free_port()}", printed)
    with log_serve(store_url, tmp_path / "home", tmp_path / "log.key", [down]) as log:
        ids = run_operations(log, [f"while down {n}" for n in range(3)])  # the journal goes on
        assert len(ids) == 3
        answer = httpx.get(
            f"{log.url}/v1/checkpoint",
            headers={"Authorization": f"Bearer {log.system_token}"}, timeout=10,
        )  # fmt: skip
        assert answer.status_code == 200  # signed, not cosigned
        assert "w1.example" not in {s.name for s in parse_note(answer.text).signatures}
        port = int(down.url.rsplit(":", 1)[1])
        with witness_serve(key, [verifier], tmp_path / "w1-state", port=port) as witness:
            checkpoint = cosigned_checkpoint(log, [witness], 1)  # the backoff's next try
            say("log", f"cosigned by w1.example once it came up, at size {checkpoint.size}")


def test_a_worker_pushes_and_the_server_publishes_the_cosignatures(
    store_url: str, tmp_path: Path
) -> None:
    made = cli(
        "keys", "generate", "--name", ORIGIN, "--output", str(tmp_path / "log.key"), "--json"
    )
    verifier = json.loads(made.stdout)["verifierKey"]
    key = tmp_path / "w1.key"
    assert (
        cli("witness", "generate-key", "--name", "w1.example", "--output", str(key)).returncode == 0
    )
    with (
        witness_serve(key, [verifier], tmp_path / "w1-state") as witness,
        log_serve(store_url, tmp_path / "home", tmp_path / "log.key", []) as log,
    ):
        out = open(tmp_path / "worker.log", "w")  # noqa: SIM115 (closed below)
        worker = subprocess.Popen(
            [*BLACKOPS, "worker", "--store", store_url, "--workflow-processes", "1",
             "--witness", f"{witness.url}={witness.verifier_key}"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            run_operations(log, ["pushed by a worker"])
            checkpoint = cosigned_checkpoint(log, [witness], 1)
            say("log", f"GET /v1/checkpoint carries w1's cosignature at size {checkpoint.size}")
        finally:
            worker.terminate()
            worker.wait(timeout=60)
            out.close()
