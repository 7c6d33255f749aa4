"""The service's side of tlog-witness: push each new signed checkpoint to the configured
witnesses and keep the cosignatures they return (``--witness URL=VERIFIER_KEY``).

Off the append path: a daemon thread wakes when a checkpoint is signed (:meth:`notify`) or
every ``poll_seconds``, and sends the latest signed checkpoint to each witness that has not
cosigned it yet, with the consistency proof from the size that witness last cosigned. A 409
names the witness's size: the request is sent again from there. A witness that is down or
refuses is retried with exponential backoff (1 s doubling to ``max_backoff``); it delays
cosigning, never the journal. A witness that refuses with 422, or with a 409 that names no
size (``text/plain``: it cosigned another root for this size, a fork), or knows a larger
tree, has seen a history this log cannot prove it extends: that is logged as an error every
time, with the same backoff.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from blackops.witness.cosigned import CosignatureBook
from replay import tlog_witness
from replay.cosignature import cosigner_verifier, verify
from replay.notes import (
    MAX_TREE_SIZE,
    Checkpoint,
    NoteError,
    VerifierKey,
    parse_note,
    parse_signature_line,
)

LOG = logging.getLogger("blackops.witness")
ProofSource = Callable[[int, int], Sequence[bytes]]


class PushError(Exception):
    pass


@dataclass(frozen=True)
class WitnessTarget:
    url: str
    key: VerifierKey

    @property
    def label(self) -> str:
        return f"{self.key.name}+{self.key.key_id.hex()}"

    def redacted(self, text: str) -> str:
        """``text`` (the URL, an error naming it) with the URL's password as ``***``: httpx
        sends it as Basic auth, and it was logged on every failed push (found by a defect
        hunt, stop 40), where store URLs were always masked."""
        password = urlsplit(self.url).password
        return text if not password else text.replace(f":{password}@", ":***@")

    @classmethod
    def parse(cls, text: str) -> WitnessTarget:
        """``URL=VERIFIER_KEY`` (the URL is the witness's submission prefix, without '=')."""
        url, equals, key = text.partition("=")
        if not equals or not url.startswith(("http://", "https://")):
            raise ValueError("a witness is URL=VERIFIER_KEY, the URL starting http(s)://")
        # Read whole now, by the client that will send to it: "http://[::1", a NUL or a
        # port that is no number was taken, and failed at every push (found by a defect
        # hunt and a review, stop 40).
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (a port that is no number, or past 65535, raises here)
            httpx.Request("POST", f"{url.rstrip('/')}/add-checkpoint")  # as each push makes it
        except Exception:  # httpx's InvalidURL, an IDNA error, urllib's ValueError
            raise ValueError("the witness's URL is malformed") from None
        if not parts.hostname:
            raise ValueError("the witness's URL names no host")
        if parts.query or parts.fragment or "?" in url or "#" in url:
            # "/add-checkpoint" is appended to it: it would land in the query or fragment.
            raise ValueError("the witness's URL is a submission prefix: no query or fragment")
        try:
            verifier = cosigner_verifier(VerifierKey.parse(key.strip()))
        except NoteError as error:
            raise ValueError(f"the witness's verifier key is malformed: {error}") from None
        return cls(url=url.rstrip("/"), key=verifier)


@dataclass
class _Progress:
    known: int | None = None  # the size the witness said it has (409), or cosigned for us
    next_at: float = 0.0
    delay: float = 0.0
    last: str = ""


@dataclass
class WitnessPusher:
    book: CosignatureBook
    targets: Sequence[WitnessTarget]
    latest: Callable[[], str | None]  # the latest signed checkpoint note, if any
    proof: ProofSource
    poll_seconds: float = 5.0
    max_backoff: float = 60.0
    timeout: float = 10.0
    after_round: Callable[[], None] | None = None  # e.g. publish what the book holds
    _progress: dict[str, _Progress] = field(default_factory=dict)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stopped: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def notify(self) -> None:
        """A checkpoint was signed: push it now."""
        self._wake.set()

    def start(self) -> WitnessPusher:
        self._thread = threading.Thread(target=self._run, name="witness-push", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 5)

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while not self._stopped.is_set():
                try:
                    self.run_once(client)
                    if self.after_round is not None:
                        self.after_round()
                except Exception:
                    LOG.exception("witness push: could not read the latest checkpoint")
                self._wake.wait(self._wait_seconds())
                self._wake.clear()

    def _wait_seconds(self) -> float:
        now = time.monotonic()
        due = [p.next_at - now for p in self._progress.values() if p.next_at > now]
        return max(0.05, min([self.poll_seconds, *due]))

    def run_once(self, client: httpx.Client) -> dict[str, str]:
        """Push the latest checkpoint to every witness that is due; what each answered."""
        note = self.latest()
        if note is None:
            return {}
        checkpoint = Checkpoint.parse(parse_note(note).text)
        have = "".join(self.book.lines(checkpoint))
        results: dict[str, str] = {}
        now = time.monotonic()
        for target in self.targets:
            progress = self._progress.setdefault(target.label, _Progress())
            if progress.next_at > now:
                continue
            if _verified_lines(have, checkpoint, target.key):
                continue  # this checkpoint already carries its cosignature
            try:
                self._push(client, target, progress, note, checkpoint)
            except Exception as error:  # one witness never stops the others
                progress.delay = min(max(progress.delay * 2, 1.0), self.max_backoff)
                progress.next_at = time.monotonic() + progress.delay
                said = progress.last = target.redacted(str(error))
                LOG.error(
                    "witness %s refused or unreachable for size %d (retry in %.0f s): %s",
                    target.redacted(target.url), checkpoint.size, progress.delay, said,
                )  # fmt: skip
                results[target.label] = f"error: {said}"
            else:
                progress.delay, progress.next_at, progress.last = 0.0, 0.0, "cosigned"
                results[target.label] = "cosigned"
        return results

    def _push(
        self,
        client: httpx.Client,
        target: WitnessTarget,
        progress: _Progress,
        note: str,
        checkpoint: Checkpoint,
    ) -> None:
        old = progress.known
        if old is None:
            old = self.book.cosigned_size(checkpoint.origin, target.label) or 0
        for _ in range(3):  # a 409 tells the size to resend from, once or twice
            if old > checkpoint.size:
                raise PushError(
                    f"the witness has cosigned size {old}, larger than this log's "
                    f"{checkpoint.size}: the log was rolled back"
                )
            proof = [] if old in (0, checkpoint.size) else list(self.proof(old, checkpoint.size))
            answer = client.post(
                f"{target.url}/add-checkpoint", content=tlog_witness.encode(old, proof, note)
            )
            if answer.status_code == 409 and answer.headers.get("content-type", "").startswith(
                "text/x.tlog.size"
            ):
                old = progress.known = _size_of(answer.text)
                continue
            if answer.status_code == 409:  # no size: not a stale size, a fork
                raise PushError(f"409 (a fork): {answer.text.strip()[:200]}")
            if answer.status_code != 200:
                raise PushError(f"{answer.status_code}: {answer.text.strip()[:200]}")
            kept = _verified_lines(answer.text, checkpoint, target.key)
            if not kept:
                raise PushError("the witness answered no valid cosignature by its key")
            for line in kept:
                self.book.save(checkpoint, target.label, line)
            progress.known = checkpoint.size
            return
        raise PushError("the witness kept answering 409")


_SIZE = re.compile(r"(0|[1-9][0-9]{0,19})\n?")  # ASCII decimal: '²'.isdigit() is True


def _size_of(text: str) -> int:
    """The size a 409 names (a uint64 in decimal), or a ``PushError``."""
    matched = _SIZE.fullmatch(text)
    size = int(matched.group(1)) if matched is not None else MAX_TREE_SIZE + 1
    if size > MAX_TREE_SIZE:
        raise PushError(f"409 with a malformed size {text[:40]!r}")
    return size


def _verified_lines(text: str, checkpoint: Checkpoint, key: VerifierKey) -> list[str]:
    """The lines of a witness's answer that are ``key``'s valid cosignature of ``checkpoint``
    (canonical form, key ID and signature checked); every other line is dropped."""
    body = checkpoint.body()
    kept: list[str] = []
    for raw in text.split("\n"):
        if not raw:
            continue
        try:
            signature = parse_signature_line(raw)
        except NoteError:
            continue
        line = raw + "\n"
        if signature.line() == line and verify(body, signature, key) and line not in kept:
            kept.append(line)
    return kept
