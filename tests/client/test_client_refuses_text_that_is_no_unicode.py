"""An id, a name or a filter holding a lone surrogate (no UTF-8, so no URL can carry it) is
refused by ``Client`` and ``AsyncClient`` before any request, with the class the in-process
API raises for the same call: ``NotFound`` / ``UnknownInstance`` for an id that would name
something, ``InvalidRequest`` for a Space, a type or a filter. It used to escape as a raw
``UnicodeEncodeError`` from ``quote()`` or httpx."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from blackops import (
    Application,
    BlackOpsError,
    ExecutionContext,
    InvalidRequest,
    NotFound,
    UnknownInstance,
)
from blackops.client import AsyncClient, Client

BAD = "a\ud800"


@dataclass(frozen=True, slots=True)
class Case:
    """``client.<method>(*args, **kwargs)``; on ``client.workflow(*workflow)`` if given."""

    method: str
    args: tuple[Any, ...]
    expected: type[BlackOpsError]
    parameter: str  # what the refusal's message names
    kwargs: dict[str, Any] = field(default_factory=dict)
    workflow: tuple[str, str | None] | None = None


CASES: dict[str, Case] = {
    "status(id)": Case("status", (BAD,), NotFound, "operation_id"),
    "events(id)": Case("events", (BAD,), NotFound, "operation_id"),
    "outcome(id)": Case("outcome", (BAD,), NotFound, "operation_id"),
    "redrive(id)": Case("redrive", (BAD,), NotFound, "operation_id"),
    "hold(id)": Case("hold", (BAD,), NotFound, "operation_id", {"reason": "r"}),
    "receipt(id)": Case("receipt", (BAD,), NotFound, "operation_id"),
    "run(tenant=)": Case("run", ("t.echo",), InvalidRequest, "tenant", {"tenant": BAD}),
    "run(type)": Case("run", (BAD,), InvalidRequest, "type"),
    "submit(tenant=)": Case("submit", ("t.echo",), InvalidRequest, "tenant", {"tenant": BAD}),
    "list_operations(tenant=)": Case(
        "list_operations", (), InvalidRequest, "tenant", {"tenant": BAD}
    ),
    "list_operations(type=)": Case("list_operations", (), InvalidRequest, "type", {"type": BAD}),
    "list_operations(status=)": Case(
        "list_operations", (), InvalidRequest, "status", {"status": BAD}
    ),
    "list_operations(since=)": Case("list_operations", (), InvalidRequest, "since", {"since": BAD}),
    "list_operations(cursor=)": Case(
        "list_operations", (), InvalidRequest, "cursor", {"cursor": BAD}
    ),
    "operation_counts(tenant)": Case("operation_counts", (BAD,), InvalidRequest, "tenant"),
    "list_instances(status=)": Case(
        "list_instances", ("W",), InvalidRequest, "status", {"status": BAD}
    ),
    "list_instances(uid)": Case("list_instances", (BAD,), NotFound, "uid"),
    "instance_counts(uid)": Case("instance_counts", (BAD,), NotFound, "uid"),
    "workflow().get(id)": Case("get", (BAD,), UnknownInstance, "instance id", workflow=("W", None)),
    "workflow(space=).get": Case("get", ("i",), InvalidRequest, "space", workflow=("W", BAD)),
    "journal(space=)": Case("journal", (), InvalidRequest, "space", {"space": BAD}),
    "stream(space=)": Case("stream", (), InvalidRequest, "space", {"space": BAD}),
    "export(space=)": Case("export", (), InvalidRequest, "space", {"space": BAD}),
}

#: The same calls in process, where they exist there.
IN_PROCESS: dict[str, Callable[[Application], object]] = {
    "status(id)": lambda app: app.status(BAD),
    "events(id)": lambda app: app.events(BAD),
    "outcome(id)": lambda app: app.outcome(BAD),
    "redrive(id)": lambda app: app.redrive(BAD, actor="me"),
    "hold(id)": lambda app: app.hold(BAD, reason="r", actor="me"),
    "run(tenant=)": lambda app: app.run("t.echo", {}, actor="me", tenant=BAD),
    "run(type)": lambda app: app.run(BAD, {}, actor="me", tenant="default"),
    "submit(tenant=)": lambda app: app.submit("t.echo", {}, actor="me", tenant=BAD),
    "list_operations(tenant=)": lambda app: app.list_operations(tenant=BAD),
    "list_operations(type=)": lambda app: app.list_operations(type=BAD),
    "list_operations(status=)": lambda app: app.list_operations(status=BAD),
    "list_operations(since=)": lambda app: app.list_operations(since=BAD),
    "list_operations(cursor=)": lambda app: app.list_operations(cursor=BAD),
    "operation_counts(tenant)": lambda app: app.operation_counts(BAD),
    "list_instances(status=)": lambda app: app.list_instances("W", status=BAD),
    "list_instances(uid)": lambda app: app.list_instances(BAD),
    "instance_counts(uid)": lambda app: app.instance_counts(BAD),
    "workflow().get(id)": lambda app: asyncio.run(app.workflow("W").get(BAD)),
}


class W:
    async def run(self, event: Any, step: Any) -> None:
        return None


@pytest.fixture(scope="module")
def in_process() -> Iterator[Application]:
    app = Application("memory://")

    @app.operation("t.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return params

    app.register_workflow(W, uid="W")
    yield app
    app.close()


class Recorder:
    """A MockTransport handler that keeps every request (none should come)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "sent"}})


def arguments(case: Case, tmp_path: Path) -> tuple[Any, ...]:
    return (str(tmp_path / "out.jsonl"),) if case.method == "export" else case.args


def call_sync(client: Client, case: Case, tmp_path: Path) -> object:
    target: Any = client
    if case.workflow is not None:
        uid, space = case.workflow
        target = client.workflow(uid, space=space)
    result = getattr(target, case.method)(*arguments(case, tmp_path), **case.kwargs)
    return list(result) if case.method == "stream" else result


async def call_async(client: AsyncClient, case: Case, tmp_path: Path) -> object:
    target: Any = client
    if case.workflow is not None:
        uid, space = case.workflow
        target = client.workflow(uid, space=space)
    result = getattr(target, case.method)(*arguments(case, tmp_path), **case.kwargs)
    if case.method == "stream":
        return [line async for line in result]
    awaited: Awaitable[object] = result
    return await awaited


def assert_refused(error: BaseException, case: Case) -> None:
    assert type(error) is case.expected, f"{type(error).__name__}: {error}"
    assert isinstance(error, BlackOpsError)
    assert case.parameter in error.message
    assert "lone surrogate" in error.message
    error.message.encode("utf-8")  # the bad value is not in it: it always prints


@pytest.mark.parametrize("name", list(CASES))
def test_the_sync_client_refuses_before_sending(name: str, tmp_path: Path) -> None:
    case, recorder = CASES[name], Recorder()
    transport = httpx.MockTransport(recorder)
    with (
        Client("http://x", "t", transport=transport) as client,
        pytest.raises(BlackOpsError) as refused,
    ):
        call_sync(client, case, tmp_path)
    assert_refused(refused.value, case)
    assert recorder.requests == []
    assert list(tmp_path.iterdir()) == []  # export: no file opened either


@pytest.mark.parametrize("name", list(CASES))
def test_the_async_client_refuses_alike(name: str, tmp_path: Path) -> None:
    case, recorder = CASES[name], Recorder()

    async def scenario() -> BaseException:
        transport = httpx.MockTransport(recorder)
        async with AsyncClient("http://x", "t", transport=transport) as client:
            with pytest.raises(BlackOpsError) as refused:
                await call_async(client, case, tmp_path)
        return refused.value

    assert_refused(asyncio.run(scenario()), case)
    assert recorder.requests == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", list(IN_PROCESS))
def test_the_class_is_the_in_process_apis(name: str, in_process: Application) -> None:
    with pytest.raises(BlackOpsError) as here:
        IN_PROCESS[name](in_process)
    assert type(here.value) is CASES[name].expected


def test_unicode_text_is_still_sent_percent_encoded() -> None:
    recorder = Recorder()
    with Client("http://x", "t", transport=httpx.MockTransport(recorder)) as client:
        with pytest.raises(NotFound, match="sent"):
            client.status("é/1")
        with pytest.raises(NotFound, match="sent"):
            client.list_operations(type="é.x", tenant="a")
    paths = [request.url.raw_path for request in recorder.requests]
    assert paths == [b"/v1/operations/%C3%A9%2F1", b"/v1/operations?type=%C3%A9.x&tenant=a"]


@pytest.mark.parametrize("value", [["a", BAD], ["a", "b"], ["a"], [], ("a",)], ids=range(5))
def test_a_list_as_a_filter_is_refused_before_sending(value: Any, in_process: Application) -> None:
    """A filter takes one value (decisions H15), as in process: httpx sent one parameter per
    item, so ``["a"]`` was answered as ``"a"`` and ``[]`` unfiltered (found by a defect hunt,
    stop 35)."""
    with pytest.raises(InvalidRequest):
        in_process.list_operations(tenant=value)
    recorder = Recorder()
    transport = httpx.MockTransport(recorder)
    with (
        Client("http://x", "t", transport=transport) as client,
        pytest.raises(InvalidRequest, match="tenant"),
    ):
        client.list_operations(tenant=value)
    assert recorder.requests == []


def test_an_id_that_is_no_text_is_refused_as_in_process() -> None:
    """``workflow(...).get(5)`` raised AttributeError from the client (found by a defect
    hunt, stop 35); in process it is UnknownInstance."""
    recorder = Recorder()
    with Client("http://x", "t", transport=httpx.MockTransport(recorder)) as client:
        with pytest.raises(UnknownInstance):
            client.workflow("Flow", space="acme").get(5).status()  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            client.status(7)  # type: ignore[arg-type]
    assert recorder.requests == []
