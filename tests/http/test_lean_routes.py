"""A lean route answers exactly as the FastAPI route that documents it (decisions F130).

The same application is served twice: as ``create_http_app`` builds it (the lean route in
front) and with the lean routes removed, so FastAPI's own parameter and dependency handling
answers. Generated requests (tokens of every kind, Prefer, Idempotency-Key and traceparent
headers, once or twice, well-formed or not, Spaces and types known or not, bodies valid or
hostile) must get the same status, body and headers from both, and the lean route must be
the one answering.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import spaces
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from blackops import Application, ExecutionContext, OperationRejected
from blackops.http.app import create_http_app
from blackops.http.lean import LeanRoute
from domain.access import Role
from domain.context import Actor

SYSTEM = "lean-system-token"
SPACE = "acme"
#: Minted ids differ between two runs of one request: compared as shapes.
_MINTED = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Order(BaseModel):
    qty: int


def lean_routes(api: FastAPI) -> list[LeanRoute]:
    """The lean routes of ``api`` (removed to reach the documented routes)."""
    return [route for route in api.router.routes if isinstance(route, LeanRoute)]


@pytest.fixture
def served(app: Application) -> Iterator[tuple[TestClient, TestClient, dict[str, str]]]:
    app.operation("t.echo")(lambda ctx, params: params)

    @app.operation("t.refuse")
    def refuse(ctx: ExecutionContext, params: dict[str, Any]) -> None:
        raise OperationRejected("business_rule", "never", "this type always refuses")

    @app.operation("t.order")
    def order(ctx: ExecutionContext, params: Order) -> dict[str, int]:
        return {"qty": params.qty}

    spaces(app, SPACE, "other")
    ctx = app.access_context(Actor("test", "cli"), SPACE)
    tokens = {"system": SYSTEM}
    for principal, role in (("op", Role.OPERATOR), ("reader", Role.READER)):
        app.access.create_principal(principal, ctx)
        app.access.grant(principal, SPACE, role, ctx)
        tokens[principal] = app.access.issue_token(principal, ctx)[0]
    lean = create_http_app(app, SYSTEM)
    assert [route.path for route in lean_routes(lean)] == ["/v1/spaces/{space}/operations/{type}"]
    documented = create_http_app(app, SYSTEM)
    documented.router.routes[:] = [
        r for r in documented.router.routes if r not in lean_routes(documented)
    ]
    assert not lean_routes(documented)
    with TestClient(lean) as fast, TestClient(documented) as exact:
        yield fast, exact, tokens


def _authorization(tokens: dict[str, str]) -> st.SearchStrategy[bytes | None]:
    token = st.sampled_from(sorted(tokens.values()))
    return st.one_of(
        st.none(),
        token.map(lambda t: b"Bearer " + t.encode()),
        token.map(lambda t: b"bearer " + t.encode()),
        token.map(lambda t: b"Bearer  " + t.encode() + b" "),
        token.map(lambda t: b"Basic " + t.encode()),
        st.sampled_from([b"", b"Bearer", b"Bearer ", b"Bearer bo_" + b"A" * 43, b"Bearer x"]),
    )


_VISIBLE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=8)
_HEADER_VALUE = st.one_of(
    _VISIBLE.map(str.encode),
    st.sampled_from([b"", b"a b", b"caf\xe9", b"k" * 255, b"k" * 256, b" padded "]),
)
_PREFER = st.sampled_from(
    [b"respond-async", b"RESPOND-ASYNC; wait=5", b"handling=lenient, respond-async", b"wait=1"]
)
_TRACEPARENT = st.sampled_from(
    [
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
        b"not a traceparent",
    ]
)
_BODY = st.sampled_from(
    [
        b"",
        b"{}",
        b'{"qty": 3}',
        b'{"qty": "many"}',
        b'{"a": 1, "a": 2}',
        b"[1]",
        b"{",
        b" ",
        b'{"n": 9007199254740993}',
        b'{"f": 1.5e400}',
        b"[" * 70 + b"]" * 70,
        b'{"s": "\\ud800"}',
        b"\xff",
    ]
)


def _headers(tokens: dict[str, str]) -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    def build(
        authorization: bytes | None,
        prefer: list[bytes],
        keys: list[bytes],
        traceparent: list[bytes],
    ) -> list[tuple[bytes, bytes]]:
        headers = [] if authorization is None else [(b"authorization", authorization)]
        headers += [(b"prefer", p) for p in prefer]
        headers += [(b"idempotency-key", k) for k in keys]
        headers += [(b"traceparent", t) for t in traceparent]
        return headers

    return st.builds(
        build,
        _authorization(tokens),
        st.lists(_PREFER, max_size=2),
        st.lists(_HEADER_VALUE, max_size=2),
        st.lists(_TRACEPARENT, max_size=1),
    )


def _answer(client: TestClient, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
    response = client.post(path, content=body, headers=headers)
    shown = {
        name: _MINTED.sub("ID", response.headers.get(name, ""))
        for name in ("content-type", "location", "preference-applied", "www-authenticate")
    }
    return response.status_code, _MINTED.sub("ID", response.text), shown


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_the_lean_run_route_answers_as_the_documented_one(
    served: tuple[TestClient, TestClient, dict[str, str]], data: st.DataObject
) -> None:
    fast, exact, tokens = served
    space = data.draw(st.sampled_from([SPACE, "other", "nosuch", "bad%20space"]))
    type_ = data.draw(st.sampled_from(["t.echo", "t.refuse", "t.order", "t.nosuch", "9bad"]))
    headers = data.draw(_headers(tokens))
    body = data.draw(_BODY)
    path = f"/v1/spaces/{space}/operations/{type_}"
    assert _answer(fast, path, headers, body) == _answer(exact, path, headers, body)


def test_the_lean_route_is_the_one_that_answers(
    served: tuple[TestClient, TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, _, _ = served
    seen: list[str] = []
    original = LeanRoute.handle

    async def handle(self: LeanRoute, scope: Any, receive: Any, send: Any) -> None:
        seen.append(self.path)
        await original(self, scope, receive, send)

    monkeypatch.setattr(LeanRoute, "handle", handle)
    answer = fast.post(
        f"/v1/spaces/{SPACE}/operations/t.echo",
        content=b'{"x": 1}',
        headers={"Authorization": f"Bearer {SYSTEM}", "Prefer": "respond-async"},
    )
    assert answer.status_code == 202 and seen == ["/v1/spaces/{space}/operations/{type}"]


def test_other_methods_on_the_path_still_answer_405_with_allow(
    served: tuple[TestClient, TestClient, dict[str, str]],
) -> None:
    fast, exact, _ = served
    path = f"/v1/spaces/{SPACE}/operations/t.echo"
    for client in (fast, exact):
        answer = client.get(path, headers={"Authorization": f"Bearer {SYSTEM}"})
        assert answer.status_code == 405 and answer.headers["allow"] == "POST"
        assert answer.json()["error"]["code"] == "invalid_request"
