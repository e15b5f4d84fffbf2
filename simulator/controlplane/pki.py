"""The local control plane's PKI: a CA, the apiserver serving cert, an admin client cert, SA keys.

Generated at `cluster up` into the cluster's state directory (never committed). The CA and
certificate code is the webhook's (`webhook.tls`): one implementation of certificate issuance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from webhook.tls import CertificateAuthority, KeyPair, new_key, write_key


@dataclass(frozen=True)
class ClusterPki:
    """Every credential file the local control plane needs."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    service_account_key: Path
    service_account_pub: Path


def create_cluster_pki(directory: Path) -> ClusterPki:
    ca = CertificateAuthority.create(directory)
    apiserver = ca.issue(
        directory,
        "apiserver",
        common_name="kube-apiserver",
        server=True,
        dns_names=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ip_addresses=["127.0.0.1", "10.96.0.1"],
    )
    admin = ca.issue(
        directory, "admin", common_name="muster-admin", organization="system:masters", client=True
    )
    sa_key = new_key()
    sa_key_path = directory / "sa.key"
    sa_pub_path = directory / "sa.pub"
    write_key(sa_key, sa_key_path)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterPki(ca.files, apiserver, admin, sa_key_path, sa_pub_path)
