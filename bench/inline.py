"""Inline operation throughput and latency on SQLite and PostgreSQL (printed, not asserted).

Each run commits twice (received + started, then finalizing + completed).
Usage: .venv/bin/python bench/inline.py [N]   (BLACKOPS_BENCH_POSTGRES_URL to override)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script

import psycopg

from blackops import Application, ExecutionContext

POSTGRES = os.environ.get(
    "BLACKOPS_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def build(store: str) -> Application:
    app = Application(store)

    @app.operation("bench.noop")
    def noop(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"n": params["n"]}

    return app


def measure(store: str, count: int, threads: int) -> tuple[float, float, float]:
    app = build(store)
    app.run("bench.noop", {"n": -1}, actor="bench", tenant="bench")  # open and warm up
    latencies: list[float] = []

    def one(n: int) -> None:
        start = time.perf_counter()
        app.run("bench.noop", {"n": n}, actor="bench", tenant="bench")
        latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, range(count)))
    elapsed = time.perf_counter() - start
    app.close()
    cuts = statistics.quantiles(latencies, n=100)
    return count / elapsed, cuts[49] * 1000, cuts[98] * 1000


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "sqlite": f"sqlite:///{tmp}/bench.sqlite3",
            "postgresql": f"{POSTGRES}?schema={schema}",
        }
        print(f"Inline no-op operations, {count} per row (2 commits each)")
        print(f"{'store':<11} {'threads':>7} {'ops/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
        try:
            for name, url in stores.items():
                for threads in (1, 4):
                    rate, p50, p99 = measure(url, count, threads)
                    print(f"{name:<11} {threads:>7} {rate:>8.0f} {p50:>8.2f} {p99:>8.2f}")
        finally:
            with psycopg.connect(POSTGRES, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
