"""``blackops demo`` (python-contract §5): the tour runs on the journal ``--store`` names (or
a new one of its own, never the default journal) and what it reports is what the journal
holds: statuses, each operation's events, the workflow's output, a verified journal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_processes import run
from rich_journal import inline_runs
from tampering import behind_the_journals_back, position_column, q

from blackops import Application
from journal.store import EventStore
from replay.verify import verify_store


def test_the_demo_records_its_tour_in_the_named_journal(store_url: str) -> None:
    done = run("demo", "--json", store=store_url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["inline"]["status"] == "completed"
    assert report["rejected"]["status"] == "rejected"
    assert report["rejected"]["rejection"] == "name_missing"
    deferred = report["deferred"]
    assert deferred["status"] == "completed" and deferred["outcome"] == {"attempt": 2}
    assert deferred["events"].count("attempt.started") == 2
    assert "attempt.retry_scheduled" in deferred["events"]
    assert report["workflow"]["status"] == "complete"
    assert report["workflow"]["output"] == {"approved_by": "ana", "order": "A-1", "total": 42}
    assert report["journal"]["verified"] is True
    with Application(store_url) as app:  # what it said is what the journal holds
        for name in ("inline", "rejected", "deferred"):
            operation = report[name]["operationId"]
            assert app.status(operation)["status"] == report[name]["status"]
            assert [e["type"] for e in app.events(operation)] == report[name]["events"]
        assert app.store.last_position() >= report["journal"]["events"]
        assert verify_store(app.store).ok


def test_without_a_store_the_demo_writes_a_journal_of_its_own(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "BLACKOPS_STORE"}
    env["BLACKOPS_HOME"] = str(tmp_path / "home")
    env["TMPDIR"] = str(tmp_path)
    here = tmp_path / "here"  # where the default journal (.blackops/journal.sqlite3) would be
    here.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "blackops", "demo"],
        capture_output=True, text=True, env=env, timeout=120, check=False, cwd=here,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout and "NOT VERIFIED" not in done.stdout
    journals = list(tmp_path.glob("blackops-demo-*/journal.sqlite3"))
    assert len(journals) == 1, done.stdout
    assert not (here / ".blackops").exists()


def test_a_journal_that_does_not_verify_fails_the_demo(store_url: str) -> None:
    """As `verify`: the tour ran, but the journal it ran on was rewritten behind its back
    (an event changed, its leaf kept), so the demo says so and exits 1."""
    inline_runs(store_url, ["t"])
    with (
        EventStore(store_url, create=False) as store,
        behind_the_journals_back(store) as (
            conn,
            events,
            _,
        ),
    ):
        row = store.read_raw_after(0, 1)[0]
        forged = row.state.replace(b'"n":0', b'"n":7')
        assert forged != row.state
        column = position_column(conn)
        conn.execute(q(conn, f"UPDATE {events} SET state = ? WHERE {column} = ?"), (forged, row.id))
    done = run("demo", store=store_url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NOT VERIFIED" in done.stdout
