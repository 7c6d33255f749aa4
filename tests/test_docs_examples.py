"""The README's Python example runs and says what it claims (on a private memory store)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
