"""The auditor's monitor (blackops audit watch): each finding, and that a finding leaves the
saved checkpoint as it was (blackops/witness/monitor.py)."""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest
from transparency_log import ToyLog

from blackops.witness import monitor
from blackops.witness.monitor import assess, check_once, load_state
from blackops.witness.sources import HttpSource, LogUnreadable
from domain.errors import BackendUnavailable, InvalidRequest
from replay import cosignature
from replay.notes import COSIGNATURE_KEY, SigningKey


class Source:
    def __init__(self, log: ToyLog, note: str | None = None) -> None:
        self.log = log
        self.current = note

    def note(self) -> str:
        return self.current if self.current is not None else self.log.note()

    def proof(self, old: int, new: int) -> Sequence[bytes]:
        return self.log.proof(old, new)


def kinds(report: object) -> list[str]:
    return [f["kind"] for f in report.findings]  # type: ignore[attr-defined]


def test_growth_is_ok_and_saved_then_a_truncation_is_rolled_back(tmp_path: Path) -> None:
    log = ToyLog().grow(10)
    state = tmp_path / "monitor.json"
    key = log.key.verifier()
    assert check_once(Source(log), key, [], state).ok
    log.grow(7)
    assert check_once(Source(log), key, [], state).ok
    assert load_state(state) == log.checkpoint()
    log.leaves = log.leaves[:12]  # the tail deleted with its leaves, re-signed
    report = check_once(Source(log), key, [], state)
    assert kinds(report) == ["rolled_back"]
    assert load_state(state) is not None and load_state(state).size == 17  # type: ignore[union-attr]


def test_a_rewritten_history_is_inconsistent_even_with_every_root_recomputed(
    tmp_path: Path,
) -> None:
    log = ToyLog().grow(9)
    state = tmp_path / "monitor.json"
    key = log.key.verifier()
    assert check_once(Source(log), key, [], state).ok
    log.leaves[4] = bytes(32)  # rewrite one entry; every root after it recomputed
    log.grow(3)
    assert kinds(check_once(Source(log), key, [], state)) == ["inconsistent"]
    # The same size with another root is also inconsistent (a fork).
    fork = ToyLog(log.origin, log.key)
    fork.leaves = list(log.leaves[:9])
    assert kinds(check_once(Source(fork), key, [], state)) == ["inconsistent"]


def test_signatures_and_cosignatures(tmp_path: Path) -> None:
    log = ToyLog().grow(3)
    key = log.key.verifier()
    witness = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    other = SigningKey.generate("w2.example", COSIGNATURE_KEY)
    note = log.note()
    body = log.checkpoint().body()
    signed = note + cosignature.cosign(body, witness, 10).line()
    proof = Source(log).proof
    report = assess(signed, key, [witness.verifier()], None, proof)
    assert report.ok and list(report.cosigned_by) == [f"w1.example+{witness.key_id.hex()}"]
    assert kinds(assess(note, key, [witness.verifier()], None, proof)) == ["missing_cosignature"]
    wrong = note + cosignature.cosign(body.replace("3", "4", 1), witness, 10).line()
    assert kinds(assess(wrong, key, [witness.verifier()], None, proof)) == ["bad_signature"]
    assert kinds(assess(signed, key, [witness.verifier(), other.verifier()], None, proof)) == [
        "missing_cosignature"
    ]
    impostor = ToyLog(log.origin).grow(3)
    assert kinds(assess(impostor.note(), key, [], None, proof)) == ["bad_signature"]
    state = tmp_path / "m.json"
    report = check_once(Source(log, impostor.note()), key, [], state)
    assert kinds(report) == ["bad_signature"] and not state.exists()


def served_log(log: ToyLog, proof_answer: Callable[[], httpx.Response] | None) -> HttpSource:
    """The service over HTTP: its checkpoint, and the proof ``proof_answer`` gives (or the
    true one)."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/checkpoint":
            return httpx.Response(200, text=log.note())
        if proof_answer is not None:
            return proof_answer()
        old, new = int(request.url.params["from"]), int(request.url.params["to"])
        lines = "".join(base64.b64encode(h).decode() + "\n" for h in log.proof(old, new))
        return httpx.Response(200, text=lines)

    return HttpSource("http://log.invalid", None, transport=httpx.MockTransport(handle))


def unreachable() -> httpx.Response:
    raise httpx.ConnectError("connection refused")


@pytest.mark.parametrize(
    "answer",
    [unreachable, lambda: httpx.Response(503, text="down"), lambda: httpx.Response(500)],
)
def test_a_proof_it_cannot_fetch_is_no_finding_but_an_unreadable_log(
    tmp_path: Path, answer: Callable[[], httpx.Response]
) -> None:
    log = ToyLog().grow(5)
    state = tmp_path / "monitor.json"
    key = log.key.verifier()
    assert check_once(served_log(log, None), key, [], state).ok
    saved = state.read_bytes()
    log.grow(3)
    with pytest.raises(LogUnreadable):  # before: reported "inconsistent"
        check_once(served_log(log, answer), key, [], state)
    assert state.read_bytes() == saved
    assert check_once(served_log(log, None), key, [], state).ok  # later, it reads


@pytest.mark.parametrize(
    "answer",
    [
        lambda: httpx.Response(404, text="no such proof"),
        lambda: httpx.Response(200, text="not base64!\n"),
        lambda: httpx.Response(200, text=base64.b64encode(bytes(32)).decode() + "\n"),
    ],
)
def test_a_proof_refused_malformed_or_wrong_is_still_inconsistent(
    tmp_path: Path, answer: Callable[[], httpx.Response]
) -> None:
    log = ToyLog().grow(5)
    state = tmp_path / "monitor.json"
    key = log.key.verifier()
    assert check_once(served_log(log, None), key, [], state).ok
    log.grow(3)
    assert kinds(check_once(served_log(log, answer), key, [], state)) == ["inconsistent"]


def watch_args(state: Path, *, follow: bool) -> argparse.Namespace:
    return argparse.Namespace(
        url="http://log.invalid", token=None, store=None, state=state, follow=follow,
        interval=0.01, cosignature_grace=0.0, json=True,
    )  # fmt: skip


def test_run_watch_retries_a_proof_it_cannot_fetch_under_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = ToyLog().grow(5)
    state = tmp_path / "monitor.json"
    key = log.key.verifier()
    assert check_once(served_log(log, None), key, [], state).ok
    log.grow(3)
    failures = [True, True]  # two 502s, then the proof

    def flaky() -> httpx.Response:
        if failures:
            failures.pop()
            return httpx.Response(502, text="bad gateway")
        text = "".join(base64.b64encode(h).decode() + "\n" for h in log.proof(5, 8))
        log.leaves = log.leaves[:6]  # then the tail is cut: the next check ends the watch
        return httpx.Response(200, text=text)

    monkeypatch.setattr(monitor, "HttpSource", lambda url, token: served_log(log, flaky))
    assert monitor.run_watch(watch_args(state, follow=True), key, []) == 1
    captured = capsys.readouterr()
    out = [json.loads(line) for line in captured.out.splitlines()]
    assert [(r["ok"], r["checkpoint"]["size"]) for r in out] == [(True, 8), (False, 6)]
    assert [f["kind"] for f in out[-1]["findings"]] == ["rolled_back"]
    assert captured.err.count("could not read the log") == 2
    # Without --follow: backend_unavailable at once.
    log.grow(5)
    failures.append(True)
    with pytest.raises(BackendUnavailable):
        monitor.run_watch(watch_args(state, follow=False), key, [])


@pytest.mark.parametrize(
    "text",
    [
        '{"origin": "example.com/log", "size": 5, "ro',
        "[]",
        '{"origin": "example.com/log", "size": "5", "root": "' + "A" * 43 + '="}',
        '{"origin": "example.com/log", "size": true, "root": "' + "A" * 43 + '="}',
        '{"origin": "example.com/log", "size": 5, "root": "short"}',
        '{"origin": 7, "size": 5, "root": "' + "A" * 43 + '="}',
        "\udcff",
        # Right types, values no checkpoint holds (a NoteError escaped: stop 35's hunt).
        '{"origin": "example.com/log", "size": 18446744073709551616, "root": "' + "A" * 43 + '="}',
        '{"origin": "example.com/log\\nx", "size": 5, "root": "' + "A" * 43 + '="}',
        '{"origin": "example.com/\\u0007log", "size": 5, "root": "' + "A" * 43 + '="}',
    ],
)
def test_a_damaged_state_file_is_invalid_request_and_stops_even_under_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    log = ToyLog().grow(5)
    state = tmp_path / "monitor.json"
    state.write_bytes(text.encode("utf-8", "surrogateescape"))
    monkeypatch.setattr(monitor, "HttpSource", lambda url, token: served_log(log, None))
    with pytest.raises(InvalidRequest, match=r"monitor\.json") as caught:
        load_state(state)
    assert caught.value.code == "invalid_request"
    # --follow does not retry it (before: backend_unavailable, forever).
    with pytest.raises(InvalidRequest, match=r"monitor\.json"):
        monitor.run_watch(watch_args(state, follow=True), log.key.verifier(), [])
