"""What ``blackops worker`` subprocesses run in tests/faults/test_workflow_delete_races.py.

The workflows those tests run are Workflow *resources*: their code is a Version in
the journal, found through the catalog, so this application registers nothing of
them. It registers one operation type only because a worker must run something of
its own; the built-in control-plane operations (``blackops.*``, the DELETE among
them) run in every worker.
"""

from __future__ import annotations

from typing import Any

from blackops import Application


def _noop(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
    return {}


def build_app(store: str | None = None) -> Application:
    application = Application(store)
    application.operation("rf.noop")(_noop)
    return application


app = build_app()  # ``blackops worker --app resource_fault_apps:app --store URL``
