"""The controller's writes survive conflicts, throttling, server errors, timeouts and dropped
connections, against the real apiserver.

Faults come from a small TLS front on loopback (the way toxiproxy is used): it answers the first
PATCHes with the faults it is given and forwards every other request to the real apiserver, so
the write that finally lands is a real one and its effect is read back from the apiserver.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from admission.writes import JobRef, Writer
from kubeport.kubeapi import ApiError, Credentials, KubeClient
from policies.kinds import JOB
from policies.kinds.release import Release, release_writes
from policies.vocabulary import ADMITTED, SUBMITTED
from tests import builders
from tests.controller_helpers import jobs_path
from webhook.tls import create_webhook_tls

pytestmark = [pytest.mark.cluster]

Fault = int | str  # an HTTP status to answer, "slow" (no answer before the client's timeout) or
# "drop" (close the connection without an answer)


class FaultyFront(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: KubeClient, faults: list[Fault]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.faults = list(faults)
        self.seen: list[tuple[str, Fault | None]] = []
        self.lock = threading.Lock()

    def next_fault(self, method: str) -> Fault | None:
        with self.lock:
            fault = self.faults.pop(0) if method == "PATCH" and self.faults else None
            self.seen.append((method, fault))
            return fault


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FaultyFront

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        fault = self.server.next_fault(self.command)
        if fault == "slow":
            time.sleep(2.0)  # past the client's 1 s timeout
            self.close_connection = True
            return
        if fault == "drop":
            self.close_connection = True
            return
        if isinstance(fault, int):
            status = {"kind": "Status", "code": fault, "message": f"injected {fault}"}
            self._answer(fault, status, {"Retry-After": "0"} if fault == 429 else {})
            return
        try:
            answer = self.server.upstream.request(
                self.command,
                self.path,
                body,
                content_type=self.headers.get("Content-Type") or "application/json",
            )
            self._answer(200, answer, {})
        except ApiError as exc:
            self._answer(exc.status, {"kind": "Status", "message": exc.message}, {})

    do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve


def suspended_job() -> dict[str, Any]:
    """A suspended Job as the webhook stores one (it always has muster's annotations)."""
    return builders.job("gang", pods=2, suspend=True, annotations={SUBMITTED: "stand-in"})


@pytest.fixture
def front(kube: KubeClient, tmp_path: Path) -> Iterator[tuple[FaultyFront, Credentials]]:
    tls = create_webhook_tls(tmp_path, ["127.0.0.1"])
    ca = tmp_path / "front-ca.crt"
    ca.write_bytes(tls.ca_bundle)
    server = FaultyFront(kube, [])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(tls.cert), str(tls.key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    credentials = Credentials(
        server=f"https://127.0.0.1:{server.server_address[1]}",
        ca_file=str(ca),
        cert_file=None,
        key_file=None,
        token=None,
        insecure=False,
    )
    try:
        yield server, credentials
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def admit_through(
    credentials: Credentials,
    ref: JobRef,
    *,
    timeout: float,
    retried: list[int],
    attempts: int = 8,
) -> str:
    """One admission by a Writer whose client talks to the faulty front."""
    with KubeClient(credentials, timeout=timeout) as faulty:
        writer = Writer(faulty, attempts=attempts, on_retry=retried.append)
        try:
            (write,) = release_writes(
                JOB, ref.uid, {}, JOB.original({}), (), Release(time.time(), 2)
            )
            return writer.admit(ref, [write])
        finally:
            writer.close()


def test_an_admission_survives_every_transient_fault_and_lands_once(
    kube: KubeClient, namespace: str, front: tuple[FaultyFront, Credentials]
) -> None:
    server, credentials = front
    server.faults = [409, 429, 503, "slow", "slow", "drop", "drop"]
    stored = kube.create(jobs_path(namespace), suspended_job())
    ref = JobRef(namespace, "gang", stored["metadata"]["uid"])
    retried: list[int] = []
    assert admit_through(credentials, ref, timeout=1.0, retried=retried) == "ok"
    # 429 is waited out by the client itself (Retry-After); a single slow or dropped answer is
    # retried once on a fresh connection by the client, a second one reaches the writer (0).
    assert retried == [409, 503, 0, 0], retried
    assert server.faults == []
    job = kube.get(f"{jobs_path(namespace)}/gang")
    assert job["spec"]["suspend"] is False
    assert job["metadata"]["annotations"][ADMITTED]

    # The same admission again is refused by its JSON Patch test (the Job is no longer
    # suspended): reported as a conflict, not retried, and nothing is written.
    stamp = job["metadata"]["annotations"][ADMITTED]
    assert admit_through(credentials, ref, timeout=5.0, retried=retried) == "conflict"
    assert retried == [409, 503, 0, 0]
    # What a second admission would write is unchanged (the Job controller, not us, keeps
    # writing the Job's status now that it runs, so its resourceVersion moves regardless).
    assert kube.get(f"{jobs_path(namespace)}/gang")["metadata"]["annotations"][ADMITTED] == stamp


def test_a_write_still_failing_after_every_attempt_is_reported(
    kube: KubeClient, namespace: str, front: tuple[FaultyFront, Credentials]
) -> None:
    server, credentials = front
    server.faults = [503] * 3
    stored = kube.create(jobs_path(namespace), suspended_job())
    ref = JobRef(namespace, "gang", stored["metadata"]["uid"])
    retried: list[int] = []
    assert admit_through(credentials, ref, timeout=5.0, retried=retried, attempts=3) == "refused"
    assert retried == [503, 503]  # three attempts, the last one not retried
    # Nothing landed: the caller rolls its optimistic admission back and plans it again.
    assert kube.get(f"{jobs_path(namespace)}/gang")["spec"]["suspend"] is True
