"""Observer Replay (OL-11): ``blackops replay`` says what is wrong in one line and delivers
nothing it cannot keep track of: a state file that holds no position, is a folder or sits in
no folder, and a ``--from`` beyond any position are refused before the first event; a
hostile tombstone line is a refusal naming the line; an observer that raises stops the
replay with its exception named, the state file keeping the last event it took (found by a
defect hunt: each was a traceback, the missing folder only after every event was delivered)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_processes import ROOT, run

from blackops import Application
from replay.export import observed_lines
from replay.observed import ObservedLineError
from replay.replayer import replay


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, list[int]]:
    """A small export (SQLite is enough: replay reads files) and its positions."""
    app = Application(f"sqlite:///{tmp_path}/j.db")
    app.operation("t.ok")(lambda ctx, params: None)
    for n in range(3):
        app.run("t.ok", {"n": n}, actor="a", tenant="t")
    lines = list(observed_lines(app.store))
    app.close()
    target = tmp_path / "j.jsonl"
    target.write_bytes(b"".join(line for _, line in lines))
    return target, [position for position, _ in lines]


def _replay(
    target: Path, tmp_path: Path, *flags: str, observer: str = "record_position"
) -> subprocess.CompletedProcess[str]:
    env = {"REPLAY_OUT": str(tmp_path / "seen.txt"), "PYTHONPATH": str(ROOT / "tests")}
    return run("replay", str(target), "--observer", f"replay_observers:{observer}", *flags,
               store=f"sqlite:///{tmp_path}/unused.db", env=env)  # fmt: skip


@pytest.mark.parametrize(
    "state",
    ["garbage\n", "-5\n", "99999999999999999999\n", b"\xff\xfe", "folder", "no-folder/state"],
)
def test_a_state_it_cannot_use_is_refused_before_anything_is_delivered(
    exported: tuple[Path, list[int]], tmp_path: Path, state: str | bytes
) -> None:
    target, _ = exported
    path = tmp_path / "state"
    if state == "folder":
        path.mkdir()
    elif state == "no-folder/state":
        path = tmp_path / "no-folder" / "state"
    elif isinstance(state, bytes):
        path.write_bytes(state)
    else:
        path.write_text(state)
    done = _replay(target, tmp_path, "--state", str(path))
    assert done.returncode == 1, done.stderr
    assert (
        done.stderr.startswith("blackops: invalid_request: --state")
        and "Traceback" not in done.stderr
    )
    assert not (tmp_path / "seen.txt").exists()  # nothing delivered


def test_a_start_beyond_any_position_is_refused(
    exported: tuple[Path, list[int]], tmp_path: Path
) -> None:
    target, _ = exported
    done = _replay(target, tmp_path, "--from", str(2**63), "--state", str(tmp_path / "s"))
    assert done.returncode == 1 and "blackops: invalid_request: --from" in done.stderr
    assert not (tmp_path / "s").exists()


def test_an_observer_that_raises_is_named_and_the_state_keeps_what_it_took(
    exported: tuple[Path, list[int]], tmp_path: Path
) -> None:
    target, positions = exported
    state = tmp_path / "state"
    done = _replay(target, tmp_path, "--state", str(state), "--json", observer="fail_at_third")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    body = json.loads(done.stdout)  # exactly one document
    assert body["position"] == positions[2]
    assert "the observer raised RuntimeError" in body["stopped"]
    assert state.read_text() == f"{positions[1]}\n"  # the last event it took


def test_a_tombstone_whose_versions_are_not_a_number_is_a_refused_line(tmp_path: Path) -> None:
    line = {
        "at": "2026-12-06T09:00:00.000000Z", "context": {}, "data": {"versions": "x"},
        "position": 7, "stream": "op-1", "type": "operation.purged", "version": 3,
    }  # fmt: skip
    text = json.dumps(line, separators=(",", ":"), sort_keys=True).encode()
    with pytest.raises(ObservedLineError, match=r"line 1: a tombstone's data\.versions"):
        replay([text], lambda event: None)
    target = tmp_path / "t.jsonl"
    target.write_bytes(text + b"\n")
    done = _replay(target, tmp_path)
    assert done.returncode == 1 and "blackops: invalid_request: line 1" in done.stderr


@pytest.mark.parametrize(
    ("observer", "named"),
    [("exit_at_first", "SystemExit"), ("cancelled_at_first", "CancelledError")],
)
def test_an_observer_raising_a_base_exception_is_named_in_one_document(
    exported: tuple[Path, list[int]], tmp_path: Path, observer: str, named: str
) -> None:
    """``sys.exit(7)`` in an observer exited 7 with no document; a CancelledError was a
    traceback (found by a defect hunt, stop 38)."""
    target, positions = exported
    done = _replay(target, tmp_path, "--json", observer=observer)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    body = json.loads(done.stdout)  # exactly one document
    assert body["position"] == positions[0]
    assert f"the observer raised {named}" in body["stopped"]
