"""One signer at a time across processes (decisions A3): six `blackops journal checkpoint`
processes sign while this process appends; in journal order the signed tree sizes never
decrease (two signers racing without the lock would append a smaller tree after a larger
one), and every checkpoint is a prefix of the final tree."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from cli_processes import ROOT

from blackops import Application
from blackops.audit.tree import JournalTree
from replay.notes import Checkpoint, SigningKey, open_note


def test_concurrent_signers_journal_non_decreasing_consistent_checkpoints(
    store_url: str, tmp_path: Path
) -> None:
    key = SigningKey.generate("example.com/race")
    key_file = tmp_path / "log.key"
    key_file.write_text(key.encode() + "\n")
    app = Application(store_url)
    app.operation("t.ok")(lambda ctx, params: {})
    stop = threading.Event()

    def append() -> None:
        while not stop.is_set():
            app.run("t.ok", {}, actor="a", tenant="default")

    writer = threading.Thread(target=append)
    writer.start()
    env = {**os.environ, "BLACKOPS_HOME": str(tmp_path / "home")}
    command = [sys.executable, "-m", "blackops", "journal", "checkpoint", "--signing-key",
               str(key_file), "--store", store_url]  # fmt: skip
    try:
        signers = [
            subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        errors = [p.communicate(timeout=120)[1] for p in signers]
        assert [p.returncode for p in signers] == [0] * 6, errors
    finally:
        stop.set()
        writer.join()
    try:
        events = app.store.read_topics(["journal.checkpoint"])
        tree = JournalTree(app.store)
        tree.sync()
    finally:
        app.close()
    checkpoints = [
        Checkpoint.parse(open_note(e.data["note"], [key.verifier()])[0].text) for e in events
    ]
    sizes = [c.size for c in checkpoints]
    assert len(sizes) == 6 and sizes == sorted(sizes), sizes
    for checkpoint in checkpoints:
        assert tree.root(checkpoint.size) == checkpoint.root
