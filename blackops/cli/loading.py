"""Import the user's ``module:attr`` Application (the current directory is importable)."""

from __future__ import annotations

import importlib
import os
import sys

from blackops.application import Application
from domain.errors import InvalidRequest


def load_application(target: str) -> Application:
    value = load_object(target, "--app")
    if not isinstance(value, Application):
        raise InvalidRequest(f"{target} is not a blackops.Application")
    return value


def load_object(target: str, flag: str) -> object:
    """``package.module:attribute`` (dotted attributes allowed), imported."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise InvalidRequest(f"{flag} must look like 'package.module:attribute'")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidRequest(f"cannot import {module_name!r}: {error}") from None
    value: object = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise InvalidRequest(f"{module_name!r} has no attribute {attr!r}") from None
    return value
