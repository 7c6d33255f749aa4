"""HEAD is GET without its body (RFC 9110 9.3.2; a general-purpose server MUST support both,
9.1). FastAPI's routes answer the methods they name, GET without HEAD, so ``HEAD`` of every
GET route was 405 (found by a defect hunt). This middleware runs a HEAD request as a GET,
passes its status and headers on, and ends the response there: the handler is then told the
client left, so a live stream's HEAD lets go of it at once (it sends no body until its first
heartbeat), also on a kept-alive connection.

A GET that writes is not run for a HEAD: an export journals its `journal.exported` custody
event (decisions P37), which a probe must not add; those paths answer HEAD with 405."""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blackops.http.scopes import route_path, segments_path

#: GET routes that journal something: no HEAD for them. Exports record themselves; a
#: receipt signs a checkpoint on the spot when none covers its event yet (A3: a HEAD of one
#: wrote `journal.checkpoint`, found by a defect hunt, stop 34). Their ids and Space names
#: hold no ``/``, so they are matched on the decoded path, as the router matches it: the
#: path as sent let ``/v1/journal/%65xport`` and ``/v1/journal%2Fexport`` pass for other
#: routes while the router ran the export (found by a defect hunt and a review, stop 37).
#: The console's pages that show a receipt (an operation's, an instance's, and their
#: receipt files) make it the same way; the console matches them on the decoded path too
#: (a HEAD of one signed a checkpoint, also with a ``%2F`` for a ``/``: found by review,
#: stop 37). ``[\s\S]``, not ``.``: an instance id may hold a line feed (P42). Each is
#: matched as Starlette's router matches its routes, ``^...$`` with ``re.match``, where
#: ``$`` also matches before a final line feed: with ``fullmatch``, ``export%0A`` passed
#: for another path while the router ran the export (found by a defect hunt, stop 38).
_WRITING_GETS = re.compile(
    r"(?:/v1/(?:spaces/[^/]+/)?journal/export|/v1/operations/[^/]+/receipt"
    r"|/ui/operations/[^/]+(?:/receipt\.json)?"
    r"|/ui/spaces/[^/]+/workflows/[^/]+/(?:instances|receipts)/[\s\S]*)$"
)
#: An instance's receipt: its id may hold ``/`` (sent as ``%2F``), so its segments decide
#: (`segments_path`): an instance whose id ends in ``%2Freceipt`` is a status (the route
#: tells them apart by the path as sent).
_INSTANCE_RECEIPT = re.compile(r"/v1/spaces/[^/]+/workflows/[^/]+/instances/[\s\S]+/receipt$")


def answers_head(scope: Scope) -> bool:
    """Does a GET of the request's path also answer HEAD (what a 405's ``Allow`` names)?"""
    return (
        _WRITING_GETS.match(route_path(scope)) is None
        and _INSTANCE_RECEIPT.match(segments_path(scope)) is None
    )


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        # Below the prefix the API is served under: with the whole path, a HEAD of an export
        # behind a proxy ran the GET and journaled it (found by review, stop 35).
        if not answers_head(scope):
            await self.app(scope, receive, send)  # a writing GET's HEAD: 405 from the router
            return
        ended = False

        async def receive_until_ended() -> Message:
            if ended:
                return {"type": "http.disconnect"}
            return await receive()

        async def send_headers_only(message: Message) -> None:
            nonlocal ended
            if ended:
                return
            await send(message)
            if message["type"] == "http.response.start":
                ended = True  # the headers say it all (Content-Length included)
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app({**scope, "method": "GET"}, receive_until_ended, send_headers_only)
