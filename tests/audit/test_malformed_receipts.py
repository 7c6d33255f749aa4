"""A receipt is checked byte for byte: every malformed one is a ``ReceiptError`` with a stable
code (``blackops verify-receipt`` exits 1 with it), never a traceback; only the entry the leaf
hashes, with at most one trailing newline, verifies (the leaf is SHA-256(0x00 ‖ entry))."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transparency_log import ToyLog, observed_entry

from replay.cosignature import cosign, cosigner_verifier
from replay.merkle import inclusion_proof
from replay.notes import Checkpoint, SigningKey
from replay.receipts import ReceiptError, TlogProof, verify_receipt

CODES = {
    "malformed_receipt", "malformed_proof", "malformed_note", "malformed_checkpoint",
    "bad_signature", "unknown_key", "not_included", "ambiguous_key",
}  # fmt: skip
LOG = ToyLog().append(*(observed_entry(n) for n in range(7)))
RECEIPT: dict[str, Any] = {
    "entry": observed_entry(3),
    "index": 3,
    "proof": TlogProof(3, tuple(inclusion_proof(3, LOG.leaves)), LOG.note()).text(),
}
KEYS = [LOG.key.verifier()]


def test_the_receipt_verifies_with_its_entry_and_with_one_trailing_newline() -> None:
    assert verify_receipt(RECEIPT, KEYS).size == 7
    assert verify_receipt({**RECEIPT, "entry": observed_entry(3) + "\n"}, KEYS).size == 7


@pytest.mark.parametrize("tail", ["\n\n", "\n\n\n\n", "\r\n", "\n \n"])
def test_more_than_one_trailing_newline_is_refused(tail: str) -> None:
    with pytest.raises(ReceiptError) as caught:
        verify_receipt({**RECEIPT, "entry": observed_entry(3) + tail}, KEYS)
    assert caught.value.code in {"malformed_receipt", "not_included"}


@pytest.mark.parametrize(
    "receipt",
    [
        {"entry": RECEIPT["entry"], "index": 3, "extra": 1},  # no proof, one more key
        {"index": 3, "proof": RECEIPT["proof"], "x": 1, "y": 2},
        {"entry": RECEIPT["entry"], "proof": RECEIPT["proof"], "extra": 1},
        {**RECEIPT, "index": 10**5000},
        {**RECEIPT, "proof": RECEIPT["proof"].replace("index 3", "index " + "3" * 5000)},
        {
            **RECEIPT,
            "index": 2**64,
            "proof": RECEIPT["proof"].replace("index 3", "index 18446744073709551616"),
        },
        {**RECEIPT, "entry": "\ud800"},
        [RECEIPT],
    ],
)
def test_a_malformed_receipt_is_a_receipt_error(receipt: Any) -> None:
    with pytest.raises(ReceiptError) as caught:
        verify_receipt(receipt, KEYS)
    assert caught.value.code in CODES


def mangle(data: st.DataObject, text: str) -> str:
    chars = list(text)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(chars)))
        how = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        char = data.draw(st.sampled_from(["\n", "0", "9", " ", "=", "+", "²", "—", "\ud800", "a"]))
        if how == "insert":
            chars.insert(at, char)
        elif chars and at < len(chars):
            chars[at : at + 1] = [] if how == "delete" else [char]
    return "".join(chars)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mangled_receipts_verify_or_are_refused_with_a_code(data: st.DataObject) -> None:
    receipt: Any = dict(RECEIPT)
    field = data.draw(st.sampled_from(["entry", "proof", "index", "keys", "value"]))
    if field in ("entry", "proof"):
        receipt[field] = mangle(data, receipt[field])
    elif field == "index":
        receipt["index"] = data.draw(st.one_of(st.integers(), st.text(), st.none(), st.booleans()))
    elif field == "keys":
        for key in data.draw(st.sets(st.sampled_from(sorted(RECEIPT)))):
            del receipt[key]
        receipt.update(data.draw(st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)))
    else:
        receipt = data.draw(st.one_of(st.none(), st.integers(), st.text(), st.lists(st.text())))
    code, checkpoint = outcome(receipt)
    if checkpoint is None:
        assert code in CODES
    else:  # it verified: then it is the receipt of leaf 3 under the signed root
        assert checkpoint.size == 7 and receipt["index"] == 3
        assert receipt["entry"] in (observed_entry(3), observed_entry(3) + "\n")


def outcome(receipt: Any) -> tuple[str, Checkpoint | None]:
    try:
        return "", verify_receipt(receipt, KEYS)
    except ReceiptError as error:
        return error.code, None


def test_verify_receipt_exits_1_with_the_code_never_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps({"entry": RECEIPT["entry"], "index": 3, "extra": 1}))
    done = subprocess.run(
        [sys.executable, "-m", "blackops", "verify-receipt", str(path), "--json",
         "--key", LOG.key.verifier().encode()],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["problem"] == "malformed_receipt"
    good = tmp_path / "good.json"
    good.write_text(json.dumps({**RECEIPT, "entry": RECEIPT["entry"] + "\n\n\n\n"}))
    done = subprocess.run(
        [sys.executable, "-m", "blackops", "verify-receipt", str(good), "--json",
         "--key", LOG.key.verifier().encode()],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and json.loads(done.stdout)["problem"] == "malformed_receipt"


def verify_receipt_file(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blackops", "verify-receipt", str(path), "--json",
         "--key", LOG.key.verifier().encode()],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_receipt_that_names_a_member_twice_is_refused(tmp_path: Path) -> None:
    """``{"entry": FORGED, <the genuine receipt>}``: a reader keeping the last ``entry``
    verifies the genuine one, a reader keeping the first shows the forged one; so neither
    may (found by a defect hunt: it verified, exit 0)."""
    genuine = tmp_path / "genuine.json"
    genuine.write_text(json.dumps(RECEIPT))
    assert verify_receipt_file(genuine).returncode == 0
    doubled = tmp_path / "doubled.json"
    doubled.write_text('{"entry": "FORGED", ' + json.dumps(RECEIPT)[1:])
    done = verify_receipt_file(doubled)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    error = json.loads(done.stdout or done.stderr)["error"]
    assert error["code"] == "invalid_request" and "duplicate object key" in error["message"]
    # Read strictly, but any JSON value: a receipt that is no object is still the receipt's
    # own refusal (decisions A16), not an input error.
    listed = tmp_path / "listed.json"
    listed.write_text("[]")
    done = verify_receipt_file(listed)
    assert done.returncode == 1 and json.loads(done.stdout)["problem"] == "malformed_receipt"


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        # A reader keeping the first "verdict" sees approved, one keeping the last rejected.
        (
            observed_entry(0).replace('{"n":0}', '{"verdict":"approved","verdict":"rejected"}'),
            "duplicate",
        ),
        (observed_entry(0).replace('"context":{}', '"context": {}'), "spelled"),
        ('{"n":0}', "missing"),  # no Observed event at all
    ],
    ids=["duplicate-key", "not-rfc8785", "not-an-event"],
)
def test_an_entry_that_is_no_canonical_observed_line_is_refused(entry: str, said: str) -> None:
    """The log signed over it, and the audit path leads to the signed root; but an entry two
    readers read differently proves nothing (found by a defect hunt against the operator,
    stop 37: a row with a duplicate key, appended by SQL with its leaf, got a receipt that
    verified)."""
    log = ToyLog().append(entry, observed_entry(1))
    receipt = {
        "entry": entry,
        "index": 0,
        "proof": TlogProof(0, tuple(inclusion_proof(0, log.leaves)), log.note()).text(),
    }
    with pytest.raises(ReceiptError) as caught:
        verify_receipt(receipt, [log.key.verifier()])
    assert caught.value.code == "malformed_receipt" and said in str(caught.value)


def test_a_required_witness_must_have_cosigned_the_receipts_checkpoint(tmp_path: Path) -> None:
    """A log that signs a fork shows each reader its own tree: only a witness every reader
    requires sees both. ``verify-receipt`` could not require one; a witness's key given as
    ``--key`` was taken as a log key that signed nothing, and a forked receipt verified with
    it given (found by a defect hunt against the operator, stop 37)."""
    witness, other = SigningKey.generate("witness.example/w1"), SigningKey.generate("w2.example")
    body = LOG.checkpoint().body()
    cosigned = LOG.note() + cosign(body, witness, 1_700_000_000).line()
    proof = TlogProof(3, tuple(inclusion_proof(3, LOG.leaves)), cosigned).text()
    receipt = {**RECEIPT, "proof": proof}
    witness_key = cosigner_verifier(witness.verifier())
    assert verify_receipt(receipt, KEYS, [witness_key]).size == 7
    with pytest.raises(ReceiptError) as another:
        verify_receipt(receipt, KEYS, [witness_key, cosigner_verifier(other.verifier())])
    assert another.value.code == "missing_cosignature"
    with pytest.raises(ReceiptError) as uncosigned:
        verify_receipt(RECEIPT, KEYS, [witness_key])
    assert uncosigned.value.code == "missing_cosignature"
    forged = LOG.note() + cosign(body.replace("\n7\n", "\n8\n"), witness, 5).line()
    with pytest.raises(ReceiptError) as bad:
        verify_receipt({**RECEIPT, "proof": RECEIPT["proof"].replace(LOG.note(), forged)},
                       KEYS, [witness_key])  # fmt: skip
    assert bad.value.code == "bad_signature"
    # The CLI: --witness-key, and a witness's cosignature key given as --key, both require it.
    path = tmp_path / "r.json"
    path.write_text(json.dumps(RECEIPT))
    log_key = KEYS[0].encode()
    for flags in (["--witness-key", witness_key.encode()], ["--key", witness_key.encode()]):
        done = subprocess.run(
            [sys.executable, "-m", "blackops", "verify-receipt", str(path), "--key", log_key,
             *flags, "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout
        assert json.loads(done.stdout)["problem"] == "missing_cosignature"
    path.write_text(json.dumps(receipt))
    done = subprocess.run(
        [sys.executable, "-m", "blackops", "verify-receipt", str(path), "--key", log_key,
         "--witness-key", witness_key.encode()],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
