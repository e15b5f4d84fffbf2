"""The lean webhook endpoint's HTTP/1.1 (webhook/server.py), on loopback with real TLS.

The server is started and stopped from an event loop in a thread (asyncio's and uvloop's, which
`muster run` uses for its webhook child) and serves each connection on a thread of its
own; the tests speak raw HTTP over a TLS socket, as the apiserver's client does: kept-alive
connections, requests split across packets or sent back to back, and
what the apiserver never sends (chunked bodies, other methods, oversized heads), which gets a
clear status and a closed connection.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import uvloop

from admission.launcher import free_port
from policies.submitted import SubmissionClock
from policies.vocabulary import SUBMITTED
from tests import builders
from webhook import server as server_module
from webhook.configuration import JOB_PATH
from webhook.decision import WebhookSettings
from webhook.review import WebhookState
from webhook.server import WebhookServer
from webhook.tls import create_webhook_tls

LOOPBACK = "127.0.0.1"

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


class Served:
    """A WebhookServer running in a loop thread, and TLS client sockets to it."""

    def __init__(self, tmp_path: Path, new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
        tls = create_webhook_tls(tmp_path, [LOOPBACK])
        self.loop = new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = WebhookServer(
            addr=LOOPBACK,
            port=free_port(LOOPBACK),
            certfile=str(tls.cert),
            keyfile=str(tls.key),
            state=WebhookState(),
            settings=WebhookSettings(),
            clock=SubmissionClock(),
        )
        self.context = ssl.create_default_context(cadata=tls.ca_bundle.decode())
        self.call(self.server.start())

    def call(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(30)

    def connect(self) -> ssl.SSLSocket:
        raw = socket.create_connection((LOOPBACK, self.server.port), timeout=10)
        return self.context.wrap_socket(raw, server_hostname=LOOPBACK)

    def close(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(params=sorted(LOOPS))
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    running = Served(tmp_path, LOOPS[request.param])
    try:
        yield running
    finally:
        running.close()


def _review(name: str, uid: str = "u-1") -> bytes:
    job = builders.job(
        name,
        "q",
        namespace="team",
        pods=2,
        completions=None,
        suspend=None,
        cpu=None,
        runtime=None,
        tolerations=(),
    )
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "operation": "CREATE", "namespace": "team", "object": job},
    }
    return json.dumps(review).encode()


def _post(body: bytes, path: str = "/" + JOB_PATH, extra: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def _read_response(sock: ssl.SSLSocket, pending: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One response from `sock` (bytes beyond it stay in `pending`)."""
    while b"\r\n\r\n" not in pending:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response")
        pending += chunk
    end = pending.index(b"\r\n\r\n")
    lines = pending[:end].decode().split("\r\n")
    status = int(lines[0].split(" ")[1])
    pairs = (line.partition(":") for line in lines[1:])
    headers = {name.strip().lower(): value.strip() for name, _, value in pairs}
    length = int(headers["content-length"])
    while len(pending) < end + 4 + length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside a body")
        pending += chunk
    body = bytes(pending[end + 4 : end + 4 + length])
    del pending[: end + 4 + length]
    return status, headers, body


def _closed(sock: ssl.SSLSocket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def test_reviews_over_one_kept_alive_connection_are_answered_in_order(served: Served) -> None:
    with served.connect() as sock:
        pending = bytearray()
        for i in range(3):
            sock.sendall(_post(_review(f"j{i}", uid=f"u-{i}")))
            status, headers, body = _read_response(sock, pending)
            assert status == 200 and "connection" not in headers
            response = json.loads(body)["response"]
            assert response["uid"] == f"u-{i}" and response["allowed"] is True
            assert response["patchType"] == "JSONPatch"
    assert served.server.reviews == 3


def test_a_request_split_across_writes_and_two_sent_back_to_back(served: Served) -> None:
    first, second = _post(_review("a", uid="u-a")), _post(_review("b", uid="u-b"))
    with served.connect() as sock:
        pending = bytearray()
        for piece in (first[:10], first[10:60], first[60:] + second[:5]):
            sock.sendall(piece)
        sock.sendall(second[5:])
        uids = [json.loads(_read_response(sock, pending)[2])["response"]["uid"] for _ in "ab"]
    assert uids == ["u-a", "u-b"]


def test_the_stamped_patch_is_what_the_decision_sets(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(_post(_review("stamped")))
        _, _, body = _read_response(sock, bytearray())
    patch = json.loads(base64.b64decode(json.loads(body)["response"]["patch"]))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch
    annotations = [op["value"] for op in patch if op["path"] == "/metadata/annotations"]
    assert len(annotations) == 1 and SUBMITTED in annotations[0]


@pytest.mark.parametrize(
    ("request_bytes", "status", "says"),
    [
        (b"GET /" + JOB_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n", 405, "POST only"),
        (
            b"POST /" + JOB_PATH.encode() + b" HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            411,
            "Content-Length",
        ),
        (b"POST /" + JOB_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n", 411, "Content-Length"),
        (
            b"POST /x HTTP/1.1\r\nContent-Length: " + str(10**9).encode() + b"\r\n\r\n",
            413,
            "bytes is over",
        ),
        (b"POST /x HTTP/1.1\r\nContent-Length: -4\r\n\r\n", 400, "Content-Length"),
        (b"POST /x HTTP/1.1\r\nno colon here\r\n\r\n", 400, "malformed header"),
        (b"POST /x SPDY/3\r\n\r\n", 505, "not an HTTP/1.x"),
        (_post(b"{}", path="/a/b"), 404, "no webhook at /a/b"),
        (_post(b"[1, 2]"), 400, "not a JSON object"),
        (_post(b"{not json"), 400, "not an AdmissionReview"),
    ],
)
def test_what_the_apiserver_never_sends_gets_a_clear_status(
    served: Served, request_bytes: bytes, status: int, says: str
) -> None:
    with served.connect() as sock:
        sock.sendall(request_bytes)
        got, _, body = _read_response(sock, bytearray())
        assert got == status
        assert says in json.loads(body)["message"]
    assert served.server.reviews == 0


def test_a_bad_body_keeps_the_connection_a_framing_error_closes_it(served: Served) -> None:
    with served.connect() as sock:
        pending = bytearray()
        sock.sendall(_post(b"{not json"))
        assert _read_response(sock, pending)[0] == 400
        sock.sendall(_post(_review("after")))
        assert _read_response(sock, pending)[0] == 200
        sock.sendall(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        status, headers, _ = _read_response(sock, pending)
        assert status == 411 and headers["connection"] == "close"
        assert _closed(sock)


def test_oversized_headers_are_refused_before_they_end(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nX-Big: " + b"a" * (server_module.MAX_HEAD + 10))
        status, _, body = _read_response(sock, bytearray())
    assert status == 431 and "over" in json.loads(body)["message"]


def test_unknown_single_segment_path_is_a_denied_review_not_an_http_error(
    served: Served,
) -> None:
    with served.connect() as sock:
        sock.sendall(_post(_review("x"), path="/nowhere"))
        status, _, body = _read_response(sock, bytearray())
    response = json.loads(body)["response"]
    assert status == 200 and response["allowed"] is False
    assert response["status"]["code"] == 404 and "/nowhere" in response["status"]["message"]


def test_connection_close_and_http_1_0_are_honoured(served: Served) -> None:
    with served.connect() as sock:
        # A request sent after the one asking to close is not answered.
        sock.sendall(_post(_review("c"), extra="Connection: close\r\n") + _post(_review("e")))
        pending = bytearray()
        status, headers, _ = _read_response(sock, pending)
        assert status == 200 and headers["connection"] == "close"
        assert not pending and _closed(sock)
    assert served.server.reviews == 1
    with served.connect() as sock:
        body = _review("d")
        sock.sendall(
            f"POST /{JOB_PATH} HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        )
        assert _read_response(sock, bytearray())[0] == 200
        assert _closed(sock)


def test_an_idle_connection_is_closed(served: Served) -> None:
    served.server.idle_timeout = 0.2
    with served.connect() as sock:
        sock.sendall(_post(_review("idle")))
        assert _read_response(sock, bytearray())[0] == 200
        sock.settimeout(5)
        assert _closed(sock)


def test_stop_closes_open_connections(served: Served) -> None:
    sock = served.connect()
    sock.sendall(_post(_review("open")))
    assert _read_response(sock, bytearray())[0] == 200
    served.call(served.server.stop())
    sock.settimeout(5)
    assert _closed(sock)
    sock.close()
    with pytest.raises(OSError):  # no longer listening
        socket.create_connection((LOOPBACK, served.server.port), timeout=5).close()


def test_muster_run_puts_a_webhook_only_process_on_uvloop() -> None:
    from admission.process import event_loop as _event_loop

    def loop_of(event_loop: str, no_controller: bool) -> str | None:
        loop = _event_loop(event_loop, webhook_only=no_controller)
        if loop is None:
            return None
        loop.close()
        asyncio.set_event_loop(None)
        return type(loop).__module__.split(".")[0]

    assert loop_of("auto", no_controller=True) == "uvloop"
    assert loop_of("auto", no_controller=False) is None  # kopf makes an asyncio loop
    assert loop_of("asyncio", no_controller=True) is None
    assert loop_of("uvloop", no_controller=False) == "uvloop"


def test_a_connection_inside_a_request_does_not_hold_up_another(served: Served) -> None:
    # Each connection has its thread: one stuck half-way through its body waits alone.
    half = _post(_review("slow", uid="u-slow"))
    with served.connect() as slow, served.connect() as quick:
        slow.sendall(half[: len(half) // 2])
        quick.sendall(_post(_review("quick", uid="u-quick")))
        status, _, body = _read_response(quick, bytearray())
        assert status == 200 and json.loads(body)["response"]["uid"] == "u-quick"
        slow.sendall(half[len(half) // 2 :])
        assert json.loads(_read_response(slow, bytearray())[2])["response"]["uid"] == "u-slow"
    assert served.server.reviews == 2


def test_past_the_limit_the_quietest_connection_makes_room(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client holding idle connections cannot lock the apiserver out: a new connection past
    # the limit closes the one silent longest, and is served.
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 1)
    with served.connect() as first:
        first.sendall(_post(_review("first")))
        assert _read_response(first, bytearray())[0] == 200
        with served.connect() as second:
            second.sendall(_post(_review("second", uid="u-2")))
            status, _, body = _read_response(second, bytearray())
            assert status == 200 and json.loads(body)["response"]["uid"] == "u-2"
            with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
                first.sendall(_post(_review("again")))
                if not first.recv(1):
                    raise ConnectionError("closed")
    assert served.server.reviews == 2


def test_past_the_limit_a_new_connection_is_closed_while_every_one_is_answering(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 1)
    release, entered = threading.Event(), threading.Event()
    answer = served.server.answer

    def slow_answer(path: str, body: bytes) -> bytes:
        entered.set()
        release.wait(10)
        return answer(path, body)

    monkeypatch.setattr(served.server, "answer", slow_answer)
    with served.connect() as first:
        first.sendall(_post(_review("first")))
        assert entered.wait(10)
        raw = socket.create_connection((LOOPBACK, served.server.port), timeout=10)
        with pytest.raises((ConnectionError, ssl.SSLError)):
            served.context.wrap_socket(raw, server_hostname=LOOPBACK).sendall(b"x")
        raw.close()
        release.set()
        assert _read_response(first, bytearray())[0] == 200
