"""A session's form token (decisions U6) cannot be computed from what the journal keeps about
the token: its SHA-256 digest (``principal.token_issued``, the token stream's name)."""

from __future__ import annotations

import hashlib
import hmac

from blackops.console import session
from domain.access import new_token, token_digest


def test_the_form_token_is_not_keyed_by_the_journaled_digest() -> None:
    token = new_token()
    journaled = bytes.fromhex(token_digest(token))
    for message in (session._SESSION_LABEL, b"", token.encode()):
        assert hmac.new(journaled, message, hashlib.sha256).hexdigest() != session.session_csrf(
            token
        )
    assert session.session_csrf(token) == session.session_csrf(token)  # stable per session
    assert session.session_csrf(token) != session.session_csrf(new_token())
