"""The single development bearer token: generated on first start, kept in ``.blackops/``."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def state_dir() -> Path:
    # An empty $BLACKOPS_HOME is unset: Path("") is the working folder, where the tokens
    # and the signing key were written (a project checkout; found by a defect hunt).
    return Path(os.environ.get("BLACKOPS_HOME") or ".blackops")


def read_secret(path: Path) -> str:
    """A saved secret (stripped; "" when there is none); one that cannot be read (a
    folder, not ASCII, a state dir that is a file) is ``invalid_request`` naming it."""
    from domain.errors import InvalidRequest

    try:
        return path.read_text(encoding="ascii").strip() if path.exists() else ""
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not ASCII text"
        raise InvalidRequest(f"cannot read {path}: {reason} ($BLACKOPS_HOME)") from None


def write_secret(path: Path, text: str) -> None:
    """``text`` into ``path``, mode 0600, replaced atomically; ``invalid_request`` naming
    the file when it cannot be written."""
    from domain.errors import InvalidRequest

    partial = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InvalidRequest(f"{path.parent} is not a folder ($BLACKOPS_HOME)") from None
    except OSError as error:
        raise InvalidRequest(f"cannot create {path.parent}: {error.strerror}") from None
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(text + "\n")
        os.chmod(partial, 0o600)
        os.replace(partial, path)
    except OSError as error:
        raise InvalidRequest(f"cannot write {path}: {error.strerror} ($BLACKOPS_HOME)") from None


def load_or_create_token(path: Path | None = None) -> str:
    """``$BLACKOPS_DEV_TOKEN`` if set, else the saved token, else a new one (mode 0600)."""
    from_env = os.environ.get("BLACKOPS_DEV_TOKEN")
    if from_env:
        return from_env
    path = path or state_dir() / "dev-token"
    token = read_secret(path)
    if token:
        return token
    token = "bo_dev_" + secrets.token_urlsafe(32)
    write_secret(path, token)
    return token
