"""HEAD is GET without its body (RFC 9110 9.3.2; a general-purpose server MUST support both,
9.1). FastAPI's routes answer the methods they name, GET without HEAD, so ``HEAD`` of every
GET route was 405 (found by a defect hunt). This middleware runs a HEAD request as a GET,
passes its status and headers on, and ends the response at the first body message: a live
stream's handler is then told the client left, so a HEAD of a stream answers at once."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
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
            if message["type"] == "http.response.body":
                ended = True  # the headers said it all (Content-Length included)
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive_until_ended, send_headers_only)
