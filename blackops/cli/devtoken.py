"""The single development bearer token: generated on first start, kept in ``.blackops/``."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def state_dir() -> Path:
    return Path(os.environ.get("BLACKOPS_HOME", ".blackops"))


def load_or_create_token(path: Path | None = None) -> str:
    """``$BLACKOPS_DEV_TOKEN`` if set, else the saved token, else a new one (mode 0600)."""
    from_env = os.environ.get("BLACKOPS_DEV_TOKEN")
    if from_env:
        return from_env
    path = path or state_dir() / "dev-token"
    if path.exists():
        token = path.read_text(encoding="ascii").strip()
        if token:
            return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = "bo_dev_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
    return token
