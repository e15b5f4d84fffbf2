"""Shared fixtures. Tests marked `cluster` run against one real local control plane per session.

Set MUSTER_KUBECONFIG to use an existing cluster (it is then left running); otherwise the
session starts `muster cluster up --nodes 1000` under the name `muster-test` and stops it at the
end. The binaries are built first if they are not cached (`muster cluster build`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from admission.kubeapi import KubeClient

TEST_CLUSTER = "muster-test"
TEST_NODES = 1000


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[Path]:
    existing = os.environ.get("MUSTER_KUBECONFIG")
    if existing:
        yield Path(existing)
        return
    from simulator.controlplane.cluster import LocalCluster

    cluster = LocalCluster(name=TEST_CLUSTER)
    # Through the CLI on purpose: the tests then cover the command users run.
    proc = subprocess.run(
        [sys.executable, "-m", "muster.cli", "cluster", "up", "--name", TEST_CLUSTER]
        + ["--nodes", str(TEST_NODES), "--cpu", "32", "--memory", "256Gi"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        cluster.down(quiet=True)
        pytest.fail(f"muster cluster up failed:\n{proc.stdout}\n{proc.stderr}")
    try:
        yield cluster.kubeconfig
    finally:
        cluster.down(quiet=True)


@pytest.fixture(scope="session")
def kube(kubeconfig: Path) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(kubeconfig) as client:
        yield client


@pytest.fixture
def namespace(kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (its Jobs and Pods go with it)."""
    name = "t-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")
