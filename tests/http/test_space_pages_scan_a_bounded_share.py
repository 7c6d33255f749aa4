"""A Space's journal page costs a bounded read, whatever other tenants hold (found by a
defect hunt: 40 pages of a Space with 20 lines in a 31,000-event journal, each scanning up
to 500,000 events on the API's thread pool, took another tenant's listing from 9 ms to
13.6 s).

A page reads at most ``SPACE_SCAN_ROWS`` events and ends early with ``BlackOps-Next-After``
past them (fewer lines than ``limit``, even none, with a cursor that moved); following the
cursor until it stops moving gives exactly the Space's lines, through the client too; and a
page's read never takes a thread of the API's pool. Structure, not time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from blackops import Application, ExecutionContext
from blackops.client import Client
from blackops.http import journal
from blackops.http.app import create_http_app
from journal.store import EventStore
from replay.export import observed_lines

SYSTEM = "systok"
#: The budget (2,000 events); old code had none but 500,000.
BUDGET = getattr(journal, "SPACE_SCAN_ROWS", 2_000)


@pytest.fixture
def served(app: Application) -> Iterator[TestClient]:
    @app.operation("t.echo")
    def echo(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return params

    context = app.access_context({"id": "root", "kind": "system"}, "acme")
    for space in ("acme", "globex"):
        app.access.create_space(space, context)
    with TestClient(create_http_app(app, SYSTEM)) as client:
        yield client


AUTH = {"Authorization": f"Bearer {SYSTEM}"}


class CountedRows:
    """Rows read from the journal (``read_raw_after``) while ``counting``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: EventStore) -> None:
        self.rows = 0
        self.counting = False
        self.hold: threading.Event | None = None
        self.held = threading.Event()
        read = store.read_raw_after

        def counted(position: int, limit: int = 1000, max_bytes: int | None = None) -> Any:
            if self.hold is not None:
                self.held.set()
                self.hold.wait(30)
            rows = read(position, limit, max_bytes)
            if self.counting:
                self.rows += len(rows)
            return rows

        monkeypatch.setattr(store, "read_raw_after", counted)


def acme_lines(store: EventStore) -> list[bytes]:
    return [line for _, line in observed_lines(store) if journal.tenant_of(line) == "acme"]


def test_a_space_page_reads_at_most_its_budget_and_its_cursor_moves_past_it(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    app.run("t.echo", {"n": 0}, actor="ana", tenant="acme")
    while app.store.last_position() < 2 * BUDGET + 10:  # another tenant's events
        app.run("t.echo", {"n": 1}, actor="ana", tenant="globex")
    app.run("t.echo", {"n": 2}, actor="ana", tenant="acme")
    expected = acme_lines(app.store)
    rows = CountedRows(monkeypatch, app.store)
    rows.counting = True
    first = served.get("/v1/spaces/acme/journal?after=0&limit=10000", headers=AUTH)
    rows.counting = False
    assert first.status_code == 200, first.text
    assert rows.rows <= BUDGET  # was every event of the journal
    cursor = int(first.headers["BlackOps-Next-After"])
    scanned = [position for position, _ in observed_lines(app.store, 0, BUDGET)]
    assert cursor == scanned[-1]  # past everything it read, its own lines or not
    assert first.content == b"".join(
        line for position, line in observed_lines(app.store, 0, BUDGET) if line in expected
    )
    # A page among only other tenants' events: no line, and the cursor moves on.
    empty = served.get(f"/v1/spaces/acme/journal?after={cursor}&limit=10000", headers=AUTH)
    assert empty.content == b""
    assert int(empty.headers["BlackOps-Next-After"]) > cursor
    # Following the cursor until it stops moving gives exactly the Space's lines, through
    # the client too (an empty page with a moved cursor is no end).
    reader = Client("http://testserver", SYSTEM, transport=served._transport)  # not closed
    got: list[bytes] = []
    after, pages = 0, 0
    while True:
        page = reader.journal(after, 10_000, space="acme")
        got += page.lines
        pages += 1
        if page.next_after == after:
            break
        after = page.next_after
    assert got == expected and pages > 2


def api_pool_threads_while_held(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch, path: str
) -> tuple[float, Any]:
    """GET ``path`` with the journal's row read held: the API pool's threads in use then,
    and the answer once released."""
    app.run("t.echo", {"n": 0}, actor="ana", tenant="acme")
    rows = CountedRows(monkeypatch, app.store)
    rows.hold = threading.Event()
    answers: list[Any] = []
    reader = threading.Thread(target=lambda: answers.append(served.get(path, headers=AUTH)))
    reader.start()
    try:
        assert rows.held.wait(20)

        async def borrowed() -> float:
            return anyio.to_thread.current_default_thread_limiter().borrowed_tokens

        assert served.portal is not None
        in_use = served.portal.call(borrowed)
    finally:
        rows.hold.set()
        reader.join()
    return in_use, answers[0]


def test_a_held_space_read_takes_no_thread_of_the_api_pool(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_use, answer = api_pool_threads_while_held(
        served, app, monkeypatch, "/v1/spaces/acme/journal"
    )
    assert in_use == 0  # was 1: the API's pool
    assert answer.status_code == 200
    assert answer.content == b"".join(acme_lines(app.store))


@pytest.mark.parametrize("path", ["/v1/spaces/acme/journal/export", "/v1/journal/export"])
def test_a_held_export_takes_no_thread_of_the_api_pool(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """An export reads, hashes and holds its whole range: on threads of its own (it took one
    of the API's, so a tenant's exports queued every other tenant's requests)."""
    in_use, answer = api_pool_threads_while_held(served, app, monkeypatch, path)
    assert in_use == 0  # was 1: the API's pool
    assert answer.status_code == 200 and b'"tenant":"acme"' in answer.content


#: A large document (the limit is 1 MiB): a few of them pass any page's byte budget.
LARGE = {"text": "x" * 300_000}


def test_pages_of_large_events_end_at_their_byte_budget_and_lose_nothing(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream's page, the stream tail's and a Space page's scan end at a byte budget (one
    event at least), so a reader that stops reading holds about a megabyte, not 500 large
    events (~600 MB each: found by a defect hunt, stop 40); following them still gives every
    line, and the console's recent lines are the journal's last ones."""
    from blackops.console.views import recent_lines
    from blackops.http import stream

    for n in range(12):
        app.run("t.echo", {"n": n, **LARGE}, actor="ana", tenant="acme" if n % 3 else "globex")
    everything = list(observed_lines(app.store))
    # The store's read: ends with the row that reaches the budget; the first always comes.
    rows = app.store.read_raw_after(0, 500, max_bytes=1 << 20)
    sizes = [len(row.state) for row in rows]
    assert sum(sizes[:-1]) < 1 << 20 <= sum(sizes) and len(rows) < len(everything)
    assert len(app.store.read_raw_after(0, 500, max_bytes=1)) == 1
    # A stream's page: full (read on at once), bounded, and the pages together are all.
    after, streamed, pages = 0, [], 0
    while True:
        page = stream._page(app.store, after, None)
        if not page.lines:
            break
        assert sum(len(line) for _, line in page.lines[:-1]) < journal.PAGE_BYTES
        streamed += page.lines
        after, pages = page.read_up_to, pages + 1
    assert streamed == everything and pages > 2
    # Through HTTP: the whole stream, each line once, in order.
    answer = served.get(f"/v1/journal/stream?after=0&limit={len(everything)}", headers=AUTH)
    ids = [int(line[4:]) for line in answer.text.splitlines() if line.startswith("id: ")]
    assert ids == [position for position, _ in everything]
    # A Space page scans at most its bytes; following its cursor gives the Space's lines.
    monkeypatch.setattr(journal, "SPACE_SCAN_BYTES", 1 << 20)
    got, after, pages = [], 0, 0
    while True:
        page = served.get(f"/v1/spaces/acme/journal?after={after}&limit=10000", headers=AUTH)
        assert len(page.content) < 2 << 20
        got += page.content.splitlines(keepends=True)
        cursor, pages = int(page.headers["BlackOps-Next-After"]), pages + 1
        if cursor == after:
            break
        after = cursor
    assert got == acme_lines(app.store) and pages > 3
    # The console's last lines, read back in windows of bounded pages.
    last = app.store.last_position()
    shown = [row["position"] for row in recent_lines(app, "acme", last, limit=5)]
    acme = [p for p, line in everything if journal.tenant_of(line) == "acme"]
    assert shown == acme[-5:]
    shown = [row["position"] for row in recent_lines(app, None, last, limit=7)]
    assert shown == [p for p, _ in everything][-7:]


def test_a_spaces_many_principals_share_its_threads_and_leave_another_spaces_alone(
    served: TestClient, app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The threads of Space pages are shared per Space read, not per principal: a Space
    admin's extra principals (made over HTTP) took every thread and slowed another Space's
    pages tenfold (found by a defect hunt, stop 40). Four of acme's principals with reads
    held take at most the per-key share; globex's page is answered meanwhile."""
    from blackops.http.capacity import SPACE_READS

    context = app.access_context({"id": "root", "kind": "system"}, "acme")
    tokens = {}
    for name, space in [*((f"p{n}", "acme") for n in range(4)), ("bob", "globex")]:
        app.access.create_principal(name, context)
        app.access.grant(name, space, "reader", context)
        tokens[name] = app.access.issue_token(name, context, space=space)[0]
    app.run("t.echo", {"n": 0}, actor="ana", tenant="acme")
    app.run("t.echo", {"n": 1}, actor="ana", tenant="globex")
    rows = CountedRows(monkeypatch, app.store)
    gate = rows.hold = threading.Event()
    held = [
        threading.Thread(
            target=served.get,
            args=("/v1/spaces/acme/journal",),
            kwargs={"headers": {"Authorization": f"Bearer {tokens[f'p{n}']}"}},
        )
        for n in range(4)
    ]
    for reader in held:
        reader.start()
    try:
        assert rows.held.wait(20)
        assert served.portal is not None

        async def in_use() -> int:
            return SPACE_READS.borrowed()

        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # let every acme request reach its share
            assert served.portal.call(in_use) <= SPACE_READS.per_key
            time.sleep(0.05)
        rows.hold = None  # globex's read goes through while acme's stay held
        answer = served.get(
            "/v1/spaces/globex/journal", headers={"Authorization": f"Bearer {tokens['bob']}"}
        )
        assert answer.status_code == 200 and b'"tenant":"globex"' in answer.content
    finally:
        gate.set()
        for reader in held:
            reader.join()
