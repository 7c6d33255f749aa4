"""``blackops witness serve`` as an outside party runs it: a real process answering the C2SP
tlog-witness HTTP interface; SIGKILL and a restart forget nothing."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import httpx
import pytest
from cli_processes import BLACKOPS, ROOT
from transparency_log import ToyLog
from witness_process import witness_serve

from replay import cosignature, tlog_witness
from replay.notes import VerifierKey, parse_note

pytestmark = pytest.mark.faults


def generate_key(tmp_path: Path, name: str) -> tuple[Path, str]:
    path = tmp_path / f"{name}.key"
    done = subprocess.run(
        [*BLACKOPS, "witness", "generate-key", "--name", name, "--output", str(path)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert path.stat().st_mode & 0o777 == 0o600
    return path, done.stdout.strip()


def post(url: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{url}/add-checkpoint", content=body, timeout=10)


def test_a_witness_process_cosigns_refuses_and_remembers_across_sigkill(tmp_path: Path) -> None:
    key, printed = generate_key(tmp_path, "w1.example")
    log = ToyLog().grow(6)
    state = tmp_path / "state"
    with witness_serve(key, [log.key.verifier().encode()], state) as witness:
        assert witness.verifier_key == printed
        verifier = VerifierKey.parse(printed)
        answer = post(witness.url, tlog_witness.encode(0, [], log.note()))
        assert answer.status_code == 200, answer.text
        [line] = answer.text.splitlines()
        signature = parse_note(log.note() + answer.text).signatures[-1]
        assert line.startswith("— w1.example ")
        assert cosignature.verify(log.checkpoint().body(), signature, verifier)
        log.grow(5)
        assert (
            post(witness.url, tlog_witness.encode(6, log.proof(6), log.note())).status_code == 200
        )
        witness.kill()  # SIGKILL: no chance to flush anything
    with witness_serve(key, [log.key.verifier().encode()], state) as witness:
        stale = post(witness.url, tlog_witness.encode(6, log.proof(6), log.note()))
        assert stale.status_code == 409
        assert stale.headers["content-type"] == "text/x.tlog.size"
        assert stale.text == "11\n"
        assert post(witness.url, b"old 0\n\nnot a checkpoint").status_code == 400
        other = ToyLog("other.example/log").grow(1)
        assert post(witness.url, tlog_witness.encode(0, [], other.note())).status_code == 404
        impostor = ToyLog(log.origin).grow(11)
        assert post(witness.url, tlog_witness.encode(11, [], impostor.note())).status_code == 403
        assert httpx.get(f"{witness.url}/add-checkpoint", timeout=5).status_code == 404
        # The monitoring path serves the cosigned checkpoint.
        origin_hash = hashlib.sha256(log.origin.encode()).hexdigest()
        kept = httpx.get(f"{witness.url}/{origin_hash}/checkpoint", timeout=5)
        assert kept.status_code == 200
        assert parse_note(kept.text).text == log.checkpoint().body()
        assert httpx.get(f"{witness.url}/{'0' * 64}/checkpoint", timeout=5).status_code == 404
