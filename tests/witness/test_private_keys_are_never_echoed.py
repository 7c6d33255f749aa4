"""A private key given where a verifier key goes is refused without printing it: the
whole seed went into the refusal, on stderr and in the ``--json`` document (found by a
defect hunt, stop 40). Each command that reads verifier keys, text or file."""

from __future__ import annotations

from pathlib import Path

import pytest

from blackops.cli.main import main
from replay.notes import SigningKey


@pytest.mark.parametrize("as_file", [False, True])
def test_a_private_key_as_a_verifier_key_is_refused_unprinted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_file: bool
) -> None:
    private = SigningKey.generate("example.com/log").encode()
    secret = private.rsplit("+", 1)[1]
    given = private
    if as_file:
        path = tmp_path / "log.key"
        path.write_text(private + "\n")
        given = str(path)
    key_file = tmp_path / "witness.key"
    assert main(["witness", "generate-key", "--name", "w1.example", "--output", str(key_file)]) == 0
    receipt = tmp_path / "r.json"
    receipt.write_text("{}")
    commands = [
        ["verify-receipt", str(receipt), "--key", given],
        ["witness", "serve", "--key", str(key_file), "--log", given, "--state", str(tmp_path)],
        ["audit", "watch", "--store", "memory://", "--key", given, "--state", str(tmp_path / "s")],
    ]
    for command in commands:
        capsys.readouterr()
        assert main([*command, "--json"]) == 1
        out, err = capsys.readouterr()
        assert "is a private key" in out, (command, out, err)
        assert secret not in out + err and "PRIVATE+KEY" not in out + err
