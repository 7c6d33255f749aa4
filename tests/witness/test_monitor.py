"""The auditor's monitor (blackops audit watch): each finding, and that a finding leaves the
saved checkpoint as it was (blackops/witness/monitor.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from transparency_log import ToyLog

from blackops.witness.monitor import assess, check_once, load_state
from replay import cosignature
from replay.notes import COSIGNATURE_KEY, SigningKey


class Source:
    def __init__(self, log: ToyLog, note: str | None = None) -> None:
        self.log = log
        self.current = note

    def note(self) -> str:
        return self.current if self.current is not None else self.log.note()

    def proof(self, old: int, new: int) -> Sequence[bytes]:
        return self.log.proof(old, new)


def kinds(report: object) -> list[str]:
    return [f["kind"] for f in report.findings]  # type: ignore[attr-defined]


def test_growth_is_ok_and_saved_then_a_truncation_is_rolled_back(tmp_path: Path) -> None:
    log = ToyLog().grow(10)
    state = tmp_path / "monitor.json"
    key = log.key.verifier()
    assert check_once(Source(log), key, [], state).ok
    log.grow(7)
    assert check_once(Source(log), key, [], state).ok
    assert load_state(state) == log.checkpoint()
    log.leaves = log.leaves[:12]  # the tail deleted with its leaves, re-signed
    report = check_once(Source(log), key, [], state)
    assert kinds(report) == ["rolled_back"]
    assert load_state(state) is not None and load_state(state).size == 17  # type: ignore[union-attr]


def test_a_rewritten_history_is_inconsistent_even_with_every_root_recomputed(
    tmp_path: Path,
) -> None:
    log = ToyLog().grow(9)
    state = tmp_path / "monitor.json"
    key = log.key.verifier()
    assert check_once(Source(log), key, [], state).ok
    log.leaves[4] = bytes(32)  # rewrite one entry; every root after it recomputed
    log.grow(3)
    assert kinds(check_once(Source(log), key, [], state)) == ["inconsistent"]
    # The same size with another root is also inconsistent (a fork).
    fork = ToyLog(log.origin, log.key)
    fork.leaves = list(log.leaves[:9])
    assert kinds(check_once(Source(fork), key, [], state)) == ["inconsistent"]


def test_signatures_and_cosignatures(tmp_path: Path) -> None:
    log = ToyLog().grow(3)
    key = log.key.verifier()
    witness = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    other = SigningKey.generate("w2.example", COSIGNATURE_KEY)
    note = log.note()
    body = log.checkpoint().body()
    signed = note + cosignature.cosign(body, witness, 10).line()
    proof = Source(log).proof
    report = assess(signed, key, [witness.verifier()], None, proof)
    assert report.ok and list(report.cosigned_by) == [f"w1.example+{witness.key_id.hex()}"]
    assert kinds(assess(note, key, [witness.verifier()], None, proof)) == ["missing_cosignature"]
    wrong = note + cosignature.cosign(body.replace("3", "4", 1), witness, 10).line()
    assert kinds(assess(wrong, key, [witness.verifier()], None, proof)) == ["bad_signature"]
    assert kinds(assess(signed, key, [witness.verifier(), other.verifier()], None, proof)) == [
        "missing_cosignature"
    ]
    impostor = ToyLog(log.origin).grow(3)
    assert kinds(assess(impostor.note(), key, [], None, proof)) == ["bad_signature"]
    state = tmp_path / "m.json"
    report = check_once(Source(log, impostor.note()), key, [], state)
    assert kinds(report) == ["bad_signature"] and not state.exists()
