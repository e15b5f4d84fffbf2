"""The webhook's HTTPS endpoint: a small HTTP/1.1 server on blocking sockets, one thread per
connection, calling `review_response`.

One route, `POST /{path}` (one path segment); the body is an AdmissionReview, the answer is built
by the pure `webhook.review.review_response` from the in-memory `WebhookState`. TLS 1.2 or newer;
a renewed certificate is picked up without a restart (`webhook.serving.ServingCertificate`).

Why threads and blocking sockets (issue 17): the apiserver sends one small POST after another
over a few kept-alive connections. On an event loop every review paid for the loop's wake-ups
and for TLS through a memory BIO (OpenSSL writes into a buffer, the loop copies it to the
socket, and back), about twice what the decision costs (docs/benchmarks.md). Here a
connection's thread reads with OpenSSL straight from the socket, parses, answers and writes, and
sleeps in `recv` (without the GIL) between reviews; the operator's event loop (kopf's watches)
is not on the review's path. A review is: find the end of the headers, read `Content-Length`
(`kubeport.httpwire`: the request head as the status service reads it too), decode the body
(orjson: a review decodes in less than half the time of the standard library's `json`),
answer. What the apiserver's client does not send is refused plainly: a chunked body
(411), a body over `MAX_BODY` (413), headers over `MAX_HEAD` (431), any method but POST (405).
A connection silent for `idle_timeout` seconds is closed (the apiserver's own client
drops idle ones after 90 s); at most `MAX_CONNECTIONS` are served at once (the apiserver keeps
a few), and past that the one silent longest is closed to make room, so a client holding idle
connections cannot lock the apiserver out.

Reviews on different connections run at once in their threads: what they share
(`WebhookState`'s backlog and never-fits check, the `SubmissionClock`) is locked, and the
watches that feed the state (kopf's handlers on the event loop, the streams' threads) only
replace whole entries, as with kopf's handler threads before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

import orjson

from kubeport.httpwire import REASONS, HttpError, content_length, head_end, parse_head
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
"""Seconds a connection may stay silent (waiting for its next request, or inside one)."""
MAX_CONNECTIONS = 256
"""Connections served at once (each holds a thread). One more closes the connection silent
longest to make room, or, if every one is answering a review, is itself closed at once."""
LINGER = 1.0
"""Seconds to keep reading (and dropping) what a client still sends after an answer that
closes the connection early (431, 413, ...), so that closing with unread bytes does not reset
the connection before the client has read the answer."""
_READ = 256 * 1024
"""Bytes asked of one `recv_into`."""


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
    """Read when a connection is accepted."""
    reviews: int = 0
    """Reviews answered so far (with an AdmissionReview: allowed or not)."""
    _listener: socket.socket | None = None
    _acceptor: threading.Thread | None = None
    _reloads: asyncio.Task[None] | None = None
    _connections: set[_Connection] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: bool = False

    def answer(self, path: str, body: bytes) -> bytes:
        """The JSON answer to one review posted to `/<path>`; raises HttpError (400) for a
        body that is not a JSON object."""
        try:
            review = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise HttpError(400, f"not an AdmissionReview: {exc}") from None
        if not isinstance(review, dict):
            raise HttpError(400, "not an AdmissionReview: the body is not a JSON object")
        response = review_response(
            review, path=path, state=self.state, settings=self.settings, stamp=self.clock.stamp
        )
        with self._lock:
            self.reviews += 1
        return orjson.dumps(response)

    async def start(self) -> None:
        """Listen, and accept connections on a thread of the server's own."""
        self.certificate = ServingCertificate(self.certfile, self.keyfile)
        self._stopping = False
        family, _, _, _, address = socket.getaddrinfo(
            self.addr, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        self._listener = socket.create_server(address[:2], family=family, backlog=128)
        self._acceptor = threading.Thread(
            target=self._accept, args=(self._listener,), name="webhook-accept", daemon=True
        )
        self._acceptor.start()
        loop = asyncio.get_running_loop()
        self._reloads = loop.create_task(self.certificate.watch(self.reload_interval))
        logger.info("webhook serving on https://%s:%d", self.addr, self.port)

    async def stop(self) -> None:
        """Stop accepting, close every open connection (an answer being written is finished
        first) and wait for their threads."""
        if self._reloads is not None:
            self._reloads.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloads
            self._reloads = None
        listener, self._listener = self._listener, None
        if listener is None:
            return
        with self._lock:
            self._stopping = True
            connections = list(self._connections)
        _shutdown(listener)  # wakes `accept`
        for connection in connections:
            connection.close()
        threads = [c.thread for c in connections]
        if self._acceptor is not None:
            threads.append(self._acceptor)
        await asyncio.to_thread(_join, threads, 10.0)
        listener.close()
        self._acceptor = None

    @property
    def url(self) -> str:
        return f"https://{self.addr}:{self.port}"

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return  # shut down by `stop`
            assert self.certificate is not None
            with self._lock:
                refused = self._stopping
                making_room = None
                if not refused and len(self._connections) >= MAX_CONNECTIONS:
                    making_room = _quietest(self._connections)
                    refused = making_room is None
                if not refused:
                    connection = _Connection(self, raw, self.certificate.context)
                    self._connections.add(connection)
            if making_room is not None:
                # Full: the connection silent longest makes room (a client that holds idle
                # connections cannot lock the apiserver out; its own reconnects).
                logger.warning(
                    "webhook: %d connections open; closing the quietest", MAX_CONNECTIONS
                )
                making_room.close()
            if refused:
                if not self._stopping:
                    logger.warning(
                        "webhook: %d connections answering at once; closing a new one",
                        MAX_CONNECTIONS,
                    )
                raw.close()
                continue
            connection.thread.start()

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)


def _shutdown(sock: socket.socket, how: int = socket.SHUT_RDWR) -> None:
    """Shut the socket down at the TCP level (for an SSLSocket too: no TLS alert, and safe
    while another thread reads it, which wakes up to an end of stream)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, how)


def _quietest(connections: set[_Connection]) -> _Connection | None:
    """The connection that has been silent longest and is not answering (None: all are)."""
    idle = [c for c in connections if not c.answering]
    return min(idle, key=lambda c: c.active_at) if idle else None


def _join(threads: list[threading.Thread], timeout: float) -> None:
    for thread in threads:
        thread.join(timeout)


class _Connection:
    """One client connection, served by its own thread: requests one after another
    (keep-alive), each answered in turn."""

    def __init__(self, server: WebhookServer, raw: socket.socket, context: ssl.SSLContext) -> None:
        self.server = server
        raw.settimeout(server.idle_timeout)
        # No I/O yet (the handshake is the thread's): `close` has this one socket to shut down.
        self.sock = context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        self.thread = threading.Thread(target=self.serve, name="webhook-connection", daemon=True)
        self.active_at = time.monotonic()
        """When the client last sent bytes, or was last answered."""
        self.answering = False
        """Between a whole request and its answer sent."""

    def close(self) -> None:
        """From another thread: end the connection (its thread sees an end of stream)."""
        _shutdown(self.sock)

    def serve(self) -> None:
        try:
            self.sock.do_handshake()
            self._requests()
        except (OSError, ValueError):  # reset, timed out, TLS failure, closed by `stop`
            pass
        finally:
            self.sock.close()
            self.server._forget(self)

    def _requests(self) -> None:
        buffer = bytearray()
        chunk = bytearray(_READ)
        view = memoryview(chunk)
        while True:
            try:
                request = _take_request(buffer)
            except HttpError as exc:
                self._send(exc.status, _error_body(exc), keep_alive=False)
                self._linger(view)
                return
            if request is None:
                read = self.sock.recv_into(view)
                if not read:
                    return
                self.active_at = time.monotonic()
                buffer += view[:read]
                continue
            path, body, keep_alive = request
            self.answering = True
            try:
                answer = self.server.answer(path, body)
                status = 200
            except HttpError as exc:
                status, answer = exc.status, _error_body(exc)
            except Exception:  # a bug in a decision: answer 500, keep serving
                logger.exception("webhook review at /%s failed", path)
                status, answer = 500, b'{"message":"internal error"}'
            self._send(status, answer, keep_alive)
            self.active_at, self.answering = time.monotonic(), False
            if not keep_alive:
                return  # closed after this answer: what else the client sent is dropped

    def _send(self, status: int, body: bytes, keep_alive: bool) -> None:
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            + ("" if keep_alive else "Connection: close\r\n")
            + "\r\n"
        )
        self.sock.sendall(head.encode("ascii") + body)

    def _linger(self, view: memoryview) -> None:
        """After an error answer that closes: stop sending, read what the client still sends
        for up to `LINGER` seconds, then close (see `LINGER`)."""
        _shutdown(self.sock, socket.SHUT_WR)
        deadline = time.monotonic() + LINGER
        with contextlib.suppress(OSError, ValueError):
            while (left := deadline - time.monotonic()) > 0:
                self.sock.settimeout(left)
                if not self.sock.recv_into(view):
                    return


def _error_body(exc: HttpError) -> bytes:
    return orjson.dumps({"message": str(exc)})


def _take_request(buffer: bytearray) -> tuple[str, bytes, bool] | None:
    """The first whole request in `buffer` (removed from it): (path without its leading slash,
    body, keep the connection open after it), or None while it is incomplete. Raises
    HttpError for a request that is answered with an error and the connection closed."""
    end = head_end(buffer, MAX_HEAD)
    if end < 0:
        return None
    head = parse_head(bytes(buffer[:end]))
    length = content_length(head, "review")
    if head.method != "POST":
        raise HttpError(405, f"{head.method} {head.target}: the webhook answers POST only")
    if length is None:
        raise HttpError(411, "a review needs a Content-Length")
    if length > MAX_BODY:
        raise HttpError(413, f"a review of {length} bytes is over {MAX_BODY}")
    start = end + 4
    if len(buffer) < start + length:
        return None
    body = bytes(buffer[start : start + length])
    del buffer[: start + length]
    path = head.target.split("?", 1)[0]
    if not path.startswith("/") or "/" in path[1:] or path == "/":
        raise HttpError(404, f"no webhook at {path}")
    return path[1:], body, head.keep_alive
