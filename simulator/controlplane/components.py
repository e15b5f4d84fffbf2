"""The components of a local control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok; the operators beside it start through `operatorrun`): the command line and
config files each is started with on loopback (`ComponentArgs`), how each says it is healthy
(`health_check`, the operators' too), and the free ports they take.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import yaml

from kubeport.kubeapi import KubeClient
from kubeport.listenports import listen_ports
from simulator.controlplane.build import Binaries
from simulator.controlplane.features import NONE, FeatureGates
from simulator.controlplane.nodes import FAKE_NODE_ANNOTATION
from simulator.controlplane.operators import OPERATORS
from simulator.controlplane.pki import ClusterPki

COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)
API_ONLY = ("etcd", "kube-apiserver")
"""The least a control plane runs: the API and its store. What Kueue's scheduler benchmark runs
its controller against (envtest): no Job controller, no scheduler, no nodes, so no pods."""


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports, below the kernel's ephemeral range, so that a component
    restarted on its old port finds it free (`kubeport.listenports`)."""
    return listen_ports(count)


class ComponentArgs:
    """The command line of each component of one cluster (its state directory holds their data,
    certificates and config files), with the feature gates it runs with."""

    def __init__(
        self,
        name: str,
        state_dir: Path,
        kubeconfig: Path,
        binaries: Binaries,
        pki: ClusterPki,
        features: FeatureGates = NONE,
    ) -> None:
        self.name = name
        self.state_dir = state_dir
        self.kubeconfig = kubeconfig
        self.binaries = binaries
        self.pki = pki
        self.features = features

    def etcd(self, port: int, peer: int) -> list[str]:
        return [
            str(self.binaries.etcd),
            f"--name={self.name}",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{port}",
            f"--advertise-client-urls=http://127.0.0.1:{port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster={self.name}=http://127.0.0.1:{peer}",
            "--quota-backend-bytes=8589934592",
            # A throwaway cluster for tests and simulation: durability is not worth the latency.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def apiserver(self, port: int, etcd: int) -> list[str]:
        pki = self.pki
        return [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{etcd}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={pki.apiserver.cert}",
            f"--tls-private-key-file={pki.apiserver.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            # The endpoint reconciler would publish 127.0.0.1 as the kubernetes service, which
            # Endpoints validation rejects; nothing in this cluster dials that service.
            "--endpoint-reconciler-type=none",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            f"--cert-dir={self.state_dir / 'pki' / 'apiserver'}",
            *self.features.flag("kube-apiserver"),
            *self.features.runtime_config(),
            "--v=1",
        ]

    def controller_manager(self, port: int) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            str(self.binaries.kube_controller_manager),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.state_dir / 'pki' / 'controller-manager'}",
            "--leader-elect=false",
            f"--service-account-private-key-file={self.pki.service_account_key}",
            f"--root-ca-file={self.pki.ca.cert}",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            "--concurrent-job-syncs=20",
            # Fake nodes never fail: their heartbeats (kwok-stages.yaml, every 10-15 min, few
            # writes) must never make the node lifecycle controller taint them unreachable and
            # mark their pods not ready, however late a busy kwok posts them.
            "--node-monitor-grace-period=1h",
            *self.features.flag("kube-controller-manager"),
            "--v=1",
        ]

    def scheduler(self, port: int) -> list[str]:
        config = self.state_dir / "scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(self.kubeconfig),
                        "qps": 500,
                        "burst": 1000,
                    },
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        kc = str(self.kubeconfig)
        return [
            str(self.binaries.kube_scheduler),
            f"--config={config}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.state_dir / 'pki' / 'scheduler'}",
            *self.features.flag("kube-scheduler"),
            "--v=1",
        ]

    def kwok(self, port: int) -> list[str]:
        stages = self.state_dir / "kwok-stages.yaml"
        stages.write_text(
            resources.files("simulator.controlplane").joinpath("kwok-stages.yaml").read_text()
        )
        return [
            str(self.binaries.kwok),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={stages}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
            f"--server-address=127.0.0.1:{port}",
            "--cidr=10.0.0.1/16",
            "--node-ip=10.0.0.1",
            # At INFO kwok writes a JSON line for every pod and node PATCH it sends: 30,000
            # lines in a replay of the mixed trace, on the cores the replay needs.
            "--v=WARN",
        ]


def health_check(component: str, port: int, client: KubeClient) -> Callable[[], bool]:
    """Whether ``component``, listening on ``port``, says it is healthy (the apiserver: its
    /readyz through ``client``)."""
    if component == "etcd":
        return lambda: http_ok(f"http://127.0.0.1:{port}/health")
    if component == "kube-apiserver":
        return lambda: readyz(client)
    if component == "kwok":
        return lambda: http_ok(f"http://127.0.0.1:{port}/healthz")
    if component in {op.component for op in OPERATORS.values()}:
        # controller-runtime's probe port, plain HTTP (simulator.controlplane.operatorrun).
        return lambda: http_ok(f"http://127.0.0.1:{port}/readyz")
    return lambda: https_ok(f"https://127.0.0.1:{port}/healthz")


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def https_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=ctx) as response:
        return bool(response.status == 200)


def readyz(client: KubeClient) -> bool:
    status, _ = client.raw_get("/readyz")
    return status == 200
