"""The webhook's HTTPS endpoint: a small HTTP/1.1 server on an asyncio Protocol, in the
operator's event loop, calling `review_response`.

One route, `POST /{path}` (one path segment); the body is an AdmissionReview, the answer is built
by the pure `webhook.review.review_response` from the in-memory `WebhookState`. TLS 1.2 or newer;
a renewed certificate is picked up without a restart (`webhook.serving.ServingCertificate`).

Why not aiohttp (which served it until issue 17): the apiserver sends one small POST after
another over a few kept-alive connections, and aiohttp's request machinery (a Request object,
the router, a StreamReader, a Response with its headers) cost about 0.3 ms of CPU per review,
twice what the decision itself costs. Here a review is: find the end of the headers, read
`Content-Length`, decode the body, answer. What the apiserver's client does not send is refused
plainly: a chunked body (411), a body over `MAX_BODY` (413), headers over `MAX_HEAD` (431), any
method but POST (405). Connections idle for `IDLE_TIMEOUT` seconds are closed (the apiserver's
own client drops idle ones after 90 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import cast

from policies.submitted import SubmissionClock
from webhook.decision import WebhookSettings
from webhook.review import WebhookState, review_response
from webhook.serving import RELOAD_INTERVAL, ServingCertificate

logger = logging.getLogger("muster.webhook")

MAX_HEAD = 64 * 1024
"""Bytes of request line and headers accepted (431 beyond)."""
MAX_BODY = 16 * 1024 * 1024
"""Bytes of body accepted (413 beyond); the apiserver's own limit on an object is 3 MiB."""
IDLE_TIMEOUT = 120.0
"""Seconds a kept-alive connection may wait for its next request."""

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    505: "HTTP Version Not Supported",
}


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class WebhookServer:
    addr: str
    port: int
    certfile: str
    keyfile: str
    state: WebhookState
    settings: WebhookSettings
    clock: SubmissionClock
    reload_interval: float = RELOAD_INTERVAL
    """Seconds between two looks at the certificate files (`ServingCertificate.watch`)."""
    certificate: ServingCertificate | None = None
    """TLS >= 1.2 and the certificate, reloaded in place; set by `start`."""
    idle_timeout: float = IDLE_TIMEOUT
    reviews: int = 0
    """Reviews answered so far (with an AdmissionReview: allowed or not)."""
    _server: asyncio.Server | None = None
    _reloads: asyncio.Task[None] | None = None
    _connections: set[_Connection] = field(default_factory=set)

    def answer(self, path: str, body: bytes) -> bytes:
        """The JSON answer to one review posted to `/<path>`; raises _HttpError (400) for a
        body that is not a JSON object."""
        try:
            review = json.loads(body)
        except ValueError as exc:
            raise _HttpError(400, f"not an AdmissionReview: {exc}") from None
        if not isinstance(review, dict):
            raise _HttpError(400, "not an AdmissionReview: the body is not a JSON object")
        response = review_response(
            review, path=path, state=self.state, settings=self.settings, stamp=self.clock.stamp
        )
        self.reviews += 1
        return json.dumps(response, separators=(",", ":")).encode()

    async def start(self) -> None:
        self.certificate = ServingCertificate(self.certfile, self.keyfile)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self),
            self.addr,
            self.port,
            ssl=self.certificate.context,
            reuse_address=True,
        )
        self._reloads = loop.create_task(self.certificate.watch(self.reload_interval))
        logger.info("webhook serving on https://%s:%d", self.addr, self.port)

    async def stop(self) -> None:
        if self._reloads is not None:
            self._reloads.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloads
            self._reloads = None
        if self._server is not None:
            self._server.close()
            for connection in list(self._connections):
                connection.close()
            await self._server.wait_closed()
            self._server = None

    @property
    def url(self) -> str:
        return f"https://{self.addr}:{self.port}"


class _Connection(asyncio.Protocol):
    """One client connection: requests one after another (keep-alive), each answered in turn."""

    def __init__(self, server: WebhookServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both have what is used here.
        self.transport = cast(asyncio.Transport, transport)
        self.server._connections.add(self)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.discard(self)
        if self.idle is not None:
            self.idle.cancel()
        self.transport = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _arm(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        loop = asyncio.get_running_loop()
        self.idle = loop.call_later(self.server.idle_timeout, self.close)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None:
            try:
                request = _take_request(self.buffer)
            except _HttpError as exc:
                self._send(exc.status, _error_body(exc), keep_alive=False)
                return
            if request is None:
                return
            path, body, keep_alive = request
            try:
                answer = self.server.answer(path, body)
                status = 200
            except _HttpError as exc:
                status, answer = exc.status, _error_body(exc)
            except Exception:  # a bug in a decision: answer 500, keep serving
                logger.exception("webhook review at /%s failed", path)
                status, answer = 500, b'{"message":"internal error"}'
            self._send(status, answer, keep_alive)
            if not keep_alive:
                return  # closed after this answer: what else the client sent is dropped
            self._arm()

    def _send(self, status: int, body: bytes, keep_alive: bool) -> None:
        transport = self.transport
        if transport is None:
            return
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            + ("" if keep_alive else "Connection: close\r\n")
            + "\r\n"
        )
        transport.write(head.encode("ascii") + body)
        if not keep_alive:
            transport.close()


def _error_body(exc: _HttpError) -> bytes:
    return json.dumps({"message": str(exc)}).encode()


def _take_request(buffer: bytearray) -> tuple[str, bytes, bool] | None:
    """The first whole request in `buffer` (removed from it): (path without its leading slash,
    body, keep the connection open after it), or None while it is incomplete. Raises
    _HttpError for a request that is answered with an error and the connection closed."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > MAX_HEAD:
            raise _HttpError(431, f"request line and headers over {MAX_HEAD} bytes")
        return None
    if end > MAX_HEAD:
        raise _HttpError(431, f"request line and headers over {MAX_HEAD} bytes")
    lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _HttpError(505 if len(parts) == 3 else 400, f"not an HTTP/1.x request: {lines[0]!r}")
    method, target, version = parts
    length: int | None = None
    connection = ""
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise _HttpError(400, f"malformed header line {line!r}")
        name = name.strip().lower()
        if name == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise _HttpError(400, f"bad Content-Length {value.strip()!r}") from None
            if length < 0:
                raise _HttpError(400, f"bad Content-Length {value.strip()!r}")
        elif name == "transfer-encoding":
            raise _HttpError(411, "send the review with a Content-Length, not chunked")
        elif name == "connection":
            connection = value.strip().lower()
    if method != "POST":
        raise _HttpError(405, f"{method} {target}: the webhook answers POST only")
    if length is None:
        raise _HttpError(411, "a review needs a Content-Length")
    if length > MAX_BODY:
        raise _HttpError(413, f"a review of {length} bytes is over {MAX_BODY}")
    start = end + 4
    if len(buffer) < start + length:
        return None
    body = bytes(buffer[start : start + length])
    del buffer[: start + length]
    path = target.split("?", 1)[0]
    if not path.startswith("/") or "/" in path[1:] or path == "/":
        raise _HttpError(404, f"no webhook at {path}")
    keep_alive = connection != "close" and (version != "HTTP/1.0" or connection == "keep-alive")
    return path[1:], body, keep_alive
