"""Mounting the console in the API's FastAPI app (``create_http_app`` calls ``install``)."""

from __future__ import annotations

import secrets

from fastapi import FastAPI

from blackops.console import actions, pages


def install(api: FastAPI) -> None:
    """The ``/ui/`` routes (left out of the OpenAPI document: they are pages, not API),
    and the key this process signs the sign-in form's CSRF tokens with (a session's are
    derived from the session itself: decisions U6)."""
    api.state.console_secret = secrets.token_bytes(32)
    api.include_router(pages.router)
    api.include_router(actions.router)
