"""Spaces, principals, roles and bearer tokens: the access rule and its journal."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from blackops.control.access import AccessService
from blackops.testing import FakeClock
from domain.access import (
    REQUIRED,
    Action,
    Principal,
    Role,
    check_access,
    check_token_shape,
    fold_principal,
    fold_token,
    new_token,
    token_digest,
)
from domain.errors import Conflict, Forbidden, InvalidRequest, NotFound, Unauthorized
from journal.store import EventStore

CTX: dict[str, Any] = {"operation_id": "op-1", "actor": {"id": "root", "kind": "system"}}


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    with EventStore(store_url) as s:
        yield s


@pytest.fixture
def access(store: EventStore, clock: FakeClock) -> AccessService:
    return AccessService(store, clock, cache_ttl=2.0)


def setup_space(access: AccessService, space: str, principal: str, role: Role) -> None:
    if not access.space_exists(space):
        access.create_space(space, CTX)
    with contextlib.suppress(Conflict):
        access.create_principal(principal, CTX)
    access.grant(principal, space, role, CTX)


# -- the pure model --------------------------------------------------------------------------


def test_roles_are_ordered_reader_operator_deployer_admin() -> None:
    assert [r.rank for r in Role] == [0, 1, 2, 3]
    assert Role.READER < Role.OPERATOR < Role.DEPLOYER < Role.ADMIN
    assert Role.ADMIN.covers(Role.READER) and Role.DEPLOYER.covers(Role.DEPLOYER)
    assert not Role.OPERATOR.covers(Role.DEPLOYER)
    assert Role.parse("deployer") is Role.DEPLOYER
    with pytest.raises(InvalidRequest):
        Role.parse("owner")


def test_permission_table_names_the_least_role_for_each_action() -> None:
    assert dict(REQUIRED) == {
        Action.READ: Role.READER,
        Action.OPERATE: Role.OPERATOR,
        Action.DEPLOY: Role.DEPLOYER,
        Action.ADMINISTER: Role.ADMIN,
    }
    operator = Principal("op", {"a": Role.OPERATOR})
    assert operator.may("a", Action.READ) and operator.may("a", Action.OPERATE)
    assert not operator.may("a", Action.DEPLOY) and not operator.may("b", Action.READ)


def test_check_access_without_a_role_is_not_found_too_low_is_forbidden() -> None:
    reader = Principal("r", {"a": Role.READER})
    check_access(reader, "a", Action.READ)
    with pytest.raises(NotFound) as missing:
        check_access(reader, "b", Action.READ)
    assert missing.value.message == "no space 'b'"
    with pytest.raises(Forbidden) as low:
        check_access(reader, "a", Action.OPERATE)
    assert "operator" in low.value.message and low.value.http_status == 403


def test_system_principal_may_do_everything_everywhere() -> None:
    root = Principal("root", system=True)
    for action in Action:
        check_access(root, "anywhere", action)
    assert root.may("elsewhere", Action.ADMINISTER) and root.role_in("anywhere") is None


def test_token_shape_and_digest() -> None:
    token = new_token()
    assert token.startswith("bo_") and check_token_shape(token) == token
    assert token_digest(token) == hashlib.sha256(token.encode()).hexdigest()
    for garbage in ["", "bo_", "Bearer x", token + "x", "xx" + token[2:], token[:-1] + "!", 7]:
        with pytest.raises(Unauthorized):
            check_token_shape(garbage)


def test_folds_fail_closed_on_unknown_events() -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        fold_principal([("principal.created", {"principal": "p", "system": False}), ("x", {})])
    assert fold_token([("token.issued", {"principal": "p", "token_id": "t"})]).active
    assert not fold_token(
        [("token.issued", {"principal": "p", "token_id": "t"}), ("token.revoked", {})]
    ).active


# -- the journal-backed service --------------------------------------------------------------


def test_token_is_journaled_only_as_a_hash(access: AccessService, store: EventStore) -> None:
    setup_space(access, "acme", "alice", Role.OPERATOR)
    token, record = access.issue_token("alice", CTX, label="ci")
    digest = token_digest(token)
    assert record["tokenId"] == digest[:16] and record["principal"] == "alice"
    access.revoke_token("alice", record["tokenId"], CTX)
    events = store.read_after(0, 10000)
    assert {e.stream for e in events} >= {"space-acme", "principal-alice", f"token-{digest}"}
    secret = token.removeprefix("bo_")
    for event in events:
        blob = json.dumps([event.stream, event.type, event.context, event.data])
        assert secret not in blob
    issued = [e for e in events if e.type == "token.issued"]
    assert issued[0].context == CTX and issued[0].data["label"] == "ci"


def test_issue_appends_both_streams_in_one_transaction(
    access: AccessService, store: EventStore
) -> None:
    setup_space(access, "acme", "alice", Role.READER)
    before = store.last_position()
    token, _ = access.issue_token("alice", CTX)
    events = store.read_after(before, 100)
    assert [e.type for e in events] == ["token.issued", "principal.token_issued"]
    assert events[1].data["digest"] == token_digest(token)


def test_authenticate_returns_current_roles(access: AccessService) -> None:
    setup_space(access, "acme", "alice", Role.DEPLOYER)
    token, _ = access.issue_token("alice", CTX)
    who = access.authenticate(token)
    assert who.id == "alice" and who.role_in("acme") is Role.DEPLOYER and not who.system
    check_access(who, "acme", Action.DEPLOY)


def test_wrong_garbage_and_unknown_tokens_are_unauthorized(access: AccessService) -> None:
    setup_space(access, "acme", "alice", Role.READER)
    token, _ = access.issue_token("alice", CTX)
    for bad in [new_token(), "garbage", token.upper(), ""]:
        with pytest.raises(Unauthorized):
            access.authenticate(bad)


def test_revoked_token_is_refused_after_the_cache_ttl(store: EventStore, clock: FakeClock) -> None:
    writer = AccessService(store, clock)
    reader = AccessService(store, clock, cache_ttl=2.0)  # another process's cache
    setup_space(writer, "acme", "alice", Role.READER)
    token, record = writer.issue_token("alice", CTX)
    assert reader.authenticate(token).id == "alice"
    writer.revoke_token("alice", record["tokenId"], CTX)
    with pytest.raises(Unauthorized):
        writer.authenticate(token)  # the revoking service forgets at once
    assert reader.authenticate(token).id == "alice"  # still cached, within the TTL
    clock.advance(2.0)
    with pytest.raises(Unauthorized):
        reader.authenticate(token)
    last = store.last_position()
    assert writer.revoke_token("alice", record["tokenId"], CTX)["revoked"]
    assert store.last_position() == last  # revoking again appends nothing


def test_revoking_an_unknown_token_is_not_found(access: AccessService) -> None:
    setup_space(access, "acme", "alice", Role.READER)
    with pytest.raises(NotFound):
        access.revoke_token("alice", "0123456789abcdef", CTX)
    with pytest.raises(InvalidRequest):
        access.revoke_token("alice", "not-a-token-id", CTX)


def test_grants_in_two_spaces_are_independent(access: AccessService) -> None:
    setup_space(access, "acme", "alice", Role.ADMIN)
    setup_space(access, "globex", "alice", Role.READER)
    setup_space(access, "globex", "bob", Role.OPERATOR)
    alice = access.principal("alice")
    assert alice.role_in("acme") is Role.ADMIN and alice.role_in("globex") is Role.READER
    with pytest.raises(Forbidden):
        check_access(alice, "globex", Action.OPERATE)
    with pytest.raises(NotFound):
        check_access(access.principal("bob"), "acme", Action.READ)
    access.revoke("alice", "acme", CTX)
    alice = access.principal("alice")
    assert alice.role_in("acme") is None and alice.role_in("globex") is Role.READER
    assert access.principals("globex") == [
        {"id": "alice", "role": "reader"},
        {"id": "bob", "role": "operator"},
    ]
    assert access.principals("acme") == []
    assert access.spaces() == ["acme", "globex"]


def test_regrant_replaces_the_role_and_same_role_appends_nothing(
    access: AccessService, store: EventStore
) -> None:
    setup_space(access, "acme", "alice", Role.READER)
    before = store.last_position()
    access.grant("alice", "acme", "reader", CTX)
    assert store.last_position() == before
    record = access.grant("alice", "acme", Role.ADMIN, CTX)
    assert record["roles"] == {"acme": "admin"} and store.last_position() == before + 1


def test_duplicate_space_and_principal_are_conflicts(
    access: AccessService, store: EventStore
) -> None:
    access.create_space("acme", CTX)
    access.create_principal("root", CTX, system=True)
    last = store.last_position()
    with pytest.raises(Conflict):
        access.create_space("acme", CTX)
    with pytest.raises(Conflict):
        access.create_principal("root", CTX)
    assert store.last_position() == last
    assert access.principal("root").system


def test_grant_into_a_missing_space_or_to_a_missing_principal_is_not_found(
    access: AccessService, store: EventStore
) -> None:
    access.create_principal("alice", CTX)
    access.create_space("acme", CTX)
    last = store.last_position()
    with pytest.raises(NotFound, match="no space 'ghost'"):
        access.grant("alice", "ghost", Role.READER, CTX)
    with pytest.raises(NotFound, match="no principal 'bob'"):
        access.grant("bob", "acme", Role.READER, CTX)
    with pytest.raises(NotFound):
        access.issue_token("bob", CTX)
    with pytest.raises(NotFound):
        access.principal("bob")
    assert store.last_position() == last


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("create_space", ("-leading-dash", CTX)),
        ("create_space", ("a" * 64, CTX)),
        ("create_space", ("sp ace", CTX)),
        ("create_principal", ("bad/id", CTX)),
        ("create_principal", ("", CTX)),
        ("create_principal", ("x" * 129, CTX)),
        ("grant", ("alice", "acme", "owner", CTX)),
        ("grant", ("alice", "ac me", "reader", CTX)),
        ("grant", ("alice", "acme", "reader", "not a dict")),
        ("revoke", ("al ice", "acme", CTX)),
    ],
)
def test_invalid_input_is_invalid_request_and_appends_nothing(
    access: AccessService, store: EventStore, call: str, args: tuple[Any, ...]
) -> None:
    setup_space(access, "acme", "alice", Role.READER)
    last = store.last_position()
    with pytest.raises(InvalidRequest):
        getattr(access, call)(*args)
    assert store.last_position() == last


def test_invalid_token_label_appends_nothing(access: AccessService, store: EventStore) -> None:
    setup_space(access, "acme", "alice", Role.READER)
    last = store.last_position()
    with pytest.raises(InvalidRequest):
        access.issue_token("alice", CTX, label="line\nbreak")
    assert store.last_position() == last


def test_concurrent_grants_from_two_threads_all_land(access: AccessService) -> None:
    access.create_principal("alice", CTX)
    spaces = [f"s{n}" for n in range(16)]
    for space in spaces:
        access.create_space(space, CTX)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def grant_half(mine: list[str]) -> None:
        try:
            barrier.wait()
            for space in mine:
                access.grant("alice", space, Role.OPERATOR, CTX)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=grant_half, args=(spaces[i::2],)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    roles = access.principal("alice").roles
    assert dict(roles) == dict.fromkeys(spaces, Role.OPERATOR)


def test_a_space_seen_once_is_known_without_reading_the_journal(
    access: AccessService, store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A system principal's every request asked whether its Space exists by reading the
    Space's stream on the HTTP event loop: a slow database held up every request (found by
    a fault hunt, stop 37). A Space is never removed, so one seen is known; an unknown name
    is read each time (another process may create it)."""
    reads: list[str] = []
    real = store.read_stream

    def counted(stream: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(stream)
        return real(stream, *args, **kwargs)

    monkeypatch.setattr(store, "read_stream", counted)
    assert not access.space_exists("later")
    access.create_space("acme", {"actor": {"id": "ops", "kind": "system"}})
    reads.clear()
    assert access.space_exists("acme") and access.space_exists("acme")
    assert len(reads) == 1
    assert not access.space_exists("later") and not access.space_exists("later")
    assert len(reads) == 3
    other = AccessService(store, FakeClock())  # another process creates it: seen at once
    other.create_space("later", {"actor": {"id": "ops", "kind": "system"}})
    assert access.space_exists("later")
