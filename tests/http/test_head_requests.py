"""HEAD of every GET route answers as GET does, without the body (RFC 9110 9.1, 9.3.2): it
was 405 on every API route (found by a defect hunt); a HEAD of a live stream answers at
once against a real ``blackops serve``."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from served import blackops_serve

from blackops import Application
from blackops.http.app import create_http_app

AUTH = {"Authorization": "Bearer systok"}


def test_head_is_get_without_the_body(tmp_path: Path) -> None:
    app = Application(f"sqlite:///{tmp_path}/j.sqlite3")

    @app.operation("t.ok")
    def ok(ctx: object, params: dict[str, object]) -> dict[str, object]:
        return {}

    operation = app.run("t.ok", {}, actor="a", tenant="default").operation_id
    client = TestClient(create_http_app(app, "systok"))
    paths = ["/v1/operations", f"/v1/operations/{operation}", "/v1/operation-counts",
             "/v1/journal?after=0&limit=5", "/openapi.json", "/v1/operations/nosuch",
             "/docs"]  # fmt: skip
    for path in paths:
        got, head = client.get(path, headers=AUTH), client.head(path, headers=AUTH)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers["content-type"] == got.headers["content-type"], path
        assert head.headers["content-length"] == str(len(got.content)), path
    # Without a token as with GET; a route that has no GET refuses HEAD, naming it.
    assert client.head("/v1/operations").status_code == 401
    refused = client.head("/v1/spaces/default/operations/t.ok", headers=AUTH)
    assert refused.status_code == 405 and "HEAD" not in refused.headers["allow"]
    allowed = client.delete("/v1/operations", headers=AUTH).headers["allow"]
    assert allowed == "GET, HEAD"
    # An export journals its custody event: a HEAD must not run it (found by review).
    exported = len(app.store.read_topics(["journal.exported"]))
    for path in ("/v1/journal/export", "/v1/spaces/default/journal/export"):
        refused = client.head(path, headers=AUTH)
        assert refused.status_code == 405 and refused.headers["allow"] == "GET", path
    assert len(app.store.read_topics(["journal.exported"])) == exported
    # Counted as what it was.
    assert 'method="HEAD"' in client.get("/metrics", headers=AUTH).text
    app.close()


def test_head_of_a_live_stream_answers_at_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with blackops_serve(f"sqlite:///{tmp_path}/j.sqlite3", home) as served:
        headers = {"Authorization": f"Bearer {served.system_token}"}
        with httpx.Client(base_url=served.url, headers=headers, timeout=10) as kept_alive:
            start = time.monotonic()
            # After the journal's end: nothing to send before the first heartbeat.
            answer = kept_alive.head("/v1/journal/stream", params={"after": 10**12})
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            # The next request on the same connection is not held until the stream's first
            # heartbeat, 15 s away (it was: the HEAD ended only at a body; found by review).
            assert kept_alive.get("/v1/operations").status_code == 200
            assert time.monotonic() - start < 5
