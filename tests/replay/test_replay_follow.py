"""``blackops replay --follow URL``: a live stream fed to an observer with the checks a file
gets, on SQLite and PostgreSQL, against a real ``blackops serve``: it follows commits as
they happen, stops cleanly on SIGINT with ``--state`` saved, resumes after it, and stops
at a duplicate (or a version gap) a bad stream sends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_processes import BLACKOPS, ROOT
from served import Served, blackops_serve

from blackops.cli.follow import stream_target
from domain.errors import InvalidRequest

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def server(store_url: str, tmp_path: Path) -> Iterator[Served]:
    with blackops_serve(store_url, tmp_path / "home", heartbeat_seconds=0.5) as served:
        yield served


def follow(url: str, token: str, out: Path, state: Path, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)]),
        "REPLAY_OUT": str(out),
        "BLACKOPS_TOKEN": token,
    }
    return subprocess.Popen(
        [*BLACKOPS, "replay", "--follow", url, "--observer", "replay_observers:record_position",
         "--state", str(state), "--json", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def delivered(out: Path) -> list[int]:
    return [int(line) for line in out.read_text().split()] if out.exists() else []


def journal_positions(server: Served, space: str | None = None) -> list[int]:
    path = f"/v1/spaces/{space}/journal" if space else "/v1/journal"
    response = httpx.get(
        f"{server.url}{path}?limit=10000",
        headers={"Authorization": f"Bearer {server.system_token}"},
    )
    return [json.loads(line)["position"] for line in response.content.splitlines()]


def run_ops(server: Served, count: int) -> None:
    for n in range(count):
        answer = httpx.post(
            f"{server.url}/v1/spaces/default/operations/greeting.say",
            json={"name": f"n{n}"},
            headers={"Authorization": f"Bearer {server.admin_token}"},
        )
        assert answer.status_code == 200, answer.text


def wait_until(check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail("timed out")
        time.sleep(0.1)


def stop(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    return process.returncode, json.loads(stdout), stderr


def test_follow_delivers_live_lines_stops_cleanly_and_resumes(
    server: Served, tmp_path: Path
) -> None:
    out, state = tmp_path / "positions.txt", tmp_path / "state"
    run_ops(server, 3)
    process = follow(server.url, server.system_token, out, state)
    try:
        wait_until(lambda: delivered(out) == journal_positions(server))
        run_ops(server, 4)  # committed while it follows
        wait_until(lambda: delivered(out) == journal_positions(server))
    finally:
        code, report, stderr = stop(process)
    assert code == 0, stderr
    # The server's automatic signer may journal a checkpoint after the follower stopped:
    # what was delivered is a prefix of the journal, in order, and the report says so.
    everything = delivered(out)
    assert everything == journal_positions(server)[: len(everything)]
    assert report["delivered"] == len(everything) and report["lastPosition"] == everything[-1]
    assert report["anomalies"] == []
    assert state.read_text().strip() == str(everything[-1])  # saved at the clean stop

    # Resumed from --state: only what came after, each once.
    run_ops(server, 2)
    again = follow(server.url, server.system_token, out, state)
    try:
        wait_until(lambda: delivered(out) == journal_positions(server))
    finally:
        code, report, stderr = stop(again)
    assert code == 0, stderr
    after = delivered(out)
    assert report["delivered"] == len(after) - len(everything)
    assert after == journal_positions(server)[: len(after)]  # no duplicates, in order


def test_follow_a_spaces_stream_by_its_url(server: Served, tmp_path: Path) -> None:
    """The Space's own stream (its admin's token, the stream URL itself): only its lines."""
    out, state = tmp_path / "positions.txt", tmp_path / "state"
    run_ops(server, 2)
    system = {"Authorization": f"Bearer {server.system_token}"}
    made = httpx.post(f"{server.url}/v1/spaces", json={"name": "globex"}, headers=system)
    assert made.status_code == 201, made.text
    elsewhere = httpx.post(
        f"{server.url}/v1/spaces/globex/operations/greeting.say", json={}, headers=system
    )
    assert elsewhere.status_code == 200, elsewhere.text
    run_ops(server, 1)
    url = f"{server.url}/v1/spaces/default/journal/stream"
    process = follow(url, server.admin_token, out, state, "--on-duplicate", "stop")
    try:
        wait_until(lambda: delivered(out) == journal_positions(server, "default"))
    finally:
        code, report, stderr = stop(process)
    assert delivered(out) == journal_positions(server, "default")
    assert len(delivered(out)) < len(journal_positions(server))  # not the whole journal
    if code != 0:  # the only acceptable stop: a Space's view of a shared principal stream
        assert report["anomalies"][0]["kind"] == "gap", (report, stderr)


def test_a_refused_token_exits_with_the_error(server: Served, tmp_path: Path) -> None:
    process = follow(server.url, server.admin_token, tmp_path / "o", tmp_path / "s")
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert json.loads(stdout)["error"]["code"] == "forbidden"  # the whole journal: system


class BadStream(BaseHTTPRequestHandler):
    """Serves a stream whose third event repeats the second (or whose stream skips a
    version): what a broken relay could send."""

    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def line(position: int, stream: str, version: int) -> bytes:
    return json.dumps(
        {"at": "2026-11-30T09:00:00.000000Z", "context": {}, "data": {}, "position": position,
         "stream": stream, "type": "operation.received", "version": version},
        separators=(",", ":"), sort_keys=True,
    ).encode()  # fmt: skip


@pytest.mark.parametrize(
    ("events", "kind"),
    [
        ([(1, "a", 1), (2, "a", 2), (2, "a", 2)], "duplicate"),
        ([(1, "a", 1), (3, "a", 3)], "gap"),
        ([(5, "a", 1), (4, "b", 1)], "out_of_order"),
    ],
)
def test_follow_stops_where_a_file_would(
    tmp_path: Path, events: list[tuple[int, str, int]], kind: str
) -> None:
    body = b"".join(b"id: %d\ndata: %s\n\n" % (p, line(p, s, v)) for p, s, v in events)
    handler = type("Handler", (BadStream,), {"body": body})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        process = follow(url, "t", tmp_path / "o", tmp_path / "s")
        stdout, stderr = process.communicate(timeout=60)
    finally:
        httpd.shutdown()
    assert process.returncode == 1, stderr
    report = json.loads(stdout)
    assert report["anomalies"][0]["kind"] == kind
    assert kind.replace("_", " ") in report["stopped"] or kind in json.dumps(report)


def test_stream_urls_are_read_as_base_and_space() -> None:
    assert stream_target("http://h:1", None) == ("http://h:1", None)
    assert stream_target("http://h:1/", "acme") == ("http://h:1", "acme")
    assert stream_target("http://h:1/v1/journal/stream", None) == ("http://h:1", None)
    assert stream_target("https://h/api/v1/spaces/acme/journal/stream", None) == (
        "https://h/api",
        "acme",
    )
    for bad in ("ftp://h/x", "http://h/v1/journal", "h:1"):
        with pytest.raises(InvalidRequest):
            stream_target(bad, None)
    with pytest.raises(InvalidRequest):
        stream_target("http://h/v1/spaces/a/journal/stream", "b")
