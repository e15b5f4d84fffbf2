"""The local control plane's credentials: its PKI (a CA, the apiserver serving cert, an admin
client cert, muster's own client cert, SA keys), the kubeconfigs that use them, and serving
certificates signed by the same CA for what the apiserver calls on loopback (an operator's
admission webhooks).

Generated at `cluster up` into the cluster's state directory (never committed). The CA and
certificate code is the webhook's (`webhook.tls`): one implementation of certificate issuance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from webhook.configuration import CONTROLLER_USER
from webhook.tls import CertificateAuthority, KeyPair, new_key, write_key


@dataclass(frozen=True)
class ClusterPki:
    """Every credential file the local control plane needs."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    service_account_key: Path
    service_account_pub: Path
    controller: KeyPair
    """muster's own client cert (`webhook.configuration.CONTROLLER_USER`, in system:masters
    as the admin): its updates skip muster's update review, the admin's are reviewed."""


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
    controller = ca.issue(
        directory,
        "controller",
        common_name=CONTROLLER_USER,
        organization="system:masters",
        client=True,
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
    return ClusterPki(ca.files, apiserver, admin, sa_key_path, sa_pub_path, controller)


def load_cluster_ca(directory: Path) -> CertificateAuthority:
    """The CA `create_cluster_pki` wrote into `directory`, to sign more certificates with."""
    files = KeyPair(directory / "ca.crt", directory / "ca.key")
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{files.key}: not the EC key create_cluster_pki writes")
    return CertificateAuthority(key, cert, files)


def issue_loopback_serving(pki_dir: Path, directory: Path, common_name: str) -> KeyPair:
    """A serving certificate for 127.0.0.1 and localhost, signed by the cluster's CA (in
    `pki_dir`), written as `directory`/tls.crt and tls.key: the names controller-runtime's
    webhook server reads from its certificate directory."""
    directory.mkdir(parents=True, exist_ok=True)
    return load_cluster_ca(pki_dir).issue(
        directory,
        "tls",
        common_name=common_name,
        server=True,
        dns_names=["localhost"],
        ip_addresses=["127.0.0.1"],
    )


def write_kubeconfig(
    path: Path, name: str, pki: ClusterPki, port: int, user: KeyPair | None = None
) -> None:
    """The admin kubeconfig of cluster ``name`` (its apiserver on loopback ``port``; the
    client cert is in group system:masters), or with ``user`` that client cert's, readable by
    its owner only."""
    client = user if user is not None else pki.admin
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": f"https://127.0.0.1:{port}",
                    "certificate-authority": str(pki.ca.cert),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(client.cert),
                    "client-key": str(client.key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
