"""The access service: Spaces, principals, roles and bearer tokens, kept in the journal.

The journal is the only truth: a space is ``space-<name>``, a principal is
``principal-<id>`` (its roles and its tokens' digests), a token is
``token-<sha256 hex>``. The plaintext of a token is returned once by
:meth:`AccessService.issue_token` and is never journaled, logged or compared.

Every write is an append at the version read (optimistic concurrency); one that
lost a race reads again and decides again, up to ``_RACES`` times, then the
``FencingError`` (a ``Conflict``) is raised: a write never silently disappears.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from domain.access import (
    PRINCIPAL_CREATED,
    PRINCIPAL_TOKEN_ISSUED,
    PRINCIPAL_TOKEN_REVOKED,
    ROLE_GRANTED,
    ROLE_REVOKED,
    SPACE_CREATED,
    TOKEN_ISSUED,
    TOKEN_REVOKED,
    Principal,
    PrincipalState,
    Role,
    SpaceState,
    TokenState,
    check_label,
    check_principal_id,
    check_space_name,
    check_token_id,
    check_token_shape,
    fold_principal,
    fold_space,
    fold_token,
    new_token,
    principal_stream,
    space_stream,
    token_digest,
    token_id,
    token_stream,
)
from domain.clock import Clock, format_instant
from domain.errors import (
    BlackOpsError,
    Conflict,
    FencingError,
    InvalidRequest,
    NotFound,
    Unauthorized,
)
from domain.events import NewEvent, RecordedEvent
from journal.store import Append, EventStore

T = TypeVar("T")
_RACES = 20
#: Entries kept by the authentication cache before expired ones are swept.
_CACHE_MAX = 10_000


class AccessService:
    """Spaces, principals, roles and tokens over one :class:`EventStore`.

    ``authenticate`` keeps what it found for ``cache_ttl`` seconds of ``clock`` time,
    keyed by token digest: a revocation or a role change made by *another* process
    takes effect within that TTL (2 s by default); one made through *this* service
    clears the cache at once. ``cache_ttl=0`` turns the cache off.
    """

    def __init__(self, store: EventStore, clock: Clock, *, cache_ttl: float = 2.0) -> None:
        if cache_ttl < 0:
            raise ValueError("cache_ttl must not be negative")
        self.store = store
        self.clock = clock
        self.cache_ttl = timedelta(seconds=cache_ttl)
        self._cache: dict[str, tuple[datetime, Principal]] = {}
        #: Bumped (under ``_lock``) whenever a change through this service clears the
        #: cache: a lookup that read the journal before such a clear keeps its answer
        #: out of the cache (it may predate the change).
        self._generation = 0
        self._lock = threading.Lock()
        #: Spaces found to exist: a Space is never removed, so the answer holds for good
        #: (an unknown name is read again each time: another process may create it).
        self._spaces_seen: set[str] = set()

    # -- spaces ----------------------------------------------------------------------------

    def create_space(self, name: str, context: dict[str, Any]) -> dict[str, Any]:
        """Create Space ``name``; ``Conflict`` if it exists."""
        check_space_name(name)
        _check_context(context)
        stream = space_stream(name)
        events = self.store.read_stream(stream)
        if fold_space(_pairs(events)).exists:
            raise Conflict(f"space {name!r} exists")
        at = self._at()
        event = NewEvent(SPACE_CREATED, at, context, {"name": name, "request": _nonce()})
        try:
            self.store.append(Append(stream, _version(events), [event]))
        except FencingError:
            raise Conflict(f"space {name!r} exists") from None  # another create won
        return {"name": name, "createdAt": at}

    def space_exists(self, name: str) -> bool:
        """Whether Space ``name`` exists. Asked on the HTTP event loop for every request of
        a system principal, it read the Space's stream there each time, so a slow database
        held up every request of the server (found by a fault hunt, stop 37): a Space seen
        once is known without a read."""
        if name in self._spaces_seen:
            return True
        exists = self._space(name).exists
        if exists:
            self._spaces_seen.add(name)
        return exists

    def spaces(self) -> list[str]:
        """Every Space's name, sorted."""
        return sorted(str(event.data["name"]) for event in self.store.read_topics([SPACE_CREATED]))

    def _space(self, name: str) -> SpaceState:
        check_space_name(name)
        return fold_space(_pairs(self.store.read_stream(space_stream(name))))

    # -- principals and roles --------------------------------------------------------------

    def create_principal(
        self, principal_id: str, context: dict[str, Any], *, system: bool = False
    ) -> dict[str, Any]:
        """Create a principal with no roles; ``Conflict`` if it exists."""
        check_principal_id(principal_id)
        _check_context(context)
        if type(system) is not bool:
            raise InvalidRequest("system must be a boolean")
        stream = principal_stream(principal_id)
        events = self.store.read_stream(stream)
        if fold_principal(_pairs(events)).exists:
            raise Conflict(f"principal {principal_id!r} exists")
        data = {"principal": principal_id, "system": system, "request": _nonce()}
        try:
            self.store.append(
                Append(
                    stream,
                    _version(events),
                    [NewEvent(PRINCIPAL_CREATED, self._at(), context, data)],
                )
            )
        except FencingError:
            raise Conflict(f"principal {principal_id!r} exists") from None
        return _principal_record(PrincipalState(principal_id, system))

    def grant(
        self,
        principal_id: str,
        space: str,
        role: Role | str,
        context: dict[str, Any],
        *,
        unless_outside: BlackOpsError | None = None,
    ) -> dict[str, Any]:
        """Give ``principal_id`` ``role`` in ``space`` (replacing any other role there).

        The space and the principal must exist (``NotFound``). Granting the role it
        already has appends nothing. ``unless_outside``: raised instead when the principal
        is not ``space``'s (no role there, or a system principal), judged on the state the
        grant would follow (a check before the grant could be overtaken by a revoke).
        """
        check_principal_id(principal_id)
        check_space_name(space)
        granted = Role.parse(role)
        _check_context(context)
        if not self._space(space).exists:
            raise NotFound(f"no space {space!r}")

        def attempt() -> dict[str, Any]:
            state, version = self._load_principal(principal_id)
            if unless_outside is not None and (state.system or space not in state.roles):
                raise unless_outside
            if state.roles.get(space) is not granted:
                data = {"principal": principal_id, "space": space, "role": granted.value}
                self._append_principal(principal_id, version, ROLE_GRANTED, data, context)
                state.roles[space] = granted
            return _principal_record(state)

        return self._retry(attempt)

    def revoke(self, principal_id: str, space: str, context: dict[str, Any]) -> dict[str, Any]:
        """Take away ``principal_id``'s role in ``space``; without one, appends nothing."""
        check_principal_id(principal_id)
        check_space_name(space)
        _check_context(context)

        def attempt() -> dict[str, Any]:
            state, version = self._load_principal(principal_id)
            if space in state.roles:
                data = {"principal": principal_id, "space": space}
                self._append_principal(principal_id, version, ROLE_REVOKED, data, context)
                del state.roles[space]
            return _principal_record(state)

        return self._retry(attempt)

    def principal(self, principal_id: str) -> Principal:
        """The principal with its current roles; ``NotFound`` if none."""
        check_principal_id(principal_id)
        return self._load_principal(principal_id)[0].principal()

    def principals(self, space: str) -> list[dict[str, Any]]:
        """``[{"id", "role"}]`` of every principal with a role in ``space``, by id."""
        if not self._space(space).exists:
            raise NotFound(f"no space {space!r}")
        topics = [PRINCIPAL_CREATED, ROLE_GRANTED, ROLE_REVOKED]
        by_stream: dict[str, list[RecordedEvent]] = {}
        for event in self.store.read_topics(topics):
            by_stream.setdefault(event.stream, []).append(event)
        found = []
        for events in by_stream.values():
            state = fold_principal(_pairs(events))
            role = state.roles.get(space)
            if state.id is not None and role is not None:
                found.append({"id": state.id, "role": role.value})
        return sorted(found, key=lambda row: row["id"])

    # -- tokens ----------------------------------------------------------------------------

    def issue_token(
        self,
        principal_id: str,
        context: dict[str, Any],
        *,
        label: str | None = None,
        space: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """A new bearer token for ``principal_id``: ``(plaintext, record)``.

        The plaintext is returned here only; the journal gets its SHA-256 digest, on
        ``token-<digest>`` and on the principal's stream, in one transaction. With
        ``space`` the token is scoped: it carries only the principal's role in that
        Space, never a system power (what a Space admin may hand out).
        """
        check_principal_id(principal_id)
        check_label(label)
        _check_context(context)

        def attempt() -> tuple[str, dict[str, Any]]:
            _, version = self._load_principal(principal_id)
            token = new_token()
            digest = token_digest(token)
            tid = token_id(digest)
            at = self._at()
            issued = {"principal": principal_id, "token_id": tid, "label": label}
            if space is not None:
                issued["space"] = check_space_name(space)
            linked = {"principal": principal_id, "token_id": tid, "digest": digest}
            self.store.append(
                Append(token_stream(digest), 0, [NewEvent(TOKEN_ISSUED, at, context, issued)]),
                Append(
                    principal_stream(principal_id),
                    version,
                    [NewEvent(PRINCIPAL_TOKEN_ISSUED, at, context, linked)],
                ),
            )
            record = {"tokenId": tid, "principal": principal_id, "label": label, "issuedAt": at}
            if space is not None:
                record["space"] = space
            return token, record

        return self._retry(attempt)

    def revoke_token(
        self,
        principal_id: str,
        token_id: str,
        context: dict[str, Any],
        *,
        space: str | None = None,
    ) -> dict[str, Any]:
        """Revoke one of ``principal_id``'s tokens (both streams, one transaction).

        ``NotFound`` if the principal has no such token; revoking a revoked token
        appends nothing. With ``space`` (a Space admin's revocation) only a token scoped
        to that Space is found: one that acts elsewhere too is not this Space's to revoke.
        """
        check_principal_id(principal_id)
        check_token_id(token_id)
        _check_context(context)

        def attempt() -> dict[str, Any]:
            state, version = self._load_principal(principal_id)
            ref = state.tokens.get(token_id)
            if ref is None:
                raise NotFound(f"principal {principal_id!r} has no token {token_id!r}")
            stream = token_stream(ref.digest)
            events = self.store.read_stream(stream)
            if space is not None and fold_token(_pairs(events)).space != space:
                raise NotFound(f"principal {principal_id!r} has no token {token_id!r} here")
            record: dict[str, Any] = {"tokenId": token_id, "principal": principal_id}
            if ref.revoked:
                return record | {"revoked": True}
            token_version = _version(events)
            at = self._at()
            data = {"principal": principal_id, "token_id": token_id, "request": _nonce()}
            self.store.append(
                Append(stream, token_version, [NewEvent(TOKEN_REVOKED, at, context, data)]),
                Append(
                    principal_stream(principal_id),
                    version,
                    [NewEvent(PRINCIPAL_TOKEN_REVOKED, at, context, data)],
                ),
            )
            return record | {"revoked": True, "revokedAt": at}

        return self._retry(attempt)

    def authenticate(self, token: str) -> Principal:
        """The principal a bearer token acts as, with its current roles.

        ``Unauthorized`` for a malformed, unknown or revoked token, or a token whose
        principal is gone. The lookup by digest is the check: no plaintext is compared.
        """
        check_token_shape(token)
        digest = token_digest(token)
        now = self.clock.now()
        cached = self._cached(digest, now)
        if cached is not None:
            return cached
        with self._lock:
            generation = self._generation  # before any read: see _retry
        found: TokenState = fold_token(_pairs(self.store.read_stream(token_stream(digest))))
        if not found.active or found.principal is None:
            raise Unauthorized()
        events = self.store.read_stream(principal_stream(found.principal))
        state = fold_principal(_pairs(events))
        ref = state.tokens.get(token_id(digest))
        if not state.exists or ref is None or ref.revoked:
            raise Unauthorized()
        principal = state.principal()
        if found.space is not None:  # a Space-scoped token: that Space's role only
            role = principal.role_in(found.space)
            principal = Principal(principal.id, {found.space: role} if role else {}, False)
        if self.cache_ttl:
            with self._lock:
                if generation != self._generation:
                    # A revocation or role change through this service landed while
                    # we read: what we read may predate it, so it is answered (the
                    # lookup linearizes before the change) but never cached.
                    return principal
                if len(self._cache) >= _CACHE_MAX:
                    self._cache = {k: v for k, v in self._cache.items() if now < v[0]}
                    if len(self._cache) >= _CACHE_MAX:
                        self._cache.clear()
                self._cache[digest] = (now + self.cache_ttl, principal)
        return principal

    def cached_principal(self, token: str) -> Principal | None:
        """What :meth:`authenticate` would answer from its cache, without reading the
        store: ``None`` when it would have to read it (``Unauthorized`` for a malformed
        token, as there). The HTTP edge asks this on its event loop first."""
        check_token_shape(token)
        return self._cached(token_digest(token), self.clock.now())

    # -- helpers ---------------------------------------------------------------------------

    def _cached(self, digest: str, now: datetime) -> Principal | None:
        with self._lock:
            cached = self._cache.get(digest)
        return cached[1] if cached is not None and now < cached[0] else None

    def _at(self) -> str:
        return format_instant(self.clock.now())

    def _load_principal(self, principal_id: str) -> tuple[PrincipalState, int]:
        events = self.store.read_stream(principal_stream(principal_id))
        state = fold_principal(_pairs(events))
        if not state.exists:
            raise NotFound(f"no principal {principal_id!r}")
        return state, _version(events)

    def _append_principal(
        self,
        principal_id: str,
        version: int,
        type_: str,
        data: dict[str, Any],
        context: dict[str, Any],
    ) -> None:
        event = NewEvent(type_, self._at(), context, data | {"request": _nonce()})
        self.store.append(Append(principal_stream(principal_id), version, [event]))

    def _retry(self, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` (read, decide, append) again while it loses races."""
        for remaining in range(_RACES, 0, -1):
            try:
                result = attempt()
            except FencingError:
                if remaining == 1:
                    raise
                continue
            with self._lock:
                self._cache.clear()  # this process's own changes are seen at once
                self._generation += 1  # ... by lookups already reading, too
            return result
        raise AssertionError("unreachable")


def _pairs(events: list[RecordedEvent]) -> list[tuple[str, dict[str, Any]]]:
    return [(event.type, event.data) for event in events]


def _version(events: list[RecordedEvent]) -> int:
    return events[-1].version if events else 0


def _nonce() -> str:
    # Two writers never make byte-identical appends, which the store would take for
    # the first one's lost acknowledgement and let both "win".
    return uuid.uuid4().hex


def _check_context(context: object) -> None:
    if not isinstance(context, dict):
        raise InvalidRequest("context must be a JSON object")


def _principal_record(state: PrincipalState) -> dict[str, Any]:
    return {
        "id": state.id,
        "system": state.system,
        "roles": {space: role.value for space, role in sorted(state.roles.items())},
        "tokens": sorted(tid for tid, ref in state.tokens.items() if not ref.revoked),
    }
