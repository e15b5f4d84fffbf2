"""Shared fixtures. Tests marked `cluster` run against one real local control plane per session.

Set MUSTER_KUBECONFIG to use an existing cluster (it is then left running); otherwise the
session starts `muster cluster up --nodes 1000` under the name `muster-test` and stops it at the
end. The binaries are built first if they are not cached (`muster cluster build`).
"""

from __future__ import annotations

import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
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


def pytest_report_header(config: pytest.Config) -> str:
    """Which MiniCluster CRD cluster tests install (the real one where ../shared/ has it)."""
    from simulator.controlplane.minicluster import minicluster_crd

    try:
        return f"MiniCluster CRD: {minicluster_crd().describe()}"
    except (OSError, ValueError) as exc:
        return f"MiniCluster CRD: cannot be read: {exc}"


_MINICLUSTER_CRD_INSTALLED: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for outcome in _MINICLUSTER_CRD_INSTALLED:
        terminalreporter.write_line(f"MiniCluster CRD: {outcome}")


@pytest.fixture(scope="session")
def crds(kube: KubeClient) -> None:
    """The Queue CRD from manifests/ and the MiniCluster CRD (`minicluster_crd()`: the Flux
    Operator's where ../shared/ has it, else the stand-in), Established."""
    import yaml

    from simulator.controlplane.minicluster import apply_crd, install_crd, minicluster_crd

    apply_crd(kube, yaml.safe_load((REPO / "manifests/crd/queues.muster.dev.yaml").read_text()))
    _MINICLUSTER_CRD_INSTALLED.append(install_crd(kube, minicluster_crd()))


@dataclass
class MusterProcess:
    """A running `muster run --local` (webhook + controller) and where its services listen."""

    proc: subprocess.Popen[str]
    status_url: str
    metrics_url: str
    output: list[str] = field(default_factory=list)
    kubeconfig: Path | None = None
    webhook_metrics_url: str | None = None
    """The webhook process's own /metrics (queue depth, refusals), when it serves one."""

    def text(self) -> str:
        """Everything the process printed so far."""
        return "".join(self.output)

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Stop the process with `sig` (kill -9 by default) and start a fresh one in place."""
        assert self.kubeconfig is not None
        self.stop(sig)
        fresh = start_muster(self.kubeconfig)
        self.proc, self.status_url, self.metrics_url, self.webhook_metrics_url = (
            fresh.proc,
            fresh.status_url,
            fresh.metrics_url,
            fresh.webhook_metrics_url,
        )
        self.output = fresh.output

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


MUSTER_TEST_FLAGS = [
    *("--status-port", "0", "--metrics-port", "0", "--deadlock-grace", "3"),
    # Long enough for tests that close a queue (quota 1m) for a while, then open it.
    *("--fail-rejected-after", "60"),
]


def start_muster(
    kubeconfig: Path | None,
    *extra: str,
    timeout: float = 90,
    env: Mapping[str, str] | None = None,
) -> MusterProcess:
    """Start `muster run --local` and wait until the webhook and the controller are ready.

    Without `kubeconfig`, muster finds one as kubectl does ($KUBECONFIG in `env`)."""
    where = ["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "muster.cli", "run", "--local", *where]
        + [*MUSTER_TEST_FLAGS, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env} if env is not None else None,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        # Reads every line (so the pipe never fills); keeps the last ones for failure messages.
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    webhook = controller = None
    while not (webhook and controller) and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        output.append(line)
        if "webhook ready" in line:
            webhook = line
        if "controller ready" in line or "controller standby" in line:
            # A --peering replica that is not active says standby instead of ready.
            controller = line
    if not (webhook and controller):
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        pytest.fail("muster run --local did not become ready:\n" + "".join(output[-40:]))
    fields = dict(part.split("=", 1) for part in controller.split()[3:])

    log_path = os.environ.get("MUSTER_TEST_LOG")

    def drain() -> None:
        # Keep reading; with MUSTER_TEST_LOG set, keep the controller's log there for debugging.
        # Every line also stays in `output`, so a test can read what the process logged.
        with open(log_path or os.devnull, "a") as log:
            log.writelines(output)
            while (line := lines.get()) is not None:
                output.append(line)
                log.write(line)
                log.flush()

    threading.Thread(target=drain, daemon=True).start()
    webhook_fields = dict(part.split("=", 1) for part in webhook.split() if "=" in part)
    return MusterProcess(
        proc,
        f"http://{fields['status']}",
        f"http://{fields['metrics']}",
        output,
        kubeconfig,
        webhook_fields.get("metrics"),
    )


@pytest.fixture(scope="session")
def muster(kubeconfig: Path, crds: None) -> Iterator[MusterProcess]:
    """`muster run --local` (webhook + controller) as a real process, for the whole session."""
    process = start_muster(kubeconfig)
    yield process
    process.stop()


@pytest.fixture(scope="session")
def muster_webhook(muster: MusterProcess) -> subprocess.Popen[str]:
    """The webhook is served by the session's `muster run --local`."""
    return muster.proc
