"""How a replay check's child process loads a Version's (or a folder's) class: plain,
picklable data and a loader that needs only the bundle loader (``bundles.py``), so the
child starts without the control plane."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blackops.control.bundles import load_version as load_bundle
from blackops.workflows.code import Env, WorkflowCode


class _NoBinding:
    """A workflowBinding during a replay check: reaching it outside a step would act on
    real instances, so it refuses (inside a step it is never reached: no effect runs)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attribute: str) -> Any:
        raise RuntimeError(
            f"binding {self._name!r} is not available in a replay check (used outside a step)"
        )


@dataclass(frozen=True, slots=True)
class BundleSource:
    """A Version's (or folder's) class as another process loads it: in isolation, with
    its declared env and its bindings refused (picklable: plain data)."""

    key: str
    modules: dict[str, str]
    main: str
    class_name: str
    env: dict[str, Any]
    bindings: tuple[str, ...]

    def load(self, workflow: str) -> WorkflowCode:
        bundle = load_bundle(self.key, self.modules, self.main)
        values = {**self.env, **{name: _NoBinding(name) for name in self.bindings}}
        return WorkflowCode(workflow, self.key, bundle.export(self.class_name), Env(values))
