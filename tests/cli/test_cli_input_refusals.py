"""Inputs the CLI refuses in one clear line (or one JSON document with ``--json``), before
anything changes, and a reader of stdout that goes away (found by a defect hunt): malformed
store URLs (decisions H6, P16), `deploy --force` without `--promote`, `wf history --json`
without `--output`, a deployment weight that is not ASCII digits, and a closed stdout (exit
141 quietly, as `journal export` does, P34)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_processes import ROOT

from blackops.cli.main import main
from domain.errors import InvalidRequest
from journal.locator import resolve_store


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """``main(argv)`` exits 1 with exactly one JSON document, an ``invalid_request``."""
    capsys.readouterr()
    assert main(argv) == 1
    out = capsys.readouterr().out
    error = json.loads(out)["error"]  # one document: json.loads refuses two
    assert error["code"] == "invalid_request", error
    return str(error["message"])


BAD_STORES = [
    ("postgresql://postgres@127.0.0.1:abc/test", "port"),
    ("postgresql://postgres@127.0.0.1:99999/test", "port"),
    ("postgresql://postgres@127.0.0.1:0/test", "port"),
    ("postgresql://postgres@[::1/test", "malformed"),
    ("postgresql://postgres@127.0.0.1:5432/test?connect_timeout=abc", "connect_timeout"),
    ("postgresql://postgres@127.0.0.1:5432/test?connect_timeout=2.5", "connect_timeout"),
    ("postgresql://postgres@127.0.0.1:5432/test?pool_size=-1", "pool_size"),
    ("postgresql://postgres@127.0.0.1:5432/test?pool_size=%C2%B2", "pool_size"),
    ("sqlite:////tmp/%00x.db", "NUL"),
]


@pytest.mark.parametrize(("url", "says"), BAD_STORES)
def test_a_malformed_store_url_is_invalid_request_not_a_traceback(
    capsys: pytest.CaptureFixture[str], url: str, says: str
) -> None:
    assert says in _refused(capsys, ["op", "status", "x", "--json", "--store", url])


@pytest.mark.parametrize(
    "url",
    ["sqlite:///{d}/a.db\n", " sqlite:///{d}/a.db", "sqlite:///{d}/a\r.db", "memory://\t"],
)
def test_a_store_url_with_whitespace_or_control_characters_names_no_new_journal(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    url: str,
) -> None:
    """A trailing newline from a file named another SQLite file ("a.db\\n"), which `op
    counts` created and found empty (exit 0). Refused, not stripped: the URL said is the
    URL used."""
    monkeypatch.setenv("BLACKOPS_STORE", url.format(d=tmp_path))
    assert "whitespace" in _refused(capsys, ["op", "counts", "--json"])
    assert list(tmp_path.iterdir()) == []  # no journal, no lock file
    with pytest.raises(InvalidRequest, match="control character"):
        resolve_store(url.format(d=tmp_path))


def test_a_well_formed_store_url_still_resolves() -> None:
    found = resolve_store("postgresql://u:p%40ss@db.example:6543/j?schema=s1&pool_size=2")
    assert found.settings["POSTGRES_PORT"] == "6543"
    assert found.settings["POSTGRES_PASSWORD"] == "p@ss"
    assert found.settings["POSTGRES_POOL_SIZE"] == "2"
    assert found.settings["POSTGRES_CONNECT_TIMEOUT"] == "5"
    # 0 is libpq's "wait for ever": a URL that worked before still does (found by review).
    forever = resolve_store("postgresql://u@db.example/j?connect_timeout=0")
    assert forever.settings["POSTGRES_CONNECT_TIMEOUT"] == "0"
    assert resolve_store("sqlite:///my%20dir/j.db").settings["SQLITE_DBNAME"] == "my dir/j.db"


def test_deploy_force_without_promote_is_refused_before_any_change(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It was refused after the Worker was created and the folder uploaded and verified
    as a Version (both journaled)."""
    store = f"sqlite:///{tmp_path}/dep.db"
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "flows.py").write_text("X = 1\n")
    assert main(["space", "create", "default", "--store", store]) == 0
    said = _refused(
        capsys,
        ["deploy", str(folder), "--space", "default", "--worker", "w1", "--create-worker",
         "--force", "--store", store, "--json"],
    )  # fmt: skip
    assert said == "--force goes with --promote"
    capsys.readouterr()
    assert main(["worker", "list", "--space", "default", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == []


def test_wf_history_json_without_output_is_refused_as_journal_export_refuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--json`` is one document; the history is JSONL (one line per event) on stdout."""
    store = f"sqlite:///{tmp_path}/wf.db"
    said = _refused(capsys, ["wf", "history", "orders", "i1", "--json", "--store", store])
    assert said == "--json needs --output: stdout carries the JSONL"


@pytest.mark.parametrize("weight", ["²", "١٠٠", "5²"])
def test_a_deployment_weight_that_is_not_ascii_digits_is_refused(weight: str) -> None:
    from blackops.cli.deploy import parse_allocation
    from domain.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="is not VERSION=WEIGHT"):
        parse_allocation([f"v={weight}"])
    assert parse_allocation(["v= 40 ", "w=60"]) == [
        {"version": "v", "weight": 40},
        {"version": "w", "weight": 60},
    ]


@pytest.mark.parametrize(
    "argv",
    [["journal", "schema"], ["op", "list", "--store", "STORE"], ["op", "counts", "--json",
                                                                 "--store", "STORE"]],
)  # fmt: skip
def test_a_reader_that_closed_stdout_gets_sigpipes_status_not_a_traceback(
    tmp_path: Path, argv: list[str]
) -> None:
    from rich_journal import inline_runs

    store = f"sqlite:///{tmp_path}/j.db"
    inline_runs(store, ["t"] * 2)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away before a byte was written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "blackops", *[store if a == "STORE" else a for a in argv]],
            cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
            check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and done.stderr == ""


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("schema=s1&sslmode=require", "'sslmode' is not one blackops takes"),
        ("Schema=s1", "'Schema' is not one blackops takes"),
        ("schem=s1", "'schem' is not one blackops takes"),
        ("schema=", "schema is empty"),
        ("pool_size=", "pool_size is empty"),
        ("schema=a&schema=b", "names schema more than once"),
    ],
)
def test_a_postgres_url_option_blackops_does_not_take_is_refused_not_dropped(
    query: str, says: str
) -> None:
    """A misspelt or empty ``schema`` named ``public``, another journal; ``sslmode=require``
    was dropped and the connection made in clear text (found by a defect hunt, stop 38)."""
    with pytest.raises(InvalidRequest, match=says):
        resolve_store(f"postgresql://u@db.example/j?{query}")
