"""A Kubernetes Secret volume on disk, for tests of the webhook's certificate reload, and a look
at the certificate a TLS server presents."""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from webhook.tls import KeyPair


@dataclass(frozen=True)
class SecretVolume:
    """A directory laid out as the kubelet mounts a `kubernetes.io/tls` Secret."""

    root: Path

    @property
    def cert(self) -> Path:
        return self.root / "tls.crt"

    @property
    def key(self) -> Path:
        return self.root / "tls.key"

    def publish(self, version: str, pair: KeyPair) -> None:
        """Make `pair` the volume's content at once: a new `..<version>` directory, then one
        rename of the `..data` symlink onto it (the kubelet's atomic writer does the same)."""
        directory = self.root / f"..{version}"
        directory.mkdir()
        (directory / "tls.crt").write_bytes(pair.cert.read_bytes())
        (directory / "tls.key").write_bytes(pair.key.read_bytes())
        staged = self.root / "..data_tmp"
        staged.symlink_to(directory.name)
        os.replace(staged, self.root / "..data")
        for name in ("tls.crt", "tls.key"):
            if not (self.root / name).is_symlink():
                (self.root / name).symlink_to(f"..data/{name}")


def presented(port: int, context: ssl.SSLContext, host: str = "127.0.0.1") -> x509.Certificate:
    """The certificate a new handshake with the server presents."""
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)
