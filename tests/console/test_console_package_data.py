"""The console's templates and static files ship in the wheel: every file under
``blackops/console/templates`` and ``static`` matches a ``package-data`` pattern of
pyproject.toml (a file that matched none would be missing from an installed console)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "blackops" / "console"


def test_every_template_and_static_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["blackops.console"]
    files = [
        path.relative_to(PACKAGE).as_posix()
        for folder in ("templates", "static")
        for path in (PACKAGE / folder).iterdir()
    ]
    assert {"templates/base.html", "static/console.css", "static/console.js"} <= set(files)
    unshipped = [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]
    assert unshipped == []
