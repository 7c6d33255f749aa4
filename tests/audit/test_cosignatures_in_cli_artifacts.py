"""Receipts and signed exports made by any process carry the witnesses' cosignatures kept
beside the journal (decisions A22): only the process pushing to the witnesses held them, so
`blackops op receipt` and `blackops journal export --signing-key` never carried one and an
auditor requiring the witness (`--witness-key`) refused every genuine artefact of the CLI
(found by a defect hunt against the operator, stop 39)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from cli_processes import run
from rich_journal import inline_runs

from blackops.witness.cosigned import CosignatureBook
from journal.store import EventStore
from replay.cosignature import cosign
from replay.notes import COSIGNATURE_KEY, Checkpoint, SigningKey, parse_note


def offline(*args: str) -> subprocess.CompletedProcess[str]:
    """An auditor's check, with no store."""
    command = [sys.executable, "-m", "blackops", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


def test_cli_receipts_and_exports_carry_the_kept_cosignatures(
    store_url: str, tmp_path: Path
) -> None:
    inline_runs(store_url, ["t"] * 3)
    key = SigningKey.generate("example.com/cosigned")
    key_file = tmp_path / "log.key"
    key_file.write_text(key.encode() + "\n")
    signed = run("journal", "checkpoint", "--signing-key", str(key_file), "--json",
                 store=store_url)  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    note = json.loads(signed.stdout)["note"]
    checkpoint = Checkpoint.parse(parse_note(note).text)
    witness = SigningKey.generate("witness.example/w1", COSIGNATURE_KEY)
    with EventStore(store_url, create=False) as store:
        line = cosign(checkpoint.body(), witness, int(time.time())).line()
        CosignatureBook(store).save(checkpoint, "w1", line)
        rows = store.read_raw_after(0, checkpoint.size)
        last = rows[-1].id  # the checkpoint's last leaf
        completed = next(r for r in rows if r.topic == "operation.completed")
    log_key, witness_key = key.verifier().encode(), witness.verifier().encode()

    receipt = run("op", "receipt", str(completed.originator_id), "--signing-key",
                  str(key_file), "--json", store=store_url)  # fmt: skip
    assert receipt.returncode == 0, receipt.stderr
    assert line.strip() in json.loads(receipt.stdout)["proof"]
    receipt_file = tmp_path / "receipt.json"
    receipt_file.write_text(receipt.stdout)
    checked = offline("verify-receipt", str(receipt_file), "--key", log_key,
                      "--witness-key", witness_key)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr

    target = tmp_path / "j.jsonl"
    exported = run("journal", "export", "--output", str(target), "--until", str(last),
                   "--signing-key", str(key_file), store=store_url)  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    verified = offline("verify", "--jsonl", str(target), "--key", log_key,
                       "--witness-key", witness_key)  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
