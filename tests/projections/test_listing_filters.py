"""The listing and count filters are checked by the rules their values were written with,
on every store and through every door (found by a defect hunt): a tenant that is not a
Space name, a type that is not an operation type's name, a status that is not a string
were answered as an empty list on SQLite, as "the journal store failed"
(``backend_unavailable``) on PostgreSQL (NUL), as a raw ``UnicodeEncodeError`` (a lone
surrogate, what a CLI argument that is not UTF-8 becomes) or a ``TypeError`` (a list as an
instance status), while ``GET /v1/operations`` refused them with 400 ``invalid_request``.
Now the Python API, HTTP, the console and the CLI all refuse them with ``invalid_request``."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blackops import Application
from blackops.cli.main import main
from domain.errors import InvalidRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "console"))
from console_forms import csrf_of  # type: ignore[import-not-found, unused-ignore]

SYSTEM = "listing-filters-system-token"

BAD_TENANTS: list[object] = ["a\x00b", "\udcff", "a\udcff", "a b", "", "-a", "x" * 64, 5]
BAD_TYPES: list[object] = ["a\x00b", "\udcff", "A.B", "a b", "", "a..b", "a." * 70 + "a", 5]
BAD_STATUSES: list[object] = [["completed"], {"completed": 1}, 5, "a\x00b", "\udcff"]


class Quick:
    async def run(self, event: Any, step: Any) -> dict[str, Any]:
        return {}


@pytest.fixture
def listed(store_url: str) -> Iterator[tuple[Application, str]]:
    """An application on each store (and the store's URL) with one operation of Space acme
    and a workflow."""
    app = Application(store_url)
    app.operation("t.ok")(lambda ctx, params: None)
    app.register_workflow(Quick)
    app.run("t.ok", {}, actor="a", tenant="acme")
    try:
        yield app, store_url
    finally:
        app.close()


def refused(call: Callable[..., object], *args: object, **filters: object) -> str:
    with pytest.raises(InvalidRequest) as refusal:
        call(*args, **filters)
    assert refusal.value.code == "invalid_request"
    return refusal.value.message


def test_the_python_api_refuses_malformed_filters(listed: tuple[Application, str]) -> None:
    app = listed[0]
    for tenant in BAD_TENANTS:
        assert "tenant" in refused(app.list_operations, tenant=tenant), tenant
        assert "tenant" in refused(app.operation_counts, tenant), tenant
        assert "tenant" in refused(app.projections.operation_counts, tenant), tenant
    for kind in BAD_TYPES:
        assert "type" in refused(app.list_operations, type=kind), kind
    for status in BAD_STATUSES:
        assert "status" in refused(app.list_operations, status=status), status
        assert "status" in refused(app.list_instances, "Quick", status=status), status
    # What the rules accept is still answered.
    assert len(app.list_operations(tenant="acme", type="t.ok")["items"]) == 1
    assert app.list_operations(tenant="globex", type="t.other")["items"] == []
    assert app.operation_counts("acme")["acme"]["t.ok"]["completed"] == 1
    assert app.list_instances("Quick", status="queued")["items"] == []


def test_http_and_the_console_refuse_what_the_api_refuses(
    listed: tuple[Application, str],
) -> None:
    from blackops.http.app import create_http_app

    headers = {"Authorization": f"Bearer {SYSTEM}"}
    with TestClient(
        create_http_app(listed[0], SYSTEM), follow_redirects=False, raise_server_exceptions=False
    ) as client:
        assert client.post("/v1/spaces", json={"name": "acme"}, headers=headers).is_success
        csrf = csrf_of(client.get("/ui/login").text)
        assert client.post("/ui/login", data={"csrf": csrf, "token": SYSTEM}).status_code == 303
        for query in ("type=%00", "type=a%00b", "tenant=acme&type=A.B", "tenant=a%20b",
                      "tenant=%00"):  # fmt: skip
            api = client.get(f"/v1/operations?{query}", headers=headers)
            assert api.status_code == 400, (query, api.text)
            assert api.json()["error"]["code"] == "invalid_request"
            page = client.get(f"/ui/operations?{query}")
            assert page.status_code == 400, (query, page.status_code)
            assert "invalid_request" in page.text
        counts = client.get("/v1/operation-counts?tenant=a%00b", headers=headers)
        assert counts.status_code == 400
        assert client.get("/ui/operations?tenant=acme&type=t.ok").status_code == 200


def cli_refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """``main(argv)`` exits 1 with exactly one JSON document, an ``invalid_request``."""
    capsys.readouterr()
    assert main(argv) == 1
    error = json.loads(capsys.readouterr().out)["error"]  # one document: loads refuses two
    assert error["code"] == "invalid_request", error
    return str(error["message"])


def test_the_cli_refuses_them_as_one_json_document(
    listed: tuple[Application, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A lone surrogate is what Python makes of an argument that is not UTF-8
    (``--tenant $'\\xff'``): before, a traceback and no JSON document."""
    store = ["--store", listed[1], "--json"]
    for argv in (
        ["op", "list", "--tenant", "\udcff"],
        ["op", "list", "--tenant", "a b"],  # was an empty list, exit 0
        ["op", "list", "--type", "a\udcff"],
        ["op", "list", "--type", "A.B"],
        ["op", "counts", "--tenant", "a\udcff"],
        ["op", "counts", "--tenant", "a b"],
    ):
        message = cli_refusal(capsys, [*argv, *store])
        assert re.search("tenant|type", message), (argv, message)
