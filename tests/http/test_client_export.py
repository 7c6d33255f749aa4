"""``Client.export`` / ``AsyncClient.export`` write a body and its manifest as a pair: both
are fetched before either file is replaced, a failure leaves the previous pair, an answer
without a manifest leaves no stale one beside the new body, and the bearer token never goes
to another origin a ``Link`` names. Against a scripted server (MockTransport)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from blackops import BackendUnavailable, BlackOpsError
from blackops.client import AsyncClient, Client

ORIGIN = "http://blackops.internal"


class Server:
    """Answers an export of ``count`` lines whose Link is ``link``; its manifest answers
    ``manifest`` (a status and a body). Every request is kept."""

    def __init__(self) -> None:
        self.count, self.link = 3, '</v1/journal/exports/e1/manifest>; rel="describedby"'
        self.manifest: tuple[int, Any] = (200, {"count": 3})
        self.media_type = "application/jsonl"  # another: a proxy answered in its place
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path.endswith("/export"):
            body = b"".join(b'{"position":%d}\n' % n for n in range(1, self.count + 1))
            headers = {"link": self.link} if self.link else {}
            if self.media_type != "application/jsonl":
                body = b"<html><body>Please sign in</body></html>"
            return httpx.Response(200, content=body, headers=headers | {
                "content-type": self.media_type})  # fmt: skip
        status, document = self.manifest
        return httpx.Response(status, json=document)


def on_disk(target: Path) -> tuple[int, int | None]:
    """(lines in the body, the manifest's count or None without a manifest file)."""
    manifest = Path(f"{target}.manifest.json")
    counted = json.loads(manifest.read_bytes())["count"] if manifest.exists() else None
    return target.read_bytes().count(b"\n"), counted


def exported(server: Server, target: Path, **options: Any) -> Any:
    with Client(ORIGIN, "SECRET", transport=httpx.MockTransport(server)) as client:
        return client.export(str(target), **options)


def exported_async(server: Server, target: Path, **options: Any) -> Any:
    async def scenario() -> Any:
        transport = httpx.MockTransport(server)
        async with AsyncClient(ORIGIN, "SECRET", transport=transport) as client:
            return await client.export(str(target), **options)

    return asyncio.run(scenario())


EXPORTS: dict[str, Callable[..., Any]] = {"sync": exported, "async": exported_async}


@pytest.fixture(params=list(EXPORTS))
def export(request: pytest.FixtureRequest) -> Callable[..., Any]:
    return EXPORTS[request.param]


def test_a_manifest_that_cannot_be_fetched_leaves_the_previous_pair(
    export: Callable[..., Any], tmp_path: Path
) -> None:
    """The new body replaced the old one before the manifest was asked for: 6 lines beside
    a manifest that counted 3."""
    server, target = Server(), tmp_path / "journal.jsonl"
    assert export(server, target) == {"count": 3}
    server.count, server.manifest = (
        6,
        (503, {"error": {"code": "backend_unavailable", "message": "busy"}}),
    )
    with pytest.raises(BackendUnavailable):
        export(server, target)
    assert on_disk(target) == (3, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "journal.jsonl",
        "journal.jsonl.manifest.json",
    ]  # fmt: skip (no partial file left behind)
    server.manifest = (200, {"count": 6})
    assert export(server, target) == {"count": 6}
    assert on_disk(target) == (6, 6)


def test_an_answer_without_a_manifest_removes_the_stale_one(
    export: Callable[..., Any], tmp_path: Path
) -> None:
    server, target = Server(), tmp_path / "journal.jsonl"
    export(server, target)
    server.count, server.link = 5, ""
    assert export(server, target) is None
    assert on_disk(target) == (5, None)


def test_a_manifest_that_is_no_json_object_is_refused_and_changes_nothing(
    export: Callable[..., Any], tmp_path: Path
) -> None:
    server, target = Server(), tmp_path / "journal.jsonl"
    export(server, target)
    server.count, server.manifest = 4, (200, ["not", "an", "object"])
    with pytest.raises(BlackOpsError, match="no JSON object"):
        export(server, target)
    assert on_disk(target) == (3, 3)


@pytest.mark.parametrize("media_type", ["text/html", ""])
def test_a_success_that_is_no_export_is_refused_and_changes_nothing(
    export: Callable[..., Any], tmp_path: Path, media_type: str
) -> None:
    """An SSO proxy's sign-in page answered 200: the export returned None, replaced the
    file with the page and removed the manifest as stale (found by a defect hunt, stop 38)."""
    server, target = Server(), tmp_path / "journal.jsonl"
    export(server, target)
    server.media_type, server.link = media_type, ""
    with pytest.raises(BlackOpsError, match="not application/jsonl") as refused:
        export(server, target)
    assert refused.value.code == "internal_error"
    assert on_disk(target) == (3, 3)


@pytest.mark.parametrize(
    "link",
    [
        '<https://attacker.example/m>; rel="describedby"',
        '<//attacker.example/m>; rel="describedby"',
        '<http://blackops.internal:8080/m>; rel="describedby"',
        '<https://blackops.internal/m>; rel="describedby"',
    ],
)
def test_a_manifest_on_another_origin_is_not_fetched_with_the_token(
    export: Callable[..., Any], tmp_path: Path, link: str
) -> None:
    server, target = Server(), tmp_path / "journal.jsonl"
    export(server, target)
    server.count, server.link = 7, link
    with pytest.raises(BlackOpsError) as refused:
        export(server, target)
    assert refused.value.code == "internal_error" and "another origin" in refused.value.message
    assert [r.url.host for r in server.requests] == ["blackops.internal"] * 3
    assert on_disk(target) == (3, 3)


def test_an_absolute_link_to_the_same_origin_is_followed(
    export: Callable[..., Any], tmp_path: Path
) -> None:
    server, target = Server(), tmp_path / "journal.jsonl"
    server.link = f'<{ORIGIN}/v1/journal/exports/e1/manifest>; rel="describedby"'
    assert export(server, target) == {"count": 3}
    assert server.requests[-1].headers["authorization"] == "Bearer SECRET"


def test_a_spaces_export(export: Callable[..., Any], tmp_path: Path) -> None:
    """A Space-scoped token can only export its Space: ``space=`` asks that route."""
    server, target = Server(), tmp_path / "journal.jsonl"
    assert export(server, target, space="a/b", after=2, until=9) == {"count": 3}
    asked = server.requests[0].url
    assert asked.raw_path == b"/v1/spaces/a%2Fb/journal/export?after=2&until=9"
