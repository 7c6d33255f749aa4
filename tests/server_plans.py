"""The server's own plans, as it runs them: ``auto_explain`` loaded for one session."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import IN_CI  # type: ignore[import-not-found, unused-ignore]


def report_plans(conn: psycopg.Connection[Any], *, analyze: bool = False) -> None:
    """Every statement ``conn`` runs from now on, nested ones too, reports its plan as a
    notice (``analyze``: with what each node produced). Loading ``auto_explain`` needs a
    superuser: without one the test is skipped, saying so (under CI it fails)."""
    try:
        conn.execute("LOAD 'auto_explain'")  # for this session only
    except psycopg.errors.InsufficientPrivilege:
        conn.close()
        why = "loading auto_explain needs a superuser (the local test server's is one)"
        if IN_CI:  # required under CI: never skipped there
            pytest.fail(why)
        pytest.skip(why)
    settings = ["log_min_duration = 0", "log_nested_statements = on", "log_level = notice"]
    for setting in settings + (["log_analyze = on"] if analyze else []):
        conn.execute(f"SET auto_explain.{setting}")
