"""Canonicalisation throughput: `canonical_document` against the pure-Python `rfc8785.dumps`."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script

import rfc8785

from domain.documents import MAX_BYTES, canonical_document

REPEATS = 7
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
NON_ASCII = ["café", "naïve", "Zürich", "東京", "Москва", "emoji 😀", "ﬁn"]


def _record(rng: random.Random, index: int) -> dict[str, Any]:
    """One realistic operation record: strings, ints, floats, bools, nesting, some non-ASCII."""
    return {
        "id": f"op-{index:06d}",
        "attempt": rng.randint(0, 10),
        "sequence": rng.randint(-(2**40), 2**40),
        "amount": round(rng.uniform(-1e6, 1e6), 2),
        "ratio": rng.random(),
        "tiny": rng.random() * 1e-9,
        "active": rng.random() < 0.5,
        "owner": None if rng.random() < 0.2 else rng.choice(WORDS),
        "label": " ".join(rng.choice(WORDS + NON_ASCII) for _ in range(rng.randint(1, 6))),
        "tags": [rng.choice(WORDS) for _ in range(rng.randint(0, 5))],
        "limits": {"cpu": rng.randint(1, 64), "memory_gb": rng.choice([0.5, 1.0, 2.0, 16.0])},
        "history": [
            {"at": rng.randint(1_600_000_000, 1_800_000_000), "state": rng.choice(WORDS)}
            for _ in range(rng.randint(0, 3))
        ],
    }


def build_document(target_bytes: int, seed: int = 8785) -> dict[str, Any]:
    """A document whose canonical form is just under ``target_bytes``."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    document: dict[str, Any] = {"kind": "bench", "version": 1, "items": items}
    size = len(canonical_document(document))
    while True:
        record = _record(rng, len(items))
        # Each record adds its own canonical bytes plus a separating comma.
        size += len(canonical_document(record)) + 1
        if size > target_bytes:
            return document
        items.append(record)


def throughput(encode: Callable[[dict[str, Any]], bytes], document: dict[str, Any]) -> float:
    """MB/s of canonical output, best of REPEATS timed runs."""
    size = len(encode(document))
    loops = max(1, 200_000 // size)
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            encode(document)
        best = min(best, (time.perf_counter() - start) / loops)
    return size / best / 1e6


def main() -> None:
    sizes = {"~1 KB": 1_000, "~64 KB": 64_000, "~1 MB": 1_000_000}
    rows = []
    for label, target in sizes.items():
        document = build_document(target)
        ours = canonical_document(document)
        if ours != rfc8785.dumps(document):
            raise SystemExit(f"{label}: canonical_document differs from rfc8785.dumps")
        if len(ours) > MAX_BYTES:
            raise SystemExit(f"{label}: document exceeds MAX_BYTES")
        fast = throughput(canonical_document, document)
        reference = throughput(rfc8785.dumps, document)
        rows.append((label, len(ours), fast, reference))
    print(f"{'document':<9} {'bytes':>9} {'ours MB/s':>10} {'rfc8785 MB/s':>13} {'ratio':>7}")
    for label, size, fast, reference in rows:
        print(f"{label:<9} {size:>9} {fast:>10.1f} {reference:>13.1f} {fast / reference:>6.1f}x")


if __name__ == "__main__":
    main()
