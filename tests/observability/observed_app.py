"""The app the worker scrape test runs in a ``blackops worker`` process: one type that
fails its first attempt (retryable) and then completes, one that always fails."""

from __future__ import annotations

from typing import Any

from blackops import Application, ExecutionContext, Retryable, Supervision

app = Application()


@app.operation("obs.flaky", supervision=Supervision(max_attempts=3, initial_delay_seconds=0.01))
def flaky(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
    if ctx.attempt == 1:
        raise Retryable("the first attempt fails")
    return {"done": True}


@app.operation("obs.broken")
def broken(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError(f"broken: {params.get('secret')}")  # a message with a secret in it
