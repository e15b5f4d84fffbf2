"""The HTTP/1.1 request head, as muster's two small servers read it: the webhook's endpoint
(`webhook/server.py`, POSTed reviews over kept-alive connections) and the status service
(`admission/status.py`, GETs, one per connection).

What is shared is the wire: where a head ends, the request line, the header lines, a body's
length and whether the connection stays open. What each server accepts (its limits, its
methods, whether it reads a body at all) stays with the server. A request the parser cannot
read raises `HttpError` with the status to answer; the server answers it and closes.

Both servers are on hot paths (docs/benchmarks.md, *Webhook*, *Status service at scale*): the
parser does one decode and one split of the head, and one pass over its header lines.
"""

from __future__ import annotations

from typing import NamedTuple

REASONS = {
    200: "OK",
    304: "Not Modified",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
"""The reason phrase of each status either server answers."""

END_OF_HEAD = b"\r\n\r\n"


class HttpError(Exception):
    """A request answered with `status` (and `str(self)` as the message), the connection then
    closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RequestHead(NamedTuple):
    """A request line and its headers (names lower-cased, values stripped; of a repeated
    header, the last)."""

    method: str
    target: str
    version: str
    headers: dict[str, str]

    @property
    def keep_alive(self) -> bool:
        """Whether the client expects the connection open after the answer: HTTP/1.1 unless it
        says `Connection: close`, HTTP/1.0 only if it says `keep-alive`."""
        connection = self.headers.get("connection", "").lower()
        return connection != "close" and (self.version != "HTTP/1.0" or connection == "keep-alive")


def head_end(buffer: bytes | bytearray, max_head: int) -> int:
    """Where the head in `buffer` ends (the index of its blank line), or -1 while it has not
    arrived whole. Raises HttpError 431 for a head over `max_head` bytes."""
    end = buffer.find(END_OF_HEAD)
    if end > max_head or (end < 0 and len(buffer) > max_head):
        raise HttpError(431, f"request line and headers over {max_head} bytes")
    return end


def parse_head(head: bytes | bytearray) -> RequestHead:
    """The request line and headers of `head` (without its blank line). Raises HttpError 400
    for a malformed request line or header line, 505 for a version other than HTTP/1.x."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(505 if len(parts) == 3 else 400, f"not an HTTP/1.x request: {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, f"malformed header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    return RequestHead(parts[0], parts[1], parts[2], headers)


def content_length(head: RequestHead, what: str = "body") -> int | None:
    """The body's length from `Content-Length` (None: not given). A chunked body (411) and a
    length that is not a whole number of bytes (400) raise HttpError; `what` names the body in
    the message."""
    if "transfer-encoding" in head.headers:
        raise HttpError(411, f"send the {what} with a Content-Length, not chunked")
    given = head.headers.get("content-length")
    if given is None:
        return None
    try:
        length = int(given)
    except ValueError:
        raise HttpError(400, f"bad Content-Length {given!r}") from None
    if length < 0:
        raise HttpError(400, f"bad Content-Length {given!r}")
    return length
