"""Observed JSONL export (OL-11): Ctrl-C (or SIGTERM) during a one-shot ``journal export``
interrupts it at its next page: exit 130 (143 for SIGTERM), no file, no partial file, no
manifest, no export recorded in the journal, and the process's own signal handlers back as
they were; to stdout, the pages before it are there and the message says so (SQLite and
PostgreSQL)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_processes import BLACKOPS, ROOT

from blackops.cli import journal as journal_commands
from blackops.cli import progress as progress_module
from blackops.cli.common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED
from blackops.cli.main import main
from domain.events import NewEvent
from journal.store import Append, EventStore
from replay.export import PAGE

AT = "2026-12-06T09:00:00.000000Z"
CONTEXT = {"actor": {"id": "ana", "kind": "principal"}, "tenant": "t"}


def _journal(url: str, events: int) -> None:
    with EventStore(url) as store:
        for start in range(0, events, 500):
            store.append(
                *[
                    Append(f"s-{n}", 0, [NewEvent("t.noted", AT, CONTEXT, {"n": n})])
                    for n in range(start, min(start + 500, events))
                ]
            )


def _custody_records(url: str) -> int:
    with EventStore(url) as store:
        return sum(1 for event in store.iter_after(0) if event.type == "journal.exported")


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_interrupts_a_one_shot_export_leaving_nothing(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    _journal(store_url, 2 * PAGE + 10)  # three pages: the signal comes after the first
    signalled: list[int] = []

    @contextlib.contextmanager
    def signal_after_the_first_page(
        description: str, **kwargs: object
    ) -> Iterator[Callable[[int, int | None], None]]:
        def report(done: int, total: int | None) -> None:
            if not signalled:
                signalled.append(done)
                os.kill(os.getpid(), number)

        yield report

    monkeypatch.setattr(progress_module, "progress", signal_after_the_first_page)
    before = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    exports = tmp_path / "exports"
    exports.mkdir()
    output = exports / "out.jsonl"
    code = main(["journal", "export", "--output", str(output), "--store", store_url])
    assert code == 128 + number  # 130 for SIGINT (EXIT_INTERRUPTED), 143 for SIGTERM
    assert signalled == [PAGE]  # interrupted at the second page, not run to the end
    assert list(exports.iterdir()) == []  # no file, no partial file, no manifest
    assert _custody_records(store_url) == 0
    assert {n: signal.getsignal(n) for n in before} == before


def test_an_export_to_stdout_interrupted_says_what_it_wrote(
    store_url: str, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    _journal(store_url, 2 * PAGE + 10)

    @contextlib.contextmanager
    def signal_at_once(description: str, **kwargs: object) -> Iterator[Callable[..., None]]:
        yield lambda done, total: os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(progress_module, "progress", signal_at_once)
    code = main(["journal", "export", "--no-manifest", "--store", store_url])
    assert code == EXIT_INTERRUPTED
    written = capsysbinary.readouterr()
    lines = written.out.count(b"\n")
    assert PAGE <= lines < 2 * PAGE + 10  # whole pages went out before it stopped, not all
    assert written.err == (
        b"blackops: export interrupted: stdout holds the lines before it; no manifest, "
        b"nothing recorded\n"
    )


def test_ctrl_c_in_any_command_is_one_line_and_status_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a traceback: whatever the command was doing (a long verify, a purge)."""

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(journal_commands, "cmd_journal_schema", interrupted)
    assert main(["journal", "schema"]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "blackops: interrupted\n"


def test_an_export_not_interrupted_is_whole_and_recorded(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same export without a signal (the check between pages costs nothing else)."""
    _journal(store_url, 2 * PAGE + 10)
    output = tmp_path / "out.jsonl"
    assert main(["journal", "export", "--output", str(output), "--store", store_url]) == 0
    assert output.read_bytes().count(b"\n") == 2 * PAGE + 10
    assert (tmp_path / "out.jsonl.manifest.json").exists()
    assert _custody_records(store_url) == 1


@pytest.mark.parametrize("manifest", [False, True])
def test_a_reader_closing_stdout_stops_the_export_quietly(
    store_url: str, tmp_path: Path, manifest: bool
) -> None:
    """`export | head`: SIGPIPE's status, no traceback; with a manifest asked for, one line
    says none was written, and nothing is recorded."""
    _journal(store_url, 2 * PAGE)  # far more than a pipe holds
    flags = ["--manifest", str(tmp_path / "m.json")] if manifest else ["--no-manifest"]
    reader = subprocess.Popen(
        [*BLACKOPS, "journal", "export", *flags, "--store", store_url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.read(100)
    reader.stdout.close()  # as `head -c 100` does
    said = reader.stderr.read().decode()
    assert reader.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert "Traceback" not in said
    if manifest:
        assert said == "blackops: the reader closed stdout: no manifest, nothing recorded\n"
        assert not (tmp_path / "m.json").exists()
    else:
        assert said == ""
    assert _custody_records(store_url) == 0
