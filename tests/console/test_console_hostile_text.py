"""What a browser makes of the console's text and URLs, checked without one (a defect hunt;
the browser tests in ``test_console_in_a_browser.py`` repeat each in Chromium): invisible
and bidi characters shown as escapes (decisions U23), instance ids ``.`` and ``..`` in
``?id=`` (U16), sign-in targets judged after dot segments are removed (U7), and sign-out
after the token stopped signing in (U5). SQLite only."""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_forms import csrf_of  # type: ignore[import-not-found, unused-ignore]
from fastapi.testclient import TestClient

from blackops import Application
from blackops.console.pages import _safe_next, resolved_path
from blackops.console.render import INVISIBLE, _shown, instance_named, instance_url
from blackops.http.app import create_http_app
from domain.errors import InvalidRequest

SYSTEM = "hostile-text-system-token"
H = {"Authorization": f"Bearer {SYSTEM}"}


def test_every_control_format_and_separator_character_is_shown_as_an_escape() -> None:
    hidden = [
        chr(c)
        for c in range(sys.maxunicode + 1)
        if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp") and chr(c) not in "\t\n"
    ]
    assert [c for c in hidden if not INVISIBLE.fullmatch(c)] == []
    named = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
    zero_widths = "\u200b\u200c\u200d\u2060\ufeff\ufe0f\U000e0041"
    assert INVISIBLE.fullmatch(named + zero_widths)
    assert not INVISIBLE.search("order-42\t\nשלום é 日本 \U0001f600")


def test_a_value_with_a_bidi_override_prints_its_escape() -> None:
    assert _shown("\u202e24-redro") == "<span class=esc>\\u202e</span>24-redro"
    assert _shown('<b a="1">\u200b') == "&lt;b a=&#34;1&#34;&gt;<span class=esc>\\u200b</span>"
    assert _shown("\U000e0041x") == "<span class=esc>\\U000e0041</span>x"
    assert _shown("order-42") == "order-42" and _shown(7) == 7


@pytest.mark.parametrize("instance_id", [".", ".."])
@pytest.mark.parametrize("kind", ["instances", "terminate", "receipts"])
def test_a_dot_instance_id_goes_in_the_query(instance_id: str, kind: str) -> None:
    url = instance_url("acme", "Flow", instance_id, kind)
    assert url == f"/ui/spaces/acme/workflows/Flow/{kind}/?id={instance_id}"
    assert resolved_path(url) == url.split("?")[0]  # what a browser requests
    assert instance_named("", instance_id) == instance_id
    with pytest.raises(InvalidRequest):
        instance_named("x", instance_id)  # one URL names one instance
    assert (
        instance_url("acme", "Flow", "a/.. b")
        == "/ui/spaces/acme/workflows/Flow/instances/a%2F..%20b"
    )


@pytest.mark.parametrize(
    "target",
    [
        "/ui/../docs",
        "/ui/..",
        "/ui/%2e%2e/v1/spaces/default/journal/stream?limit=1",
        "/ui/%2E./openapi.json",
        "/ui/.%2E/openapi.json",
        "/ui/operations/../../redoc",
        "/ui/..\t/openapi.json",
        "/ui/\n../openapi.json",
        "/ui/..\\openapi.json",
        " /ui/operations",
    ],
)
def test_no_sign_in_target_leaves_the_console_through_dot_segments(target: str) -> None:
    assert _safe_next(target) == "/ui/operations"


@pytest.mark.parametrize(
    "target",
    [
        "/ui/journal?space=acme",
        "/ui/spaces/acme/workflows/Flow/instances/?id=..",
        "/ui/spaces/acme/workflows/Flow/instances/a%2F..%2Fb",
        "/ui/operations/x/../y",  # still the console's, where the browser goes
    ],
)
def test_sign_in_targets_inside_the_console_are_kept(target: str) -> None:
    assert _safe_next(target) == target


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    app = Application(f"sqlite:///{tmp_path / 'journal.sqlite3'}")
    try:
        with TestClient(create_http_app(app, SYSTEM), follow_redirects=False) as client:
            assert client.post("/v1/spaces", json={"name": "acme"}, headers=H).is_success
            path = "/v1/spaces/acme/principals/leaver"
            assert client.put(path, json={"role": "reader"}, headers=H).is_success
            yield client
    finally:
        app.close()


def test_sign_out_clears_the_cookie_of_a_token_that_stopped_signing_in(api: TestClient) -> None:
    """The page was open when the token was revoked: its form (CSRF token derived from the
    token) still clears the cookie; another form does not, and without a cookie there is
    nothing to clear."""
    tokens = "/v1/spaces/acme/principals/leaver/tokens"
    issued = api.post(tokens, json={}, headers=H).json()
    api.cookies.set("blackops_session", issued["token"])
    csrf = csrf_of(api.get("/ui/operations").text)
    assert api.delete(f"{tokens}/{issued['tokenId']}", headers=H).is_success
    other = api.post("/ui/logout", data={"csrf": "0" * 64})
    assert other.status_code == 401 and "set-cookie" not in other.headers
    answer = api.post("/ui/logout", data={"csrf": csrf})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"
    assert answer.headers["set-cookie"].startswith('blackops_session=""; ')
    assert "Max-Age=0" in answer.headers["set-cookie"]
    api.cookies.clear()
    assert api.post("/ui/logout", data={"csrf": csrf}).status_code == 401
