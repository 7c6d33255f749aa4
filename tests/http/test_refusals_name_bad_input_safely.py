"""A refusal that quotes the caller's input always renders as the refusal raised (DW-SPEC-3,
python-contract §3), on SQLite and PostgreSQL.

A lone surrogate (valid JSON text: ``"\\ud800"``) in an unknown key of a control-plane body
made the server fail to render its own ``invalid_request``: the answer turned into
``invalid_params ... at $.error.message``. Unknown keys were also echoed without bound (a
body of 100,000 of them gave a 789 KB error). A token label with a lone surrogate passed the
label check and failed only when journaled (``invalid_params ... at $.data.label``).
Every refusal here is ``invalid_request`` and appends nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from blackops import Application
from blackops.http.app import create_http_app
from blackops.http.responses import error_response
from domain.access import check_label
from domain.errors import InvalidRequest

TOKEN = "refusal-test-token"
S = "/v1/spaces/acme"


@pytest.fixture
def client(app: Application) -> Iterator[TestClient]:
    with TestClient(create_http_app(app, TOKEN)) as test_client:
        assert send(test_client, "POST", "/v1/spaces", b'{"name": "acme"}').status_code == 201
        yield test_client


def send(client: TestClient, method: str, path: str, raw: bytes) -> Response:
    headers = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    response: Response = client.request(method, path, content=raw, headers=headers)
    return response


def invalid_request(response: Response) -> str:
    """Exactly ``{"error": {"code": "invalid_request", "message"}}``; the message."""
    assert response.status_code == 400, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == "invalid_request", body
    message: str = body["error"]["message"]
    return message


def make_worker(client: TestClient) -> str:
    response = send(client, "POST", f"{S}/workers", b'{"name": "w1"}')
    assert response.status_code == 201, response.text
    return str(response.json()["uid"])


def test_a_lone_surrogate_in_an_unknown_key_is_named_escaped(
    client: TestClient, app: Application
) -> None:
    worker = make_worker(client)
    before = app.store.last_position()
    cases = [
        ("POST", f"{S}/workflows", b'{"name": "n", "spec": {}, "\\ud800": 1}'),
        (
            "POST",
            f"{S}/workflows",
            b'{"name": "n", "spec": {"worker": {"resourceUid": "%s", "\\ud800": 1}, '
            b'"className": "A"}}' % worker.encode(),
        ),
        ("POST", f"{S}/workers/{worker}/versions", b'{"\\ud800": 1}'),
        (
            "PUT",
            f"{S}/workers/{worker}/deployment",
            b'{"allocation": [{"version": "sha256:00", "weight": 100, "\\ud800": 1}]}',
        ),
    ]
    for method, path, raw in cases:
        message = invalid_request(send(client, method, path, raw))
        assert "'\\ud800'" in message, (path, message)  # spelled out, named
    assert app.store.last_position() == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", f"{S}/workflows"),
        ("POST", f"{S}/workers/{{worker}}/versions"),
        ("PUT", f"{S}/workers/{{worker}}/deployment"),
    ],
)
def test_unknown_keys_are_named_at_most_five(
    client: TestClient, app: Application, method: str, path: str
) -> None:
    worker = make_worker(client)
    extra = {f"k{i:06d}": i for i in range(100_000)}
    body: dict[str, Any]
    if path.endswith("/deployment"):
        body = {"allocation": [{"version": "sha256:00", "weight": 100, **extra}]}
    elif path.endswith("/versions"):
        body = extra
    else:
        body = {"name": "n", "spec": {}, **extra}
    before = app.store.last_position()
    response = send(client, method, path.format(worker=worker), json.dumps(body).encode())
    message = invalid_request(response)
    assert len(response.content) < 1_000, len(response.content)
    named = [key for key in extra if key in message]
    assert named == ["k000000", "k000001", "k000002", "k000003", "k000004"], message
    assert "99995 more" in message
    assert app.store.last_position() == before


def test_a_token_label_with_a_lone_surrogate_is_refused_like_any_bad_label(
    client: TestClient, app: Application
) -> None:
    assert send(client, "PUT", f"{S}/principals/ana", b'{"role": "reader"}').status_code == 200
    control = invalid_request(
        send(client, "POST", f"{S}/principals/ana/tokens", b'{"label": "a\\u0001"}')
    )
    before = app.store.last_position()
    for label in (b'"\\ud800"', b'"ok \\udfff"', b'"\\udc00\\ud800"'):
        raw = b'{"label": %s}' % label
        assert invalid_request(send(client, "POST", f"{S}/principals/ana/tokens", raw)) == control
    assert app.store.last_position() == before
    # A well-formed pair is one character, not a lone surrogate: still a label.
    ok = send(client, "POST", f"{S}/principals/ana/tokens", b'{"label": "\\ud83d\\ude00"}')
    assert ok.status_code == 201 and ok.json()["label"] == "\U0001f600", ok.text


def test_check_label_refuses_lone_surrogates() -> None:
    for label in ("\ud800", "a\udfff", "x" * 10 + "\udc00"):
        with pytest.raises(InvalidRequest):
            check_label(label)
    assert check_label("laptop \U0001f600") == "laptop \U0001f600"


def test_an_error_with_a_lone_surrogate_in_its_message_still_renders_as_itself() -> None:
    """The safeguard under every refusal: whatever a message quotes, the answer is the
    error raised, never a different one about rendering it."""
    response = error_response(InvalidRequest("no such thing 'a\ud800b'"))
    assert response.status_code == 400
    body = json.loads(bytes(response.body))
    assert body == {"error": {"code": "invalid_request", "message": "no such thing 'a\\ud800b'"}}
