"""The witness's rules (C2SP tlog-witness add-checkpoint): parse, the status of every refusal,
cosign only consistent non-shrinking checkpoints, and keep what it cosigned
(replay/tlog_witness.py, blackops/witness/server.py, blackops/witness/state.py)."""

from __future__ import annotations

import base64
import hashlib
import threading
from pathlib import Path

import pytest
from transparency_log import ToyLog

from blackops.witness.server import Witness
from blackops.witness.state import WitnessState
from replay import cosignature, tlog_witness
from replay.merkle import EMPTY_ROOT
from replay.notes import COSIGNATURE_KEY, Checkpoint, SigningKey, parse_note, sign_note


def witness_of(log: ToyLog, state: Path) -> Witness:
    key = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    return Witness(key, [log.key.verifier()], WitnessState(state))


def add(witness: Witness, log: ToyLog, old: int, proof: list[bytes] | None = None) -> str:
    body = tlog_witness.encode(old, log.proof(old) if proof is None else proof, log.note())
    return witness.add_checkpoint(body, now=1_700_000_000)


def refused(witness: Witness, body: bytes) -> tlog_witness.Refusal:
    with pytest.raises(tlog_witness.Refusal) as caught:
        witness.add_checkpoint(body)
    return caught.value


def test_the_spec_example_request_parses(tmp_path: Path) -> None:
    body = (
        "old 20852014\n"
        "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\n"
        "jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n"
        "5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n"
        "/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n"
        "\n"
        "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        "\n"
        "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/"
        "Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    ).encode()
    request = tlog_witness.parse(body)
    assert request.old_size == 20852014
    assert len(request.proof) == 4 and all(len(h) == 32 for h in request.proof)
    assert tlog_witness.origin_of(request.note) == "example.com/behind-the-sofa"


def test_first_checkpoint_then_consistent_growth_is_cosigned_and_kept(tmp_path: Path) -> None:
    log = ToyLog().grow(5)
    witness = witness_of(log, tmp_path)
    line = add(witness, log, 0)
    signature = parse_note(log.note() + line).signatures[-1]
    assert cosignature.verify(log.checkpoint().body(), signature, witness.verifier)
    assert cosignature.timestamp_of(signature) == 1_700_000_000
    for grow in (1, 2, 9, 17):
        old = len(log.leaves)
        log.grow(grow)
        add(witness, log, old)
    latest = witness.state.latest(log.origin)
    assert latest == log.checkpoint()
    # A new Witness over the same directory (a restart) remembers the size.
    again = Witness(witness.key, [log.key.verifier()], WitnessState(tmp_path))
    stale = refused(again, tlog_witness.encode(0, [], log.note()))
    assert (stale.status, stale.size) == (409, 34)
    # The kept note carries the log's signature and the witness's cosignature.
    kept = again.state.note(log.origin)
    assert kept is not None
    names = [s.name for s in parse_note(kept).signatures]
    assert names == [log.origin, "w1.example"]


def test_a_junk_line_after_the_log_signature_is_neither_kept_nor_served(tmp_path: Path) -> None:
    """The note opener drops a key's lines after its first (decisions A1), so the witness
    cosigns such a note; it then kept and served every line under the log's key, the
    unverified junk too (found by review, stop 35)."""
    log = ToyLog().grow(3)
    witness = witness_of(log, tmp_path)
    junk = f"\u2014 {log.origin} {base64.b64encode(log.key.key_id + bytes(64)).decode()}\n"
    witness.add_checkpoint(tlog_witness.encode(0, [], log.note() + junk), now=1_700_000_000)
    kept = witness.state.note(log.origin)
    assert kept is not None
    assert parse_note(kept).signatures[0].line() == parse_note(log.note()).signatures[0].line()
    assert [s.name for s in parse_note(kept).signatures] == [log.origin, "w1.example"]


def test_the_same_checkpoint_again_is_cosigned_again(tmp_path: Path) -> None:
    log = ToyLog().grow(3)
    witness = witness_of(log, tmp_path)
    add(witness, log, 0)
    add(witness, log, 3)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"old 01\n\nx", "leading zero"),
        (b"old -1\n\nx", "negative"),
        (b"new 0\n\nx", "not old"),
        (b"old 0\nnot base64!\n\nx", "bad base64"),
        (b"old 0\n" + base64.b64encode(b"short") + b"\n\nx", "not 32 bytes"),
        (b"old 0\n", "no blank line"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_bodies_are_400(tmp_path: Path, body: bytes, why: str) -> None:
    log = ToyLog().grow(1)
    assert refused(witness_of(log, tmp_path), body).status == 400, why


def test_64_proof_lines_are_400_and_old_above_size_is_400(tmp_path: Path) -> None:
    log = ToyLog().grow(4)
    witness = witness_of(log, tmp_path)
    lines = [bytes(32)] * 64
    assert refused(witness, tlog_witness.encode(2, lines, log.note())).status == 400
    assert refused(witness, tlog_witness.encode(5, [], log.note())).status == 400
    assert refused(witness, tlog_witness.encode(0, [], "not a note")).status == 400


def test_unknown_origin_is_404_and_a_bad_or_foreign_signature_is_403(tmp_path: Path) -> None:
    log = ToyLog().grow(4)
    witness = witness_of(log, tmp_path)
    other = ToyLog("other.example/log").grow(4)
    assert refused(witness, tlog_witness.encode(0, [], other.note())).status == 404
    impostor = ToyLog(log.origin).grow(4)  # same origin, another key
    assert refused(witness, tlog_witness.encode(0, [], impostor.note())).status == 403
    note = log.note()
    body = note.partition("\n\n")[0]
    tampered = note.replace(body.split("\n")[1], "5", 1)  # size changed under the signature
    assert refused(witness, tlog_witness.encode(0, [], tampered)).status == 403
    assert witness.state.latest(log.origin) is None  # nothing was kept


def test_inconsistent_and_shrinking_checkpoints_are_refused(tmp_path: Path) -> None:
    log = ToyLog().grow(8)
    witness = witness_of(log, tmp_path)
    add(witness, log, 0)
    # A rewritten history: leaf 3 changed, every root recomputed, signed by the log's key.
    forged = ToyLog(log.origin, log.key)
    forged.leaves = list(log.leaves)
    forged.leaves[3] = bytes(32)
    forged.grow(4)
    proof = forged.proof(8)
    assert refused(witness, tlog_witness.encode(8, proof, forged.note())).status == 422
    # The same size with another root: a fork, 409 without a size (tlog-witness).
    fork = refused(witness, tlog_witness.encode(8, [], forged.note(8)))
    assert (fork.status, fork.size) == (409, None)
    # The same size and root with a proof: the proof cannot be right.
    assert refused(witness, tlog_witness.encode(8, [bytes(32)], log.note(8))).status == 422
    # A truncated tail (smaller size): the witness is at 8, the log says old 5.
    short = refused(witness, tlog_witness.encode(5, [], log.note(5)))
    assert (short.status, short.size) == (409, 8)
    # Old 8 against a size-5 checkpoint is malformed (old above the size).
    assert refused(witness, tlog_witness.encode(8, [], log.note(5))).status == 400
    # A proof with old size 0 when the witness is at 0 is 422 (fresh origin).
    fresh = ToyLog("fresh.example/log").grow(3)
    w2 = Witness(witness.key, [fresh.key.verifier()], WitnessState(tmp_path / "w2"))
    assert refused(w2, tlog_witness.encode(0, [bytes(32)], fresh.note())).status == 422
    # Nothing moved. Only the fork is kept as evidence: its signature alone proves the log
    # misbehaved, where a proof that does not verify may be anyone's (a review found junk
    # proofs filling the cap kept for forks).
    assert witness.state.latest(log.origin) == log.checkpoint(8)
    assert [p.read_bytes() for p in (tmp_path / "evidence").iterdir()] == [
        tlog_witness.encode(8, [], forged.note(8))
    ]


def test_a_size_zero_checkpoint_needs_the_empty_root(tmp_path: Path) -> None:
    log = ToyLog()
    witness = witness_of(log, tmp_path)
    bad = sign_note(Checkpoint(log.origin, 0, bytes(32)).body(), log.key)
    assert refused(witness, tlog_witness.encode(0, [], bad)).status == 422
    good = sign_note(Checkpoint(log.origin, 0, EMPTY_ROOT).body(), log.key)
    witness.add_checkpoint(tlog_witness.encode(0, [], good))


def test_concurrent_requests_never_roll_the_size_back(tmp_path: Path) -> None:
    log = ToyLog().grow(1)
    witness = witness_of(log, tmp_path)
    add(witness, log, 0)
    bodies = []
    for _ in range(12):  # 12 successive checkpoints, all claiming to extend size 1
        log.grow(1)
        bodies.append(tlog_witness.encode(1, log.proof(1), log.note()))
    outcomes: list[int] = []

    def send(body: bytes) -> None:
        try:
            witness.add_checkpoint(body)
            outcomes.append(200)
        except tlog_witness.Refusal as refusal:
            outcomes.append(refusal.status)

    threads = [threading.Thread(target=send, args=(b,)) for b in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Exactly one extends size 1; every other finds the size moved (409).
    assert sorted(outcomes) == [200] + [409] * 11
    latest = witness.state.latest(log.origin)
    assert latest is not None and latest.size >= 2


def test_evidence_is_kept_once_per_checkpoint_and_capped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = ToyLog().grow(4)
    witness = witness_of(log, tmp_path)
    add(witness, log, 0)
    witness.evidence_max_files = 3
    forks = []
    for n in range(5):  # five different forks of size 4, each signed by the log
        fork = ToyLog(log.origin, log.key).grow(3).append(f"fork {n}")
        forks.append(tlog_witness.encode(4, [], fork.note()))
    for _ in range(3):  # the same request again and again is one file
        assert refused(witness, forks[0]).status == 409
    evidence = tmp_path / "evidence"
    [kept] = list(evidence.iterdir())
    signed = parse_note(tlog_witness.parse(forks[0]).note).text
    assert kept.name == f"{hashlib.sha256(signed.encode()).hexdigest()}.txt"
    assert kept.read_bytes() == forks[0]
    for body in forks[1:]:
        assert refused(witness, body).status == 409  # refused whether kept or not
    assert sorted(p.read_bytes() for p in evidence.iterdir()) == sorted(forks[:3])
    assert "is full" in capsys.readouterr().err
    # A byte cap too: nothing more once a body would pass it.
    witness.evidence_max_files = 100
    witness.evidence_max_bytes = sum(len(b) for b in forks[:3]) + len(forks[3]) - 1
    refused(witness, forks[3])
    assert len(list(evidence.iterdir())) == 3
    assert not list(evidence.glob(".*"))  # no temporary file is left behind


@pytest.mark.parametrize("damage", ["not utf-8", "a directory"])
def test_a_state_file_it_cannot_read_stops_that_origin(tmp_path: Path, damage: str) -> None:
    log = ToyLog().grow(2)
    witness = witness_of(log, tmp_path)
    path = witness.state.path(log.origin)
    if damage == "not utf-8":
        path.write_bytes(b"\xff\xfe" + log.note().encode())
    else:
        path.mkdir()
    with pytest.raises(RuntimeError, match="cannot be read"):
        add(witness, log, 0)
    with pytest.raises(RuntimeError, match="cannot be read"):
        witness.state.note_by_hash(WitnessState.origin_hash(log.origin))


def test_junk_proofs_do_not_crowd_out_a_forks_evidence(tmp_path: Path) -> None:
    log = ToyLog().grow(8)
    witness = witness_of(log, tmp_path)
    add(witness, log, 0)
    bigger = log.grow(4)  # the witness stays at 8
    witness.evidence_max_files = 3
    for n in range(5):  # anyone can send the log's genuine checkpoint with a wrong proof
        junk = tlog_witness.encode(8, [bytes([n]) * 32], bigger.note())
        assert refused(witness, junk).status == 422
    assert not (tmp_path / "evidence").exists() or not list((tmp_path / "evidence").iterdir())
    fork = ToyLog(log.origin, log.key).grow(7).append("other")
    assert refused(witness, tlog_witness.encode(8, [], fork.note())).status == 409
    assert len(list((tmp_path / "evidence").iterdir())) == 1


def test_one_fork_resent_with_other_lines_does_not_crowd_out_other_forks(tmp_path: Path) -> None:
    # A fork's proof lines and any signature lines besides the log's are anyone's to change:
    # a review found one genuine fork resent with junk ones filling the whole cap, a file
    # each, so the log's other forks went unkept. Evidence is one file per checkpoint.
    log = ToyLog().grow(4)
    witness = witness_of(log, tmp_path)
    add(witness, log, 0)
    witness.evidence_max_files = 3
    fork = ToyLog(log.origin, log.key).grow(3).append("fork 0").note()
    first = tlog_witness.encode(4, [], fork)
    assert refused(witness, first).status == 409
    stranger = SigningKey.generate("stranger.example")
    for n in range(1, 6):
        junk_proof = tlog_witness.encode(4, [bytes([n]) * 32], fork)
        assert refused(witness, junk_proof).status == 409
        extra = sign_note(parse_note(fork).text, stranger).rpartition("\n\n")[2]
        assert refused(witness, tlog_witness.encode(4, [], fork + extra)).status == 409
    evidence = tmp_path / "evidence"
    assert [p.read_bytes() for p in evidence.iterdir()] == [first]  # the first one received
    others = [
        tlog_witness.encode(4, [], ToyLog(log.origin, log.key).grow(3).append(f"fork {n}").note())
        for n in (1, 2)
    ]
    for body in others:
        assert refused(witness, body).status == 409
    assert sorted(p.read_bytes() for p in evidence.iterdir()) == sorted([first, *others])
