"""`muster run --local` registers its webhook configuration and removes it when it stops, and a
muster stopped while it starts leaves no configuration behind pointing at a webhook that is
gone (with failurePolicy Fail that would refuse every create in managed namespaces)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from admission.kubeapi import ApiError, KubeClient
from muster.commands.run import CONFIG_PATH
from tests.conftest import MusterProcess
from webhook.configuration import NAME as WEBHOOK_CONFIG_NAME

pytestmark = [pytest.mark.cluster]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def registered_urls(kube: KubeClient) -> set[str]:
    try:
        body = kube.get(f"{CONFIG_PATH}/{WEBHOOK_CONFIG_NAME}")
    except ApiError as exc:
        if exc.status == 404:
            return set()
        raise
    return {str((h.get("clientConfig") or {}).get("url") or "") for h in body.get("webhooks") or []}


def test_a_muster_stopped_while_it_starts_leaves_no_configuration_behind(
    kube: KubeClient, kubeconfig: Path, muster: MusterProcess
) -> None:
    """SIGTERM at moments around the webhook's registration (a second or two after launch)."""
    muster.stop()
    try:
        for delay in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, "-m", "muster.cli", "run", "--local", "--no-controller"]
                + ["--kubeconfig", str(kubeconfig), "--webhook-port", str(port)]
                + ["--webhook-metrics-port", "-1"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(delay)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) is not None
            left = [u for u in registered_urls(kube) if f":{port}/" in u or u.endswith(f":{port}")]
            assert not left, f"stopped {delay}s after launch, it left {left} registered"
    finally:
        muster.restart(signal.SIGTERM)
