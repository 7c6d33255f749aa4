"""The read side from the shell: ``blackops wf list UID``, ``wf counts UID`` and
``op counts``, each with ``--json`` (exactly one document), run in-process on both stores."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from blackops import Application
from blackops.cli.main import main

APP = """
from blackops import Application

app = Application()
app.operation("t.echo")(lambda ctx, params: params)


class Nap:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        await step.sleep("nap", 60)


app.register_workflow(Nap, space="acme")
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_wf_list_counts_and_op_counts(
    tmp_path: Path,
    store_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "readapp.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("readapp", None)
    import readapp  # type: ignore[import-not-found]

    app: Application = readapp.app
    app.use_store(store_url)
    for n in range(3):
        asyncio.run(app.workflow("Nap").create(id=f"n-{n}"))
    app.run("t.echo", {}, actor="a", tenant="acme")
    asyncio.run(app.work_until_idle())
    common = ["--app", "readapp:app", "--store", store_url]
    listed = run(capsys, "wf", "list", "Nap", "--limit", "2", *common)
    assert [i["id"] for i in listed["items"]] == ["n-0", "n-1"] and listed["next"]
    rest = run(capsys, "wf", "list", "Nap", "--cursor", listed["next"], *common)
    assert [i["id"] for i in rest["items"]] == ["n-2"]
    assert run(capsys, "wf", "list", "Nap", "--status", "complete", *common)["items"] == []
    counts = run(capsys, "wf", "counts", "Nap", *common)
    assert counts["instanceCounts"]["sleeping"] == 3
    ops = run(capsys, "op", "counts", "--tenant", "acme", "--store", store_url)
    assert ops["counts"]["acme"]["t.echo"]["completed"] == 1
    # Without a UID, wf list still lists the registered workflows.
    assert run(capsys, "wf", "list", *common)["workflows"][0]["uid"] == "Nap"
    assert main(["wf", "list", "Nap", "--since", "yesterday", *common]) == 1
    app.close()
