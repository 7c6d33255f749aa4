"""C2SP tlog-cosignature v1: the spec's example line, transparency-dev's vectors, and what a
cosignature must refuse (replay/cosignature.py)."""

from __future__ import annotations

import base64

import pytest

from replay import cosignature
from replay.notes import (
    COSIGNATURE_KEY,
    NOTE_KEY,
    NoteError,
    Signature,
    SigningKey,
    VerifierKey,
    parse_note,
)

#: c2sp.org/tlog-cosignature, "Below is an example of a checkpoint that contains a cosignature."
SPEC_NOTE = (
    "example.com/behind-the-sofa\n"
    "20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    "\n"
    "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/"
    "Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    "— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJs"
    "X3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n"
)
#: The spec's "Ed25519 signed message" example, for the same checkpoint and time.
SPEC_MESSAGE = (
    b"cosignature/v1\n"
    b"time 1679315147\n"
    b"example.com/behind-the-sofa\n"
    b"20852163\n"
    b"CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
)
#: golang.org/x/mod/sumdb/note's test key (note_test.go), a type 0x01 note key.
PETER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
BODY = "example.com/log\n7\nf+7CoKgXKE/tNys9TTXcr/ad6U/K3xvznmzew9y6SP0=\n"


def test_the_spec_example_line_carries_its_key_id_and_the_time_of_its_message() -> None:
    note = parse_note(SPEC_NOTE)
    witness = note.signatures[1]
    assert witness.name == "witness.example.com/w1"
    assert witness.key_id.hex() == "8d66cf3f"
    assert cosignature.timestamp_of(witness) == 1679315147
    assert cosignature.cosigned_message(note.text, 1679315147) == SPEC_MESSAGE


def test_transparency_dev_timestamp_vector_and_a_plain_signature_is_no_cosignature() -> None:
    # transparency-dev/formats note_cosigv1_test.go: TestCosignatureTimestamp.
    raw = base64.b64decode(
        "ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOwo"
        "rDcFiEBYJXORmnFBOBA=="
    )
    assert cosignature.timestamp_of(Signature("w", raw[:4], raw[4:])) == 1727964367
    plain = base64.b64decode(
        "eQjRQm6eSKzFoiYalgwCPXu2y3ijtg68is9M46JKxuZB+dRfTmeQeDBoXnvxZx2ugnkyV+MUMLXpWs1hPb/W"
        "/4xkNQY="
    )
    with pytest.raises(NoteError) as refused:
        cosignature.timestamp_of(Signature("w", plain[:4], plain[4:]))
    assert refused.value.code == "malformed_note"


def test_a_native_cosignature_verifier_key_and_one_converted_from_a_note_key() -> None:
    # transparency-dev/formats TestCoSigV1NewVerifier: a 0x04 vkey, and a 0x01 one it converts.
    native = VerifierKey.parse(
        "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"
    )
    assert native.key_type == COSIGNATURE_KEY
    assert cosignature.cosigner_verifier(native) is native
    note_key = VerifierKey.parse("TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6")
    converted = cosignature.cosigner_verifier(note_key)
    assert (converted.key_type, converted.public) == (COSIGNATURE_KEY, note_key.public)
    assert converted.key_id != note_key.key_id
    assert converted.encode().startswith("TEST+")


def test_cosign_then_verify_byte_layout_and_key_id_of_type_4() -> None:
    key = SigningKey.parse(PETER)
    assert key.key_type == NOTE_KEY
    line = cosignature.cosign(BODY, key, 1_700_000_000)
    signer = cosignature.cosigner_key(key)
    assert line.key_id == signer.key_id != key.key_id
    assert len(line.signature) == 72 and line.signature[:8] == (1_700_000_000).to_bytes(8, "big")
    assert signer.verifier().verify(
        b"cosignature/v1\ntime 1700000000\n" + BODY.encode(), line.signature[8:]
    )
    assert cosignature.verify(BODY, line, key.verifier())
    # Ed25519 is deterministic: the same key, body and time give the same line.
    assert cosignature.cosign(BODY, key, 1_700_000_000) == line


def test_a_cosignature_binds_the_time_the_body_and_the_key() -> None:
    key = SigningKey.generate("witness.example/w1", COSIGNATURE_KEY)
    line = cosignature.cosign(BODY, key, 42)
    assert cosignature.verify(BODY, line, key.verifier())
    moved = Signature(line.name, line.key_id, (43).to_bytes(8, "big") + line.signature[8:])
    assert not cosignature.verify(BODY, moved, key.verifier())
    assert not cosignature.verify(BODY.replace("\n7\n", "\n8\n"), line, key.verifier())
    other = SigningKey.generate("witness.example/w1", COSIGNATURE_KEY)
    assert not cosignature.verify(BODY, line, other.verifier())
    zero = cosignature.cosign(BODY, key, 0)
    assert not cosignature.verify(BODY, zero, key.verifier())  # tlog-witness: never time 0


def test_the_note_verifier_accepts_the_cosignature_line_as_a_signature_of_type_4() -> None:
    from replay.notes import open_note, sign_note

    log = SigningKey.generate("example.com/log")
    witness = SigningKey.generate("witness.example/w1", COSIGNATURE_KEY)
    note = sign_note(BODY, log) + cosignature.cosign(BODY, witness, 99).line()
    _, verified = open_note(note, [log.verifier(), witness.verifier()])
    assert verified == (log.verifier(), witness.verifier())


def test_cosignatures_names_valid_invalid_and_missing_witnesses() -> None:
    from replay.notes import sign_note

    log = SigningKey.generate("example.com/log")
    one = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    two = SigningKey.generate("w2.example", COSIGNATURE_KEY)
    three = SigningKey.generate("w3.example", COSIGNATURE_KEY)
    good = cosignature.cosign(BODY, one, 5)
    forged = cosignature.cosign(BODY.replace("7", "9", 1), two, 5)  # signed another body
    note = sign_note(BODY, log) + good.line() + forged.line()
    found = cosignature.cosignatures(note, [one.verifier(), two.verifier(), three.verifier()])
    assert found.valid == {f"w1.example+{one.key_id.hex()}": 5}
    assert found.invalid == (f"w2.example+{two.key_id.hex()}",)
    assert found.missing == (f"w3.example+{three.key_id.hex()}",)


def test_a_witness_first_cosignature_decides_and_later_lines_by_it_are_dropped() -> None:
    """As `open_note` and Go's note.Open: a junk line after a genuine cosignature made the
    witness `invalid` (and `audit watch` report bad_signature; found by review, stop 35);
    a junk line first is still invalid, and the first line's time is the one reported."""
    from replay.notes import sign_note

    log = SigningKey.generate("example.com/log")
    one = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    label = f"w1.example+{one.key_id.hex()}"
    good = cosignature.cosign(BODY, one, 5).line()
    later = cosignature.cosign(BODY, one, 9).line()
    junk = f"\u2014 w1.example {base64.b64encode(one.key_id + bytes(72)).decode()}\n"
    note = sign_note(BODY, log)
    assert cosignature.cosignatures(note + good + junk, [one.verifier()]).valid == {label: 5}
    assert cosignature.cosignatures(note + good + later, [one.verifier()]).valid == {label: 5}
    assert cosignature.cosignatures(note + junk + good, [one.verifier()]).invalid == (label,)


@pytest.mark.parametrize("timestamp", [-1, 2**63, True, 1.5])
def test_times_outside_u63_are_refused(timestamp: object) -> None:
    with pytest.raises(NoteError):
        cosignature.cosigned_message(BODY, timestamp)  # type: ignore[arg-type]
