"""A rebuild's batch size outside 1..10000 is refused before anything is reset (found by a
defect hunt): ``blackops projections rebuild NAME --batch 0`` emptied the projection
(position 0, no rows), then failed with ``invalid_request`` when the journal refused the
first read. ``ProjectionRunner.rebuild`` now checks the size first, and the CLI refuses
it as a usage error (exit 2)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from cli_processes import BLACKOPS, ROOT

from blackops import Application
from domain.errors import InvalidRequest


def counted(store_url: str) -> tuple[int, list[tuple[Any, ...]]]:
    """The operation_counts projection's position and rows, as stored (no catch-up)."""
    app = Application(store_url)
    try:
        runner = app.projections.runner("operation_counts")
        return runner.position(), sorted(runner.query("SELECT * FROM {p}blackops_operation_counts"))
    finally:
        app.close()


@pytest.fixture
def caught_up(store_url: str) -> tuple[int, list[tuple[Any, ...]]]:
    app = Application(store_url)
    app.operation("t.ok")(lambda ctx, params: None)
    try:
        for n in range(5):
            app.run("t.ok", {"n": n}, actor="a", tenant="acme")
        assert app.operation_counts()["acme"]["t.ok"]["completed"] == 5
    finally:
        app.close()
    before = counted(store_url)
    assert before[0] > 0 and before[1]
    return before


@pytest.mark.parametrize("batch", [0, -1, 10_001, 2_000_000])
def test_a_rebuild_with_a_batch_out_of_range_changes_nothing(
    store_url: str, caught_up: tuple[int, list[tuple[Any, ...]]], batch: int
) -> None:
    app = Application(store_url)
    try:
        runner = app.projections.runner("operation_counts")
        runner.batch = batch
        with pytest.raises(InvalidRequest, match="batch"):
            runner.rebuild()
    finally:
        app.close()
    assert counted(store_url) == caught_up


def test_the_cli_refuses_the_batch_before_emptying_the_projection(
    store_url: str, caught_up: tuple[int, list[tuple[Any, ...]]]
) -> None:
    for batch in ("0", "10001", "x"):
        done = subprocess.run(
            [*BLACKOPS, "projections", "rebuild", "operation_counts", "--batch", batch,
             "--json", "--store", store_url],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, (batch, done.stdout, done.stderr)
        assert "--batch" in done.stderr and "1 to 10000" in done.stderr
        assert counted(store_url) == caught_up
    done = subprocess.run(
        [*BLACKOPS, "projections", "rebuild", "operation_counts", "--batch", "10000",
         "--json", "--store", store_url],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert counted(store_url) == caught_up
