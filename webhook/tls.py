"""TLS for the webhook server (and the local control plane): a CA and leaf certificates, and
the server's `ServingCertificate` (TLS 1.2 or newer, its certificate reloaded without a restart).

Made with the `cryptography` package; kopf's own self-signed path pulls oscrypto, which fails on
OpenSSL 3. ECDSA P-256 keys: fast to generate and accepted by Kubernetes components.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import ipaddress
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
MINIMUM_VERSION: Final = ssl.TLSVersion.TLSv1_2
"""The oldest TLS the webhook accepts (the apiserver speaks 1.2 and 1.3)."""
RELOAD_INTERVAL: Final = 10.0
"""Seconds between two looks at the certificate files (a renewed Secret reaches the pod's
volume within the kubelet's sync period, about a minute, so 10 s adds little)."""

logger = logging.getLogger("muster.webhook")


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA that signs the cluster's serving and client certificates."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    files: KeyPair

    @classmethod
    def create(cls, directory: Path, common_name: str = "muster-local-ca") -> CertificateAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        key = new_key()
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        files = KeyPair(directory / "ca.crt", directory / "ca.key")
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_key(key, files.key)
        return cls(key, cert, files)

    def issue(
        self,
        directory: Path,
        name: str,
        *,
        common_name: str,
        organization: str | None = None,
        server: bool = False,
        client: bool = False,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
    ) -> KeyPair:
        """Sign a leaf certificate and write `<name>.crt` / `<name>.key`."""
        key = new_key()
        now = dt.datetime.now(dt.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        files = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_key(key, files.key)
        return files


@dataclass(frozen=True)
class WebhookTls:
    """The webhook server's certificate and the CA bundle the apiserver must trust."""

    cert: Path
    key: Path
    ca_bundle: bytes


def create_webhook_tls(directory: Path, hosts: Sequence[str]) -> WebhookTls:
    """A fresh CA and a serving certificate for `hosts` (IP addresses and/or DNS names)."""
    ca = CertificateAuthority.create(directory, common_name="muster-webhook-ca")
    ips = [h for h in hosts if _is_ip(h)]
    names = [h for h in hosts if not _is_ip(h)]
    leaf = ca.issue(
        directory,
        "webhook",
        common_name=(names or ips)[0],
        server=True,
        dns_names=names,
        ip_addresses=ips,
    )
    return WebhookTls(leaf.cert, leaf.key, ca.files.cert.read_bytes())


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class ServingCertificate:
    """The webhook server's SSLContext: TLS 1.2 or newer, serving the certificate in `certfile`
    and `keyfile`, reloaded when they change, without a restart.

    cert-manager renews the certificate into the Secret the pod mounts, and the kubelet swaps
    the volume's `..data` symlink to the new files: `watch` notices (a hash of both files every
    `RELOAD_INTERVAL` seconds) and loads them into a fresh context; `context`, the one the
    server listens with, hands each new handshake to the latest one (its SNI callback, which
    OpenSSL calls for every ClientHello), so the listening socket stays open and connections
    already open keep the certificate they began with. A pair that cannot be loaded (read
    half-way through a swap, a key that does not match) is logged and tried again at the next
    look; the previous certificate is served meanwhile. (Loading into the live context instead
    would leave it half-changed by a failed load: the new certificate with the old key.)
    """

    def __init__(self, certfile: str | Path, keyfile: str | Path) -> None:
        self.certfile, self.keyfile = Path(certfile), Path(keyfile)
        self.loads = 0
        """How many times a certificate was loaded (1 after the first)."""
        self._digest = b""  # matches no file: the first `reload` loads
        self.context = self._load()
        self._serving = self.context
        self.context.sni_callback = self._select

    @staticmethod
    def _new_context() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = MINIMUM_VERSION
        return context

    def _files_digest(self) -> bytes:
        digest = hashlib.sha256(self.certfile.read_bytes())
        digest.update(self.keyfile.read_bytes())
        return digest.digest()

    def _load(self) -> ssl.SSLContext:
        """A fresh context with the files' pair (raises OSError or ssl.SSLError)."""
        digest = self._files_digest()
        context = self._new_context()
        # Hashed before loading: a swap in between only makes the next look load once more.
        context.load_cert_chain(self.certfile, self.keyfile)
        self._digest = digest
        self.loads += 1
        return context

    def _select(self, connection: ssl.SSLObject, _server_name: str | None, context: object) -> None:
        if self._serving is not context:
            connection.context = self._serving

    def changed(self) -> bool:
        """Whether the files hold something else than the pair last loaded."""
        return self._files_digest() != self._digest

    def reload(self) -> bool:
        """Serve the files' pair from the next handshake on if they changed since the last
        load; True if loaded. Raises OSError or ssl.SSLError when they cannot be read or
        loaded (the previous pair is served still)."""
        if not self.changed():
            return False
        self._serving = self._load()
        return True

    def check(self) -> bool:
        """`reload`, logging instead of raising; True if a new certificate was loaded."""
        try:
            loaded = self.reload()
        except (OSError, ssl.SSLError) as exc:
            logger.warning(
                "cannot load the webhook certificate %s (key %s): %s; still serving the previous "
                "one, trying again in %.0fs",
                self.certfile,
                self.keyfile,
                exc,
                RELOAD_INTERVAL,
            )
            return False
        if loaded:
            logger.info("webhook certificate reloaded from %s", self.certfile)
        return loaded

    async def watch(self, interval: float = RELOAD_INTERVAL) -> None:
        """Look at the files every `interval` seconds, forever (cancel the task to stop)."""
        while True:
            await asyncio.sleep(interval)
            self.check()
