"""The service pushes its latest signed checkpoint to its witnesses (blackops/witness/push.py):
from the size each witness last cosigned, resending after a 409, keeping the cosignatures, and
backing off from a witness that is down without holding up the others."""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_processes import free_port
from transparency_log import ToyLog

from blackops.witness import push
from blackops.witness.cosigned import CosignatureBook
from blackops.witness.push import WitnessPusher, WitnessTarget
from blackops.witness.server import Witness, make_server
from blackops.witness.state import WitnessState
from journal.store import EventStore
from replay import tlog_witness
from replay.cosignature import cosignatures
from replay.notes import COSIGNATURE_KEY, SigningKey


class Running:
    def __init__(self, witness: Witness, port: int) -> None:
        self.witness = witness
        self.server = make_server(witness, "127.0.0.1", port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def log() -> ToyLog:
    return ToyLog().grow(5)


@pytest.fixture
def book(tmp_path: Path) -> Iterator[CosignatureBook]:
    store = EventStore(f"sqlite:///{tmp_path / 'journal.db'}")
    yield CosignatureBook(store)
    store.close()


def start_witness(log: ToyLog, state: Path, name: str, port: int | None = None) -> Running:
    key = SigningKey.generate(name, COSIGNATURE_KEY)
    return Running(Witness(key, [log.key.verifier()], WitnessState(state)), port or free_port())


def target(running: Running) -> WitnessTarget:
    return WitnessTarget.parse(f"{running.url}={running.witness.verifier.encode()}")


def test_two_witnesses_cosign_each_checkpoint_from_their_last_size(
    tmp_path: Path, log: ToyLog, book: CosignatureBook
) -> None:
    one = start_witness(log, tmp_path / "w1", "w1.example")
    two = start_witness(log, tmp_path / "w2", "w2.example")
    pusher = WitnessPusher(book, [target(one), target(two)], log.note, log.proof)
    with httpx.Client() as client:
        for grow in (0, 3, 1, 8):
            log.grow(grow)
            assert set(pusher.run_once(client).values()) == {"cosigned"}
            note = log.note() + "".join(book.lines(log.checkpoint()))
            found = cosignatures(note, [one.witness.verifier, two.witness.verifier])
            assert len(found.valid) == 2
        # Nothing new: nothing is sent.
        assert pusher.run_once(client) == {}
    assert one.witness.state.latest(log.origin) == log.checkpoint()
    one.close()
    two.close()


def test_a_409_is_answered_by_resending_from_the_witness_size(
    tmp_path: Path, log: ToyLog, book: CosignatureBook
) -> None:
    one = start_witness(log, tmp_path / "w1", "w1.example")
    # Someone else (an earlier run of the service) already had size 5 cosigned.
    one.witness.add_checkpoint(tlog_witness.encode(0, [], log.note()))
    log.grow(4)
    pusher = WitnessPusher(book, [target(one)], log.note, log.proof)
    with httpx.Client() as client:
        assert pusher.run_once(client) == {target(one).label: "cosigned"}
    assert one.witness.state.latest(log.origin) == log.checkpoint()
    one.close()


class PushClock:
    """The ``time`` of blackops/witness/push.py: its backoff is measured on this clock,
    which moves only when the test says, not while the machine is slow."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_witness_that_is_down_is_retried_with_backoff_and_never_blocks_the_other(
    tmp_path: Path, log: ToyLog, book: CosignatureBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = PushClock()
    monkeypatch.setattr(push, "time", clock)
    up = start_witness(log, tmp_path / "w1", "w1.example")
    down_port = free_port()
    down_key = SigningKey.generate("w2.example", COSIGNATURE_KEY)
    down = WitnessTarget.parse(f"http://127.0.0.1:{down_port}={down_key.verifier().encode()}")
    pusher = WitnessPusher(book, [target(up), down], log.note, log.proof, poll_seconds=0.05)
    with httpx.Client(timeout=2) as client:
        results = pusher.run_once(client)
        assert results[target(up).label] == "cosigned"
        assert results[down.label].startswith("error:")
        # Backing off: a round before the first retry is due (1 s after) does not call it.
        log.grow(2)
        clock.now = 1000.75
        results = pusher.run_once(client)
        assert results == {target(up).label: "cosigned"}
    # It comes up (same key); its retry is due now, and the pusher's thread gets its
    # cosignature in a later round.
    late = Running(
        Witness(down_key, [log.key.verifier()], WitnessState(tmp_path / "w2")), down_port
    )
    clock.now = 1001.0
    pusher.start()
    try:

        def cosigned() -> bool:
            return any(line.startswith("— w2.example ") for line in book.lines(log.checkpoint()))

        deadline = time.monotonic() + 30  # the real clock: only a bound for a broken pusher
        while not cosigned() and time.monotonic() < deadline:
            pusher.notify()
            time.sleep(0.05)
        assert cosigned()
    finally:
        pusher.stop()
        up.close()
        late.close()


def test_a_witness_option_must_name_a_url_and_a_key() -> None:
    with pytest.raises(ValueError, match="URL=VERIFIER_KEY"):
        WitnessTarget.parse("w1.example+abcd")
    with pytest.raises(ValueError, match="malformed"):
        WitnessTarget.parse("http://x=not-a-key")


def misbehaving(answers: dict[str, httpx.Response], real: Running) -> httpx.MockTransport:
    """Hosts named in ``answers`` get that answer; every other request goes to ``real``."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host in answers:
            return answers[request.url.host]
        with httpx.Client() as client:
            return client.post(f"{real.url}{request.url.path}", content=request.content)

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("size", ["²\n", "1" * 5000 + "\n", "18446744073709551616\n", "-1\n"])
def test_a_witness_answering_a_malformed_409_backs_off_and_never_stops_the_others(
    tmp_path: Path, log: ToyLog, book: CosignatureBook, size: str
) -> None:
    good = start_witness(log, tmp_path / "w1", "w1.example")
    bad_key = SigningKey.generate("bad.example", COSIGNATURE_KEY)
    bad = WitnessTarget.parse(f"http://bad.invalid={bad_key.verifier().encode()}")
    reply = httpx.Response(409, headers={"content-type": "text/x.tlog.size"}, text=size)
    # The bad witness comes first: before the fix its ValueError ended the round.
    pusher = WitnessPusher(book, [bad, target(good)], log.note, log.proof)
    with httpx.Client(transport=misbehaving({"bad.invalid": reply}, good)) as client:
        results = pusher.run_once(client)
        assert results[target(good).label] == "cosigned"
        assert results[bad.label].startswith("error: 409 with a malformed size")
        log.grow(1)
        # Backing off: the next round pushes to the good witness only.
        assert pusher.run_once(client) == {target(good).label: "cosigned"}
    good.close()


def test_only_cosignature_lines_that_verify_are_kept(
    tmp_path: Path, log: ToyLog, book: CosignatureBook
) -> None:
    real = start_witness(log, tmp_path / "w1", "w1.example")
    key = real.witness.verifier
    junk_same_id = f"— {key.name} " + base64.b64encode(key.key_id + bytes(72)).decode()
    junk_random = f"— {key.name} " + base64.b64encode(os.urandom(76)).decode()

    def handle(request: httpx.Request) -> httpx.Response:
        with httpx.Client() as client:
            answer = client.post(f"{real.url}/add-checkpoint", content=request.content)
        return httpx.Response(200, text=f"{junk_random}\n{answer.text}{junk_same_id}\nnoise\n")

    pusher = WitnessPusher(book, [target(real)], log.note, log.proof)
    with httpx.Client(transport=httpx.MockTransport(handle)) as client:
        assert pusher.run_once(client) == {target(real).label: "cosigned"}
    kept = book.lines(log.checkpoint())
    assert len(kept) == 1
    assert cosignatures(log.note() + kept[0], [key]).valid
    real.close()


def test_an_answer_with_only_junk_lines_is_refused_and_nothing_is_kept(
    tmp_path: Path, log: ToyLog, book: CosignatureBook
) -> None:
    key = SigningKey.generate("w1.example", COSIGNATURE_KEY)
    wanted = WitnessTarget.parse(f"http://w1.invalid={key.verifier().encode()}")
    junk = f"— w1.example {base64.b64encode(wanted.key.key_id + bytes(72)).decode()}\n"
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=junk))
    pusher = WitnessPusher(book, [wanted], log.note, log.proof)
    with httpx.Client(transport=transport) as client:
        assert pusher.run_once(client)[wanted.label].startswith("error:")
    assert book.lines(log.checkpoint()) == []


def test_a_witness_that_saw_a_fork_is_an_error_with_backoff_not_a_stale_size(
    tmp_path: Path, log: ToyLog, book: CosignatureBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = PushClock()
    monkeypatch.setattr(push, "time", clock)
    one = start_witness(log, tmp_path / "w1", "w1.example")
    # The witness cosigned size 5 of another history (a fork this log signed too).
    other = ToyLog(log.origin, log.key).grow(4).append("forked")
    one.witness.add_checkpoint(tlog_witness.encode(0, [], other.note()))
    requests: list[bytes] = []

    def handle(request: httpx.Request) -> httpx.Response:
        requests.append(request.content)
        with httpx.Client() as client:
            return client.post(f"{one.url}{request.url.path}", content=request.content)

    pusher = WitnessPusher(book, [target(one)], log.note, log.proof)
    with httpx.Client(transport=httpx.MockTransport(handle)) as client:
        first = pusher.run_once(client)
        # 0 -> 409 size 5 -> resent from 5 -> 409 plain text: a fork, no third try.
        assert first[target(one).label].startswith("error: 409 (a fork)"), first
        assert len(requests) == 2
        assert pusher.run_once(client) == {}  # backing off
    assert book.lines(log.checkpoint()) == []
    assert one.witness.state.latest(log.origin) == other.checkpoint()
    one.close()


def test_a_witness_urls_password_is_never_logged_and_a_malformed_url_is_refused(
    log: ToyLog, book: CosignatureBook, caplog: pytest.LogCaptureFixture
) -> None:
    """A URL with user:password is Basic auth to the witness: every failed push logged it
    whole (found by a defect hunt, stop 40). And a URL that does not parse is refused when
    given, not at every push."""
    key = SigningKey.generate("w9.example", COSIGNATURE_KEY).verifier().encode()
    down = WitnessTarget.parse(f"http://ops:S3cret@127.0.0.1:{free_port()}={key}")
    pusher = WitnessPusher(book, [down], log.note, log.proof)
    with caplog.at_level("ERROR", logger="blackops.witness"), httpx.Client(timeout=2) as client:
        results = pusher.run_once(client)
    assert results[down.label].startswith("error:") and "S3cret" not in results[down.label]
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "ops:***@127.0.0.1" in logged and "S3cret" not in logged
    for malformed in ("http://[::1", "http://h:port", "http://", "http://h:99999",
                      "http://xn--a.com", "http://h?x", "http://h#f", "http://h\x00x"):  # fmt: skip
        with pytest.raises(ValueError, match="URL"):
            WitnessTarget.parse(f"{malformed}={key}")

    # An error that names the URL (as httpx's status errors do) is told without it.
    def failing(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused by {down.url}/add-checkpoint")

    with httpx.Client(transport=httpx.MockTransport(failing)) as client:
        said = WitnessPusher(book, [down], log.note, log.proof).run_once(client)[down.label]
    assert "ops:***@" in said and "S3cret" not in said
