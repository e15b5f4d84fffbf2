"""Start, inspect and stop a local control plane on loopback, and create kwok fake nodes.

Layout of a cluster's state directory (`<cache>/clusters/<name>/`, removed by `down`):

    pki/             CA, apiserver serving cert, admin client cert, service-account keys
    kubeconfig       admin kubeconfig (client cert in group system:masters)
    processes.json   pid, start time and command of every process we started
    logs/<component>.log
    etcd/            etcd data (fsync off: this cluster is for tests and simulation)

Every process is started in its own session and stopped by its recorded pid, after checking
that the pid still belongs to the process we started (same start time), so `down` never
signals anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from admission import kubeapi
from admission.kubeapi import ApiError, KubeClient
from simulator.controlplane import versions
from simulator.controlplane.build import Binaries, cache_root, ensure_built
from simulator.controlplane.pki import ClusterPki, create_cluster_pki

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_NODE_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
NODE_GROUP_LABEL = "muster.dev/node-group"
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)

Log = Callable[[str], None]

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Processes this Python process started, kept so they are waited on (not leaked) at `down`."""


class ClusterError(RuntimeError):
    """The local control plane could not be started or used; the message says what to do."""


@dataclass(frozen=True)
class NodeShape:
    """What one group of kwok nodes offers (Kubernetes quantities) and how it is labelled."""

    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"
    extended: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    def allocatable(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": self.pods, **self.extended}


@dataclass(frozen=True)
class ProcessRecord:
    component: str
    pid: int
    start_ticks: int
    argv: list[str]
    log: str


def _start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the parenthesised command name (which may contain spaces).
    return int(stat.rsplit(")", 1)[1].split()[19])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 (1-based, counting the pid and the command name).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(record: ProcessRecord) -> bool:
    ticks = _start_ticks(record.pid)
    if ticks is None or ticks != record.start_ticks:
        return False
    try:
        state = Path(f"/proc/{record.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held open together while picked, so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class LocalCluster:
    """One named local control plane. `up` is idempotent; `down` stops exactly what `up` started."""

    name: str = "muster"
    root: Path = field(default_factory=cache_root)
    log: Log = field(default=lambda message: print(message, flush=True))

    @property
    def state_dir(self) -> Path:
        return self.root / "clusters" / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def _records_path(self) -> Path:
        return self.state_dir / "processes.json"

    # ----------------------------------------------------------------- process bookkeeping
    def records(self) -> list[ProcessRecord]:
        try:
            raw = json.loads(self._records_path.read_text())
        except (OSError, ValueError):
            return []
        return [ProcessRecord(**r) for r in raw]

    def component_pids(self) -> dict[str, int]:
        """Pid of each live component this cluster started (etcd, kube-apiserver, ...)."""
        return {r.component: r.pid for r in self.records() if _alive(r)}

    @classmethod
    def of_kubeconfig(cls, kubeconfig: Path) -> LocalCluster | None:
        """The local cluster a kubeconfig written by `up` belongs to, or None for other clusters."""
        state = Path(kubeconfig).expanduser().resolve().parent
        if not (state / "processes.json").exists() or state.parent.name != "clusters":
            return None
        return cls(name=state.name, root=state.parent.parent)

    def _save_records(self, records: Sequence[ProcessRecord]) -> None:
        tmp = self._records_path.with_suffix(".tmp")
        tmp.write_text(json.dumps([r.__dict__ for r in records], indent=2))
        tmp.rename(self._records_path)

    def _spawn(self, component: str, argv: list[str], records: list[ProcessRecord]) -> None:
        log_path = self.state_dir / "logs" / f"{component}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log_file:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.state_dir,
            )
        _CHILDREN[proc.pid] = proc
        ticks = _start_ticks(proc.pid)
        records.append(ProcessRecord(component, proc.pid, ticks or 0, argv, str(log_path)))
        self._save_records(records)

    def client(self) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig)

    def is_healthy(self) -> bool:
        records = self.records()
        if not records or not self.kubeconfig.exists():
            return False
        if not all(_alive(r) for r in records):
            return False
        with self.client() as client:
            try:
                return _readyz(client)
            except OSError:
                return False

    # ----------------------------------------------------------------------------- up
    def up(self, nodes: int = 0, shape: NodeShape | None = None, group: str = "default") -> None:
        """Start the control plane (or find it running) and make sure `nodes` kwok nodes exist."""
        shape = shape or NodeShape()
        if self.is_healthy():
            self.log(f"cluster {self.name!r} is already running; KUBECONFIG={self.kubeconfig}")
        else:
            if self.state_dir.exists():
                self.log(f"cluster {self.name!r}: cleaning up a previous run that is not healthy")
                self.down(quiet=True)
            binaries = ensure_built(self.root, log=self.log)
            started = time.monotonic()
            try:
                self._start(binaries)
            except BaseException:
                self.down(quiet=True, keep_logs=True)
                raise
            self.log(
                f"cluster {self.name!r} up in {time.monotonic() - started:.1f}s; "
                f"export KUBECONFIG={self.kubeconfig}"
            )
        if nodes:
            self.ensure_nodes(nodes, shape, group=group)

    def _start(self, binaries: Binaries) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pki = create_cluster_pki(self.state_dir / "pki")
        etcd_port, etcd_peer, api_port, cm_port, sched_port, kwok_port = free_ports(6)
        self._write_kubeconfig(pki, api_port)
        records: list[ProcessRecord] = []

        self._spawn("etcd", self._etcd_argv(binaries, etcd_port, etcd_peer), records)
        self._wait("etcd", records, lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"), 30)

        self._spawn(
            "kube-apiserver", self._apiserver_argv(binaries, pki, api_port, etcd_port), records
        )
        with self.client() as client:
            self._wait("kube-apiserver", records, lambda: _readyz(client), 90)

        self._spawn("kube-controller-manager", self._cm_argv(binaries, pki, cm_port), records)
        self._spawn("kube-scheduler", self._scheduler_argv(binaries, sched_port), records)
        self._spawn("kwok", self._kwok_argv(binaries, kwok_port), records)
        self._wait(
            "kube-controller-manager",
            records,
            lambda: _https_ok(f"https://127.0.0.1:{cm_port}/healthz"),
            60,
        )
        self._wait(
            "kube-scheduler",
            records,
            lambda: _https_ok(f"https://127.0.0.1:{sched_port}/healthz"),
            60,
        )
        self._wait("kwok", records, lambda: _http_ok(f"http://127.0.0.1:{kwok_port}/healthz"), 60)
        (self.state_dir / "ports.json").write_text(
            json.dumps(
                {
                    "etcd": etcd_port,
                    "kube-apiserver": api_port,
                    "kube-controller-manager": cm_port,
                    "kube-scheduler": sched_port,
                    "kwok": kwok_port,
                }
            )
        )

    def _wait(
        self,
        component: str,
        records: Sequence[ProcessRecord],
        check: Callable[[], bool],
        timeout: float,
    ) -> None:
        record = next(r for r in records if r.component == component)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(record):
                log = Path(record.log)
                hint = ""
                if "address already in use" in _tail(log, 50):
                    hint = "\nhint: a port was taken between picking it and binding; run up again"
                raise ClusterError(f"{component} exited at start; log {log}:\n{_tail(log)}{hint}")
            with contextlib.suppress(OSError, ValueError, ssl.SSLError):
                if check():
                    return
            time.sleep(0.2)
        raise ClusterError(
            f"{component} did not become healthy within {timeout:.0f}s; "
            f"log {record.log}:\n{_tail(Path(record.log))}"
        )

    # ------------------------------------------------------------------------ faults
    def restart(self, component: str, sig: int = signal.SIGKILL, down_for: float = 0.0) -> float:
        """Kill one component with `sig` (kill -9 by default), leave it down `down_for`
        seconds, and start it again with the same command line: the same ports, certificates
        and (etcd) data, as a crashed process restarted by its supervisor. Returns the seconds
        from the kill until it answered its health check again. For fault tests."""
        records = self.records()
        record = next((r for r in records if r.component == component and _alive(r)), None)
        if record is None:
            raise ClusterError(f"cluster {self.name!r} runs no live {component}")
        began = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, sig)
        while _alive(record):
            _reap(record.pid)
            time.sleep(0.05)
        _reap(record.pid)
        time.sleep(down_for)
        records.remove(record)
        self._spawn(component, record.argv, records)
        with self.client() as client:
            self._wait(component, records, self._health_check(component, client), 90)
        return time.monotonic() - began

    def _health_check(self, component: str, client: KubeClient) -> Callable[[], bool]:
        port = json.loads((self.state_dir / "ports.json").read_text())[component]
        if component == "etcd":
            return lambda: _http_ok(f"http://127.0.0.1:{port}/health")
        if component == "kube-apiserver":
            return lambda: _readyz(client)
        if component == "kwok":
            return lambda: _http_ok(f"http://127.0.0.1:{port}/healthz")
        return lambda: _https_ok(f"https://127.0.0.1:{port}/healthz")

    # ------------------------------------------------------------------ component argv
    def _etcd_argv(self, b: Binaries, port: int, peer: int) -> list[str]:
        return [
            str(b.etcd),
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

    def _apiserver_argv(self, b: Binaries, pki: ClusterPki, port: int, etcd: int) -> list[str]:
        return [
            str(b.kube_apiserver),
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
            "--v=1",
        ]

    def _cm_argv(self, b: Binaries, pki: ClusterPki, port: int) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            str(b.kube_controller_manager),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.state_dir / 'pki' / 'controller-manager'}",
            "--leader-elect=false",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca.cert}",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            "--concurrent-job-syncs=20",
            # Fake nodes never fail: their heartbeats (kwok-stages.yaml, every 10-15 min, few
            # writes) must never make the node lifecycle controller taint them unreachable and
            # mark their pods not ready, however late a busy kwok posts them.
            "--node-monitor-grace-period=1h",
            "--v=1",
        ]

    def _scheduler_argv(self, b: Binaries, port: int) -> list[str]:
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
            str(b.kube_scheduler),
            f"--config={config}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.state_dir / 'pki' / 'scheduler'}",
            "--v=1",
        ]

    def _kwok_argv(self, b: Binaries, port: int) -> list[str]:
        stages = self.state_dir / "kwok-stages.yaml"
        stages.write_text(
            resources.files("simulator.controlplane").joinpath("kwok-stages.yaml").read_text()
        )
        return [
            str(b.kwok),
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

    def _write_kubeconfig(self, pki: ClusterPki, port: int) -> None:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
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
                        "client-certificate": str(pki.admin.cert),
                        "client-key": str(pki.admin.key),
                    },
                }
            ],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": "admin"}}],
            "current-context": self.name,
        }
        self.kubeconfig.write_text(yaml.safe_dump(doc))
        self.kubeconfig.chmod(0o600)

    # --------------------------------------------------------------------------- down
    def down(self, quiet: bool = False, keep_logs: bool = False) -> list[int]:
        """Stop every process this cluster started and remove its state. Returns stopped pids."""
        stopped: list[int] = []
        every = self.records()
        records = [r for r in reversed(every) if _alive(r)]
        for record in records:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for record in records:
            while _alive(record) and time.monotonic() < deadline:
                _reap(record.pid)
                time.sleep(0.05)
            if _alive(record):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, signal.SIGKILL)
                while _alive(record):
                    _reap(record.pid)
                    time.sleep(0.05)
            stopped.append(record.pid)
        for record in every:
            _reap(record.pid)
        if keep_logs and self.state_dir.exists():
            saved = self.root / "clusters" / f"{self.name}-failed-logs"
            shutil.rmtree(saved, ignore_errors=True)
            with contextlib.suppress(OSError):
                shutil.copytree(self.state_dir / "logs", saved)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        if not quiet:
            if stopped:
                self.log(f"cluster {self.name!r} stopped (pids {' '.join(map(str, stopped))})")
            else:
                self.log(f"cluster {self.name!r} was not running")
        return stopped

    # ------------------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        ports: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            ports = json.loads((self.state_dir / "ports.json").read_text())
        components = []
        for record in self.records():
            components.append(
                {
                    "component": record.component,
                    "pid": record.pid,
                    "running": _alive(record),
                    "port": ports.get(record.component),
                    "log": record.log,
                }
            )
        return {
            "name": self.name,
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig) if self.kubeconfig.exists() else None,
            "healthy": self.is_healthy(),
            "versions": {
                "kubernetes": versions.KUBERNETES,
                "etcd": versions.ETCD,
                "kwok": versions.KWOK,
            },
            "components": components,
        }

    # -------------------------------------------------------------------------- nodes
    def ensure_nodes(
        self,
        count: int,
        shape: NodeShape,
        group: str = "default",
        timeout: float = 600,
        workers: int = 16,
    ) -> None:
        """Make sure `count` kwok nodes of this group exist and are Ready (creates the missing)."""
        with self.client() as client:
            self._ensure_nodes(client, count, shape, group, timeout, workers)

    def _ensure_nodes(
        self,
        client: KubeClient,
        count: int,
        shape: NodeShape,
        group: str,
        timeout: float,
        workers: int,
    ) -> None:
        selector = f"{NODE_GROUP_LABEL}={group}"
        existing = {
            n["metadata"]["name"]
            for n in client.get(kubeapi.NODES.path(), {"labelSelector": selector})["items"]
        }
        wanted = [f"kwok-{group}-{i}" for i in range(count)]
        missing = [name for name in wanted if name not in existing]
        started = time.monotonic()
        if missing:
            self.log(f"creating {len(missing)} kwok nodes in group {group!r} ...")
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for done, _ in enumerate(
                    pool.map(lambda n: _create_node(client, n, shape, group), missing), 1
                ):
                    if done % 250 == 0 or done == len(missing):
                        self.log(f"  created {done}/{len(missing)}")
        ready = wait_nodes_ready(client, count, selector, timeout)
        self.log(f"{ready} kwok nodes Ready in group {group!r} ({time.monotonic() - started:.1f}s)")


def kwok_node(
    name: str,
    allocatable: Mapping[str, str],
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """The body of a fake node that kwok manages (annotation), pods must tolerate (taint)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **labels,
            },
        },
        "spec": {"taints": [dict(FAKE_NODE_TAINT), *(dict(t) for t in taints)]},
        "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)},
    }


def _create_node(client: KubeClient, name: str, shape: NodeShape, group: str) -> None:
    body = kwok_node(name, shape.allocatable(), {NODE_GROUP_LABEL: group, **shape.labels})
    try:
        client.create(kubeapi.NODES.path(), body)
    except ApiError as exc:
        if exc.status != 409:
            raise


def count_ready(nodes: Sequence[Mapping[str, Any]]) -> int:
    ready = 0
    for node in nodes:
        for cond in node.get("status", {}).get("conditions") or []:
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                ready += 1
                break
    return ready


def wait_nodes_ready(client: KubeClient, count: int, selector: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    ready = 0
    while time.monotonic() < deadline:
        items = client.get(kubeapi.NODES.path(), {"labelSelector": selector})["items"]
        ready = count_ready(items)
        if ready >= count:
            return ready
        time.sleep(0.5)
    raise ClusterError(
        f"only {ready}/{count} kwok nodes became Ready within {timeout:.0f}s; "
        "check the kwok log (muster cluster status)"
    )


def _reap(pid: int) -> None:
    """Collect our own exited children so they do not linger as zombies."""
    proc = _CHILDREN.get(pid)
    if proc is not None:
        if proc.poll() is not None:
            del _CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def _https_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=ctx) as response:
        return bool(response.status == 200)


def _readyz(client: KubeClient) -> bool:
    status, _ = client.raw_get("/readyz")
    return status == 200


@contextlib.contextmanager
def running_cluster(
    name: str = "muster", nodes: int = 0, shape: NodeShape | None = None
) -> Iterator[LocalCluster]:
    """Bring a cluster up for the duration of a block and tear it down after."""
    cluster = LocalCluster(name=name)
    cluster.up(nodes=nodes, shape=shape)
    try:
        yield cluster
    finally:
        cluster.down()
