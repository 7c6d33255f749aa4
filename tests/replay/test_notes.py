"""replay.notes against the published vectors: C2SP signed-note and Go's sumdb/note tests.

The PeterNeumann and EnochRoot keys and notes are copied from golang.org/x/mod
sumdb/note/note_test.go and example_test.go (BSD-3-Clause, The Go Authors); the
example.com/foo key and note from C2SP signed-note.md (CC BY 4.0). EnochRoot is what Go's
GenerateKey derives from an all-zero random reader, so its seed is 32 zero bytes.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay.notes import (
    COSIGNATURE_KEY,
    Checkpoint,
    NoteError,
    Signature,
    SigningKey,
    VerifierKey,
    add_signature_lines,
    key_id,
    open_note,
    parse_note,
    sign_note,
)

PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotp"
    "RZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox3"
    "3WWd1RvMc+QQ=\n"
)
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n"
    "— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFX"
    "mRKuwHjG1Yu72IneyaQM=\n"
)


def enoch() -> SigningKey:
    seed = bytes(32)
    return SigningKey("EnochRoot", key_id("EnochRoot", 1, _public(seed)), 1, seed)


def _public(seed: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return (
        Ed25519PrivateKey.from_private_bytes(seed)
        .public_key()
        .public_bytes(Encoding.Raw, PublicFormat.Raw)
    )


def test_go_signing_vector_is_reproduced_byte_for_byte() -> None:
    signed = sign_note(TEXT, SigningKey.parse(PETER_SKEY))
    assert signed == TEXT + "\n" + PETER_SIG


def test_go_keys_round_trip_and_agree() -> None:
    signer = SigningKey.parse(PETER_SKEY)
    assert signer.encode() == PETER_SKEY
    assert signer.verifier().encode() == PETER_VKEY
    verifier = VerifierKey.parse(PETER_VKEY)
    assert verifier == signer.verifier()
    assert verifier.key_id == bytes.fromhex("c74f20a3")
    assert verifier.key_type == 1


def test_enoch_root_zero_seed_is_go_generate_key_output() -> None:
    key = enoch()
    assert key.verifier().encode() == ENOCH_VKEY
    signed = add_signature_lines(sign_note(TEXT, SigningKey.parse(PETER_SKEY)), [ENOCH_SIG])
    assert signed == TEXT + "\n" + PETER_SIG + ENOCH_SIG
    assert sign_note(TEXT, key) == TEXT + "\n" + ENOCH_SIG


def test_c2sp_example_note_opens() -> None:
    note, verified = open_note(C2SP_NOTE, [VerifierKey.parse(C2SP_VKEY)])
    assert note.text == "This is an example message.\n"
    assert [key.encode() for key in verified] == [C2SP_VKEY]


def test_open_one_known_one_unknown() -> None:
    peter = VerifierKey.parse(PETER_VKEY)
    note, verified = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [peter])
    assert note.text == TEXT
    assert verified == (peter,)
    assert [s.name for s in note.signatures] == ["PeterNeumann", "EnochRoot"]
    assert note.signatures[1].key_id == bytes.fromhex("af0cfe78")


def test_open_both_known() -> None:
    keys = [VerifierKey.parse(PETER_VKEY), VerifierKey.parse(ENOCH_VKEY)]
    _, verified = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, keys)
    assert [k.name for k in verified] == ["PeterNeumann", "EnochRoot"]


def test_open_without_known_key_is_unknown_key() -> None:
    with pytest.raises(NoteError) as error:
        open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [])
    assert error.value.code == "unknown_key"
    # Same name, different key ID: still unknown (signed-note: ignore, never verify).
    other = SigningKey.generate("PeterNeumann").verifier()
    with pytest.raises(NoteError) as error:
        open_note(TEXT + "\n" + PETER_SIG, [other])
    assert error.value.code == "unknown_key"


def test_open_duplicate_signature_lines_verify_once() -> None:
    peter = VerifierKey.parse(PETER_VKEY)
    _, verified = open_note(TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG, [peter])
    assert verified == (peter,)


def test_the_same_key_listed_twice_is_harmless() -> None:
    enoch_key = VerifierKey.parse(ENOCH_VKEY)
    peter = VerifierKey.parse(PETER_VKEY)
    _, verified = open_note(TEXT + "\n" + ENOCH_SIG, [enoch_key, peter, enoch_key])
    assert verified == (enoch_key,)


def test_corrupted_signature_is_bad_signature() -> None:
    peter = VerifierKey.parse(PETER_VKEY)
    corrupt = PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(NoteError) as error:
        open_note(TEXT + "\n" + corrupt, [peter])
    assert error.value.code == "bad_signature"
    # A changed text under a valid signature.
    with pytest.raises(NoteError) as error:
        open_note(TEXT.replace("answer", "Answer") + "\n" + PETER_SIG, [peter])
    assert error.value.code == "bad_signature"


@pytest.mark.parametrize(
    "message",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        "\ud800" + TEXT + "\n" + PETER_SIG,
        TEXT
        + "\n"
        + "— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfq"
        "dngotpRZb6KE6RyyBwJnAM=",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
        TEXT + "\n" + PETER_SIG * 101,
        TEXT + "\n" + "— PeterNeumann AAAA\n",
        TEXT + "\n" + "— PeterNeumann \n",
    ],
)
def test_go_malformed_notes_are_refused(message: str) -> None:
    with pytest.raises(NoteError) as error:
        open_note(message, [VerifierKey.parse(PETER_VKEY)])
    assert error.value.code == "malformed_note"
    with pytest.raises(NoteError):
        parse_note(message)


def _manglings(key: str) -> list[str]:
    """Go's TestNewVerifier/TestNewSigner: every proper substring and every byte bumped."""
    out = [key[i:j] for i in range(len(key) + 1) for j in range(i + 1, len(key) + 1)]
    out = [s for s in out if s != key]
    out += [key[:i] + chr(ord(key[i]) + 1) + key[i + 1 :] for i in range(len(key))]
    return out


def test_mangled_verifier_keys_are_refused() -> None:
    for text in _manglings(PETER_VKEY):
        with pytest.raises(NoteError) as error:
            VerifierKey.parse(text)
        assert error.value.code == "malformed_key", text
    # Wrong length and unknown algorithm, with adjusted key hashes (Go's own cases).
    for text in (
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ):
        with pytest.raises(NoteError):
            VerifierKey.parse(text)


def test_mangled_private_keys_are_refused() -> None:
    for text in _manglings(PETER_SKEY):
        with pytest.raises(NoteError) as error:
            SigningKey.parse(text)
        assert error.value.code == "malformed_key", text


def test_generated_keys_sign_and_verify() -> None:
    key = SigningKey.generate("example.com/log")
    assert SigningKey.parse(key.encode()) == key
    assert VerifierKey.parse(key.verifier().encode()) == key.verifier()
    signature = key.sign(b"hi")
    assert key.verifier().verify(b"hi", signature)
    assert not key.verifier().verify(b"ho", signature)
    assert not key.verifier().verify(b"hi", bytes([signature[0] ^ 1]) + signature[1:])
    assert "seed" not in repr(key) and base64.b64encode(key.seed).decode() not in repr(key)


def test_sign_refuses_a_text_without_final_newline() -> None:
    with pytest.raises(NoteError) as error:
        sign_note("abc", SigningKey.parse(PETER_SKEY))
    assert error.value.code == "malformed_note"


def test_cosignature_keys_are_verified_with_the_cosignature_message() -> None:
    body = "example.com/log\n3\n" + base64.b64encode(bytes(32)).decode() + "\n"
    log = SigningKey.generate("example.com/log")
    witness = SigningKey.generate("example.com/witness", COSIGNATURE_KEY)
    assert base64.b64decode(witness.verifier().encode().split("+", 2)[2])[0] == 0x04
    timestamp = 1_700_000_000
    raw = witness.sign(f"cosignature/v1\ntime {timestamp}\n".encode() + body.encode())
    line = Signature(witness.name, witness.key_id, timestamp.to_bytes(8, "big") + raw).line()
    note = add_signature_lines(sign_note(body, log), [line])
    _, verified = open_note(note, [log.verifier(), witness.verifier()])
    assert verified == (log.verifier(), witness.verifier())
    forged = Signature(witness.name, witness.key_id, (timestamp + 1).to_bytes(8, "big") + raw)
    with pytest.raises(NoteError) as error:
        open_note(add_signature_lines(sign_note(body, log), [forged.line()]), [witness.verifier()])
    assert error.value.code == "bad_signature"


def test_c2sp_checkpoint_example_parses() -> None:
    body = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    checkpoint = Checkpoint.parse(body)
    assert checkpoint.origin == "example.com/behind-the-sofa"
    assert checkpoint.size == 20852163
    assert checkpoint.body() == body
    assert Checkpoint.parse(body + "ext\n").extensions == ("ext",)


@pytest.mark.parametrize(
    "body",
    [
        "o\n1\n",
        "o\n01\n" + base64.b64encode(bytes(32)).decode() + "\n",
        "o\n-1\n" + base64.b64encode(bytes(32)).decode() + "\n",
        "o\n1\n" + base64.b64encode(bytes(31)).decode() + "\n",
        "o\n1\n" + base64.b64encode(bytes(32)).decode(),
        "\n1\n" + base64.b64encode(bytes(32)).decode() + "\n",
        "o\n1\n" + base64.b64encode(bytes(32)).decode() + "\n\n",
        "o\n١\n" + base64.b64encode(bytes(32)).decode() + "\n",
    ],
)
def test_malformed_checkpoints_are_refused(body: str) -> None:
    with pytest.raises(NoteError) as error:
        Checkpoint.parse(body)
    assert error.value.code == "malformed_checkpoint"


@given(
    size=st.integers(min_value=0, max_value=2**63),
    root=st.binary(min_size=32, max_size=32),
    origin=st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40
    ),
)
def test_checkpoint_body_round_trips(size: int, root: bytes, origin: str) -> None:
    checkpoint = Checkpoint(origin=origin, size=size, root=root)
    assert Checkpoint.parse(checkpoint.body()) == checkpoint
