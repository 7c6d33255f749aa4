"""The README's Python example runs and says what it claims (on a private memory store)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_readme_example_runs_as_shown() -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert block is not None
    code = block.group(1).replace('Application("sqlite:///shop.db")', 'Application("memory://")')
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.status == "completed"  # type: ignore[attr-defined]
    assert result.outcome == {"invoice": "INV-1", "amount": 42, "by": "ana"}  # type: ignore[attr-defined]
    app = namespace["app"]
    types = [e["type"] for e in app.events(result.operation_id)]  # type: ignore[attr-defined]
    assert types == [
        "operation.received",
        "attempt.started",
        "attempt.finalizing",
        "operation.completed",
    ]


def test_operations_guide_deferred_testing_example_runs() -> None:
    """docs/operations.md: the 5-minute backoff example (OL-7) runs as written."""
    from datetime import UTC, datetime

    from blackops import Application
    from blackops.testing import FakeClock

    text = (ROOT / "docs" / "operations.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    [example] = [b for b in blocks if "pay.charge" in b]
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    namespace: dict[str, object] = {"app": Application("memory://", clock=clock), "clock": clock}
    exec(compile(example, "docs/operations.md", "exec"), namespace)
    app = namespace["app"]
    events = app.events(namespace["operation_id"])  # type: ignore[attr-defined]
    assert events[-1]["type"] == "operation.completed"


def test_workflows_guide_example_runs() -> None:
    """docs/workflows.md: the first example runs as written (its asserts are the checks)."""
    text = (ROOT / "docs" / "workflows.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert block is not None and "asyncio.run(main())" in block.group(1)
    namespace: dict[str, object] = {"__name__": "docs_workflows"}
    exec(compile(block.group(1), "docs/workflows.md", "exec"), namespace)


@pytest.mark.parametrize("guide", ["operations.md", "workflows.md"])
def test_the_testing_examples_of_the_guides_run(guide: str) -> None:
    """The TestEnvironment examples run as written (their asserts are the checks)."""
    text = (ROOT / "docs" / guide).read_text()
    blocks = [
        b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "TestEnvironment(" in b
    ]
    assert blocks, f"docs/{guide} shows no TestEnvironment example"
    for block in blocks:
        exec(compile(block, f"docs/{guide}", "exec"), {"__name__": "docs_example"})


def test_the_reading_guides_client_example_runs_against_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/reading.md: the client example runs as written against a real ``blackops
    serve`` (its asserts are the checks), with ``URL`` and ``TOKEN`` as the guide sets them."""
    from served import blackops_serve

    text = (ROOT / "docs" / "reading.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "Client(" in b]
    with blackops_serve(f"sqlite:///{tmp_path}/journal.sqlite3", tmp_path / "home") as served:
        monkeypatch.setenv("URL", served.url)
        monkeypatch.setenv("TOKEN", served.admin_token)
        exec(compile(block, "docs/reading.md", "exec"), {"__name__": "docs_reading"})
