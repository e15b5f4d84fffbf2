"""A renewed webhook certificate on the real control plane: the apiserver keeps calling the
webhook, which never restarts.

A webhook-only `muster run` (each server: lean and kopf) serves a certificate from a directory
laid out as the kubelet mounts a Secret, signed by a CA the test made and registered as the
configuration's caBundle (`--tls-ca`). Renewing it (a second certificate from the same CA, the
`..data` symlink swapped, as cert-manager and the kubelet do) changes what new handshakes
present, and Jobs created afterwards are still suspended and stamped.
"""

from __future__ import annotations

import ssl
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from admission.launcher import launch
from kubeport.kubeapi import KubeClient
from tests import builders
from tests.cluster.conftest import CONFIGURATIONS
from tests.conftest import MusterProcess
from tests.controller_helpers import jobs_path
from tests.kube import wait_for, wait_webhook_stamps
from tests.secretvolume import SecretVolume, presented
from webhook.configuration import NAME as WEBHOOK_CONFIGURATION
from webhook.startup import register_configuration
from webhook.tls import CertificateAuthority

pytestmark = [pytest.mark.cluster]

LOOP = "127.0.0.1"


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def job(name: str) -> dict[str, Any]:
    # No such queue: the Job waits suspended (with a warning); only the webhook matters here.
    return builders.job(name, "tls-rotation-nowhere", runtime=None)


def assert_suspended_and_stamped(stored: dict[str, Any]) -> None:
    assert stored["spec"]["suspend"] is True
    assert "muster.dev/submitted" in stored["metadata"]["annotations"]


@pytest.mark.parametrize("server", ["lean", "kopf"])
def test_the_apiserver_calls_the_webhook_after_its_certificate_is_renewed(
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    muster: MusterProcess,
    tmp_path: Path,
    server: str,
) -> None:
    ca = CertificateAuthority.create(tmp_path / "ca", common_name="rotation-ca")
    pairs = []
    for name in ("webhook-first", "webhook-second"):
        (tmp_path / name).mkdir()
        leaf = ca.issue(tmp_path / name, "tls", common_name=name, server=True, ip_addresses=[LOOP])
        pairs.append(leaf)
    volume = SecretVolume(tmp_path / "volume")
    volume.root.mkdir()
    volume.publish("v1", pairs[0])
    saved = kube.get(f"{CONFIGURATIONS}/{WEBHOOK_CONFIGURATION}")
    proc = launch(
        kubeconfig,
        "--no-controller",
        "--webhook-server",
        server,
        *("--tls-cert", str(volume.cert), "--tls-key", str(volume.key)),
        *("--tls-ca", str(ca.files.cert)),
    )
    try:
        served = kube.get(f"{CONFIGURATIONS}/{WEBHOOK_CONFIGURATION}")
        url = urllib.parse.urlsplit(served["webhooks"][0]["clientConfig"]["url"])
        assert url.port is not None
        trusting = ssl.create_default_context(cafile=str(ca.files.cert))  # as the apiserver
        assert common_name(presented(url.port, trusting, url.hostname or "")) == "webhook-first"
        wait_webhook_stamps(kube, jobs_path(namespace), job("probe"))
        assert_suspended_and_stamped(kube.create(jobs_path(namespace), job("before")))

        volume.publish("v2", pairs[1])  # cert-manager renewed the Secret
        wait_for(
            lambda: (
                common_name(presented(url.port or 0, trusting, url.hostname or ""))
                == "webhook-second"
            ),
            timeout=60,
            interval=1.0,
            what="the webhook to present the renewed certificate",
        )
        for i in range(3):
            assert_suspended_and_stamped(kube.create(jobs_path(namespace), job(f"after-{i}")))
            time.sleep(0.5)
        assert proc.alive(), proc.tail()
        assert "webhook certificate reloaded" in proc.text()
    finally:
        try:
            proc.stop()
        finally:
            # Give the session's muster its configuration back (see webhook_server).
            meta = {"name": WEBHOOK_CONFIGURATION, "labels": saved["metadata"].get("labels") or {}}
            register_configuration(kube, {**saved, "metadata": meta})
