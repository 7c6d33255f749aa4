"""``blackops.client`` is a client: it imports no server code. Read from the source (every
import, however deep) and checked in a fresh interpreter by what lands in ``sys.modules``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the client may import of ours: itself, the error classes and the result types.
ALLOWED_OURS = ("blackops.client", "blackops.errors", "blackops.operations.results")
OURS = ("blackops", "domain", "journal", "projections", "replay")
#: Server-side packages that must never load with the client.
SERVER = ("fastapi", "starlette", "uvicorn", "eventsourcing", "psycopg", "psycopg_pool",
          "pydantic", "journal", "projections", "replay", "blackops.application",
          "blackops.http", "blackops.control", "blackops.runtime", "blackops.worker",
          "blackops.cli")  # fmt: skip


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_the_client_source_imports_only_the_client_errors_and_results() -> None:
    files = sorted((ROOT / "blackops" / "client").rglob("*.py"))
    assert len(files) >= 4
    wrong = []
    for path in files:
        for name in imports_of(path):
            ours = name.split(".")[0] in OURS
            allowed = name == "blackops" or any(
                name == a or name.startswith(a + ".") for a in ALLOWED_OURS
            )
            if (ours and not allowed) or name.split(".")[0] in SERVER:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def loaded_by(statement: str) -> list[str]:
    probe = (
        f"import sys\n{statement}\n"
        f"server = {SERVER!r}\n"
        "print(sorted(m for m in sys.modules\n"
        "             if any(m == s or m.startswith(s + '.') for s in server)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return list(eval(done.stdout.strip()))  # a printed list of str


def test_importing_the_client_loads_no_server_code() -> None:
    assert loaded_by("from blackops.client import AsyncClient, Client") == []


def test_the_probe_sees_server_code() -> None:
    """The check can fail: importing the HTTP app does load the server side."""
    found = loaded_by("import blackops.http.app")
    assert {"fastapi", "eventsourcing", "blackops.application"} <= set(found)
