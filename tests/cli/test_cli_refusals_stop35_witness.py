"""Witness and monitor keys that cannot be written or read are ``invalid_request`` (one
document under ``--json``), as ``keys generate`` and ``verify-receipt`` already refuse the
same inputs, not tracebacks (found by a defect hunt, stop 35): ``witness generate-key``
into a missing folder or with a name that is not UTF-8 (from a non-UTF-8 argv), and a
``--key`` file of bytes that are not UTF-8 for ``witness key``, ``witness serve`` and
``audit watch``. Nothing is written: no key, no state."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_refusals import refused, run_in


def test_generate_key_into_a_missing_folder_is_invalid_request(tmp_path: Path) -> None:
    done = run_in(
        tmp_path, "witness", "generate-key", "--name", "w1.example", "--output",
        str(tmp_path / "nope" / "k"), "--json",
    )  # fmt: skip
    refused(done)
    assert sorted(os.listdir(tmp_path)) == []


def test_generate_key_with_a_name_that_is_not_utf8_is_invalid_request(tmp_path: Path) -> None:
    done = run_in(
        tmp_path, "witness", "generate-key", "--name", b"\xed\xa0\x80", "--output", "k", "--json"
    )
    refused(done)
    assert sorted(os.listdir(tmp_path)) == []  # no key file, not even an empty one


@pytest.mark.parametrize(
    "argv",
    [
        ["witness", "key", "--key", "bin.key", "--json"],
        ["witness", "serve", "--key", "bin.key", "--log", "x", "--port", "0",
         "--state", "wstate", "--json"],
        ["audit", "watch", "--store", "sqlite:///{tmp}/none.sqlite3", "--key", "bin.key",
         "--state", "st", "--json"],
        ["audit", "watch", "--store", "sqlite:///{tmp}/none.sqlite3", "--key", "ok.pub",
         "--witness-key", "bin.key", "--state", "st", "--json"],
    ],
    ids=["witness-key", "witness-serve", "audit-watch", "audit-watch-witness-key"],
)  # fmt: skip
def test_a_key_file_that_is_not_utf8_is_invalid_request(tmp_path: Path, argv: list[str]) -> None:
    from replay.notes import SigningKey

    (tmp_path / "bin.key").write_bytes(b"\xff\xfe\xfd not a key\n")
    (tmp_path / "ok.pub").write_text(SigningKey.generate("example.com/log").verifier().encode())
    listed = sorted(os.listdir(tmp_path))
    done = run_in(tmp_path, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    refused(done)
    assert sorted(os.listdir(tmp_path)) == listed  # no state, no journal
