"""A command run as a user runs it, from a folder of its own, and the checks of a refusal
that changed nothing: exit 1, exactly one ``invalid_request`` document, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_processes import ROOT

from domain.errors import NotFound
from journal.store import EventStore


def run_in(tmp: Path, *argv: str | bytes) -> subprocess.CompletedProcess[str]:
    """``python -m blackops ARGV`` in ``tmp`` (its modules importable), state dir in it; an
    argument may be bytes (a file name that is no UTF-8)."""
    env = {
        **os.environ,
        "BLACKOPS_HOME": str(tmp / "home"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp)]),
    }
    env.pop("BLACKOPS_APP", None)
    return subprocess.run(
        [sys.executable, "-m", "blackops", *argv],
        cwd=tmp, capture_output=True, text=True, timeout=60, env=env, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def journal_types(store_url: str) -> list[str]:
    """The journal's event types in order; none when there is no journal."""
    try:
        with EventStore(store_url, create=False) as store:
            return [event.type for event in store.iter_after(0)]
    except NotFound:
        return []


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The message of a refusal (exit 1, one ``invalid_request`` document, no traceback)."""
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    error = json.loads(done.stdout)["error"]  # exactly one document
    assert error["code"] == "invalid_request", error
    return str(error["message"])
