"""The deploy gate (issue 16, decisions C7-C9) on SQLite and PostgreSQL, through the CLI
in-process: ``deploy --promote`` checks the new Version against the recorded histories of
its Workflows, refuses an incompatible one (exit 3, the Deployment unchanged), promotes it
with ``--force`` (the override journaled with the actor), and ``deployment set --dry-run``
answers the same report without changing anything."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from blackops import Application
from blackops.cli.main import main
from journal.resources import version_stream
from replay.export import observed_lines
from replay.schema import observed_line_schema

FLOW = """\
class Order:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        a = await step.do('reserve', lambda: {'did': 'reserve'})
        b = await step.do(SECOND, lambda: {'did': 'charge'})
        if not (event.params or {}).get('quick'):
            await step.sleep('cool', 600)
        EXTRA
        return {'a': a, 'b': b}
"""


def folder(root: Path, name: str, second: str = "charge", extra: str = "pass") -> str:
    path = root / name
    path.mkdir()
    source = FLOW.replace("SECOND", repr(second)).replace("EXTRA", extra)
    (path / "flows.py").write_text(source)
    return str(path)


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def doc(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Ran]:
    monkeypatch.setenv("USER", "ana")

    def run(*args: str, expect: int | None = 0) -> Ran:
        capsys.readouterr()
        code = main([*args, "--store", store_url])
        captured = capsys.readouterr()
        ran = Ran(code, captured.out, captured.err)
        if expect is not None:
            assert code == expect, ran
        return ran

    return run


def journal(store_url: str) -> list[Any]:
    with Application(store_url) as app:
        return list(app.store.iter_after(0))


def checks(store_url: str, vid: str) -> list[dict[str, Any]]:
    with Application(store_url) as app:
        events = app.store.read_stream(version_stream(vid))
    return [
        {**e.data, "actor": e.context["actor"]}
        for e in events
        if e.type == "version.replay_checked"
    ]


def test_the_gate_refuses_then_forced_journals_the_override(
    cli: Callable[..., Ran], tmp_path: Path, store_url: str
) -> None:
    space = ("--space", "acme", "--worker", "shop", "--main", "flows")
    cli("space", "create", "acme")
    first = cli("deploy", folder(tmp_path, "v1"), *space, "--create-worker", "--promote",
                "--json").doc  # fmt: skip
    # No Workflow yet, so no histories: nothing to check, and the promotion goes ahead.
    assert first["replayCheck"]["compatible"] is True
    assert first["replayCheck"]["report"]["checked"] == 0
    assert first["deployment"]["status"] == "completed"
    uid = cli("workflow", "create", "orders", "--space", "acme", "--worker", "shop", "--class",
              "Order", "--json").doc["resource"]["uid"]  # fmt: skip
    cli("wf", "create", uid, "--id", "done", "--params", '{"quick": true}')
    cli("wf", "create", uid, "--id", "nap")
    with Application(store_url) as app:
        asyncio.run(app.work_until_idle())
    assert cli("wf", "status", uid, "done", "--json").doc["status"] == "complete"
    assert cli("wf", "status", uid, "nap", "--json").doc["status"] == "sleeping"

    # A step added at the end: compatible with both histories, promoted.
    later = cli("deploy", folder(tmp_path, "v2", extra="await step.do('notify', dict)"),
                *space, "--promote", "--json").doc  # fmt: skip
    assert later["replayCheck"]["compatible"] is True
    assert later["replayCheck"]["report"]["checked"] == 2
    assert later["replayCheck"]["scope"]["workflows"] == {uid: {"inFlight": 1, "terminal": 1}}
    assert later["deployment"]["status"] == "completed"
    human = cli("deploy", folder(tmp_path, "v2b", extra="await step.do('notify', dict)"),
                *space, "--promote")  # fmt: skip
    assert "replay   2 histories checked: all compatible" in human.out

    # A renamed step: refused, the Deployment keeps v2.
    before = len(journal(store_url))
    refused = cli("deploy", folder(tmp_path, "v3", second="bill"), *space, "--promote",
                  "--json", expect=3).doc  # fmt: skip
    v3 = refused["version"]
    assert "deployment" not in refused and refused["replayCheck"]["compatible"] is False
    kinds = {
        (i["instanceId"], f["kind"], f["step"])
        for i in refused["replayCheck"]["report"]["instances"]
        for f in i["findings"]
    }
    assert kinds == {("done", "new_step_inside_history", "bill"),
                     ("nap", "new_step_inside_history", "bill")}  # fmt: skip
    shown = cli("deployment", "show", "--space", "acme", "--worker", "shop", "--json").doc
    assert shown["allocation"] == [{"version": later["version"], "weight": 100}]
    (verdict,) = checks(store_url, v3)
    assert verdict["compatible"] is False and verdict["forced"] is False
    assert verdict["actor"] == {"id": "ana", "kind": "cli"} and verdict["purpose"] == "promote"
    assert {f["instanceId"] for f in verdict["findings"]} == {"done", "nap"}
    assert verdict["scope"]["workflows"] == {uid: {"inFlight": 1, "terminal": 1}}
    refusal = cli("deploy", folder(tmp_path, "v3b", second="bill"), *space, "--promote",
                expect=3).out  # fmt: skip
    assert "REFUSED, not promoted" in refusal and "--force" in refusal
    assert "new_step_inside_history" in refusal and "'bill' (do)" in refusal

    # The dry run of a weight change answers the same report, and changes nothing.
    size = len(journal(store_url))
    dry = cli("deployment", "set", "--space", "acme", "--worker", "shop", f"{v3}=100",
              "--dry-run", "--json", expect=3).doc  # fmt: skip
    assert dry["compatible"] is False and [v["version"] for v in dry["versions"]] == [v3]
    assert dry["versions"][0]["report"]["counts"]["new_step_inside_history"] == 2
    ok = cli("deployment", "set", "--space", "acme", "--worker", "shop",
             f"{later['version']}=100", "--dry-run", "--json").doc  # fmt: skip
    assert ok["compatible"] is True
    assert len(journal(store_url)) == size
    # replay --check with the Version id says the same.
    by_id = cli("replay", "--check", "--version", v3, "--workflow", uid, "--json", expect=3).doc
    assert by_id["counts"]["new_step_inside_history"] == 2

    # --force promotes, and the override is journaled with the actor.
    forced = cli("deploy", folder(tmp_path, "v3c", second="bill"), *space, "--promote",
                 "--force", "--actor", "lead", "--json").doc  # fmt: skip
    assert forced["replayCheck"]["forced"] is True
    assert forced["deployment"]["status"] == "completed"
    assert [(c["forced"], c["actor"]["id"]) for c in checks(store_url, v3)] == [
        (False, "ana"),
        (False, "ana"),
        (True, "lead"),
    ]
    assert len(journal(store_url)) > before
    # Their lines are what the published schema describes (the schema read them as an
    # operation's, which they are not: found by a defect hunt, stop 36).
    schema = Draft202012Validator(observed_line_schema(), format_checker=FormatChecker())
    with Application(store_url) as app:
        lines = [json.loads(line) for _, line in observed_lines(app.store)]
    gated = [line for line in lines if line["type"] == "version.replay_checked"]
    assert len(gated) >= 3  # v3's, and those of the Versions before it
    assert [e.message for line in lines for e in schema.iter_errors(line)] == []
    # Nothing of the replays ran: the instances' histories are as they were.
    assert cli("wf", "status", uid, "nap", "--json").doc["status"] == "sleeping"


@pytest.mark.parametrize(
    "change",
    [
        ("class Order:", "class Order2:", "has no class 'Order'"),
        ("async def run(", "async def nrun(", "fails DW-ABI-1 (has no run method)"),
    ],
    ids=["renamed_class", "broken_class"],
)
def test_a_version_that_drops_or_breaks_a_live_class_is_refused(
    cli: Callable[..., Ran], tmp_path: Path, store_url: str, change: tuple[str, str, str]
) -> None:
    """Decisions C12: every open Workflow of the Worker is in scope; a Version lacking
    (or failing DW-ABI-1 for) the class of a Workflow with histories is ``class_missing``."""
    old, new, why = change
    space = ("--space", "acme", "--worker", "shop", "--main", "flows")
    cli("space", "create", "acme")
    cli("deploy", folder(tmp_path, "v1"), *space, "--create-worker", "--promote")
    uid = cli("workflow", "create", "orders", "--space", "acme", "--worker", "shop", "--class",
              "Order", "--json").doc["resource"]["uid"]  # fmt: skip
    cli("wf", "create", uid, "--id", "nap")
    with Application(store_url) as app:
        asyncio.run(app.work_until_idle())
        created = next(e for e in app.store.iter_after(0) if e.type == "workflow.created")
    assert cli("wf", "status", uid, "nap", "--json").doc["status"] == "sleeping"
    dropped = tmp_path / "v2"
    dropped.mkdir()
    (dropped / "flows.py").write_text(FLOW.replace("SECOND", "'charge'").replace(
        "EXTRA", "pass").replace(old, new))  # fmt: skip

    refused = cli("deploy", str(dropped), *space, "--promote", "--json", expect=3).doc
    assert "deployment" not in refused and refused["replayCheck"]["compatible"] is False
    (instance,) = refused["replayCheck"]["report"]["instances"]
    (finding,) = instance["findings"]
    assert instance["instanceId"] == "nap" and finding["kind"] == "class_missing"
    assert (finding["position"], finding["version"]) == (created.position, created.version)
    assert why in finding["reason"]
    scope = refused["replayCheck"]["scope"]["workflows"]
    assert scope == {uid: {"inFlight": 1, "terminal": 0, "classMissing": "Order"}}
    vid = refused["version"]
    human = cli("deploy", str(dropped), *space, "--promote", expect=3).out
    assert "REFUSED, not promoted" in human and "class_missing" in human

    dry = cli("deployment", "set", "--space", "acme", "--worker", "shop", f"{vid}=100",
              "--dry-run", "--json", expect=3).doc  # fmt: skip
    assert dry["compatible"] is False
    assert dry["versions"][0]["report"]["counts"]["class_missing"] == 1

    forced = cli("deploy", str(dropped), *space, "--promote", "--force", "--actor", "lead",
                 "--json").doc  # fmt: skip
    assert forced["replayCheck"]["forced"] is True
    assert forced["deployment"]["status"] == "completed"
    assert [(c["forced"], c["actor"]["id"], c["counts"]["class_missing"])
            for c in checks(store_url, vid)] == [
        (False, "ana", 1), (False, "ana", 1), (True, "lead", 1)
    ]  # fmt: skip
