"""``blackops replay --check`` and ``blackops wf history`` (issue 16, decisions C1-C8),
in-process on SQLite and PostgreSQL: candidates from ``--app``, ``--bundle`` and a
Version; histories from ``--workflow`` and from Observed JSONL files; exit status 0 only
when every history is compatible, 3 when any is not."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from blackops import Application
from blackops.cli.main import main
from blackops.testing import FakeClock, replay_histories
from replay.observed import parse_line

STEPS = """\
    async def run(self, event, step):
        a = await step.do('reserve', lambda: {'did': 'reserve'})
        b = await step.do(SECOND, lambda: {'did': 'charge'})
        await step.sleep('cool', 60)
        return {'a': a, 'b': b}
"""


def flow_source(second: str = "charge") -> str:
    return "class Order:\n    def __init__(self, env):\n        self.env = env\n\n" + (
        STEPS.replace("SECOND", repr(second))
    )


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def doc(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def recorded(store_url: str, clock: FakeClock, tmp_path: Path) -> str:
    """The journal at ``store_url`` holds ``done`` (complete) and ``nap`` (sleeping) of
    the workflow ``orders``, recorded by ``flow_source()``."""
    namespace: dict[str, Any] = {}
    exec(flow_source(), namespace)
    app = Application(store_url, clock=clock)
    binding = app.register_workflow(namespace["Order"], uid="orders")
    asyncio.run(binding.create(id="done"))
    asyncio.run(app.work_until_idle())
    clock.advance(60)
    asyncio.run(app.work_until_idle())
    asyncio.run(binding.create(id="nap"))
    asyncio.run(app.work_until_idle())
    app.close()
    return store_url


@pytest.fixture
def cli(
    recorded: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Callable[..., Ran]:
    monkeypatch.setenv("USER", "ana")
    monkeypatch.chdir(tmp_path)

    def run(*args: str, expect: int | None = 0) -> Ran:
        capsys.readouterr()
        code = main([*args, "--store", recorded])
        captured = capsys.readouterr()
        ran = Ran(code, captured.out, captured.err)
        if expect is not None:
            assert code == expect, ran
        return ran

    return run


def candidate_app(tmp_path: Path, second: str) -> str:
    """A module registering the candidate Order as ``orders``; its ``--app`` target."""
    name = f"candidate_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from blackops import Application\n\n"
        + flow_source(second)
        + "\n\napp = Application()\napp.register_workflow(Order, uid='orders')\n"
    )
    if str(tmp_path) not in sys.path:
        sys.path.insert(0, str(tmp_path))
    return f"{name}:app"


def journal_size(store_url: str) -> int:
    app = Application(store_url)
    try:
        return len(list(app.store.iter_after(0)))
    finally:
        app.close()


def test_a_compatible_app_exits_zero(
    cli: Callable[..., Ran], tmp_path: Path, recorded: str
) -> None:
    before = journal_size(recorded)
    ran = cli("replay", "--check", "--app", candidate_app(tmp_path, "charge"), "--workflow",
              "orders", "--json")  # fmt: skip
    doc = ran.doc
    assert doc["compatible"] is True and doc["checked"] == 2
    assert doc["counts"]["compatible"] == 2
    assert {i["instanceId"]: i["verdict"] for i in doc["instances"]} == {
        "done": "compatible",
        "nap": "compatible",
    }
    assert journal_size(recorded) == before


def test_an_incompatible_app_exits_three_with_a_human_report(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    target = candidate_app(tmp_path, "bill")
    ran = cli("replay", "--check", "--app", target, "--workflow", "orders", expect=3)
    assert ran.out.startswith("INCOMPATIBLE: 2 histories checked")
    assert "new_step_inside_history" in ran.out
    lines = [line for line in ran.out.splitlines() if line.startswith("new_step_inside_history")]
    assert len(lines) == 2 and all("'bill' (do)" in line for line in lines)
    assert {"'done'", "'nap'"} == {line.split()[1] for line in lines}
    doc = cli("replay", "--check", "--app", target, "--workflow", "orders", "--json",
              expect=3).doc  # fmt: skip
    finding = doc["instances"][0]["findings"][0]
    assert set(finding) == {"kind", "step", "stepKind", "position", "version", "reason"}
    # Only the newest instance; only one by id; only sleeping ones.
    newest = cli("replay", "--check", "--app", target, "--workflow", "orders", "--limit", "1",
                 "--json", expect=3).doc  # fmt: skip
    assert [i["instanceId"] for i in newest["instances"]] == ["nap"]
    named = cli("replay", "--check", "--app", target, "--workflow", "orders", "--instances",
                "done", "--json", expect=3).doc  # fmt: skip
    assert [i["instanceId"] for i in named["instances"]] == ["done"]
    sleeping = cli("replay", "--check", "--app", target, "--workflow", "orders", "--status",
                   "sleeping", "--json", expect=3).doc  # fmt: skip
    assert [i["instanceId"] for i in sleeping["instances"]] == ["nap"]


def test_a_history_file_replays_in_the_cli_and_in_pytest(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    fixture = tmp_path / "done.jsonl"
    target = candidate_app(tmp_path, "charge")
    ran = cli("wf", "history", "orders", "done", "--app", target, "--output", str(fixture),
              "--json")  # fmt: skip
    assert ran.doc == {"id": "done", "events": ran.doc["events"], "output": str(fixture)}
    lines = fixture.read_bytes().splitlines()
    assert len(lines) == ran.doc["events"] >= 8
    events = [parse_line(line, n) for n, line in enumerate(lines, 1)]  # strict Observed lines
    assert [e.version for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "workflow.completed"
    assert cli("replay", "--check", str(fixture), "--app", target, "--json").doc["checked"] == 1
    bad = cli("replay", "--check", str(fixture), "--app", candidate_app(tmp_path, "bill"),
              expect=3)  # fmt: skip
    assert "new_step_inside_history" in bad.out
    # A whole journal export is a history file too: only instance streams are taken.
    export = tmp_path / "journal.jsonl"
    cli("journal", "export", "--output", str(export), "--no-manifest")
    whole = cli("replay", "--check", str(export), "--app", target, "--json").doc
    assert sorted(i["instanceId"] for i in whole["instances"]) == ["done", "nap"]
    # The same file from pytest, as docs/workflows.md shows.
    namespace: dict[str, Any] = {}
    exec(flow_source("bill"), namespace)
    report = replay_histories(namespace["Order"], fixture)
    assert [f.kind for f in report.instances[0].findings] == ["new_step_inside_history"]
    exec(flow_source("charge"), namespace)
    assert replay_histories(namespace["Order"], str(fixture)).compatible


def test_a_bundle_folder_is_a_candidate(cli: Callable[..., Ran], tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "flows.py").write_text(flow_source("bill"))
    doc = cli("replay", "--check", "--bundle", str(folder), "--workflow", "orders", "--json",
              expect=3).doc  # fmt: skip
    assert doc["counts"]["new_step_inside_history"] == 2
    (folder / "flows.py").write_text(flow_source("charge"))
    assert cli("replay", "--check", "--bundle", str(folder), "--workflow", "orders").code == 0


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "--check", "--workflow", "orders"],  # no candidate
        ["replay", "--check", "--bundle", "x", "--app", "m:a", "--workflow", "orders"],
        ["replay", "--check", "--bundle", "."],  # no histories
        ["replay", "--check", "--bundle", ".", "f.jsonl", "--workflow", "orders"],
        ["replay", "--check", "--bundle", ".", "--workflow", "orders", "--limit", "0"],
        ["replay", "--check", "--bundle", ".", "--workflow", "orders", "--observer", "m:a"],
        ["replay", "--check", "--version", "sha256:" + "0" * 64, "--workflow", "orders"],
        ["replay", "--check", "--bundle", ".", "missing.jsonl"],
        ["wf", "history", "orders", "nobody", "--app", "PLACEHOLDER"],
    ],
)
def test_bad_input_is_a_clear_error_that_changes_nothing(
    cli: Callable[..., Ran], tmp_path: Path, recorded: str, args: list[str]
) -> None:
    (tmp_path / "flow.py").write_text(flow_source())
    args = [candidate_app(tmp_path, "charge") if a == "PLACEHOLDER" else a for a in args]
    before = journal_size(recorded)
    ran = cli(*args, "--json", expect=1)
    assert ran.doc["error"]["code"] in ("invalid_request", "not_found", "unknown_instance")
    assert journal_size(recorded) == before
