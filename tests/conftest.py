"""Shared fixtures. Tests marked `cluster` run against one real local control plane per session.

Set MUSTER_KUBECONFIG to use an existing cluster (it is then left running); otherwise the
session starts `muster cluster up --nodes 1000` under the name `muster-test` and stops it at the
end. The binaries are built first if they are not cached (`muster cluster build`).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from admission.kubeapi import KubeClient

TEST_CLUSTER = "muster-test"
_NAMESPACE_COUNTER = itertools.count()
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
    import re

    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().replace("_", "-"))[:40]
    name = f"t-{slug.strip('-')}-{next(_NAMESPACE_COUNTER)}-{os.getpid() % 10000}"
    kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")


REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def crds(kube: KubeClient) -> None:
    """The Queue CRD from manifests/ and the stand-in MiniCluster CRD, Established."""
    import yaml

    from simulator.controlplane.minicluster import apply_crd, install_crd

    apply_crd(kube, yaml.safe_load((REPO / "manifests/crd/queues.muster.dev.yaml").read_text()))
    install_crd(kube)


@pytest.fixture(scope="session")
def muster_webhook(kubeconfig: Path, crds: None) -> Iterator[subprocess.Popen[str]]:
    """`muster run --local` as a real process, registered with the apiserver."""
    import queue
    import signal
    import threading
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "muster.cli", "run", "--local", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        # Reads every line (so the pipe never fills) and hands them to the waiting test.
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    output: list[str] = []
    deadline = time.monotonic() + 90
    ready = False
    while not ready and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        output.append(line)
        ready = "webhook ready" in line
    if not ready:
        proc.kill()
        proc.wait()
        pytest.fail("muster run --local did not become ready:\n" + "".join(output[-40:]))
    yield proc
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()
