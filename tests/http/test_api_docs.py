"""/docs and /redoc are served from this origin only (decisions H10); the browser's view of
them is tests/console/test_console_in_a_browser.py (test_api_docs_run_only_this_origins_files)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from blackops import Application
from blackops.http.app import create_http_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    app = Application(f"sqlite:///{tmp_path}/j.sqlite3")
    return TestClient(create_http_app(app, "systok"))


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_a_docs_page_loads_nothing_from_another_origin(client: TestClient, page: str) -> None:
    answer = client.get(page)
    assert answer.status_code == 200
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
    links = re.findall(r'(?:src|href|spec-url|data-openapi-url)="([^"]*)"', answer.text)
    assert links and all(link.startswith("/") and not link.startswith("//") for link in links)
    assert "<script>" not in answer.text  # no inline script: the policy would refuse it
    for link in links:
        fetched = client.get(link)
        assert fetched.status_code == 200, link
        if link.startswith("/docs/assets/"):
            assert fetched.headers["x-content-type-options"] == "nosniff"
            # Linked by its content's name: kept; asked for by name alone: revalidated.
            assert "?v=" in link and "immutable" in fetched.headers["cache-control"]
            bare = client.get(link.split("?")[0]).headers["cache-control"]
            assert bare == "no-cache", link


def test_only_the_named_assets_are_served(client: TestClient) -> None:
    assert (
        client.get("/docs/assets/swagger-start.js")
        .headers["content-type"]
        .startswith("text/javascript")
    )
    for name in ("core.py", "..%2F..%2Fapp.py", "nothing.js"):
        answer = client.get(f"/docs/assets/{name}")
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"


def test_the_start_up_script_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["blackops.http"]
    files = [p.relative_to(ROOT / "blackops" / "http").as_posix()
             for p in (ROOT / "blackops" / "http" / "static").iterdir()]  # fmt: skip
    assert "static/swagger-start.js" in files
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []
