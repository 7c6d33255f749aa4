"""An export's manifest is kept per Space (decisions A12), on SQLite and PostgreSQL: no
tenant's exports push out another tenant's manifest, nor the whole journal's.

Found by a hunt: the server kept the latest 256 manifests in slots shared by every tenant,
so a reader of ``acme`` making 256 empty exports (~32 s) turned the manifest link another
Space had just been given into a 404. The limit is shrunk here so the test stays fast.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from blackops import Application
from blackops.http import audit
from blackops.http.app import create_http_app

SYSTEM = "manifest-test-token"
KEPT = 3


@pytest.fixture
def client(app: Application, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setattr(audit, "_MANIFESTS_KEPT", KEPT)
    with TestClient(create_http_app(app, SYSTEM)) as test_client:
        for space in ("acme", "other"):
            created = test_client.post("/v1/spaces", json={"name": space}, headers=auth(SYSTEM))
            assert created.status_code == 201, created.text
        yield test_client


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def reader_of(client: TestClient, space: str) -> str:
    """A token of a principal whose only role is ``reader`` in ``space``."""
    base = f"/v1/spaces/{space}/principals/{space}-reader"
    granted = client.put(base, json={"role": "reader"}, headers=auth(SYSTEM))
    assert granted.status_code == 200, granted.text
    issued = client.post(f"{base}/tokens", json={}, headers=auth(SYSTEM))
    assert issued.status_code == 201, issued.text
    return str(issued.json()["token"])


def export(client: TestClient, token: str, space: str | None, after: int = 0) -> str:
    """One export; the manifest link its ``Link`` header names."""
    path = "/v1/journal/export" if space is None else f"/v1/spaces/{space}/journal/export"
    response = client.get(path, params={"after": after}, headers=auth(token))
    assert response.status_code == 200, response.text
    found = re.search(r"<([^>]+)>", response.headers["link"])
    assert found is not None
    return found.group(1)


def status(client: TestClient, token: str, link: str) -> int:
    code: int = client.get(link, headers=auth(token)).status_code
    return code


def test_one_spaces_exports_never_push_out_another_spaces_manifest(client: TestClient) -> None:
    other = export(client, SYSTEM, "other")
    whole = export(client, SYSTEM, None)
    acme = reader_of(client, "acme")
    # More empty exports than the server keeps, all from acme's reader.
    mine = [export(client, acme, "acme", after=10**15) for _ in range(KEPT + 2)]
    assert status(client, SYSTEM, other) == 200
    assert status(client, SYSTEM, whole) == 200
    # The limit still holds within acme: its oldest go, its latest stay.
    assert [status(client, acme, link) for link in mine] == [404, 404] + [200] * KEPT
    # ...and acme's reader still cannot see the other Space's manifest at all.
    assert status(client, acme, other) == 404


def test_whole_journal_exports_keep_their_own_slots(client: TestClient) -> None:
    other = export(client, SYSTEM, "other")
    whole = [export(client, SYSTEM, None) for _ in range(KEPT + 1)]
    assert status(client, SYSTEM, other) == 200
    assert [status(client, SYSTEM, link) for link in whole] == [404] + [200] * KEPT
