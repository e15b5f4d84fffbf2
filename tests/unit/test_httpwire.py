"""The request head both muster servers read (`kubeport.httpwire`): where it ends, its request
line and headers, a body's length and keep-alive; and the status service answering a head it
cannot read as the webhook's endpoint does (its own tests: tests/unit/test_webhook_server.py)."""

from __future__ import annotations

import asyncio

import pytest

from admission.cache import Cache
from admission.status import StatusServer
from kubeport.httpwire import HttpError, RequestHead, content_length, head_end, parse_head


def _head(text: str) -> RequestHead:
    return parse_head(text.encode("latin-1"))


def test_a_request_line_and_headers_are_read() -> None:
    head = _head("POST /jobs?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-TYPE:  application/json ")
    assert (head.method, head.target, head.version) == ("POST", "/jobs?timeout=10s", "HTTP/1.1")
    assert head.headers == {"host": "x", "content-type": "application/json"}
    # A value may hold colons; of a repeated header the last counts.
    assert _head("GET / HTTP/1.1\r\nA: b:c\r\nA: d").headers == {"a": "d"}
    assert _head("GET / HTTP/1.1\r\nA: b:c").headers == {"a": "b:c"}
    assert _head("GET /v1/queues HTTP/1.0").headers == {}


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("GET /", 400),
        ("GET", 400),
        ("", 400),
        ("GET / HTTP/1.1 extra", 400),
        ("GET  / HTTP/1.1", 400),
        ("GET / SPDY/3", 505),
        ("GET / HTTP/2.0", 505),
    ],
)
def test_a_malformed_request_line_is_refused(line: str, status: int) -> None:
    with pytest.raises(HttpError, match=r"not an HTTP/1\.x request") as caught:
        _head(line)
    assert caught.value.status == status


def test_a_header_line_without_a_colon_is_refused() -> None:
    with pytest.raises(HttpError, match="malformed header line 'no colon'") as caught:
        _head("GET / HTTP/1.1\r\nHost: x\r\nno colon")
    assert caught.value.status == 400


def test_the_head_ends_at_its_blank_line_within_the_limit() -> None:
    assert head_end(b"GET / HTTP/1.1\r\nHost: x\r\n", 64) == -1  # not arrived whole
    request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"
    assert head_end(bytearray(request), 64) == request.index(b"\r\n\r\n")
    assert head_end(request, request.index(b"\r\n\r\n")) == request.index(b"\r\n\r\n")


@pytest.mark.parametrize(
    "buffer",
    [
        b"GET / HTTP/1.1\r\nX: " + b"a" * 100,  # over the limit and not ended yet
        b"GET / HTTP/1.1\r\nX: " + b"a" * 100 + b"\r\n\r\n",  # ended past the limit
    ],
)
def test_an_oversize_head_is_refused(buffer: bytes) -> None:
    with pytest.raises(HttpError, match="over 64 bytes") as caught:
        head_end(buffer, 64)
    assert caught.value.status == 431


def test_the_body_length_comes_from_content_length() -> None:
    assert content_length(_head("POST / HTTP/1.1\r\nContent-Length: 12")) == 12
    assert content_length(_head("POST / HTTP/1.1\r\ncontent-length:0")) == 0
    assert content_length(_head("POST / HTTP/1.1\r\nHost: x")) is None


@pytest.mark.parametrize("value", ["-4", "12a", "", "1.5"])
def test_a_bad_content_length_is_refused(value: str) -> None:
    with pytest.raises(HttpError, match="bad Content-Length") as caught:
        content_length(_head(f"POST / HTTP/1.1\r\nContent-Length: {value}"))
    assert caught.value.status == 400


def test_a_chunked_body_is_refused_even_with_a_length() -> None:
    head = _head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3")
    with pytest.raises(HttpError, match="send the review with a Content-Length") as caught:
        content_length(head, "review")
    assert caught.value.status == 411


@pytest.mark.parametrize(
    ("text", "keep"),
    [
        ("POST / HTTP/1.1", True),
        ("POST / HTTP/1.1\r\nConnection: Close", False),
        ("POST / HTTP/1.1\r\nConnection: keep-alive", True),
        ("POST / HTTP/1.0", False),
        ("POST / HTTP/1.0\r\nConnection: Keep-Alive", True),
    ],
)
def test_keep_alive_follows_the_version_and_connection(text: str, keep: bool) -> None:
    assert _head(text).keep_alive is keep


async def _ask_status(request: bytes) -> bytes:
    cache = Cache()
    cache.synced = True
    server = StatusServer(cache, dict, None)
    port = await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return answer
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("request_bytes", "status_line", "says"),
    [
        (b"GET /v1/queues\r\n\r\n", b"HTTP/1.1 400 Bad Request", b"not an HTTP/1.x request"),
        (b"GET /v1/queues HTTP/9\r\n\r\n", b"HTTP/1.1 505 HTTP Version", b"not an HTTP/1.x"),
        (b"GET /v1/queues HTTP/1.1\r\nnope\r\n\r\n", b"HTTP/1.1 400 Bad Request", b"malformed"),
        (b"GET /v1/queues HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 OK", b'"queues"'),
        (b"POST /v1/queues HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 405 Method", b"only GET"),
    ],
)
def test_the_status_service_reads_the_same_head(
    request_bytes: bytes, status_line: bytes, says: bytes
) -> None:
    answer = asyncio.run(_ask_status(request_bytes))
    assert answer.startswith(status_line), answer[:80]
    assert b"Connection: close" in answer and says in answer.partition(b"\r\n\r\n")[2]
