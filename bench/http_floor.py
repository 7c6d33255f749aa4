"""The HTTP floor for bench/http_bench.py: a minimal FastAPI app that, per request, inserts one
row in one transaction and commits it (PostgreSQL through a psycopg pool, or SQLite in WAL mode
with one connection per thread), then answers 202 with a small JSON body.

It is served by uvicorn with the settings ``blackops serve`` uses (one process, h11, the default
thread pool for sync work). Configure with ``FLOOR_STORE`` (a PostgreSQL URL with ``?schema=``,
or ``sqlite:///path``). Run: ``python bench/http_floor.py PORT``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

STORE = os.environ.get("FLOOR_STORE", "sqlite:///floor.sqlite3")
app = FastAPI()


class Postgres:
    def __init__(self, url: str) -> None:
        import psycopg_pool

        parts = urlsplit(url)
        self.schema = parse_qs(parts.query).get("schema", ["public"])[0]
        dsn = urlunsplit(parts._replace(query=""))
        self.pool = psycopg_pool.ConnectionPool(dsn, min_size=4, max_size=40, open=True)
        with self.pool.connection() as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{self.schema}".floor '
                "(id bigserial PRIMARY KEY, key text NOT NULL, body bytea NOT NULL)"
            )
        self.insert = f'INSERT INTO "{self.schema}".floor (key, body) VALUES (%s, %s)'

    def write(self, key: str, body: bytes) -> None:
        with self.pool.connection() as conn:  # commits when the block ends
            conn.execute(self.insert, (key, body), prepare=True)


class SQLite:
    def __init__(self, path: str) -> None:
        self.path = path
        self.local = threading.local()
        self.connection().execute(
            "CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, key TEXT, body BLOB)"
        )

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self.local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            self.local.conn = conn
        return conn

    def write(self, key: str, body: bytes) -> None:
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO floor (key, body) VALUES (?, ?)", (key, body))
        conn.execute("COMMIT")


DB: Any = SQLite(STORE.removeprefix("sqlite:///")) if STORE.startswith("sqlite") else None
if DB is None:
    DB = Postgres(STORE)


@app.post("/v1/spaces/{space}/operations/{type}")
async def submit(space: str, type: str, request: Request) -> Response:
    raw = await request.body()

    def write() -> str:
        json.loads(raw or b"{}")
        key = str(uuid.uuid4())
        DB.write(key, raw)
        return key

    key = await run_in_threadpool(write)
    body = json.dumps({"operationId": key, "status": "Pending", "location": f"/x/{key}"})
    return Response(body, status_code=202, media_type="application/json")


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="info", access_log=False)
