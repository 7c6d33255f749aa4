"""Which missing events a retention tombstone accounts for (`replay.verify.read_tombstones`),
on SQLite and PostgreSQL: every form the purges write still verifies and exports (an
operation with and without its Outcome Record, after an outcome purge, a workflow instance
purged, created again and purged again, each also between its tombstone and its deletion),
and a tombstone no purge could have written vouches for nothing, so the events it lists
and someone deleted behind the journal's back are ``deleted`` again (found by a defect
hunt: a tombstone in a stream of its own listing later positions hid any deletion).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich_journal import inline_runs
from tampering import behind_the_journals_back, position_column, q

from blackops import Application, ExecutionContext
from blackops.testing import FakeClock
from domain.context import Actor
from domain.events import NewEvent
from domain.retention import Retention
from journal.instances import instance_stream
from journal.store import Append, EventStore
from replay.custody import export_with_manifest
from replay.integrity import IntegrityError
from replay.observed import ObservedEvent
from replay.verify import (
    PURGE_TYPES,
    Problem,
    SeenLines,
    purged_by_lines,
    read_tombstones,
    verify_export,
    verify_store,
)

DAY = 86_400


def purged_by_tombstones(events: list[ObservedEvent]) -> set[int]:
    """`purged_by_lines` of a file holding ``events``."""
    seen = SeenLines(
        [e.position for e in events],
        [],
        [e.stream for e in events],
        [e.version for e in events],
        [
            (e.position, e.stream, e.version, e.type, e.data)
            for e in events
            if e.type in PURGE_TYPES
        ],
    )
    return purged_by_lines(seen)


AT = "2026-11-30T09:00:00.000000Z"
CONTEXT = {"actor": {"id": "mallory", "kind": "system"}}


def forge(store: EventStore, stream: str, version: int, topic: str, data: dict[str, Any]) -> int:
    """A "tombstone" appended the ordinary way (so it has its leaf), as anyone who can
    append can write one; its position."""
    [[position]] = store.append(Append(stream, version, [NewEvent(topic, AT, CONTEXT, data)]))
    return position


def delete_rows(store: EventStore, positions: list[int]) -> None:
    """Events deleted with SQL, their leaves left: what a purge does, without a purge."""
    with behind_the_journals_back(store) as (conn, events, _):
        column = position_column(conn)
        for position in positions:
            conn.execute(q(conn, f"DELETE FROM {events} WHERE {column} = ?"), (position,))


def positions_of(store: EventStore, stream: str) -> list[int]:
    return [e.position for e in store.read_stream(stream)]


def kinds(problems: list[Problem]) -> set[tuple[str, int]]:
    return {(p.kind, p.position) for p in problems}


def assert_vouches_for_nothing(
    store: EventStore, tombstone: int, victims: list[int], also: frozenset[str] = frozenset()
) -> None:
    """Verify names the tombstone and every victim (and nothing else but ``also``); an
    export refuses at the first victim."""
    report = verify_store(store)
    found = kinds(report.problems)
    assert ("tombstone", tombstone) in found, report.problems
    assert {("deleted", v) for v in victims} <= found, report.problems
    assert {p.kind for p in report.problems} == {"tombstone", "deleted", *also}, report.problems
    assert not read_tombstones(store).purged & set(victims)
    with pytest.raises(IntegrityError) as refused:
        export_with_manifest(store, io.BytesIO(), actor=Actor("auditor"), clock=FakeClock())
    assert refused.value.position == min(victims)


def assert_verifies_and_exports(store: EventStore) -> None:
    report = verify_store(store)
    assert report.ok, report.problems
    out = io.BytesIO()
    manifest = export_with_manifest(store, out, actor=Actor("auditor"), clock=FakeClock())
    assert verify_export(out.getvalue().splitlines(keepends=True), manifest).ok


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    with EventStore(store_url) as opened:
        yield opened


# -- tombstones no purge writes ----------------------------------------------------------------


def test_a_tombstone_listing_positions_after_its_own_hides_no_deletion(store_url: str) -> None:
    """The hunter's case: a tombstone of a stream of its own, listing an earlier completion
    and positions that did not exist yet; both completions deleted later."""
    inline_runs(store_url, ["default"] * 4)
    with EventStore(store_url) as store:
        rows = store.read_raw_after(0, 1000)
        before = [r.id for r in rows if r.topic == "operation.completed"][-1]
        last = store.last_position()
        listed = [before, *range(last + 2, last + 100)]
        tombstone = forge(
            store, "nothing-to-see", 0, "operation.purged", {"positions": listed, "versions": 0}
        )
    inline_runs(store_url, ["default"] * 2)  # business goes on after it
    with EventStore(store_url) as store:
        rows = store.read_raw_after(tombstone, 1000)
        after = next(r.id for r in rows if r.topic == "operation.completed")
        assert after in listed
        delete_rows(store, [before, after])
        assert_vouches_for_nothing(store, tombstone, [before, after])
        [problem] = [p for p in verify_store(store).problems if p.kind == "tombstone"]
        assert "not an earlier one" in problem.message


def test_a_position_another_tombstone_accounts_for_is_not_taken_twice(
    store: EventStore,
) -> None:
    """A real purge's position listed again, to make a forged list the size it must be: the
    earlier claim stands, the later tombstone vouches for nothing."""
    store.append(Append("victim", 0, [NewEvent("t.created", AT, CONTEXT, {})]))
    store.append(
        Append("op-1", 0, [NewEvent("t.created", AT, CONTEXT, {}), NewEvent("t.done", AT, {}, {})])
    )
    purged = positions_of(store, "op-1")
    store.append(
        Append(
            "op-1",
            2,
            [NewEvent("operation.purged", AT, CONTEXT, {"positions": purged, "versions": 2})],
        )
    )
    store.delete_stream_events("op-1", 2)
    [victim] = positions_of(store, "victim")
    listed = sorted([purged[0], victim])
    tombstone = forge(store, "x", 0, "operation.purged", {"positions": listed, "versions": 0})
    store.append(Append("later", 0, [NewEvent("t.created", AT, CONTEXT, {})]))
    delete_rows(store, [victim])
    assert_vouches_for_nothing(store, tombstone, [victim])
    assert not {("deleted", p) for p in purged} & kinds(verify_store(store).problems)
    assert read_tombstones(store).purged == set(purged)


def test_a_tombstone_whose_stream_still_holds_the_versions_it_purged(store: EventStore) -> None:
    """Appended to a live stream, it says versions 1-3 were purged and lists another stream's
    three events: that stream's versions 1-3 are all still there."""
    three = [NewEvent("t.noted", AT, CONTEXT, {"n": n}) for n in range(3)]
    store.append(Append("live", 0, three))
    store.append(Append("victim", 0, three))
    victims = positions_of(store, "victim")
    data = {"positions": victims, "versions": 3}
    tombstone = forge(store, "live", 3, "operation.purged", data)
    store.append(Append("later", 0, [NewEvent("t.created", AT, CONTEXT, {})]))
    store.delete_stream_events("victim", 3)
    assert_vouches_for_nothing(store, tombstone, victims)
    [problem] = [p for p in verify_store(store).problems if p.kind == "tombstone"]
    assert "stream live still holds version 1" in problem.message


@pytest.mark.parametrize(
    ("topic", "others", "versions", "said"),
    [
        ("workflow.purged", 1, 1, "2 positions for 1 purged versions"),
        ("outcome.purged", 2, 1, "3 positions for 1 purged versions"),
        ("operation.purged", 3, 1, "4 positions for 1 purged versions"),
        ("operation.purged", 2, 1, None),  # an operation's Outcome Record stream: up to 2
        # A stream's first version purging none: its two "Outcome Record" positions hid two
        # completions of other operations (found by a defect hunt, stop 37).
        ("operation.purged", 2, 0, "it says 0 versions were purged"),
        ("workflow.purged", 1, 0, "it says 0 versions were purged"),
    ],
)
def test_a_tombstone_lists_one_position_per_purged_version(
    store: EventStore, topic: str, others: int, versions: int, said: str | None
) -> None:
    """Its own stream's purged versions (at least one), each once (an operation's: and up to
    two of its Outcome Record stream's), at the version after them: a list longer than that,
    or one purging nothing, vouches for nothing."""
    own = [forge(store, "x", version, "t.created", {}) for version in range(versions)]
    for n in range(others):
        store.append(Append(f"victim-{n}", 0, [NewEvent("t.created", AT, CONTEXT, {})]))
    victims = own + [positions_of(store, f"victim-{n}")[0] for n in range(others)]
    tombstone = forge(store, "x", versions, topic, {"positions": victims, "versions": versions})
    store.append(Append("later", 0, [NewEvent("t.created", AT, CONTEXT, {})]))
    delete_rows(store, victims)
    if said is None:  # the form passes: what the rule cannot tell (two events of any stream)
        assert verify_store(store).ok
        return
    assert_vouches_for_nothing(store, tombstone, victims)
    [problem] = [p for p in verify_store(store).problems if p.kind == "tombstone"]
    assert said in problem.message


def test_a_tombstone_listing_a_position_twice_or_below_one(store: EventStore) -> None:
    store.append(Append("victim", 0, [NewEvent("t.created", AT, CONTEXT, {})]))
    [victim] = positions_of(store, "victim")
    twice = forge(store, "x", 0, "operation.purged", {"positions": [victim] * 2, "versions": 0})
    below = forge(store, "y", 0, "operation.purged", {"positions": [0, victim], "versions": 0})
    store.append(Append("later", 0, [NewEvent("t.created", AT, CONTEXT, {})]))
    delete_rows(store, [victim])
    assert_vouches_for_nothing(store, twice, [victim])
    problems = {p.position: p.message for p in verify_store(store).problems}
    assert "twice" in problems[twice] and "not an earlier one" in problems[below]


# -- the purges' own tombstones ------------------------------------------------------------------


def shop(store_url: str, clock: FakeClock) -> Application:
    app = Application(store_url, clock=clock, retention=Retention(journal_seconds=30 * DAY))

    @app.operation("order.place", retention=Retention(journal_seconds=10 * DAY,
                                                      outcome_seconds=2 * DAY))  # fmt: skip
    def place(ctx: ExecutionContext, params: dict[str, Any]) -> dict[str, Any]:
        return {"order": params["n"]}

    return app


def purge_cut_short(app: Application, monkeypatch: pytest.MonkeyPatch) -> None:
    """A purge run whose deletions have not happened yet (each tombstone is appended first,
    its deletion is another transaction)."""
    with monkeypatch.context() as patched:
        patched.setattr(app.store, "delete_stream_events", lambda *args: 0)
        app.purge(actor="janitor")


def test_every_form_of_an_operations_tombstone_vouches(
    store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operation purged after its Outcome Record was (the tombstone lists the outcome
    tombstone and its record too), one purged with its record, one Inline (no record):
    each also between its tombstone and the deletion, when the events it lists are still
    there and two tombstones list the same record."""
    app = shop(store_url, clock)
    try:
        first = app.submit("order.place", {"n": 1}, actor="a", tenant="t")
        asyncio.run(app.work_until_idle())
        clock.advance(2 * DAY)
        assert [i.what for i in app.purge(actor="janitor").items] == ["outcome"]
        assert_verifies_and_exports(app.store)
        second = app.submit("order.place", {"n": 2}, actor="a", tenant="t")
        third = app.run("order.place", {"n": 3}, actor="a", tenant="t").operation_id
        asyncio.run(app.work_until_idle())
        clock.advance(10 * DAY)
        purge_cut_short(app, monkeypatch)
        assert_verifies_and_exports(app.store)
        tombstones = {
            e.stream: e for e in app.store.read_topics(["operation.purged", "outcome.purged"])
        }
        extra = {
            s: len(t.data["positions"]) - t.data["versions"]
            for s, t in tombstones.items()
            if t.type == "operation.purged"
        }
        assert extra == {first: 2, second: 1, third: 0}  # every form, cut short
        for stream, tombstone in tombstones.items():  # the deletions that were cut short
            app.store.delete_stream_events(stream, tombstone.version - 1)
            app.store.delete_stream_events(f"outcome:{stream}", 2)
        assert [e.type for e in app.store.read_stream(first)] == ["operation.purged"]
        assert app.store.read_stream(f"outcome:{first}") == []
        assert_verifies_and_exports(app.store)
        assert read_tombstones(app.store).problems == []
    finally:
        app.close()


class Echo:
    def __init__(self, env: Any) -> None:
        pass

    async def run(self, event: Any, step: Any) -> Any:
        return {"params": event.params}


def test_a_workflow_instance_purged_created_again_and_purged_again(
    store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W2: the id's new history follows the first tombstone; the second tombstone lists
    the first one and everything it listed (versions: the whole stream's)."""
    app = Application(store_url, clock=clock)
    try:
        binding = app.register_workflow(Echo)
        stream = instance_stream(binding.uid, "w")

        def lifetime(purge: Callable[[], None]) -> None:
            asyncio.run(binding.create(id="w", params={"n": 1}))
            asyncio.run(app.work_until_idle())
            clock.advance(2_592_000)
            purge()

        lifetime(lambda: asyncio.run(app.work_until_idle()))
        assert [e.type for e in app.store.read_stream(stream)] == ["workflow.purged"]
        assert_verifies_and_exports(app.store)
        with monkeypatch.context() as patched:  # the second purge cut short
            patched.setattr(app.store, "delete_stream_events", lambda *args: 0)
            lifetime(lambda: asyncio.run(app.work_until_idle()))
        events = app.store.read_stream(stream)
        tombstones = [e for e in events if e.type == "workflow.purged"]
        assert len(tombstones) == 2
        earlier, later = tombstones
        assert earlier.position in later.data["positions"]
        assert set(earlier.data["positions"]) <= set(later.data["positions"])
        assert len(later.data["positions"]) == later.data["versions"] == later.version - 1
        assert_verifies_and_exports(app.store)
        app.purge(actor="janitor")  # finishes the deletion
        assert [e.type for e in app.store.read_stream(stream)] == ["workflow.purged"]
        assert_verifies_and_exports(app.store)
        assert read_tombstones(app.store).problems == []
    finally:
        app.close()


def test_an_exports_tombstone_lines_vouch_by_the_journals_rules() -> None:
    """Offline (`verify --jsonl --key`), a hidden leaf counted as purged when any line whose
    type ended in ``.purged`` listed its position: a "tombstone" purging no version of a
    stream that never was, one named like a tombstone, one listing a later position, one
    taking another's position (found by a defect hunt against the operator, stop 37)."""

    def line(position: int, stream: str, version: int, kind: str, **data: Any) -> ObservedEvent:
        return ObservedEvent(position, stream, version, kind, AT, CONTEXT, data)

    events = [
        line(1, "a", 1, "t.created"),
        line(2, "b", 1, "t.created"),
        # "op" had versions 1 and 2 at positions 3 and 4, purged (not in the file).
        line(5, "op", 3, "operation.purged", positions=[3, 4], versions=2),
        line(6, "cleanup", 1, "operation.purged", positions=[1, 2], versions=0),
        line(7, "custom", 1, "custom.purged", positions=[1], versions=0),
        line(8, "later", 2, "workflow.purged", positions=[9], versions=1),
        line(10, "thief", 2, "workflow.purged", positions=[3], versions=1),
    ]
    assert purged_by_tombstones(events) == {3, 4}
    # The same rules see the file's own lines: a stream still holding a purged version.
    kept = [*events, line(11, "x", 1, "t.created"), line(12, "x", 2, "workflow.purged",
                                                         positions=[11], versions=1)]  # fmt: skip
    assert purged_by_tombstones(kept) == {3, 4, 11}
    assert purged_by_tombstones([line(13, "y", 1, "t.created"),
                                 line(14, "y", 2, "workflow.purged", positions=[2],
                                      versions=1)]) == set()  # fmt: skip
