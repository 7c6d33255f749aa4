"""Signing key files: ``PRIVATE+KEY+<name>+<hex key ID>+<base64>`` text, mode 0600."""

from __future__ import annotations

import os
from pathlib import Path

from blackops.input_files import KEY_FILE_BYTES, read_text_at_most
from domain.errors import InvalidRequest
from replay.notes import NoteError, SigningKey, VerifierKey, valid_key_name

ENV = "BLACKOPS_SIGNING_KEY"


def read_signing_key(path: str | Path) -> SigningKey:
    """The key in ``path``; ``invalid_request`` naming the file when it is not one."""
    try:
        text = read_text_at_most(path, KEY_FILE_BYTES)  # UTF-8 key names (C2SP signed-note)
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidRequest(f"cannot read the signing key {path}: {error}") from None
    try:
        return SigningKey.parse(text.strip())
    except NoteError as error:
        raise InvalidRequest(f"{path} is not a signing key: {error}") from None


def write_signing_key(path: str | Path, key: SigningKey, *, overwrite: bool = False) -> None:
    """Write ``key`` to ``path`` with mode 0600 (never over an existing file unless asked)."""
    target = Path(path)
    # Encoded before the file exists: a name outside ASCII (UTF-8, as C2SP allows) failed
    # to encode after the create and left an empty key file (found by a defect hunt, stop 38).
    text = (key.encode() + "\n").encode("utf-8")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    try:
        fd = os.open(target, flags, 0o600)
    except FileExistsError:
        raise InvalidRequest(f"{target} exists: a key is never overwritten") from None
    except OSError as error:
        raise InvalidRequest(f"cannot write {target}: {error.strerror}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(text)
    os.chmod(target, 0o600)


def generate(name: str) -> SigningKey:
    if not valid_key_name(name):
        raise InvalidRequest(
            "a key name is non-empty, without spaces or '+' (e.g. example.com/log)"
        )
    return SigningKey.generate(name)


def parse_verifier_key(text: str, flag: str = "--key") -> VerifierKey:
    """A verifier key given as text, or as the path of a file holding one (``flag`` names
    the option in refusals). Key text is never echoed: a private key given by mistake
    (``PRIVATE+KEY+...``) was printed whole into the refusal, stderr and ``--json`` alike
    (found by a defect hunt, stop 40); a file is named by its path."""
    candidate = text.strip()
    source = flag
    if "+" not in candidate or os.path.exists(candidate):
        source = f"{flag} {candidate}"
        try:
            candidate = read_text_at_most(candidate, KEY_FILE_BYTES).strip()
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidRequest(
                f"{flag}: neither a verifier key nor a readable file: {error}"
            ) from None
    if candidate.startswith("PRIVATE+KEY+"):
        raise InvalidRequest(
            f"{source} is a private key: give its verifier key (name+keyid+key), never the "
            "private one"
        )
    try:
        return VerifierKey.parse(candidate)
    except NoteError as error:
        raise InvalidRequest(f"{source} is not a verifier key: {error}") from None


def load_or_create_dev_key(state: Path) -> tuple[SigningKey, Path, bool]:
    """The development signing key in ``state/signing-key`` (created on first start, like
    the development token), its path, and whether it was created now."""
    path = state / "signing-key"
    if path.exists():
        return read_signing_key(path), path, False
    state.mkdir(parents=True, exist_ok=True)
    key = generate(f"blackops.localhost/dev-{os.urandom(4).hex()}")
    try:
        write_signing_key(path, key)
    except InvalidRequest:  # another process created it at the same moment
        return read_signing_key(path), path, False
    return key, path, True
