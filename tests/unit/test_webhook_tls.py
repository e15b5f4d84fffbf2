"""The webhook's TLS: 1.2 or newer, and a renewed certificate served without a restart.

Both servers (muster's lean endpoint and kopf's) run on loopback in a thread of their own; the
certificate files are laid out as a Kubernetes Secret volume (`tls.crt -> ..data/tls.crt`,
`..data -> ..<version>`), and a renewal swaps `..data` atomically, as the kubelet does.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from admission.launcher import free_port
from policies.submitted import SubmissionClock
from tests.secretvolume import SecretVolume, presented
from webhook.decision import WebhookSettings
from webhook.handlers import kopf_server
from webhook.review import WebhookState
from webhook.server import WebhookServer
from webhook.serving import ServingCertificate
from webhook.tls import CertificateAuthority, KeyPair

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Issued:
    ca: CertificateAuthority
    first: KeyPair
    second: KeyPair


@pytest.fixture
def issued(tmp_path: Path) -> Issued:
    ca = CertificateAuthority.create(tmp_path / "ca", common_name="test-webhook-ca")

    def leaf(name: str) -> KeyPair:
        directory = tmp_path / name
        directory.mkdir()
        return ca.issue(directory, "tls", common_name=name, server=True, ip_addresses=[LOOPBACK])

    return Issued(ca, leaf("webhook-first"), leaf("webhook-second"))


@pytest.fixture
def volume(tmp_path: Path, issued: Issued) -> SecretVolume:
    root = tmp_path / "volume"
    root.mkdir()
    secret = SecretVolume(root)
    secret.publish("v1", issued.first)
    return secret


class LoopThread:
    """An asyncio loop in a thread: the servers run there, the test's blocking clients here."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Any, timeout: float = 30) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@asynccontextmanager
async def lean_server(volume: SecretVolume, port: int) -> AsyncIterator[ServingCertificate]:
    server = WebhookServer(
        addr=LOOPBACK,
        port=port,
        certfile=str(volume.cert),
        keyfile=str(volume.key),
        state=WebhookState(),
        settings=WebhookSettings(),
        clock=SubmissionClock(),
        reload_interval=0.05,
    )
    await server.start()
    try:
        assert server.certificate is not None
        yield server.certificate
    finally:
        await server.stop()


@asynccontextmanager
async def kopf_webhook_server(volume: SecretVolume, port: int) -> AsyncIterator[ServingCertificate]:
    """kopf's server as `muster run --webhook-server kopf` builds it, with the reload task that
    `webhook.handlers.register_kopf_mutate` starts."""
    certificate = ServingCertificate(volume.cert, volume.key)

    async def review(*_: Any, **__: Any) -> Any:
        return {}

    async with kopf_server(LOOPBACK, port, certificate) as server:  # as kopf runs it
        serving = server(review)
        await serving.__anext__()  # listening
        reloads = asyncio.get_running_loop().create_task(certificate.watch(0.05))
        try:
            yield certificate
        finally:
            reloads.cancel()


SERVERS: dict[str, Callable[[SecretVolume, int], Any]] = {
    "lean": lean_server,
    "kopf": kopf_webhook_server,
}


@pytest.fixture(params=sorted(SERVERS))
def serving(
    request: pytest.FixtureRequest, volume: SecretVolume
) -> Iterator[tuple[int, ServingCertificate]]:
    """(port, certificate) of a running webhook server of each kind."""
    loop = LoopThread()
    port = free_port(LOOPBACK)
    context = SERVERS[request.param](volume, port)
    try:
        certificate = loop.run(context.__aenter__())
        yield port, certificate
        loop.run(context.__aexit__(None, None, None))
    finally:
        loop.close()


def client_context(ca: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the certificate names 127.0.0.1 by IP; trust is the CA's
    return context


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def serial(pair: KeyPair) -> int:
    return x509.load_pem_x509_certificate(pair.cert.read_bytes()).serial_number


def post(tls: ssl.SSLSocket) -> bytes:
    """One HTTP/1.1 request on an open connection; the status line of the answer."""
    tls.sendall(b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    return tls.recv(4096).split(b"\r\n", 1)[0]


def wait_presented(port: int, context: ssl.SSLContext, name: str) -> x509.Certificate:
    deadline = time.monotonic() + 20
    while True:
        cert = presented(port, context)
        if common_name(cert) == name or time.monotonic() > deadline:
            return cert
        time.sleep(0.05)


def test_a_renewed_certificate_is_served_without_a_restart(
    serving: tuple[int, ServingCertificate], volume: SecretVolume, issued: Issued
) -> None:
    port, certificate = serving
    context = client_context(issued.ca.files.cert)
    first = presented(port, context)
    assert (common_name(first), first.serial_number) == ("webhook-first", serial(issued.first))
    with (
        socket.create_connection((LOOPBACK, port), timeout=10) as raw,
        context.wrap_socket(raw) as held,
    ):
        volume.publish("v2", issued.second)  # cert-manager renewed the Secret
        second = wait_presented(port, context, "webhook-second")
        assert (common_name(second), second.serial_number) == (
            "webhook-second",
            serial(issued.second),
        )
        # The same listener: a connection opened before the renewal is still served.
        assert post(held).startswith(b"HTTP/1.1 ")
    assert certificate.loads == 2


def test_a_pair_that_does_not_load_keeps_the_old_certificate(
    serving: tuple[int, ServingCertificate], volume: SecretVolume, issued: Issued, tmp_path: Path
) -> None:
    port, certificate = serving
    context = client_context(issued.ca.files.cert)
    # A half-written renewal: the new certificate with the old key.
    mismatched = KeyPair(issued.second.cert, issued.first.key)
    volume.publish("v2", mismatched)
    with pytest.raises(ssl.SSLError):
        certificate.reload()
    assert certificate.check() is False
    assert common_name(presented(port, context)) == "webhook-first"
    volume.publish("v3", issued.second)
    assert common_name(wait_presented(port, context, "webhook-second")) == "webhook-second"


def tls11_client() -> ssl.SSLContext:
    """A client that speaks TLS 1.1 and nothing newer (OpenSSL 3 needs security level 0)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    return context


def test_a_tls_1_1_client_is_refused_and_1_2_is_served(
    serving: tuple[int, ServingCertificate], issued: Issued
) -> None:
    port, certificate = serving
    assert certificate.context.minimum_version == ssl.TLSVersion.TLSv1_2
    # The server ends the handshake (asyncio's transport closes without sending OpenSSL's
    # protocol_version alert, so the client sees an EOF).
    with pytest.raises(ssl.SSLError):
        presented(port, tls11_client())
    modern = client_context(issued.ca.files.cert)
    modern.maximum_version = ssl.TLSVersion.TLSv1_2
    assert common_name(presented(port, modern)) == "webhook-first"


def test_the_tls_1_1_client_does_speak_tls_1_1(issued: Issued) -> None:
    """The control for the refusal above: a server that allows 1.1 completes the handshake with
    the same client, so the alert there is the webhook's minimum version, not the client's."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server.minimum_version = ssl.TLSVersion.TLSv1_1
    server.load_cert_chain(issued.first.cert, issued.first.key)
    with socket.create_server((LOOPBACK, 0)) as listener:
        port = listener.getsockname()[1]
        versions: list[str | None] = []

        def accept() -> None:
            conn, _ = listener.accept()
            with server.wrap_socket(conn, server_side=True) as tls:
                versions.append(tls.version())

        thread = threading.Thread(target=accept)
        thread.start()
        assert common_name(presented(port, tls11_client())) == "webhook-first"
        thread.join(10)
    assert versions == ["TLSv1.1"]
