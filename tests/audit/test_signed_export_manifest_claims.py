"""What a signed export's manifest says of its range is checked too (found by a defect hunt):
hidden leaves are 32-byte hashes at whole-number positions, every position is above
``after``, ``firstPosition``/``lastPosition`` are the file's first and last line, and
``journalRoot`` is the root the file and its attestation rebuild (without a key: the
range's own root when the tree holds nothing else). Offline, as ``verify --jsonl F [--key
K]`` runs it: the manifest check (kind ``manifest``), then the signature (kind
``signature``, ``malformed_manifest`` where the manifest contradicts itself)."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_processes import run
from rich_journal import inline_runs

from blackops.cli.audit import check_signed_export
from replay.merkle import Frontier, root_of
from replay.notes import SigningKey
from replay.verify import SeenLines, VerifyReport, verify_export

ORIGIN = "example.com/manifest-claims"
Export = tuple[list[bytes], dict[str, Any], str]


def signed_export(folder: Path, *flags: str) -> Export:
    """The CLI's signed export of a small journal: its lines, manifest and verifier key."""
    url = f"sqlite:///{folder}/j.sqlite3"
    inline_runs(url, ["other", "default"] * 3)
    key = SigningKey.generate(ORIGIN)
    (folder / "log.key").write_text(key.encode() + "\n")
    target = folder / "j.jsonl"
    done = run("journal", "export", "--output", str(target), "--signing-key",
               str(folder / "log.key"), *flags, store=url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads(Path(f"{target}.manifest.json").read_text())
    return target.read_bytes().splitlines(keepends=True), manifest, key.verifier().encode()


def hide(export: Export, first: int, count: int) -> Export:
    """As a Space export is: ``count`` lines from line ``first`` (from 0) only as hidden
    leaves, the manifest's leaves, root and count without them."""
    lines, manifest, vkey = copy.deepcopy(export)
    gone = manifest["leaves"][first : first + count]
    del manifest["leaves"][first : first + count], lines[first : first + count]
    manifest["count"] = len(manifest["leaves"])
    manifest["root"] = root_of(bytes.fromhex(h) for _, h in manifest["leaves"]).hex()
    manifest["attestation"]["hidden"] = sorted([*manifest["attestation"]["hidden"], *gone])
    return lines, manifest, vkey


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Export:
    return signed_export(tmp_path_factory.mktemp("whole"))


@pytest.fixture(scope="module")
def ranged(tmp_path_factory: pytest.TempPathFactory) -> Export:
    """``--after 4``, lines 3 and 4 of the file hidden: prefix, hidden leaves, a tree larger
    than the range."""
    return hide(signed_export(tmp_path_factory.mktemp("ranged"), "--after", "4"), 2, 2)


def verified(export: Export, change: Callable[[dict[str, Any]], object] | None = None) -> Any:
    """`verify --jsonl F --key K` in process: the first problem's (kind, message), or None."""
    lines, manifest, vkey = export
    manifest = copy.deepcopy(manifest)
    if change is not None:
        change(manifest)
    seen = SeenLines()
    report: VerifyReport = verify_export(lines, manifest, seen)
    if report.ok:
        check_signed_export(seen, manifest, [vkey], report)
    first = report.problems[0] if report.problems else None
    return None if first is None else (first.kind, first.message)


def test_the_exports_as_written_verify(whole: Export, ranged: Export) -> None:
    assert verified(whole) is None and verified(ranged) is None
    assert ranged[1]["attestation"]["hidden"] and ranged[1]["after"] == 4
    assert ranged[1]["journalTreeSize"] > ranged[1]["count"]


def merged(m: dict[str, Any]) -> None:
    """Two hidden leaves given as one 64-byte value and an empty one: they fold the same."""
    (one, left), (two, right) = m["attestation"]["hidden"][:2]
    m["attestation"]["hidden"][:2] = [[one, left + right], [two, ""]]


def short(m: dict[str, Any]) -> None:
    m["attestation"]["hidden"][0][1] = m["attestation"]["hidden"][0][1][:62]


@pytest.mark.parametrize("change", [merged, short], ids=["64-and-0-bytes", "31-bytes"])
def test_a_hidden_leaf_that_is_not_32_bytes_is_refused(
    ranged: Export, change: Callable[[dict[str, Any]], object]
) -> None:
    assert verified(ranged, change) == (
        "signature",
        "malformed_manifest: every hidden leaf is one 32-byte hash",
    )


@pytest.mark.parametrize("spelling", [str, float, lambda p: True, lambda p: 0, lambda p: -p])
def test_a_hidden_position_that_is_no_whole_number_is_refused(
    ranged: Export, spelling: Callable[[int], object]
) -> None:
    def change(m: dict[str, Any]) -> None:
        hidden = m["attestation"]["hidden"]
        hidden[0][0] = spelling(hidden[0][0])

    kind, message = verified(ranged, change)
    assert kind == "signature" and message.startswith("malformed_manifest: ")


@pytest.mark.parametrize("spelling", [str, float, lambda p: True])
def test_a_line_position_in_the_manifest_that_is_no_integer_is_refused(
    whole: Export, spelling: Callable[[int], object]
) -> None:
    """``int()`` took "1", 1.0 and true for 1."""

    def change(m: dict[str, Any]) -> None:
        m["leaves"][0][0] = spelling(m["leaves"][0][0])

    assert verified(whole, change) == ("manifest", "the manifest has no usable leaves/root")


def test_a_hidden_position_not_after_the_range_start_is_refused(ranged: Export) -> None:
    def change(m: dict[str, Any]) -> None:
        m["attestation"]["hidden"][0][0] = m["after"]

    assert verified(ranged, change) == (
        "signature",
        "malformed_manifest: a position is not after 4, where it begins",
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.update(firstPosition=m["firstPosition"] - 1),
        lambda m: m.update(lastPosition=m["lastPosition"] + 1),
        lambda m: m.update(firstPosition=None),
        lambda m: m.update(firstPosition=str(m["firstPosition"])),
        lambda m: m.update(after=m["firstPosition"]),
        lambda m: m.update(after="0"),
        lambda m: m.pop("after"),
    ],
    ids=["first", "last", "first-null", "first-text", "after-first", "after-text", "no-after"],
)
def test_the_ranges_ends_must_be_the_files(
    whole: Export, ranged: Export, change: Callable[[dict[str, Any]], object]
) -> None:
    for export in (whole, ranged):
        kind, message = verified(export, change)
        assert kind == "manifest" and "the manifest" in message, message


def test_a_false_journal_root_is_refused(whole: Export, ranged: Export) -> None:
    def change(m: dict[str, Any]) -> None:
        m["journalRoot"] = "00" * 32

    # The whole journal from the start: the range's root is the tree's, even without a key.
    assert verified(whole, change) == (
        "manifest",
        "the manifest's journalRoot is not the root of its leaves, the whole tree",
    )
    lines, manifest, _ = whole
    assert not verify_export(lines, {**manifest, "journalRoot": "00" * 32}).ok
    # A range with leaves before and hidden ones: only the attestation rebuilds it.
    assert verified(ranged, change) == (
        "signature",
        "malformed_manifest: journalRoot is not the root of the tree the export ends at",
    )
    lines, manifest, _ = ranged
    assert verify_export(lines, {**manifest, "journalRoot": "00" * 32}).ok  # no key: unprovable


def test_a_tree_too_small_for_the_leaves_is_refused(whole: Export) -> None:
    def change(m: dict[str, Any]) -> None:
        m["journalTreeSize"] = m["count"] - 1

    assert verified(whole, change) == (
        "manifest",
        "the manifest's journalTreeSize and journalRoot name no tree holding its leaves",
    )


def test_a_whole_journal_export_cannot_fold_its_first_lines_into_the_prefix(
    whole: Export,
) -> None:
    """The first three lines taken out of a whole-journal export (``after`` 0) and folded into
    the attestation's prefix: every hash still led to the signed root, and the file verified
    as the whole journal with nothing unaccounted (found by a defect hunt against the
    operator, stop 37). Positions are whole numbers from 1, so at most ``after`` leaves come
    before the range."""
    lines, manifest, vkey = copy.deepcopy(whole)
    gone = manifest["leaves"][:3]
    folded = Frontier()
    for _, leaf in gone:
        folded.append(bytes.fromhex(leaf))
    manifest["attestation"]["firstIndex"] = folded.size
    manifest["attestation"]["prefix"] = [base64.b64encode(n).decode() for n in folded.nodes()]
    del manifest["leaves"][:3], lines[:3]
    manifest["count"] = len(manifest["leaves"])
    manifest["root"] = root_of(bytes.fromhex(h) for _, h in manifest["leaves"]).hex()
    manifest["firstPosition"] = manifest["leaves"][0][0]
    assert manifest["after"] == 0
    assert verified((lines, manifest, vkey)) == (
        "signature",
        "malformed_manifest: firstIndex 3 is more leaves than positions up to 0",
    )


def test_verify_jsonl_requires_each_witness_named(whole: Export, tmp_path: Path) -> None:
    """``verify --jsonl F --key K --witness-key W``: the manifest's checkpoint must carry W's
    cosignature (a fork shown to this reader alone has none); without one it is not
    verified (found by a defect hunt against the operator, stop 37: no option required it)."""
    from replay.cosignature import cosigner_verifier

    lines, manifest, vkey = whole
    store = f"sqlite:///{tmp_path}/unused.sqlite3"  # --jsonl reads no store
    target = tmp_path / "j.jsonl"
    target.write_bytes(b"".join(lines))
    Path(f"{target}.manifest.json").write_text(json.dumps(manifest))
    witness = cosigner_verifier(SigningKey.generate("witness.example/w1").verifier()).encode()
    plain = run("verify", "--jsonl", str(target), "--key", vkey, "--json", store=store)
    assert plain.returncode == 0, plain.stdout
    required = run("verify", "--jsonl", str(target), "--key", vkey, "--witness-key", witness,
                   "--json", store=store)  # fmt: skip
    assert required.returncode == 1, required.stdout
    assert "missing_cosignature" in json.loads(required.stdout)["firstProblem"]["message"]
    alone = run("verify", "--witness-key", witness, "--json", store=store)
    assert alone.returncode == 1 and "--key goes with --jsonl" in alone.stdout
