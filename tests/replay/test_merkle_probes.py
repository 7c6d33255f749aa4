"""Every transparency-dev/merkle probe file (tests/vectors/transparency-dev-merkle) against
replay.merkle's verifiers, and the 32-byte / range checks the issue asks of each verifier."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from replay.merkle import EMPTY_ROOT, verify_consistency, verify_inclusion

VECTORS = Path(__file__).parent.parent / "vectors" / "transparency-dev-merkle"
INCLUSION = sorted((VECTORS / "inclusion").rglob("*.json"))
CONSISTENCY = sorted((VECTORS / "consistency").rglob("*.json"))


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def _hashes(values: list[str] | None) -> list[bytes]:
    return [_b64(v) for v in values or []]


def _short(*hashes: bytes) -> bool:
    return any(len(h) != 32 for h in hashes)


def _load(path: Path) -> dict[str, Any]:
    probe: dict[str, Any] = json.loads(path.read_text())
    return probe


def test_the_probe_files_are_all_there() -> None:
    assert len(INCLUSION) == 98 and len(CONSISTENCY) == 98


@pytest.mark.parametrize("path", INCLUSION, ids=lambda p: str(p.relative_to(VECTORS)))
def test_inclusion_probe(path: Path) -> None:
    probe = _load(path)
    leaf, root, proof = _b64(probe["leafHash"]), _b64(probe["root"]), _hashes(probe["proof"])
    ok = verify_inclusion(probe["leafIdx"], probe["treeSize"], leaf, proof, root)
    # Every inclusion probe that wants success has 32-byte hashes: no deviation here.
    assert ok is (not probe["wantErr"]), probe["desc"]


@pytest.mark.parametrize("path", CONSISTENCY, ids=lambda p: str(p.relative_to(VECTORS)))
def test_consistency_probe(path: Path) -> None:
    probe = _load(path)
    root1, root2, proof = _b64(probe["root1"]), _b64(probe["root2"]), _hashes(probe["proof"])
    ok = verify_consistency(probe["size1"], probe["size2"], root1, root2, proof)
    want_ok = not probe["wantErr"] and not _short(root1, root2, *proof)  # decisions A2
    assert ok is want_ok, probe["desc"]


def test_issue_probe_empty_root_and_leaf_is_refused() -> None:
    assert verify_inclusion(0, 1, b"", [], b"") is False


@pytest.mark.parametrize("size", [31, 33, 0])
def test_hashes_of_other_lengths_are_refused(size: int) -> None:
    leaf = b"\x01" * size
    assert verify_inclusion(0, 1, leaf, [], leaf) is False
    assert verify_consistency(1, 1, leaf, leaf, []) is False
    good = EMPTY_ROOT
    assert verify_consistency(1, 2, good, good, [leaf]) is False
    assert verify_inclusion(0, 2, good, [leaf], good) is False


def test_sizes_and_indexes_out_of_range_are_refused() -> None:
    h = EMPTY_ROOT
    assert verify_inclusion(-1, 1, h, [], h) is False
    assert verify_inclusion(1, 1, h, [], h) is False
    assert verify_inclusion(0, 2**64, h, [h] * 64, h) is False
    assert verify_inclusion(True, 2, h, [h], h) is False
    assert verify_consistency(0, 0, h, h, []) is False
    assert verify_consistency(0, 1, h, h, []) is False
    assert verify_consistency(2, 1, h, h, []) is False
    assert verify_consistency(1, 2**64, h, h, [h]) is False
