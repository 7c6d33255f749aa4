"""The caller binding of python-contract §1: ``WorkflowBinding`` and ``WorkflowInstance``.

All four instance calls and both binding calls are coroutines, as in the spec's
binding; the journal work runs in a thread so an event loop is never blocked.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from blackops.workflows.code import WorkflowResource
from domain.context import Actor

if TYPE_CHECKING:
    from blackops.workflows.instances import InstanceService


class InstancesHost(Protocol):
    """What a binding reaches: the callers' side of instances, nothing else (a binding in
    workflow code must not reach the management plane)."""

    @property
    def instances(self) -> InstanceService: ...


#: Who a binding acts as unless told otherwise (recorded in every event's context).
LOCAL_ACTOR = Actor("local", "service")


class WorkflowBinding:
    """``env.NAME`` / ``app.register_workflow(cls)``: create and get instances."""

    def __init__(
        self, host: InstancesHost, resource: WorkflowResource, actor: Actor = LOCAL_ACTOR
    ) -> None:
        self._host = host
        self.resource = resource
        self._actor = actor

    @property
    def uid(self) -> str:
        return self.resource.uid

    def as_actor(self, actor: Actor | str | dict[str, Any]) -> WorkflowBinding:
        """The same binding, recording ``actor`` in the events it causes."""
        return WorkflowBinding(self._host, self.resource, Actor.of(actor))

    async def create(self, *, id: str | None = None, params: Any = None) -> WorkflowInstance:
        instance_id = await asyncio.to_thread(
            self._host.instances.create, self.resource, id, params, self._actor
        )
        return WorkflowInstance(self, instance_id)

    async def get(self, id: str) -> WorkflowInstance:
        await asyncio.to_thread(self._host.instances.load, self.resource, id)
        return WorkflowInstance(self, id)

    def __repr__(self) -> str:
        return f"WorkflowBinding({self.resource.uid!r})"


class WorkflowInstance:
    __slots__ = ("_binding", "_id")

    def __init__(self, binding: WorkflowBinding, instance_id: str) -> None:
        self._binding = binding
        self._id = instance_id

    @property
    def id(self) -> str:
        return self._id

    async def status(self) -> dict[str, Any]:
        b = self._binding
        return await asyncio.to_thread(b._host.instances.status, b.resource, self._id)

    async def send_event(self, *, type: str, payload: Any = None) -> None:
        b = self._binding
        await asyncio.to_thread(
            b._host.instances.send_event, b.resource, self._id, type, payload, b._actor
        )

    async def terminate(self) -> None:
        b = self._binding
        await asyncio.to_thread(b._host.instances.terminate, b.resource, self._id, b._actor)

    def __repr__(self) -> str:
        return f"WorkflowInstance({self._binding.resource.uid!r}, {self._id!r})"
