"""Spaces, principals, bearer tokens and roles: the pure access model and its one rule."""

from __future__ import annotations

import enum
import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from domain.errors import Forbidden, InvalidRequest, NotFound, Unauthorized

# -- roles and actions ---------------------------------------------------------------------


class Role(enum.Enum):
    """A principal's role in one Space, ordered: reader < operator < deployer < admin."""

    READER = "reader"
    OPERATOR = "operator"
    DEPLOYER = "deployer"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def covers(self, other: Role) -> bool:
        """True if this role may do everything ``other`` may."""
        return self.rank >= other.rank

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Role):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Role):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Role):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Role):
            return NotImplemented
        return self.rank >= other.rank

    @classmethod
    def parse(cls, value: object) -> Role:
        """A Role from itself or its name (``"reader"`` ...); else ``InvalidRequest``."""
        if isinstance(value, Role):
            return value
        if isinstance(value, str):
            for role in cls:
                if role.value == value:
                    return role
        names = ", ".join(role.value for role in cls)
        raise InvalidRequest(f"role must be one of {names}")


_RANKS: Final[dict[Role, int]] = {role: rank for rank, role in enumerate(Role)}


class Action(enum.Enum):
    """What a request does inside a Space; ``REQUIRED`` maps each to the least role."""

    #: Any GET in the space: resources, instances, operations, the space's journal lines.
    READ = "read"
    #: Create / send events to / terminate instances; run, submit, redrive operations; hold.
    OPERATE = "operate"
    #: Create / update Workers, upload Versions, change Deployments; create, replace,
    #: delete Workflow resources.
    DEPLOY = "deploy"
    #: Grant / revoke roles and issue / revoke tokens in the space; release holds.
    ADMINISTER = "administer"


REQUIRED: Final[Mapping[Action, Role]] = MappingProxyType(
    {
        Action.READ: Role.READER,
        Action.OPERATE: Role.OPERATOR,
        Action.DEPLOY: Role.DEPLOYER,
        Action.ADMINISTER: Role.ADMIN,
    }
)


# -- principals and the one rule -----------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: one role per Space, or ``system`` (everything, everywhere:
    every space, creating spaces, the whole journal)."""

    id: str
    roles: Mapping[str, Role] = field(default_factory=dict, hash=False)
    system: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", MappingProxyType(dict(self.roles)))

    def role_in(self, space: str) -> Role | None:
        return self.roles.get(space)

    def may(self, space: str, action: Action) -> bool:
        if self.system:
            return True
        role = self.role_in(space)
        return role is not None and role.covers(REQUIRED[action])


def check_access(principal: Principal, space: str, action: Action) -> None:
    """The one access rule every surface (Python API, HTTP, CLI) applies.

    - A system principal may do anything in any space: this returns.
    - A principal with no role at all in ``space`` gets ``NotFound("no space ...")``,
      the very answer a missing space gets, so whether another tenant's space exists
      never leaks across Spaces.
    - A principal with a role in ``space`` that does not cover ``REQUIRED[action]``
      gets ``Forbidden`` naming the role needed (it may know the space exists).
    - Otherwise it returns.

    This is pure: it does not know whether ``space`` exists. A surface that let a
    system principal through must still answer ``NotFound`` for a missing space.
    """
    if principal.system:
        return
    role = principal.role_in(space)
    if role is None:
        raise NotFound(f"no space {space!r}")
    needed = REQUIRED[action]
    if not role.covers(needed):
        raise Forbidden(
            f"{action.value} in space {space!r} needs role {needed.value} or higher; "
            f"principal {principal.id!r} is {role.value}"
        )


def check_system(principal: Principal, what: str) -> None:
    """Space-less powers (create spaces, read the whole journal) need a system principal."""
    if not principal.system:
        raise Forbidden(f"{what} needs a system principal")


# -- validation ----------------------------------------------------------------------------

#: The tenant rule used elsewhere (blackops/application.py ``TENANT``).
SPACE_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
PRINCIPAL_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")
LABEL_MAX: Final = 200
#: A token label: free text without control characters or line breaks. Also the published
#: schema's pattern (blackops/http/models.py), so it names no surrogates (see check_label).
LABEL: Final = re.compile(r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]{1,200}$")
#: A surrogate code point in a ``str`` is a lone one (a JSON pair decodes to one character).
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")


def check_space_name(name: object) -> str:
    if not isinstance(name, str) or not SPACE_NAME.fullmatch(name):
        raise InvalidRequest("space name must be 1-63 of [A-Za-z0-9_.-], alphanumeric first")
    return name


def check_principal_id(principal_id: object) -> str:
    if not isinstance(principal_id, str) or not PRINCIPAL_ID.fullmatch(principal_id):
        raise InvalidRequest("principal id must be 1-128 of [A-Za-z0-9_.@-], alphanumeric first")
    return principal_id


def check_label(label: object) -> str | None:
    """A token label: None, or 1-200 characters without controls or line breaks."""
    if label is None:
        return None
    # A lone surrogate has no UTF-8 spelling: the journal could not record the label.
    if not isinstance(label, str) or not LABEL.fullmatch(label) or _SURROGATE.search(label):
        raise InvalidRequest(f"token label must be 1-{LABEL_MAX} characters, no control characters")
    return label


# -- tokens --------------------------------------------------------------------------------

TOKEN_PREFIX: Final = "bo_"
#: ``secrets.token_urlsafe(32)`` is 43 characters of the URL-safe base64 alphabet.
TOKEN_SHAPE: Final = re.compile(r"^bo_[A-Za-z0-9_-]{43}$")
TOKEN_ID_LENGTH: Final = 16
TOKEN_ID: Final = re.compile(r"^[0-9a-f]{16}$")


def new_token() -> str:
    """A fresh bearer token; its plaintext is shown once and never journaled."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """SHA-256 hex of the UTF-8 token: the only form the journal holds."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_id(digest: str) -> str:
    """The public, non-secret name of a token: the first 16 hex digits of its digest."""
    return digest[:TOKEN_ID_LENGTH]


def check_token_shape(token: object) -> str:
    """Cheap syntax check (prefix, length, alphabet) so garbage never reaches the store."""
    if not isinstance(token, str) or not TOKEN_SHAPE.fullmatch(token):
        raise Unauthorized()
    return token


def check_token_id(value: object) -> str:
    if not isinstance(value, str) or not TOKEN_ID.fullmatch(value):
        raise InvalidRequest("token id must be 16 lowercase hex digits")
    return value


# -- events and folds ----------------------------------------------------------------------

SPACE_CREATED: Final = "space.created"
PRINCIPAL_CREATED: Final = "principal.created"
ROLE_GRANTED: Final = "principal.role_granted"
ROLE_REVOKED: Final = "principal.role_revoked"
PRINCIPAL_TOKEN_ISSUED: Final = "principal.token_issued"
PRINCIPAL_TOKEN_REVOKED: Final = "principal.token_revoked"
TOKEN_ISSUED: Final = "token.issued"
TOKEN_REVOKED: Final = "token.revoked"

SPACE_PREFIX: Final = "space-"
PRINCIPAL_PREFIX: Final = "principal-"
TOKEN_PREFIX_STREAM: Final = "token-"


def space_stream(name: str) -> str:
    return SPACE_PREFIX + name


def principal_stream(principal_id: str) -> str:
    return PRINCIPAL_PREFIX + principal_id


def token_stream(digest: str) -> str:
    return TOKEN_PREFIX_STREAM + digest


Events = Iterable[tuple[str, Mapping[str, Any]]]


@dataclass(slots=True)
class SpaceState:
    name: str | None = None

    @property
    def exists(self) -> bool:
        return self.name is not None


@dataclass(slots=True)
class TokenRef:
    """A token as its principal's stream knows it (the digest, never the plaintext)."""

    digest: str
    revoked: bool = False


@dataclass(slots=True)
class PrincipalState:
    id: str | None = None
    system: bool = False
    roles: dict[str, Role] = field(default_factory=dict)
    tokens: dict[str, TokenRef] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return self.id is not None

    def principal(self) -> Principal:
        if self.id is None:
            raise ValueError("the principal does not exist")
        return Principal(self.id, self.roles, self.system)


@dataclass(slots=True)
class TokenState:
    principal: str | None = None
    token_id: str | None = None
    label: str | None = None
    #: A Space-scoped token acts only in that Space (issued by that Space's admin).
    space: str | None = None
    revoked: bool = False

    @property
    def exists(self) -> bool:
        return self.principal is not None

    @property
    def active(self) -> bool:
        return self.exists and not self.revoked


def _unknown(kind: str, type_: str) -> ValueError:
    # Fail closed: an access stream we do not understand grants nothing.
    return ValueError(f"unknown event type {type_!r} in a {kind} stream")


def fold_space(events: Events) -> SpaceState:
    state = SpaceState()
    for type_, data in events:
        if type_ != SPACE_CREATED:
            raise _unknown("space", type_)
        state.name = str(data["name"])
    return state


def fold_principal(events: Events) -> PrincipalState:
    state = PrincipalState()
    for type_, data in events:
        if type_ == PRINCIPAL_CREATED:
            state.id = str(data["principal"])
            state.system = bool(data["system"])
        elif type_ == ROLE_GRANTED:
            state.roles[str(data["space"])] = Role(data["role"])
        elif type_ == ROLE_REVOKED:
            state.roles.pop(str(data["space"]), None)
        elif type_ == PRINCIPAL_TOKEN_ISSUED:
            state.tokens[str(data["token_id"])] = TokenRef(str(data["digest"]))
        elif type_ == PRINCIPAL_TOKEN_REVOKED:
            ref = state.tokens.get(str(data["token_id"]))
            if ref is not None:
                ref.revoked = True
        else:
            raise _unknown("principal", type_)
    return state


def fold_token(events: Events) -> TokenState:
    state = TokenState()
    for type_, data in events:
        if type_ == TOKEN_ISSUED:
            state.principal = str(data["principal"])
            state.token_id = str(data["token_id"])
            label = data.get("label")
            state.label = None if label is None else str(label)
            scope = data.get("space")
            state.space = None if scope is None else str(scope)
        elif type_ == TOKEN_REVOKED:
            state.revoked = True
        else:
            raise _unknown("token", type_)
    return state
