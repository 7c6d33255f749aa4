"""Go's own verifier agrees: a tiny Go program (tests/audit/gocheck/main.go) built in GOPATH
mode against Debian's golang-golang-x-mod-dev (sumdb/note, sumdb/tlog) checks our signed
checkpoint note, a receipt's audit path and a consistency proof between two checkpoints.
Skipped only when Go or the package is absent and CI is not "true"."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from blackops import Application
from blackops.audit.checkpoints import CheckpointService
from blackops.audit.receipts import OPERATION_TERMINAL, receipt_for, terminal_position
from blackops.testing import FakeClock
from replay.notes import NoteError, SigningKey, open_note
from replay.receipts import TlogProof

GOCODE = Path("/usr/share/gocode")
SOURCE = Path(__file__).parent / "gocheck" / "main.go"


@pytest.fixture(scope="module")
def gocheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None or not (GOCODE / "src/golang.org/x/mod/sumdb/note").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs golang-go and golang-golang-x-mod-dev (.ci/run installs them)")
        pytest.skip("Go or golang-golang-x-mod-dev is not installed")
    root = tmp_path_factory.mktemp("gopath")
    package = root / "src" / "gocheck"
    package.mkdir(parents=True)
    shutil.copy(SOURCE, package / "main.go")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{root}:{GOCODE}",
           "GOCACHE": str(root / "cache"), "GOFLAGS": ""}  # fmt: skip
    subprocess.run([go, "build", "-o", str(root / "gocheck"), "."], cwd=package, env=env,
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    return root / "gocheck"


def check(binary: Path, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary)], input=json.dumps(document), capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_go_verifies_our_note_receipt_and_consistency_proof(
    gocheck: Path, store_url: str, tmp_path: Path
) -> None:
    app = Application(store_url, clock=FakeClock())
    app.operation("t.ok")(lambda ctx, params: {"n": params["n"]})
    key = SigningKey.generate("example.com/go-cross-check")
    service = CheckpointService(app.store, key, app.clock)
    try:
        ids = [app.run("t.ok", {"n": n}, actor="a", tenant="default").operation_id
               for n in range(40)]  # fmt: skip
        old_note = service.sign()
        assert old_note is not None
        for n in range(300):
            app.run("t.ok", {"n": n}, actor="a", tenant="default")
        new_note = service.sign()
        assert new_note is not None
        receipt = receipt_for(service, terminal_position(app.events(ids[7]), OPERATION_TERMINAL))
        proof = TlogProof.parse(receipt["proof"])
        old_size = int(old_note.split("\n")[1])
        new_size = int(new_note.split("\n")[1])
        consistency = service.synced_tree().consistency(old_size, new_size)
    finally:
        app.close()
    assert proof.checkpoint == new_note  # the receipt names the newest checkpoint
    document = {
        "vkey": key.verifier().encode(),
        "note": proof.checkpoint,
        "entry": receipt["entry"],
        "index": receipt["index"],
        "path": [base64.b64encode(h).decode() for h in proof.path],
        "oldNote": old_note,
        "consistency": [base64.b64encode(h).decode() for h in consistency],
    }
    agreed = check(gocheck, document)
    assert agreed.returncode == 0, agreed.stdout + agreed.stderr
    assert agreed.stdout.splitlines() == [
        f"ok note signature (example.com/go-cross-check, size {new_size})",
        f"ok inclusion of leaf {receipt['index']}",
        f"ok consistency {old_size} -> {new_size}",
    ]
    # Go refuses what ours refuses: another entry, another key.
    forged = check(gocheck, {**document, "entry": receipt["entry"].replace("completed", "failed")})
    assert forged.returncode == 1 and "CheckRecord" in forged.stdout
    other = SigningKey.generate("example.com/go-cross-check").verifier().encode()
    assert "note.Open" in check(gocheck, {**document, "vkey": other}).stdout
    # A junk line appended under the log's own name and key ID: Go's note.Open verifies a
    # key's first signature and drops the rest, and so does ours (it refused the note:
    # stop 35's hunt); a junk line first is refused by both.
    junk = "— example.com/go-cross-check " + base64.b64encode(key.key_id + bytes(64)).decode()
    after = new_note + junk + "\n"
    assert check(gocheck, {**document, "note": after}).returncode == 0
    assert open_note(after, [key.verifier()])[1] == (key.verifier(),)
    head, signatures = new_note.split("\n\n", 1)
    before = f"{head}\n\n{junk}\n{signatures}"
    assert "note.Open" in check(gocheck, {**document, "note": before}).stdout
    with pytest.raises(NoteError, match="invalid signature"):
        open_note(before, [key.verifier()])
