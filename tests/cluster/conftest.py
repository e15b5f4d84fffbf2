"""Fixtures of the cluster tests that more than one module uses."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admission.launcher import launch
from kubeport.kubeapi import KubeClient
from tests.conftest import MusterProcess
from webhook.configuration import NAME as WEBHOOK_CONFIGURATION
from webhook.startup import register_configuration

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def _url(configuration: dict[str, Any]) -> str:
    return str(configuration["webhooks"][0]["clientConfig"]["url"])


@pytest.fixture(scope="module", params=["lean", "kopf"])
def webhook_server(
    request: pytest.FixtureRequest, kube: KubeClient, kubeconfig: Path, muster: MusterProcess
) -> Iterator[str]:
    """Which server answers the reviews: the session's lean endpoint, or kopf's handlers."""
    if request.param == "lean":
        yield "lean"
        return
    saved = kube.get(f"{CONFIGURATIONS}/{WEBHOOK_CONFIGURATION}")
    # The webhook alone; it is ready once it has taken the configuration over.
    proc = launch(kubeconfig, "--no-controller", "--webhook-server", "kopf")
    try:
        served = kube.get(f"{CONFIGURATIONS}/{WEBHOOK_CONFIGURATION}")
        assert _url(served) != _url(saved), "the kopf server did not take the configuration"
        # Namespace, Queue and MiniCluster watches of the new process see the cluster.
        time.sleep(1.0)
        yield "kopf"
    finally:
        try:
            proc.stop()
        finally:
            # Give the session's muster its configuration back (the kopf process removed its
            # own), even if that process had to be killed.
            meta = {"name": WEBHOOK_CONFIGURATION, "labels": saved["metadata"].get("labels") or {}}
            register_configuration(kube, {**saved, "metadata": meta})
