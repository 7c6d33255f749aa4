"""What the console's non-browser tests share: a page's CSRF token, and a one-step workflow."""

from __future__ import annotations

import re
from typing import Any


def csrf_of(html: str) -> str:
    """The form token a console page carries (64 hex digits)."""
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, html[:500]
    return found.group(1)


class Flow:
    def __init__(self, env: Any) -> None:
        self.env = env

    async def run(self, event: Any, step: Any) -> Any:
        return await step.do("a", lambda: {"v": 1})
