"""Observed JSONL export and Observer Replay (OL-11), on SQLite and PostgreSQL.

The canonical journal is the truth; the observed stream is derived from it. These
tests check that every exported line is the RFC 8785 canonical form of the event,
that export and replay through every surface agree, that replay detects duplicates,
reordering and gaps, resumes from a saved position, and that the operation statuses
rebuilt from an export alone equal the live ones.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_processes import BLACKOPS, ROOT, run
from fastapi.testclient import TestClient
from tampering import behind_the_journals_back, position_column, q

from blackops import Application, ExecutionContext, OperationRejected, Retryable, Supervision
from blackops.client import Client
from blackops.http.app import create_http_app
from blackops.operations.results import status_view
from domain.documents import canonical_json
from domain.errors import Conflict, Unauthorized
from domain.operation import Operation
from replay.export import export_journal, observed_lines
from replay.integrity import IntegrityError
from replay.observed import ObservedEvent, ObservedLineError, parse_line
from replay.replayer import ReplayStopped, read_state, replay


def busy_journal(app: Application) -> list[str]:
    """Inline and Deferred operations in every ending, with awkward params."""

    @app.operation("t.ok")
    def ok(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"echo": params}

    @app.operation("t.reject")
    def reject(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected("business_rule", "no", "nein \u00e9\U0001f600")

    @app.operation("t.retry", supervision=Supervision(max_attempts=2, exhausted="dead_letter"))
    def retry(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise Retryable("again")

    awkward = {"\u00e9": [1.5, -0.0, 1e21, 2**53 - 1, None, True], "z": {"a\u2028b": "\x00"}}
    ids = [app.run("t.ok", awkward, actor="ana", tenant="acme").operation_id]
    ids += [app.submit(t, awkward, actor="ana", tenant="acme") for t in ("t.ok", "t.reject")]
    ids.append(app.submit("t.retry", {}, actor="ana", tenant="acme"))
    asyncio.run(app.work_until_idle())
    return ids


def test_ol11_every_line_is_the_canonical_form_of_its_event(app: Application) -> None:
    busy_journal(app)
    events = list(app.store.iter_after(0))
    lines = [line for _, line in observed_lines(app.store)]
    assert len(lines) == len(events) > 20
    for event, line in zip(events, lines, strict=True):
        assert line == canonical_json(event.to_observed()) + b"\n"
        assert parse_line(line.rstrip(b"\n"), 1) == event
    positions = [json.loads(line)["position"] for line in lines]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)


def test_export_after_a_position_and_in_pages(app: Application) -> None:
    busy_journal(app)
    everything = [p for p, _ in observed_lines(app.store)]
    middle = everything[len(everything) // 2]
    assert [p for p, _ in observed_lines(app.store, middle)] == [
        p for p in everything if p > middle
    ]
    assert [p for p, _ in observed_lines(app.store, 0, page=3)] == everything
    assert [p for p, _ in observed_lines(app.store, 0, limit=5)] == everything[:5]
    out = io.BytesIO()
    summary = export_journal(app.store, out, after=middle)
    assert summary.count == len(everything) - everything.index(middle) - 1
    assert summary.last_position == everything[-1]


def rebuild_statuses(lines: list[bytes]) -> dict[str, dict[str, Any]]:
    """A projection rebuilt from the observed stream alone: each operation's status."""
    streams: dict[str, list[ObservedEvent]] = {}

    def observe(event: ObservedEvent) -> None:
        if event.type.startswith(("operation.", "attempt.")):
            streams.setdefault(event.stream, []).append(event)

    replay(lines, observe)
    statuses = {}
    for stream, events in streams.items():
        operation = Operation.replay(stream, ((e.type, e.at, e.data) for e in events))
        statuses[stream] = status_view(operation)
    return statuses


def test_ol11_statuses_rebuilt_from_an_export_equal_the_live_ones(app: Application) -> None:
    ids = busy_journal(app)
    out = io.BytesIO()
    export_journal(app.store, out)
    rebuilt = rebuild_statuses(out.getvalue().splitlines(keepends=True))
    assert set(rebuilt) == set(ids)
    for operation_id in ids:
        assert rebuilt[operation_id] == app.status(operation_id)
    assert {s["status"] for s in rebuilt.values()} == {"completed", "rejected", "dead_letter"}


def numbered(lines: list[bytes]) -> list[int]:
    return [json.loads(line)["position"] for line in lines]


def test_replay_detects_duplicates_reordering_and_gaps(app: Application) -> None:
    busy_journal(app)
    lines = [line for _, line in observed_lines(app.store)]
    seen: list[int] = []

    # Duplicates (at-least-once delivery): stop by default, or skip.
    doubled = lines[:6] + lines[4:6] + lines[6:]
    with pytest.raises(ReplayStopped) as stopped:
        replay(doubled, lambda e: seen.append(e.position))
    assert stopped.value.anomaly.kind == "duplicate"
    assert stopped.value.anomaly.line == 7
    assert stopped.value.report.last_position == numbered(lines)[5]
    seen.clear()
    report = replay(doubled, lambda e: seen.append(e.position), on_duplicate="skip")
    assert seen == numbered(lines) and report.duplicates_skipped == 2

    # A reordered pair: the second is out of order.
    swapped = [*lines[:3], lines[4], lines[3], *lines[5:]]
    with pytest.raises(ReplayStopped) as stopped:
        replay(swapped, lambda e: None, on_duplicate="skip")
    assert stopped.value.anomaly.kind == "out_of_order"
    assert stopped.value.anomaly.position == numbered(lines)[3]

    # A deleted line inside a stream: the stream's next event shows the jump. (Deleting
    # a stream's last event leaves no trace in the stream itself: that is verify's job.)
    parsed = [json.loads(line) for line in lines]
    victim = next(
        i for i, e in enumerate(parsed)
        if e["version"] == 2 and any(
            o["stream"] == e["stream"] and o["version"] == 3 for o in parsed
        )
    )  # fmt: skip
    third = next(
        e["position"] for e in parsed
        if e["stream"] == parsed[victim]["stream"] and e["version"] == 3
    )  # fmt: skip
    with pytest.raises(ReplayStopped) as stopped:
        replay(lines[:victim] + lines[victim + 1 :], lambda e: None)
    assert stopped.value.anomaly.kind == "gap"
    assert stopped.value.anomaly.position == third
    assert "from version 1 to 3" in stopped.value.anomaly.message


def test_replay_refuses_lines_that_are_not_observed_events() -> None:
    good = b'{"at":"x","context":{},"data":{},"position":1,"stream":"s","type":"t","version":1}'
    for bad in (
        b"not json",
        b"[1]",
        good.replace(b'"position":1', b'"position":"1"'),
        good.replace(b',"type":"t"', b""),
        good[:-1] + b',"at":"again"}',  # duplicate key
        b'{"at":"x","context":{},"data":{},"position":0,"stream":"s","type":"t","version":1}',
        # A member no event has (the schema's additionalProperties: false), in order or not:
        good[:-1] + b',"zzz":1}',
        b'{"aaa":1,' + good[1:],
        b'{"zzz":1,' + good[1:],
    ):
        with pytest.raises(ObservedLineError) as refused:
            replay([good + b"\n", bad + b"\n"], lambda e: None)
        assert refused.value.line == 2
    with pytest.raises(ObservedLineError, match="holds a member no event has"):
        replay([good[:-1] + b',"zzz":1}\n'], lambda e: None)


def test_replay_resumes_from_a_saved_position(app: Application, tmp_path: Path) -> None:
    busy_journal(app)
    lines = [line for _, line in observed_lines(app.store)]
    state = tmp_path / "observer.position"
    first: list[int] = []
    replay(lines[:10], lambda e: first.append(e.position), state_file=state, checkpoint_every=3)
    assert read_state(state) == first[-1]
    rest: list[int] = []
    # The whole file again (at-least-once): what was delivered is skipped, nothing is lost.
    report = replay(lines, lambda e: rest.append(e.position), after=read_state(state))
    assert first + rest == numbered(lines)
    assert report.skipped_before == 10


def test_a_failing_line_source_still_saves_what_was_delivered(
    app: Application, tmp_path: Path
) -> None:
    """A source that raises (a revoked token, a changed event on a followed stream) left
    the state at the last checkpoint: up to ``checkpoint_every`` events came again."""
    busy_journal(app)
    lines = [line for _, line in observed_lines(app.store)]
    state = tmp_path / "observer.position"

    def source() -> Iterator[bytes]:
        yield from lines[:7]
        raise Unauthorized("the token was revoked")

    seen: list[int] = []
    with pytest.raises(Unauthorized):
        replay(source(), lambda e: seen.append(e.position), state_file=state, checkpoint_every=100)
    assert len(seen) == 7 and read_state(state) == seen[-1]


def test_http_journal_answers_pages_of_jsonl(app: Application) -> None:
    busy_journal(app)
    client = TestClient(create_http_app(app, "t0k"))
    auth = {"Authorization": "Bearer t0k"}
    expected = b"".join(line for _, line in observed_lines(app.store))
    collected, after = b"", 0
    while True:
        response = client.get(f"/v1/journal?after={after}&limit=7", headers=auth)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/jsonl")
        if not response.content:
            break
        collected += response.content
        after = int(response.headers["blackops-next-after"])
    assert collected == expected
    for query in ("after=-1", "limit=0", "limit=10001", "after=x"):
        bad = client.get(f"/v1/journal?{query}", headers=auth)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    assert client.get("/v1/journal").status_code == 401


def test_http_journal_names_an_event_changed_behind_its_back(app: Application) -> None:
    """A state that is no longer a canonical envelope: the journal pages answer the export's
    409 ``conflict`` naming its position (it was a 500), and the pages before it still read."""
    busy_journal(app)
    victim = app.store.read_raw_after(4, 1)[0].id
    with behind_the_journals_back(app.store) as (conn, events, _):
        column = position_column(conn)
        conn.execute(q(conn, f"UPDATE {events} SET state = ? WHERE {column} = ?"), (b"{}", victim))
    with pytest.raises(IntegrityError) as refused:
        list(observed_lines(app.store))
    assert refused.value.position == victim
    client = TestClient(create_http_app(app, "t0k"))
    auth = {"Authorization": "Bearer t0k"}
    answer = client.get("/v1/journal", headers=auth)
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "conflict"
    assert f"position {victim}:" in answer.json()["error"]["message"]
    before = client.get(f"/v1/journal?limit={victim - 1}", headers=auth)
    assert before.status_code == 200 and len(before.content.splitlines()) == victim - 1
    # The stream sends the events before it too, then ends (its headers are sent) with a
    # last event that names the change (F167); a stream ended by its limit first does not.
    for query, count in ((f"limit={victim - 1}", victim - 1), ("max_seconds=2", victim - 1),
                         (f"after={victim - 3}&max_seconds=2", 2)):  # fmt: skip
        streamed = client.get(f"/v1/journal/stream?{query}", headers=auth)
        assert streamed.status_code == 200, query
        assert streamed.text.count("\nid: ") + streamed.text.startswith("id: ") == count, query
        last = streamed.text.rstrip("\n").rsplit("\n\n", 1)[-1]
        if query.startswith("limit"):
            assert last.startswith("id: "), query
            continue
        assert last.startswith("event: error\ndata: ") and "id:" not in last, query
        refusal = json.loads(last.split("data: ", 1)[1])["error"]
        assert refusal["code"] == "conflict" and f"position {victim}:" in refusal["message"]
    # Resumed where it ended (after the last id received), it answers the 409 before the
    # first byte (found by a defect hunt: an empty 200, and a client reconnecting for ever).
    app.access.create_space("acme", app.access_context("test", "acme"))
    for path in ("/v1/journal/stream", "/v1/spaces/acme/journal/stream"):
        resumed = client.get(path, headers={**auth, "Last-Event-ID": str(victim - 1)})
        assert resumed.status_code == 409 and resumed.json()["error"]["code"] == "conflict"
        assert f"position {victim}:" in resumed.json()["error"]["message"]
    # So the client following the stream gets the events before it, then raises, where it
    # reconnected every second for ever.
    got: list[int] = []

    def follow(reader: Client) -> None:
        got.extend(streamed.position for streamed in reader.stream(0, retry_seconds=0.01))

    reader = Client("http://testserver", "t0k", transport=client._transport)
    with reader, pytest.raises(Conflict):
        follow(reader)
    assert got == [position for position, _ in observed_lines(app.store, 0, victim - 1)]
    # Without reconnecting too: the connection's last event raises (it ended quietly, as
    # if the server had closed).
    got.clear()
    once = Client("http://testserver", "t0k", transport=client._transport)
    with once, pytest.raises(Conflict, match=f"position {victim}:"):
        got.extend(s.position for s in once.stream(0, reconnect=False, max_seconds=20))
    assert got == [position for position, _ in observed_lines(app.store, 0, victim - 1)]
    documented = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/journal", "/v1/spaces/{space}/journal", "/v1/journal/stream",
                 "/v1/spaces/{space}/journal/stream"):  # fmt: skip
        assert "409" in documented[path]["get"]["responses"], path


def test_a_state_changed_to_break_its_line_forges_no_stream_event(app: Application) -> None:
    """A state changed behind the journal's back to hold line ends, its braces kept, was
    served as it was: the JSONL page held several lines, and the event stream forged events
    of its own (an ``id`` far ahead), which the client took as its resume point and so
    skipped everything up to it (found by a defect hunt, stop 36). It is a 409 now."""
    busy_journal(app)
    victim = app.store.read_raw_after(4, 1)[0].id
    state = app.store.read_raw_after(victim - 1, 1)[0].state
    forged = state + b'\n\nid: 999999\ndata: {"forged":true}\n\n{"x":1}'
    with behind_the_journals_back(app.store) as (conn, events, _):
        column = position_column(conn)
        conn.execute(q(conn, f"UPDATE {events} SET state = ? WHERE {column} = ?"), (forged, victim))
    client = TestClient(create_http_app(app, "t0k"))
    auth = {"Authorization": "Bearer t0k"}
    page = client.get(f"/v1/journal?after={victim - 1}&limit=1", headers=auth)
    assert page.status_code == 409 and f"position {victim}:" in page.json()["error"]["message"]
    streamed = client.get(f"/v1/journal/stream?after={victim - 3}&max_seconds=2", headers=auth)
    assert "999999" not in streamed.text and "forged" not in streamed.text
    assert streamed.text.rstrip("\n").rsplit("\n\n", 1)[-1].startswith("event: error\n")
    got: list[int] = []
    reader = Client("http://testserver", "t0k", transport=client._transport)
    with reader, pytest.raises(Conflict, match=f"position {victim}:"):
        got.extend(s.position for s in reader.stream(victim - 3, reconnect=False, max_seconds=20))
    assert got == [victim - 2, victim - 1]


def test_cli_export_and_replay(store_url: str, tmp_path: Path) -> None:
    """``blackops journal export`` then ``blackops replay`` with a module observer."""
    app = Application(store_url)
    ids = busy_journal(app)
    expected = b"".join(line for _, line in observed_lines(app.store))
    app.close()
    target = tmp_path / "journal.jsonl"
    done = run("journal", "export", "--output", str(target), "--json", store=store_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["count"] == expected.count(b"\n")
    assert target.read_bytes() == expected
    # The export was recorded in the journal (chain of custody): one more event.
    recorded = json.loads((tmp_path / "journal.jsonl.manifest.json").read_text())["custody"]
    piped = run("journal", "export", "--no-manifest", store=store_url)
    assert piped.returncode == 0
    piped_lines = piped.stdout.encode().splitlines(keepends=True)
    assert b"".join(piped_lines[:-1]) == expected
    assert json.loads(piped_lines[-1])["type"] == "journal.exported"
    assert json.loads(piped_lines[-1])["position"] == recorded["position"]
    assert piped.stderr == ""  # quiet when piped: no progress drawn
    unlabelled = run("journal", "export", store=store_url)
    assert unlabelled.returncode == 1 and "--manifest" in unlabelled.stderr

    out = tmp_path / "seen.txt"
    env = {"REPLAY_OUT": str(out), "PYTHONPATH": str(ROOT / "tests")}
    replayed = run(
        "replay", str(target), "--observer", "replay_observers:record_position", "--json",
        store=store_url, env=env,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["delivered"] == expected.count(b"\n")
    assert out.read_text().split() == [str(p) for p in numbered(expected.splitlines())]

    counts = tmp_path / "counts.json"
    env["REPLAY_OUT"] = str(counts)
    by_class = run(
        "replay", str(target), "--observer", "replay_observers:CountingObserver",
        store=store_url, env=env,
    )  # fmt: skip
    assert by_class.returncode == 0, by_class.stderr
    assert json.loads(counts.read_text())["operation.received"] == len(ids)

    broken = tmp_path / "broken.jsonl"
    lines = expected.splitlines(keepends=True)
    broken.write_bytes(b"".join(lines[:5] + lines[4:]))
    stopped = run(
        "replay", str(broken), "--observer", "replay_observers:record_position", "--json",
        store=store_url, env=env,
    )  # fmt: skip
    assert stopped.returncode == 1
    assert json.loads(stopped.stdout)["anomalies"][0]["kind"] == "duplicate"
    missing = run("replay", str(tmp_path / "nope.jsonl"), "--observer", "x:y", store=store_url)
    assert missing.returncode == 1 and "invalid_request" in missing.stderr


def test_cli_export_follow_writes_new_events_until_interrupted(
    store_url: str, tmp_path: Path
) -> None:
    app = Application(store_url)
    app.operation("t.ok")(lambda ctx, params: None)
    app.run("t.ok", {}, actor="a", tenant="t")
    target = tmp_path / "live.jsonl"
    follower = subprocess.Popen(
        [*BLACKOPS, "journal", "export", "--follow", "--output", str(target),
         "--store", store_url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while (not target.exists() or target.read_bytes().count(b"\n") < 4) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
        app.run("t.ok", {}, actor="a", tenant="t")  # appended while it follows
        while target.read_bytes().count(b"\n") < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert target.read_bytes().count(b"\n") == 8
    finally:
        follower.send_signal(signal.SIGINT)
        follower.communicate(timeout=30)
        app.close()
    assert follower.returncode == 0
    manifest = json.loads((tmp_path / "live.jsonl.manifest.json").read_text())
    assert manifest["count"] == 8
    assert target.read_bytes() == b"".join(
        line for position, line in observed_lines(app.store) if position <= manifest["lastPosition"]
    )


def test_cli_export_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal (stderr is a tty) a long export draws a rich progress bar."""
    import pty

    store = f"sqlite:///{tmp_path}/j.db"
    app = Application(store)
    busy_journal(app)
    app.close()
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [*BLACKOPS, "journal", "export", "--output", str(tmp_path / "o.jsonl"),
             "--store", store],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=follower, timeout=120,
        )  # fmt: skip
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0
    assert b"exporting" in drawn


def synthetic(position: int, stream: str, version: int, kind: str = "t", **data: int) -> bytes:
    event = {"at": "x", "context": {}, "data": data, "position": position, "stream": stream,
             "type": kind, "version": version}  # fmt: skip
    return canonical_json(event) + b"\n"


def test_replay_reports_how_far_it_got_and_saves_it(tmp_path: Path) -> None:
    """The report and the state file at a stop, at each checkpoint and at the end; a new
    stream starting at version 1, and a tombstone starting a stream past its purged versions."""
    state = tmp_path / "observer.position"
    lines = [
        synthetic(1, "a", 1),
        synthetic(2, "b", 1),
        synthetic(3, "a", 2),
        synthetic(5, "c", 4, "operation.purged", versions=3),  # versions 1-3 were purged
        synthetic(6, "c", 5),
        synthetic(7, "b", 2),
    ]
    progress: list[int] = []
    report = replay(lines, lambda e: None, state_file=state, checkpoint_every=2,
                    progress=progress.append)  # fmt: skip
    assert (report.delivered, report.last_position, read_state(state)) == (6, 7, 7)
    assert progress == [2, 5, 7, 7]
    for bad, kind, delivered in [
        (synthetic(7, "b", 2), "duplicate", 6),  # the last position again
        (synthetic(4, "d", 1), "out_of_order", 6),
        (synthetic(8, "d", 2), "gap", 6),  # a new stream must start at version 1
        (synthetic(8, "e", 2, "operation.purged", versions=3), "gap", 6),
    ]:
        with pytest.raises(ReplayStopped) as stopped:
            replay([*lines, bad], lambda e: None, state_file=state)
        assert stopped.value.anomaly.kind == kind
        assert stopped.value.report.delivered == delivered
        assert stopped.value.report.last_position == read_state(state) == 7
    # After a resume point a stream's first event may have any version.
    report = replay([*lines, synthetic(8, "d", 2)], lambda e: None, after=5)
    assert (report.delivered, report.skipped_before, report.last_position) == (3, 4, 8)


def test_a_resumed_replay_still_finds_an_event_missing_right_after_its_start() -> None:
    """The lines at or below the resume point are not delivered again, but each stream's
    version is counted from them: a file missing the event right after the resume point
    stops the replay as it would from the start (found by a defect hunt: it went through)."""
    lines = [
        synthetic(1, "a", 1),
        synthetic(2, "b", 1),
        synthetic(3, "a", 2),  # the resume point
        synthetic(4, "a", 3),
        synthetic(5, "b", 2),
        synthetic(6, "a", 4),
        synthetic(7, "b", 3),
    ]
    whole = replay(lines, lambda e: None, after=3)
    assert (whole.delivered, whole.skipped_before) == (4, 3)
    for missing in (3, 4):  # a's version 3 (right after the point), b's version 2
        cut = lines[:missing] + lines[missing + 1 :]
        with pytest.raises(ReplayStopped) as stopped:
            replay(cut, lambda e: None, after=3)
        assert stopped.value.anomaly.kind == "gap"
        assert stopped.value.report.delivered == missing - 2  # up to the gap
    # Lines before the resume point out of order stop it, as they stop a whole run.
    shuffled = [lines[2], lines[0], lines[1], *lines[3:]]
    with pytest.raises(ReplayStopped) as stopped:
        replay(shuffled, lambda e: None, after=3)
    assert stopped.value.anomaly.kind == "out_of_order"


@pytest.mark.parametrize(
    ("lines", "after", "kind"),
    [
        # A repeated position (a duplicate a whole run skips or stops at) does not count.
        ([(1, "s", 1), (2, "s", 2), (2, "s", 9), (4, "s", 3)], 2, "duplicate"),
        ([(1, "s", 1), (2, "s", 2), (2, "s", 3), (4, "s", 4)], 2, "duplicate"),
        # The first run stopped at position 2 (out of order after 3) and saved 3: resuming
        # after 3 meets it again, as a whole run does.
        ([(1, "s", 1), (3, "t", 1), (2, "s", 2), (4, "s", 3)], 3, "out_of_order"),
        # A line at or below the resume point after this run delivered a later one (found
        # by a second review: skipped silently, and s's version 2 delivered twice).
        ([(1, "s", 1), (3, "s", 2), (2, "s", 1), (4, "s", 2)], 2, "out_of_order"),
        ([(1, "s", 1), (2, "t", 1), (3, "s", 2), (1, "s", 1), (4, "s", 3)], 2, "duplicate"),
        # t's only line at or below the point repeats a position: skipped as a duplicate by
        # both runs, t must still start at version 1 (found by a third review).
        ([(1, "s", 1), (1, "t", 1), (2, "t", 2)], 1, "duplicate"),
    ],
)
def test_a_resumed_replay_ends_where_a_whole_run_ends(
    lines: list[tuple[int, str, int]], after: int, kind: str
) -> None:
    """Found by reviews of the fix above: every skipped line set its stream's version, so a
    repeated position made a false gap and hid a real one; and a line at or below the resume
    point was skipped even after later ones were delivered. Whether duplicates stop or are
    skipped, a resumed run stops where a whole run stops (same kind, same position), or
    ends at the same last position."""
    text = [synthetic(*line) for line in lines]

    def outcome(**options: Any) -> tuple[str | None, int]:
        try:
            return None, replay(text, lambda e: None, **options).last_position
        except ReplayStopped as stopped:
            return stopped.anomaly.kind, stopped.anomaly.position

    assert outcome()[0] == kind
    for on_duplicate in ("stop", "skip"):
        whole = outcome(on_duplicate=on_duplicate)
        assert outcome(after=after, on_duplicate=on_duplicate) == whole, on_duplicate
