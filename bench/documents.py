"""Canonical documents: `canonical_document` beside `rfc8785.dumps` and orjson, and JSON text
to validated canonical bytes beside orjson's own parse + dump (printed, never asserted).

For each bench document (~1 KB, ~64 KB, ~1 MB of float-heavy operation records):

  canonical   `canonical_document(doc)`, `rfc8785.dumps(doc)` and
              `orjson.dumps(doc, option=OPT_SORT_KEYS)` (no validation, not RFC 8785: the floor)
  text        `parse_canonical_document(text)` (one pass; a library without it: the two calls)
              for the document as a client sends it (orjson's compact text, keys unsorted),
              beside `orjson.dumps(orjson.loads(text), option=OPT_SORT_KEYS)` (the floor)
  two calls   `canonical_document(parse_document(text))`, what callers not yet using the one
              pass pay

MB/s of canonical output, the median of REPEATS timed runs, timed in this process's CPU time
(`time.process_time`): the machine is shared, and time other processes take does not count.
Output bytes are checked identical to `rfc8785.dumps` first.
Usage: .venv/bin/python bench/documents.py [--json] [--ref REV] [--rounds N]
(``--ref main`` runs the same measurements with main's library in a child process too;
``--rounds N`` alternates before and after N times and prints each cell's median: the
machine's load then weighs on both alike).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable as a plain script
import orjson
import rfc8785

# first: with --ref, the child's library comes from REV
from bench_ref import median_figures, run_at

from blackops import jsonbody
from blackops.jsonbody import parse_document
from domain.documents import MAX_BYTES, canonical_document

REPEATS = 7
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
NON_ASCII = ["café", "naïve", "Zürich", "東京", "Москва", "emoji 😀", "ﬁn"]
SIZES = {"~1 KB": 1_000, "~64 KB": 64_000, "~1 MB": 1_000_000}


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
    size = len(rfc8785.dumps(document))
    while True:
        record = _record(rng, len(items))
        # Each record adds its own canonical bytes plus a separating comma.
        size += len(rfc8785.dumps(record)) + 1
        if size > target_bytes:
            return document
        items.append(record)


def throughput(encode: Callable[[], bytes]) -> float:
    """MB/s of ``encode()``'s output, the median of REPEATS timed runs."""
    size = len(encode())
    loops = max(1, 200_000 // size)
    runs = []
    for _ in range(REPEATS):
        start = time.process_time()
        for _ in range(loops):
            encode()
        runs.append((time.process_time() - start) / loops)
    return size / statistics.median(runs) / 1e6


def measure() -> list[dict[str, Any]]:
    rows = []
    for label, target in SIZES.items():
        document = build_document(target)
        expected = rfc8785.dumps(document)
        text = orjson.dumps(document)  # what a client sends: compact, keys in its own order
        if canonical_document(document) != expected:
            raise SystemExit(f"{label}: canonical_document differs from rfc8785.dumps")
        if _text_path()(text) != expected or _two_calls(text) != expected:
            raise SystemExit(f"{label}: the text path differs from rfc8785.dumps")
        if len(expected) > MAX_BYTES:
            raise SystemExit(f"{label}: document exceeds MAX_BYTES")
        rows.append({"document": label, "bytes": len(expected), **_rates(document, text)})
    return rows


def _two_calls(text: bytes) -> bytes:
    return canonical_document(parse_document(text))


def _text_path() -> Callable[[bytes], bytes]:
    """The library's way from text to canonical bytes (a revision before it: the two calls)."""
    one_pass = getattr(jsonbody, "parse_canonical_document", None)
    return _two_calls if one_pass is None else lambda text: one_pass(text)[1]


def _rates(document: dict[str, Any], text: bytes) -> dict[str, float]:
    sort = orjson.OPT_SORT_KEYS
    text_path = _text_path()
    return {
        "ours": throughput(lambda: canonical_document(document)),
        "rfc8785": throughput(lambda: rfc8785.dumps(document)),
        "orjson": throughput(lambda: orjson.dumps(document, option=sort)),
        "text_ours": throughput(lambda: text_path(text)),
        "text_two": throughput(lambda: _two_calls(text)),
        "text_floor": throughput(lambda: orjson.dumps(orjson.loads(text), option=sort)),
    }


def show(rows: list[dict[str, Any]], title: str) -> None:
    print(title)
    print(
        f"{'document':<9} {'bytes':>9} {'ours':>7} {'rfc8785':>8} {'orjson':>7} "
        f"{'÷rfc':>6} {'÷orjson':>8} | {'text':>7} {'floor':>7} {'÷floor':>7} "
        f"{'2 calls':>8}   (MB/s)"
    )
    for r in rows:
        print(
            f"{r['document']:<9} {r['bytes']:>9} {r['ours']:>7.1f} {r['rfc8785']:>8.1f} "
            f"{r['orjson']:>7.1f} {r['ours'] / r['rfc8785']:>5.1f}x "
            f"{r['ours'] / r['orjson']:>7.2f}x | {r['text_ours']:>7.1f} {r['text_floor']:>7.1f} "
            f"{r['text_ours'] / r['text_floor']:>6.2f}x {r.get('text_two', 0.0):>8.1f}"
        )


def median_rows(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each cell's median over several runs of `measure` (same documents, same order)."""
    return [median_figures(list(cells)) for cells in zip(*runs, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--ref", help="also measure this git revision's library (before)")
    parser.add_argument("--rounds", type=int, default=1, help="alternate before/after N times")
    args = parser.parse_args()
    befores: list[list[dict[str, Any]]] = []
    afters: list[list[dict[str, Any]]] = []
    for _ in range(args.rounds):
        if args.ref:
            befores.append(run_at(args.ref, Path(__file__), [])["rows"])
        afters.append(measure())
    before = {"rows": median_rows(befores)} if befores else None
    rows = median_rows(afters)
    if args.json:
        print(json.dumps({"rows": rows, "before": before and before["rows"], "ref": args.ref}))
        return
    if before is not None:
        show(before["rows"], f"before ({args.ref}):")
        print()
    show(rows, "this tree:" if before is not None else "")


if __name__ == "__main__":
    main()
