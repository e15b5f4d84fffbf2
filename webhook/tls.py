"""TLS for the webhook server (and the local control plane): a CA and leaf certificates. The
server's `ServingCertificate` (TLS 1.2 or newer, reloaded without a restart) is in
`webhook.serving`, which needs only `ssl`: a process that serves but never issues (the
controller, the webhook with its certificate given) does not load `cryptography` (~16 MB).

Made with the `cryptography` package; kopf's own self-signed path pulls oscrypto, which fails on
OpenSSL 3. ECDSA P-256 keys: fast to generate and accepted by Kubernetes components.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


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
