"""Run a bench script against another revision of the code, for before/after figures.

``--ref REV`` extracts REV's library packages (``git archive``) into a temporary folder and
runs the same script again in a child process whose imports resolve there: the editable
install's finder is taken off ``sys.meta_path`` and the folder put first on ``sys.path``.
Only the library changes; the bench script, its documents and the machine are the same.
Importing this module is what points the child at the tree, so import it before the library.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("domain", "journal", "projections", "replay", "blackops")
TREE_ENV = "BLACKOPS_BENCH_TREE"


class _TreeFinder:
    """Finds our packages in ``tree`` only; everything else is left to the usual finders."""

    def __init__(self, tree: str) -> None:
        self.tree = tree

    def find_spec(
        self, name: str, path: list[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name.partition(".")[0] not in PACKAGES:
            return None
        return importlib.machinery.PathFinder.find_spec(name, path or [self.tree], target)


def _use_tree_from_environment() -> None:
    """In a child started by `run_at`: import the library from the extracted tree."""
    tree = os.environ.get(TREE_ENV)
    if tree:
        sys.meta_path.insert(0, _TreeFinder(tree))  # type: ignore[arg-type]
    else:
        sys.path.insert(0, str(ROOT))


def run_at(ref: str, script: Path, args: list[str]) -> dict[str, Any]:
    """Run ``script args --json`` with REV's library; its JSON result."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, *PACKAGES],
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix="bench-ref-") as folder:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        return _child(script, args, {**os.environ, TREE_ENV: folder})


def run_here(script: Path, args: list[str]) -> dict[str, Any]:
    """Run ``script args --json`` with this tree's library, in a child process as `run_at`
    does (so that before and after are measured alike); its JSON result."""
    return _child(script, args, {k: v for k, v in os.environ.items() if k != TREE_ENV})


def _child(script: Path, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(script), *args, "--json"],
        check=True,
        capture_output=True,
        env=env,
        text=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


_use_tree_from_environment()


def median_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first run's figures with each float replaced by its median over ``runs`` (the
    runs of one measurement, alternated with another tree's: ``--rounds N``)."""
    merged = dict(runs[0])
    for key, value in merged.items():
        if isinstance(value, float):
            merged[key] = statistics.median(run[key] for run in runs)
    return merged
