"""The operation types of one application and their handler specs (light to import: the
CLI's read commands need the registry's rules, not pydantic)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain.errors import NotFound
from domain.operation_types import check_operation_type

if TYPE_CHECKING:
    from blackops.operations.handlers import HandlerSpec


#: Operation types under this prefix are the control plane's own (built-in handlers).
BUILTIN_PREFIX = "blackops."


class HandlerRegistry:
    """The operation types of one application: its own and the built-in ``blackops.*``."""

    def __init__(self) -> None:
        #: type -> spec; public so a test may swap one spec (``monkeypatch.setitem``).
        self.specs: dict[str, HandlerSpec] = {}

    def register(self, spec: HandlerSpec, *, builtin: bool = False) -> None:
        if spec.operation_type.startswith(BUILTIN_PREFIX) != builtin:
            raise ValueError(
                f"operation types starting with {BUILTIN_PREFIX!r} are reserved"
                if not builtin
                else f"built-in operation types start with {BUILTIN_PREFIX!r}"
            )
        if spec.operation_type in self.specs:
            raise ValueError(f"operation type {spec.operation_type!r} is already registered")
        self.specs[spec.operation_type] = spec

    def get(self, type_name: str) -> HandlerSpec:
        try:
            return self.specs[type_name]
        except KeyError:
            raise NotFound(f"operation type {type_name!r} is not registered") from None

    def find(self, type_name: str) -> HandlerSpec | None:
        return self.specs.get(type_name)

    def public(self, type_name: str) -> HandlerSpec:
        """A type callers may run or submit: the built-in types are reachable only through
        the control plane's checks."""
        check_operation_type(type_name)
        if type_name.startswith(BUILTIN_PREFIX):
            raise NotFound(f"operation type {type_name!r} is not registered")
        return self.get(type_name)

    @property
    def public_types(self) -> list[str]:
        return sorted(t for t in self.specs if not t.startswith(BUILTIN_PREFIX))

    def builtin(self) -> dict[str, HandlerSpec]:
        return {t: s for t, s in self.specs.items() if t.startswith(BUILTIN_PREFIX)}

    def all(self) -> dict[str, HandlerSpec]:
        return dict(self.specs)
