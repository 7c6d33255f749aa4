"""Fresh stores for benchmark scenarios (shared by bench/operations.py and bench/workflows.py):
a new SQLite file, or a new PostgreSQL schema dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POSTGRES = os.environ.get(
    "BLACKOPS_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


class Stores:
    """Fresh stores for scenarios; ``prefix`` names the files and schemas."""

    def __init__(self, tmp: Path, prefix: str) -> None:
        self.tmp = tmp
        self.prefix = prefix

    @contextmanager
    def fresh(self, kind: str) -> Iterator[str]:
        tag = uuid.uuid4().hex[:8]
        if kind == "sqlite":
            yield f"sqlite:///{self.tmp}/{self.prefix}-{tag}.sqlite3"
            return
        schema = f"bench_{self.prefix}_{tag}"
        try:
            yield f"{POSTGRES}?schema={schema}"
        finally:
            drop_schema(schema)


def drop_schema(schema: str) -> None:
    # Imported here: bench/workflows.py's worker child imports this module, and a worker on
    # SQLite must not carry psycopg (~7 MB in it and in each executor forked from it).
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
