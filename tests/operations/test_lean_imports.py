"""An application without pydantic models never loads pydantic (~7 MB in the worker and in
every executor forked from it): handlers, failures and outcomes look it up instead of
importing it. Checked in a fresh interpreter by what lands in ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
{prelude}
from blackops import Application

def fails(ctx, params):
    raise ValueError("no")

with Application("sqlite:///{store}") as app:
    app.operation("t.echo")(lambda ctx, params: {{"got": params}})
    app.operation("t.fails")(fails)
    ok = app.run("t.echo", {{"a": 1}}, actor="t", tenant="acme")
    failed = app.run("t.fails", {{}}, actor="t", tenant="acme")
print(json.dumps([ok.status, failed.failure.message, "pydantic" in sys.modules]))
"""


def run_probe(tmp_path: Path, prelude: str = "") -> list[object]:
    code = PROBE.format(prelude=prelude, store=tmp_path / "j.sqlite3")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    found: list[object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_untyped_handlers_never_load_pydantic(tmp_path: Path) -> None:
    status, failure, loaded = run_probe(tmp_path)
    assert status == "completed"
    assert failure == "ValueError: no"  # describe_error ran without pydantic
    assert loaded is False


def test_the_probe_sees_pydantic_when_the_app_imports_it(tmp_path: Path) -> None:
    *_, loaded = run_probe(tmp_path, "import pydantic")
    assert loaded is True
