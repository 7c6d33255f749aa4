"""``replay --state S``: a state file whose temporary sibling (``S.tmp``, written and then
renamed onto S) cannot be made is refused before the first event is delivered (found by a
defect hunt, stop 35: every event was delivered, then a traceback); and a state that cannot
be saved once delivery began is an ``invalid_request`` naming ``--state``, not a
traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_refusals import refused, run_in
from rich_journal import inline_runs

OBSERVER = """\
from pathlib import Path

def observe(event):
    with open("delivered.log", "a") as log:
        log.write(f"{{event.position}}\\n")
    {extra}
"""


def _prepared(tmp: Path, extra: str = "pass") -> Path:
    store = f"sqlite:///{tmp}/j.sqlite3"
    inline_runs(store, ["t"] * 2)
    exported = run_in(tmp, "journal", "export", "--no-manifest", "--store", store)
    assert exported.returncode == 0, exported.stderr
    jsonl = tmp / "in.jsonl"
    jsonl.write_text(exported.stdout)
    (tmp / "stop35_observer.py").write_text(OBSERVER.format(extra=extra))
    return jsonl


@pytest.mark.parametrize("where", ["temporary-name-too-long", "temporary-is-a-folder"])
def test_a_state_whose_temporary_cannot_be_made_is_refused_before_delivering(
    tmp_path: Path, where: str
) -> None:
    jsonl = _prepared(tmp_path)
    if where == "temporary-name-too-long":
        state = "s" * 253  # fits NAME_MAX (255); its ".tmp" does not
    else:
        state = "st"
        (tmp_path / "st.tmp").mkdir()
    listed = sorted(os.listdir(tmp_path))
    done = run_in(
        tmp_path, "replay", str(jsonl), "--observer", "stop35_observer:observe",
        "--state", state, "--json",
    )  # fmt: skip
    assert "--state" in refused(done)
    assert not (tmp_path / "delivered.log").exists(), "refused only after delivering"
    assert sorted(os.listdir(tmp_path)) == listed  # no state, no temporary


def test_a_state_that_cannot_be_saved_after_delivery_began_is_invalid_request(
    tmp_path: Path,
) -> None:
    """The observer puts a folder where the temporary goes, after the check: the save at
    the end fails, said as ``invalid_request`` naming --state (was a traceback)."""
    jsonl = _prepared(tmp_path, extra='Path("st.tmp").mkdir(exist_ok=True)')
    done = run_in(
        tmp_path, "replay", str(jsonl), "--observer", "stop35_observer:observe",
        "--state", "st", "--json",
    )  # fmt: skip
    message = refused(done)
    assert "--state" in message and "could not be saved" in message
    assert not (tmp_path / "st").exists()  # nothing saved: a resume starts where it did
