"""Shared fixtures. Tests marked `cluster` run against one real local control plane per session.

Set MUSTER_KUBECONFIG to use an existing cluster (it is then left running); otherwise the
session starts `muster cluster up --nodes 1000` under the name `muster-test` (or
$MUSTER_TEST_CLUSTER), with the real operators whose sources are beside the repository
(`--operators available`: the JobSet controller, the Flux Operator), and stops it at the end.
The binaries are built first if they are not cached (`muster cluster build`). The report header
says which operators run, and so what makes the MiniClusters' Jobs: the real Flux Operator, or
muster's stand-in reconciler.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from admission.launcher import LaunchError, MusterRun, launch
from kubeport.kubeapi import KubeClient

TEST_CLUSTER = os.environ.get("MUSTER_TEST_CLUSTER", "muster-test")
"""The session cluster's name: another worktree's test run on the same machine sets its own."""
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
        + ["--nodes", str(TEST_NODES), "--cpu", "32", "--memory", "256Gi"]
        + ["--operators", "available"],
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


def manifest_webhooks() -> int:
    """How many webhooks manifests/base/webhook.yaml (and so the chart) registers: three per kind
    muster holds (its creates, labelled and by namespace default, and its updates)."""
    import yaml

    document = yaml.safe_load((REPO / "manifests" / "base" / "webhook.yaml").read_text())
    return len(document["webhooks"])


def session_operators() -> list[str]:
    """The operators the session's cluster runs (or will: the session starts the available
    ones), by name."""
    from simulator.controlplane.cluster import operators_of
    from simulator.controlplane.operators import available

    existing = os.environ.get("MUSTER_KUBECONFIG")
    operators = operators_of(Path(existing)) if existing else available()
    return [op.name for op in operators]


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which MiniCluster CRD cluster tests install (the real one where ../shared/ has it), which
    operators run beside the cluster, and so what makes the MiniClusters' Jobs."""
    from simulator.controlplane.minicluster import describe_job_maker, minicluster_crd

    try:
        crd = f"MiniCluster CRD: {minicluster_crd().describe()}"
    except (OSError, ValueError) as exc:
        crd = f"MiniCluster CRD: cannot be read: {exc}"
    operators = session_operators()
    return [
        crd,
        f"operators beside the cluster: {', '.join(operators) or 'none'}",
        f"MiniClusters' Jobs made by: {describe_job_maker('flux' in operators)}",
    ]


_MINICLUSTER_CRD_INSTALLED: list[str] = []
_JOB_MAKERS_USED: set[str] = set()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for outcome in _MINICLUSTER_CRD_INSTALLED:
        terminalreporter.write_line(f"MiniCluster CRD: {outcome}")
    for maker in sorted(_JOB_MAKERS_USED):
        terminalreporter.write_line(f"MiniClusters' Jobs were made by: {maker}")


@pytest.fixture(scope="session")
def flux_operator(kubeconfig: Path) -> bool:
    """The session's cluster runs the real Flux Operator: it makes the MiniClusters' Jobs, and
    tests start no stand-in (`simulator.controlplane.minicluster.job_maker`)."""
    from simulator.controlplane.cluster import operators_of
    from simulator.controlplane.minicluster import describe_job_maker
    from simulator.controlplane.operators import FLUX

    real = FLUX in operators_of(kubeconfig)
    _JOB_MAKERS_USED.add(describe_job_maker(real))
    return real


@pytest.fixture(scope="session")
def jobset_controller(kubeconfig: Path) -> None:
    """The session's cluster runs the real JobSet controller (its CRD and webhooks installed);
    skips the test where its source is not beside the repository."""
    from simulator.controlplane.cluster import operators_of
    from simulator.controlplane.operators import JOBSET, is_present, source_of

    if JOBSET in operators_of(kubeconfig):
        return
    if not is_present(source_of(JOBSET)):
        pytest.skip(f"no JobSet controller source at {source_of(JOBSET)}")
    pytest.skip(
        f"the cluster of MUSTER_KUBECONFIG ({kubeconfig}) runs no JobSet controller: "
        "`muster cluster up --name NAME --operators jobset` starts it"
    )


@pytest.fixture(scope="session")
def crds(kube: KubeClient) -> None:
    """muster's CRDs, Queue and GangRecord (as the package ships them: manifests/crd/'s), and
    the MiniCluster CRD (`minicluster_crd()`: the Flux Operator's where ../shared/ has it, else
    the stand-in), Established."""
    from admission.crd import muster_crds
    from simulator.controlplane.minicluster import apply_crd, install_crd, minicluster_crd

    for crd in muster_crds():
        apply_crd(kube, crd)
    _MINICLUSTER_CRD_INSTALLED.append(install_crd(kube, minicluster_crd()))


@dataclass
class MusterProcess:
    """A running `muster run --local` (webhook + controller) and where its services listen:
    an `admission.launcher.MusterRun` that a test can restart in place."""

    run: MusterRun
    kubeconfig: Path | None = None
    flags: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    stopped: bool = False
    """Stopped on purpose (`stop`), until started again (`restart`)."""

    @property
    def proc(self) -> subprocess.Popen[str]:
        return self.run.proc

    @property
    def status_url(self) -> str:
        assert self.run.status_url is not None, "started without a status service"
        return self.run.status_url

    @property
    def metrics_url(self) -> str:
        assert self.run.metrics_url is not None, "started without a controller"
        return self.run.metrics_url

    @property
    def webhook_metrics_url(self) -> str | None:
        """The webhook process's own /metrics (queue depth, refusals), when it serves one."""
        return self.run.webhook_metrics_url

    @property
    def output(self) -> list[str]:
        return self.run.output

    def text(self) -> str:
        """Everything the process printed so far."""
        return self.run.text()

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Stop the process with `sig` (kill -9 by default) and start a fresh one in place."""
        self.stop(sig)
        self.run = start_muster(self.kubeconfig, *self.flags, env=self.env).run
        self.stopped = False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.stopped = True
        self.run.stop(sig)


MUSTER_TEST_FLAGS = [
    "--deadlock-grace",
    "3",
    # Long enough for tests that close a queue (quota 1m) for a while, then open it.
    "--fail-rejected-after",
    "60",
]


def start_muster(
    kubeconfig: Path | None,
    *extra: str,
    timeout: float = 90,
    env: Mapping[str, str] | None = None,
) -> MusterProcess:
    """Start `muster run --local` and wait until the webhook and the controller are ready (a
    `--peering` replica: until it serves, active or standby). With MUSTER_TEST_LOG set, its log
    is appended there too. On a local control plane muster runs as itself (its updates skip
    the update review; the tests' own, by the admin, are reviewed).

    Without `kubeconfig`, muster finds one as kubectl does ($KUBECONFIG in `env`)."""
    from simulator.controlplane.cluster import controller_kubeconfig

    log = os.environ.get("MUSTER_TEST_LOG")
    try:
        run = launch(
            controller_kubeconfig(kubeconfig) if kubeconfig is not None else None,
            *MUSTER_TEST_FLAGS,
            *extra,
            env=env,
            timeout=timeout,
            log_path=Path(log) if log else None,
        )
    except LaunchError as exc:
        pytest.fail(f"muster run --local did not become ready: {exc}")
    return MusterProcess(run, kubeconfig, extra, env)


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
