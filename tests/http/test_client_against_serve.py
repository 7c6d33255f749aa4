"""``blackops.client`` against a real ``blackops serve`` process (uvicorn on a free port, the
example shop app), on SQLite and PostgreSQL: what a caller and a reader do, answered as the
in-process API answers (results, documents, the same exception classes by ``error.code``).

Methods whose routes other branches are adding are tested too, marked ``xfail(strict=True)``
with the route they wait for: they start failing loudly the day the route lands.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_processes import free_port
from conftest import STORES, postgres_schema_url
from served import Served, blackops_serve

from blackops import (
    BackendUnavailable,
    BlackOpsError,
    DocumentError,
    Forbidden,
    InstanceExists,
    InstanceTerminal,
    InvalidRequest,
    NotFound,
    OperationResult,
    Unauthorized,
    UnknownInstance,
)
from blackops.client import ERROR_CLASSES, AsyncClient, Client, error_of
from domain.errors import HTTP_STATUS
from replay.notes import Checkpoint, parse_note

SPACE = "default"
FLOW = "OrderApproval"


@pytest.fixture(scope="module", params=STORES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """One server per store for this module (starting one costs seconds)."""
    home = tmp_path_factory.mktemp(f"serve-{request.param}") / "home"
    if request.param == "sqlite":
        urls: Iterator[str] = iter([f"sqlite:///{home.parent}/journal.sqlite3"])
    else:
        urls = postgres_schema_url()
    store = next(urls)
    try:
        with blackops_serve(store, home) as served:
            yield served
    finally:
        close = getattr(urls, "close", None)
        if close is not None:
            close()


@pytest.fixture
def client(server: Served) -> Iterator[Client]:
    with Client(server.url, server.admin_token) as made:
        yield made


def eventually(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {check}")
        time.sleep(0.1)


def test_a_caller_runs_submits_and_reads_operations(client: Client, server: Served) -> None:
    done = client.run("invoice.issue", {"customer": "ana", "amount": 42})
    assert isinstance(done, OperationResult)
    assert done.status == "completed" and done.outcome is not None
    assert done.outcome["amount"] == 42 and done.outcome["issued_by"] == "admin"
    # A rejection and a validation rejection are results, as in process (never raised).
    blocked = client.run("invoice.issue", {"customer": "blocked", "amount": 1})
    assert blocked.status == "rejected" and blocked.rejection is not None
    assert (blocked.rejection.category, blocked.rejection.code) == (
        "business_rule", "customer_blocked"
    )  # fmt: skip
    invalid = client.run("invoice.issue", {"customer": "ana", "amount": 0})
    assert invalid.status == "rejected" and invalid.rejection is not None
    assert invalid.rejection.category == "validation"

    submitted = client.submit(
        "invoice.issue", {"customer": "bo", "amount": 7}, idempotency_key="client-1"
    )
    assert client.submit(
        "invoice.issue", {"customer": "bo", "amount": 7}, idempotency_key="client-1"
    ) == submitted  # fmt: skip
    eventually(lambda: client.status(submitted)["status"] == "completed")
    status = client.status(submitted)
    assert status["operationId"] == submitted and status["mode"] == "deferred"
    assert client.outcome(submitted) == client.outcome_record(submitted)["outcome"]
    assert client.outcome_record(submitted)["digest"].startswith("sha256:")
    types = [event["type"] for event in client.events(submitted)]
    assert types[:2] == ["operation.received", "operation.accepted"]
    assert types[-1] == "operation.completed"
    listed = client.list_operations(tenant=SPACE, limit=1000)
    assert {done.operation_id, submitted} <= {item["operationId"] for item in listed["items"]}
    page = client.list_operations(tenant=SPACE, limit=1)
    assert len(page["items"]) == 1 and page["next"]


def test_errors_raise_the_in_process_classes(client: Client, server: Served) -> None:
    unknown = "01a22bae-0000-7000-8000-000000000000"
    with pytest.raises(NotFound) as missing:
        client.status(unknown)
    assert missing.value.code == "not_found" and unknown in missing.value.message
    inline = client.run("invoice.issue", {"customer": "ana", "amount": 1}).operation_id
    with pytest.raises(NotFound, match="Inline"):
        client.outcome(inline)
    with pytest.raises(DocumentError) as bad_params:
        client.submit("invoice.issue", {"customer": "ana"})  # the model needs an amount
    assert bad_params.value.code == "invalid_params"
    with Client(server.url, server.system_token) as system, pytest.raises(InvalidRequest) as bad:
        system.run("invoice.issue", {}, tenant="bad space")  # a system caller passes access
    assert bad.value.code == "invalid_request"
    with pytest.raises(NotFound, match="no space"):  # the admin has no role there (R1)
        client.run("invoice.issue", {}, tenant="elsewhere")
    with Client(server.url, "bo_" + "A" * 43) as stranger, pytest.raises(Unauthorized):
        stranger.status(inline)
    with Client(server.url, server.admin_token) as admin, pytest.raises(Forbidden):
        list(admin.stream(limit=1))  # the whole journal is a system principal's
    with Client(f"http://127.0.0.1:{free_port()}", "x") as nobody:
        with pytest.raises(BackendUnavailable) as down:
            nobody.status(inline)
        assert down.value.code == "backend_unavailable" and down.value.detail


def test_workflow_instances_through_the_client(client: Client) -> None:
    flow = client.workflow(FLOW)
    odd = "A/1 %é."
    instance = flow.create(id=odd, params={"order": "A-1", "amount": 5, "cool_off_seconds": 0})
    assert instance.id == odd
    eventually(lambda: instance.status()["status"] == "waiting")
    assert instance.send_event(type="approval", payload={"approved": True, "by": "ana"}) == 1
    final = eventually(lambda: (s := flow.get(odd).status())["status"] == "complete" and s)
    assert final["output"]["charged"] == 5
    with pytest.raises(InstanceExists):
        flow.create(id=odd)
    with pytest.raises(InstanceTerminal):
        instance.send_event(type="approval")
    with pytest.raises(UnknownInstance):
        flow.get("no such instance")
    with pytest.raises(NotFound):
        client.workflow("NoSuchFlow").create()
    sleeper = flow.create(params={"order": "B", "amount": 1, "cool_off_seconds": 600})
    assert len(sleeper.id) == 36  # a UUID was issued (D5)
    assert sleeper.terminate() == "terminated"
    assert flow.get(sleeper.id).status() == {"status": "terminated"}
    assert instance.terminate() == "complete"  # an ended instance keeps its status (P41)
    broken = flow.create(params={})
    assert (
        eventually(lambda: (s := broken.status())["status"] == "errored" and s)["error"]["reason"]
        == "run_threw"
    )


def test_journal_pages_and_the_stream_agree(client: Client, server: Served) -> None:
    for n in range(5):
        client.run("greeting.say", {"name": f"journal {n}"})
    with Client(server.url, server.system_token) as system:
        lines: list[bytes] = []
        after = 0
        while True:
            page = system.journal(after, 50)
            lines += page.lines
            if not page.lines:
                break
            after = page.next_after
        assert len(lines) > 20 and all(line.endswith(b"\n") for line in lines)
        streamed = list(system.stream(0, limit=len(lines)))
        assert [s.line for s in streamed] == lines
        positions = [s.position for s in streamed]
        assert positions == sorted(set(positions))
        middle = positions[len(positions) // 2]
        rest = list(system.stream(middle, limit=len(lines) - positions.index(middle) - 1))
        assert [s.line for s in rest] == lines[positions.index(middle) + 1 :]
        nothing = list(system.stream(positions[-1] + 10**6, max_seconds=0.5))
        assert nothing == []
    ours = client.journal(0, 1000, space=SPACE)
    assert ours.lines and all(b'"tenant":"default"' in line for line in ours.lines)
    assert [s.line for s in client.stream(0, space=SPACE, limit=len(ours.lines))] == ours.lines


def test_the_async_client_does_the_same(server: Served) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url, server.admin_token) as client:
            done = await client.run("greeting.say", {"name": "async"})
            assert done.status == "completed" and done.outcome == {
                "greeting": "hello, async", "tenant": SPACE
            }  # fmt: skip
            submitted = await client.submit("greeting.say", {})
            for _ in range(300):
                if (await client.status(submitted))["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
            assert await client.outcome(submitted) == {"greeting": "hello, world", "tenant": SPACE}
            with pytest.raises(NotFound):
                await client.status("01a22bae-0000-7000-8000-000000000000")
            flow = client.workflow(FLOW)
            instance = await flow.create(
                params={"order": "C", "amount": 1, "cool_off_seconds": 600}
            )
            assert await instance.terminate() == "terminated"
            assert (await (await flow.get(instance.id)).status())["status"] == "terminated"
            page = await client.journal(0, 1000, space=SPACE)
            got = [s.line async for s in client.stream(0, space=SPACE, limit=len(page.lines))]
            assert got == page.lines
            assert (await client.schema())["$id"] == "urn:blackops:schema:observed-line:v1"

    asyncio.run(scenario())


def test_every_taxonomy_code_maps_to_the_class_that_carries_it() -> None:
    """The client raises, for each code, an instance of the class whose instances the
    in-process API raises with that code; the message is the server's."""
    for code in HTTP_STATUS:
        error = error_of(code, "the server's words", 409)
        assert isinstance(error, BlackOpsError)
        assert error.code == code and error.message == "the server's words"
        assert type(error) is ERROR_CLASSES.get(code, BlackOpsError)
    assert isinstance(error_of("unknown_instance", "m"), UnknownInstance)
    assert isinstance(error_of("invalid_params", "bad at $.x"), DocumentError)
    assert error_of("invalid_params", "bad at $.x").path == "$.x"  # type: ignore[attr-defined]
    newer = error_of("brand_new_code", "m")
    assert type(newer) is BlackOpsError and newer.code == "internal_error"
    assert "brand_new_code" in newer.message
    # An answer that is not the error shape (a proxy's page) still raises by status.
    page = httpx.Response(
        502, text="<html>bad gateway</html>", request=httpx.Request("GET", "http://x/")
    )
    from blackops.client.calls import error_from

    assert isinstance(error_from(page), BackendUnavailable)


def test_a_manifest_link_is_found() -> None:
    from blackops.client.calls import described_by

    assert described_by('<https://x/m.json>; rel="describedby"') == "https://x/m.json"
    assert described_by('</a>; rel="next", </m>; rel="describedby alternate"') == "/m"
    assert described_by("</a>; rel=describedby") == "/a"
    assert described_by('</a>; rel="next"') is None and described_by(None) is None


# -- methods whose routes other branches add --------------------------------------------------


def test_list_instances(client: Client) -> None:
    flow = client.workflow(FLOW)
    made = flow.create(params={"order": "L", "amount": 1, "cool_off_seconds": 600})
    listed = client.list_instances(FLOW, limit=1000)
    assert made.id in {item["id"] for item in listed["items"]}
    assert "next" in listed
    made.terminate()
    only = client.list_instances(FLOW, status="terminated", limit=1000)
    assert made.id in {item["id"] for item in only["items"]}


def test_instance_counts(client: Client) -> None:
    counts = client.instance_counts(FLOW)
    assert set(counts) >= {"instanceCounts", "observedAt", "observedPosition"}
    assert set(counts["instanceCounts"]) == {
        "queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"
    }  # fmt: skip


def test_operation_counts(client: Client) -> None:
    client.run("greeting.say", {})
    counts = client.operation_counts(SPACE)
    assert set(counts) == {"counts", "observedPosition"}
    assert counts["counts"][SPACE]["greeting.say"]["completed"] >= 1


def test_checkpoint(server: Served) -> None:
    with Client(server.url, server.system_token) as system:
        note = system.checkpoint()
    body = parse_note(note).text
    assert Checkpoint.parse(body).size > 0 and note.startswith(body + "\n— ")


def test_receipt(client: Client) -> None:
    done = client.run("greeting.say", {})
    receipt = client.receipt(done.operation_id)
    assert set(receipt) == {"entry", "index", "proof"}
    assert json.loads(receipt["entry"])["type"] == "operation.completed"
    assert receipt["proof"].startswith(f"c2sp.org/tlog-proof@v1\nindex {receipt['index']}\n")


def test_export_with_manifest(server: Served, tmp_path: Path) -> None:
    target = str(tmp_path / "journal.jsonl")
    with Client(server.url, server.system_token) as system:
        lines = system.journal(0, 10_000).lines  # before: the export journals itself
        manifest = system.export(target)
    assert manifest is not None
    exported = Path(target).read_bytes().splitlines(keepends=True)
    assert exported[: len(lines)] == lines
    assert Path(target + ".manifest.json").exists()
    signed = Checkpoint.parse(parse_note(manifest["attestation"]["checkpoint"]).text)
    assert signed.size >= manifest["journalTreeSize"] > 0
    assert json.loads(Path(target + ".manifest.json").read_bytes()) == manifest


def test_the_client_stream_resumes_after_the_last_id_it_received() -> None:
    """A server that sends two events per connection and then drops it: the client asks
    again with ``Last-Event-ID`` = the last id it got (positions with gaps: never id + 1)
    and yields every event once, in order."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    positions = [3, 4, 9, 10, 11, 20, 21]
    asked: list[str | None] = []

    class Dropping(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            last = self.headers.get("Last-Event-ID")
            asked.append(last)
            after = int(last or 0)
            batch = [p for p in positions if p > after][:2]
            body = b"".join(b'id: %d\ndata: {"p":%d}\n\n' % (p, p) for p in batch)
            body += b'id: 99\ndata: {"cut' if batch else b""  # half an event, then the drop
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Dropping)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        with Client(url, "t") as client:
            got = list(client.stream(0, limit=len(positions), retry_seconds=0.01))
    finally:
        httpd.shutdown()
    assert [s.position for s in got] == positions
    assert [s.line for s in got] == [b'{"p":%d}\n' % p for p in positions]
    assert asked == ["0", "4", "10", "20"]


# -- found by the client's defect hunt ---------------------------------------------------------


def test_a_space_admin_exports_its_space_sync_and_async(server: Served, tmp_path: Path) -> None:
    """``export(space=)`` (a Space-scoped token cannot export the whole journal), and
    AsyncClient's export, hold and release (it lacked them)."""
    target = tmp_path / "space.jsonl"
    with Client(server.url, server.admin_token) as client:
        done = client.run("greeting.say", {"name": "export"})
        with pytest.raises(Forbidden):
            client.export(str(target))
        manifest = client.export(str(target), space=SPACE)
    assert manifest is not None and manifest["count"] == len(target.read_bytes().splitlines())
    assert all(b'"tenant":"default"' in line for line in target.read_bytes().splitlines())
    assert json.loads(Path(f"{target}.manifest.json").read_bytes()) == manifest

    async def scenario() -> None:
        async with AsyncClient(server.url, server.admin_token) as client:
            again = await client.export(str(target), space=SPACE, after=0)
            assert again is not None and again["count"] >= manifest["count"]
            hold = await client.hold(done.operation_id, reason="audit")
            assert hold["reason"] == "audit"
            await client.release(done.operation_id, reason="audit done")

    asyncio.run(scenario())
    assert json.loads(Path(f"{target}.manifest.json").read_bytes())["count"] >= manifest["count"]


def test_a_token_file_with_its_newline_and_documents_refused_as_in_process(
    server: Served,
) -> None:
    with Client(server.url, server.admin_token + "\n") as client:
        assert client.run("greeting.say", {"name": "nl"}).status == "completed"
        with pytest.raises(DocumentError) as refused:
            client.submit("invoice.issue", {"customer": "c", "amount": 1, "extra": (1, 2)})
        assert refused.value.code == "invalid_params"
        with pytest.raises(NotFound):
            client.status("")
