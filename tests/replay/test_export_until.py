"""Observed JSONL export (OL-11): ``until`` bounds every kind of export: a plain stream
(``--no-manifest``) as well as one with a manifest, and ``--follow --until`` ends once the
journal has reached it instead of following for ever (SQLite and PostgreSQL)."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

from cli_processes import run
from tampering import behind_the_journals_back, position_column, q

from blackops import Application
from blackops.runtime import SystemClock
from domain.context import Actor
from replay.custody import export_with_manifest
from replay.export import export_journal, observed_lines


def _journal(store_url: str, runs: int) -> list[int]:
    app = Application(store_url)
    try:
        app.operation("t.ok")(lambda ctx, params: None)
        for _ in range(runs):
            app.run("t.ok", {}, actor="a", tenant="t")
        return [position for position, _ in observed_lines(app.store)]
    finally:
        app.close()


def test_a_plain_export_stops_at_until(store_url: str, tmp_path: Path) -> None:
    positions = _journal(store_url, 4)
    until = positions[5]
    target = tmp_path / "plain.jsonl"
    done = run(
        "journal", "export", "--no-manifest", "--output", str(target),
        "--after", str(positions[1]), "--until", str(until), store=store_url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    app = Application(store_url)
    try:
        expected = [line for p, line in observed_lines(app.store) if positions[1] < p <= until]
    finally:
        app.close()
    assert target.read_bytes() == b"".join(expected)
    assert len(expected) == 4  # positions[2..5]
    assert not (tmp_path / "plain.jsonl.manifest.json").exists()


def test_export_journal_until_a_position_before_after_writes_nothing(store_url: str) -> None:
    positions = _journal(store_url, 1)
    app = Application(store_url)
    try:
        out = io.BytesIO()
        summary = export_journal(app.store, out, after=positions[2], until=positions[1])
        assert (summary.count, out.getvalue()) == (0, b"")
    finally:
        app.close()


def _returns_within(target: Callable[[], object], seconds: float) -> bool:
    """Does ``target()`` return within ``seconds`` (it would follow for ever otherwise)?"""
    finished = threading.Event()

    def call() -> None:
        target()
        finished.set()

    threading.Thread(target=call, daemon=True).start()
    return finished.wait(seconds)


def test_following_until_a_reached_position_ends_by_itself(store_url: str) -> None:
    positions = _journal(store_url, 3)
    until = positions[3]
    app = Application(store_url)
    never = threading.Event()  # nobody stops these: reaching ``until`` must
    plain, with_manifest = io.BytesIO(), io.BytesIO()
    try:
        assert _returns_within(
            lambda: export_journal(
                app.store, plain, follow=True, stop=never, poll_seconds=0.01, until=until
            ),
            20,
        )
        manifest = partial(
            export_with_manifest, app.store, with_manifest, actor=Actor("a"),
            clock=SystemClock(), follow=True, stop=never, poll_seconds=0.01, until=until,
        )  # fmt: skip
        assert _returns_within(manifest, 20)
        expected = b"".join(line for p, line in observed_lines(app.store) if p <= until)
        assert plain.getvalue() == expected == with_manifest.getvalue()
    finally:
        app.close()


def test_a_changed_event_past_until_does_not_stop_the_range_before_it(store_url: str) -> None:
    """Rows past ``until`` are never made into lines: the plain export of a range before an
    event changed behind the journal's back succeeds, as the export with a manifest does
    (found by review: the plain one failed on the whole page)."""
    positions = _journal(store_url, 3)
    until = positions[4]
    app = Application(store_url)
    try:
        with behind_the_journals_back(app.store) as (conn, events, _):
            where = position_column(conn)
            conn.execute(q(conn, f"UPDATE {events} SET state = ? WHERE {where} = ?"),
                         (b"{}", positions[5]))  # fmt: skip
        out = io.BytesIO()
        summary = export_journal(app.store, out, until=until)
        assert (summary.count, summary.last_position) == (5, until)
        expected = b"".join(line for p, line in observed_lines(app.store, until=until))
        assert out.getvalue() == expected and expected.count(b"\n") == 5
    finally:
        app.close()


def test_following_until_a_position_that_is_missing_ends_too(store_url: str) -> None:
    """Positions may have gaps: following until one that is not there ends once the
    journal is past it."""
    positions = _journal(store_url, 3)
    app = Application(store_url)
    try:
        with behind_the_journals_back(app.store) as (conn, events, _):
            where = position_column(conn)
            conn.execute(q(conn, f"DELETE FROM {events} WHERE {where} = ?"), (positions[3],))
        out = io.BytesIO()
        follow = partial(export_journal, app.store, out, follow=True, stop=threading.Event(),
                         poll_seconds=0.01, until=positions[3])  # fmt: skip
        assert _returns_within(follow, 20)
        assert out.getvalue().count(b"\n") == 3
    finally:
        app.close()
