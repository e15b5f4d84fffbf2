"""Fixtures of the cluster tests that more than one module uses."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from admission.launcher import launch
from admission.supervisor import refuses
from kubeport.kubeapi import ApiError, KubeClient
from tests.conftest import MusterProcess
from webhook.configuration import NAME as WEBHOOK_CONFIGURATION
from webhook.startup import register_configuration

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def _url(configuration: dict[str, Any]) -> str:
    """Where the configuration sends reviews; empty for a Service (muster in the cluster)."""
    return str(configuration["webhooks"][0]["clientConfig"].get("url") or "")


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


SERVES_WITHIN = 40.0
"""How long the check below waits for the webhook to serve again: muster's supervisor kills a
child that refuses connections for 10 s and starts it again (`admission.supervisor`)."""


def _webhook_refuses(kube: KubeClient) -> str | None:
    """What is wrong with the registered webhook, from the apiserver's side: no configuration,
    or nothing listening at its URL (None: something accepts connections there)."""
    try:
        configuration = kube.get(f"{CONFIGURATIONS}/{WEBHOOK_CONFIGURATION}")
    except ApiError as exc:
        return f"has no webhook configuration ({exc.status})"
    url = _url(configuration)
    if not url:  # a Service: the manifests' or the chart's tests
        return None
    where = urlsplit(url)
    if asyncio.run(refuses((where.hostname or "127.0.0.1", where.port or 443), timeout=5)):
        return f"refuses connections at {url}"
    return None


def _session_muster_problem(muster: MusterProcess, kube: KubeClient) -> str | None:
    deadline = time.monotonic() + SERVES_WITHIN
    while True:
        if not muster.run.alive():
            return f"exited ({muster.proc.returncode})"
        problem = _webhook_refuses(kube)
        if problem is None or time.monotonic() > deadline:
            return problem
        time.sleep(1.0)


@pytest.fixture(autouse=True)
def _session_muster_serves(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that uses the session's muster: it still runs and its webhook serves.

    Every later test shares that process; a test that left it down (or a muster that died
    under it) would otherwise fail every create of the tests after it, far from the cause
    (CI once lost 13 tests to "connection refused" with no word of why). The test is failed
    at its teardown with the process's last output, and muster is started again for the rest.
    """
    yield
    if "muster" not in request.fixturenames:
        return
    muster: MusterProcess = request.getfixturevalue("muster")
    if muster.stopped:  # by a module's fixture, for the module (it starts muster again)
        return
    problem = _session_muster_problem(muster, request.getfixturevalue("kube"))
    if problem is None:
        return
    tail = muster.run.tail(80)
    muster.restart(signal.SIGKILL)  # nothing is sent to a process that already exited
    pytest.fail(
        f"after this test the session's muster {problem}; it was started again for the tests "
        f"after this one. Its last output:\n{tail}"
    )
