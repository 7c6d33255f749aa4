"""`--json` prints one document even when what it says holds text that is no Unicode (a
file name of non-UTF-8 bytes, read by Python with surrogateescape), and a SQLite journal
whose files cannot be made is a refusal, not a traceback (found by a defect hunt, stop 35:
the error's own answer raised; a finished export was reported as failed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_refusals import refused, run_in

NOT_UTF8 = b"\xed\xa0\x80"  # one byte string, never UTF-8 text


@pytest.mark.parametrize(
    "argv",
    [
        ["verify", "--jsonl", b"/nonexistent/x" + NOT_UTF8, "--store", "STORE"],
        ["journal", "export", "--output", b"/nonexistent/x" + NOT_UTF8, "--store", "STORE"],
        ["keys", "generate", "--name", "ok", "--output", b"/nonexistent/x" + NOT_UTF8],
    ],
)
def test_an_error_naming_text_that_is_no_unicode_is_one_document(
    tmp_path: Path, argv: list[str | bytes]
) -> None:
    store = f"sqlite:///{tmp_path}/j.db"
    assert run_in(tmp_path, "space", "create", "acme", "--store", store).returncode == 0
    done = run_in(tmp_path, *(store if word == "STORE" else word for word in argv), "--json")
    assert "\\udced" in refused(done)  # the byte spelled out, not dropped


def test_an_export_to_a_name_that_is_no_unicode_reports_what_it_wrote(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/j.db"
    assert run_in(tmp_path, "space", "create", "acme", "--store", store).returncode == 0
    target = os.fsencode(str(tmp_path)) + b"/p" + NOT_UTF8
    done = run_in(tmp_path, "journal", "export", "--output", target, "--no-manifest", "--json",
                  "--store", store)  # fmt: skip
    assert done.returncode == 0, done.stderr[-1500:]
    assert json.loads(done.stdout)["count"] == Path(os.fsdecode(target)).read_bytes().count(b"\n")


@pytest.mark.parametrize("where", ["under-a-file", "name-too-long"])
def test_a_sqlite_journal_that_cannot_be_made_is_refused(tmp_path: Path, where: str) -> None:
    (tmp_path / "afile").write_text("")
    path = tmp_path / "afile" / "j.db" if where == "under-a-file" else tmp_path / ("j" * 250)
    done = run_in(tmp_path, "op", "counts", "--json", "--store", f"sqlite:///{path}")
    assert "cannot make the journal" in refused(done)


def test_a_lock_the_file_system_refuses_is_the_stores_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An existing journal whose setup lock fails now (ENOLCK on NFS, EIO) is
    backend_unavailable, not the caller's invalid_request (found by review, stop 35)."""
    import errno
    import fcntl

    from domain.errors import BlackOpsError
    from journal.store import EventStore

    url = f"sqlite:///{tmp_path}/j.db"
    EventStore(url).close()

    def refused(*args: object) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refused)
    with pytest.raises(BlackOpsError) as error:
        EventStore(url, create=False)
    assert error.value.code == "backend_unavailable"


def test_a_serve_refused_for_its_store_writes_no_token(tmp_path: Path) -> None:
    """The dev token was written before the journal opened (found by review, stop 35)."""
    (tmp_path / "afile").write_text("")
    done = run_in(tmp_path, "serve", "--port", "0", "--json", "--no-worker",
                  "--store", f"sqlite:///{tmp_path}/afile/j.db")  # fmt: skip
    refused(done)
    assert not (tmp_path / "home" / "dev-token").exists()


def test_an_export_whose_partial_is_a_pipe_is_refused(tmp_path: Path) -> None:
    """A FIFO where the export's `.partial` goes hung the export, then was renamed onto the
    output and the export recorded (found by review, stop 35)."""
    store = f"sqlite:///{tmp_path}/j.db"
    assert run_in(tmp_path, "space", "create", "acme", "--store", store).returncode == 0
    os.mkfifo(tmp_path / "out.jsonl.partial")
    done = run_in(tmp_path, "journal", "export", "--output", str(tmp_path / "out.jsonl"),
                  "--json", "--store", store)  # fmt: skip
    assert "not a regular file" in refused(done)
    assert not (tmp_path / "out.jsonl").exists()
