"""Files a user names (keys, receipts, manifests, env files, JSONL): read whole, but never
more than their kind can hold. A device that never ends (``/dev/zero``) or a wrong file is
then refused with the file's own error path, where it filled memory until a
``MemoryError`` traceback or the OOM killer (found by a defect hunt, stop 40)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import BinaryIO, Final

#: A key file (a C2SP signed-note key, a witness key, a token): a line of text.
KEY_FILE_BYTES: Final = 64 * 1024


def open_input(path: str) -> BinaryIO:
    """``path`` opened for reading bytes; ``-`` is stdin (closing it leaves the process's
    descriptor open), so every caller closes what it opened, stdin or not."""
    if path == "-":
        return open(0, "rb", closefd=False)
    return open(path, "rb")


def read_at_most(path: str | Path, limit: int) -> bytes:
    """The bytes of the file ``path``; ``OSError`` (EFBIG) if it holds more than ``limit``."""
    with open(path, "rb") as source:
        return read_stream_at_most(source, limit, str(path))


def read_text_at_most(path: str | Path, limit: int) -> str:
    """`read_at_most` as UTF-8 text (``UnicodeDecodeError`` if it is not)."""
    return read_at_most(path, limit).decode("utf-8")


#: Read a chunk at a time: ``read(limit + 1)`` asks for the whole limit's buffer at once
#: (a GiB for a manifest of a few KB: a MemoryError under an address-space limit).
_CHUNK = 1 << 20


def read_stream_at_most(source: BinaryIO, limit: int, name: str) -> bytes:
    """What ``source`` holds (stdin, an open file); ``OSError`` (EFBIG) past ``limit``."""
    chunks, size = [], 0
    while chunk := source.read(min(_CHUNK, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", name)
    return b"".join(chunks)
