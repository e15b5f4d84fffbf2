"""Start, inspect and stop a named local control plane on loopback (`LocalCluster`), and create
kwok fake nodes in it.

Layout of a cluster's state directory (`<cache>/clusters/<name>/`, removed by `down`):

    pki/             CA, apiserver serving cert, admin client cert, service-account keys
    kubeconfig       admin kubeconfig (client cert in group system:masters)
    controller.kubeconfig  muster's own (user muster-controller, also system:masters): what
                     the tests, benches and the kwok engine run `muster run --local` with
    processes.json   pid, start time and command of every process we started
    ports.json       the port each component listens on
    features.json    the feature gates it runs with, which components take each, and the
                     API versions they made the apiserver serve (`--runtime-config`)
    logs/<component>.log
    etcd/            etcd data (fsync off: this cluster is for tests and simulation)

Its parts: the processes, supervised and stopped by pid (`simulator.controlplane.processes`),
each component's command line and health check (`simulator.controlplane.components`), the
credentials (`simulator.controlplane.pki`), the kwok nodes (`simulator.controlplane.nodes`) and,
when asked for, the real operators beside it (`simulator.controlplane.operators`, started by
`simulator.controlplane.operatorrun`: the JobSet controller, the Flux Operator), supervised like
the rest (in processes.json and ports.json, stopped by `down`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeport.kubeapi import ApiError, KubeClient
from simulator.controlplane import versions
from simulator.controlplane.build import Binaries, cache_root, ensure_built
from simulator.controlplane.components import (
    API_ONLY,
    COMPONENTS,
    ComponentArgs,
    free_ports,
    health_check,
    http_ok,
    https_ok,
    readyz,
)
from simulator.controlplane.errors import ClusterError
from simulator.controlplane.features import NONE, FeatureGates, check_gates, read_state, write_state
from simulator.controlplane.nodes import NodeShape, ensure_nodes
from simulator.controlplane.operatorrun import OperatorPlace, start_operator
from simulator.controlplane.operators import (
    OPERATORS,
    Operator,
    ensure_operators,
    source_of,
)
from simulator.controlplane.pki import create_cluster_pki, write_kubeconfig
from simulator.controlplane.processes import ProcessRecord, Supervisor, alive

Log = Callable[[str], None]


@dataclass
class LocalCluster:
    """One named local control plane. `up` is idempotent; `down` stops exactly what `up` started."""

    name: str = "muster"
    root: Path = field(default_factory=cache_root)
    log: Log = field(default=lambda message: print(message, flush=True))
    components: tuple[str, ...] = COMPONENTS
    """What `up` starts: every component (the default), or a subset that holds etcd and the
    apiserver (`API_ONLY`: an API with nothing acting on its objects but its clients)."""

    def __post_init__(self) -> None:
        unknown = [c for c in self.components if c not in COMPONENTS]
        missing = [c for c in API_ONLY if c not in self.components]
        if unknown or missing:
            raise ClusterError(
                f"cluster {self.name!r}: components {', '.join(self.components)}: "
                + (f"unknown {', '.join(unknown)} " if unknown else "")
                + (f"missing {', '.join(missing)} " if missing else "")
                + f"(known: {', '.join(COMPONENTS)}; etcd and kube-apiserver always run)"
            )

    @property
    def state_dir(self) -> Path:
        return self.root / "clusters" / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def processes(self) -> Supervisor:
        return Supervisor(self.state_dir)

    def records(self) -> list[ProcessRecord]:
        return self.processes.records()

    def component_pids(self) -> dict[str, int]:
        """Pid of each live component this cluster started (etcd, kube-apiserver, ...)."""
        return {r.component: r.pid for r in self.records() if alive(r)}

    @classmethod
    def of_kubeconfig(cls, kubeconfig: Path) -> LocalCluster | None:
        """The local cluster a kubeconfig written by `up` belongs to, or None for other clusters."""
        state = Path(kubeconfig).expanduser().resolve().parent
        if not (state / "processes.json").exists() or state.parent.name != "clusters":
            return None
        return cls(name=state.name, root=state.parent.parent)

    def client(self) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig)

    def is_healthy(self) -> bool:
        records = self.records()
        if not records or not self.kubeconfig.exists():
            return False
        if not all(alive(r) for r in records):
            return False
        with self.client() as client:
            try:
                return readyz(client)
            except OSError:
                return False

    @property
    def features(self) -> FeatureGates:
        """The feature gates this cluster was started with (none recorded: none)."""
        return read_state(self.state_dir)

    # ----------------------------------------------------------------------------- up
    def up(
        self,
        nodes: int = 0,
        shape: NodeShape | None = None,
        group: str = "default",
        operators: Sequence[Operator] = (),
        feature_gates: Mapping[str, bool] | None = None,
    ) -> None:
        """Start the control plane (or find it running) with `operators` beside it, and make
        sure `nodes` kwok nodes exist.

        `feature_gates` (None: whatever a running cluster has, none for a new one) are checked
        against the components before anything starts, and a running cluster with other gates is
        refused rather than silently kept."""
        shape = shape or NodeShape()
        if nodes and "kwok" not in self.components:
            raise ClusterError(f"cluster {self.name!r}: kwok nodes need kwok among its components")
        if self.is_healthy():
            running = self.features
            if feature_gates is not None and dict(feature_gates) != dict(running.gates):
                raise ClusterError(
                    f"cluster {self.name!r} is running with feature gates {running.describe()}, "
                    f"not {FeatureGates(dict(feature_gates), {}).describe()}: stop it first "
                    f"(muster cluster down --name {self.name}) or pick another --name"
                )
            self.log(f"cluster {self.name!r} is already running; KUBECONFIG={self.kubeconfig}")
            self.start_operators(operators)
        else:
            binaries = ensure_built(self.root, log=self.log)
            features = (
                check_gates(feature_gates, binaries.gated(), versions.KUBERNETES)
                if feature_gates
                else NONE
            )
            if self.state_dir.exists():
                self.log(f"cluster {self.name!r}: cleaning up a previous run that is not healthy")
                self.down(quiet=True)
            # Built before anything starts: a failed build leaves no cluster half up.
            ensure_operators(operators, self.root, self.log)
            started = time.monotonic()
            try:
                self._start(binaries, features)
                self.start_operators(operators)
            except BaseException:
                self.down(quiet=True, keep_logs=True)
                raise
            self.log(
                f"cluster {self.name!r} up in {time.monotonic() - started:.1f}s; "
                f"export KUBECONFIG={self.kubeconfig}"
            )
        if nodes:
            self.ensure_nodes(nodes, shape, group=group)

    def operators(self) -> list[Operator]:
        """The operators this cluster runs (alive), in catalogue order."""
        live = {r.component for r in self.records() if alive(r)}
        return [op for op in OPERATORS.values() if op.component in live]

    def start_operators(self, operators: Sequence[Operator]) -> None:
        """Start each of `operators` this cluster does not run yet, built first if needed, each
        once the one before it is ready. One that cannot be started is stopped again (the
        cluster stays as it was) and raises ClusterError."""
        missing = [op for op in operators if op not in self.operators()]
        if not missing:
            return
        binaries = ensure_operators(missing, self.root, self.log)
        processes = self.processes
        records = processes.records()
        ports = self._ports()
        with self.client() as client:
            for op in missing:
                place = OperatorPlace(
                    op, binaries[op.name], source_of(op), self.state_dir, self.kubeconfig
                )
                try:
                    ports[op.component] = start_operator(place, processes, records, client)
                except (ClusterError, ApiError, OSError, ValueError) as exc:
                    processes.discard(op.component, records)
                    raise ClusterError(f"{op.component} could not be started: {exc}") from exc
                self._save_ports(ports)
                self.log(f"cluster {self.name!r}: {op.component} {op.version} ready")

    def _ports(self) -> dict[str, int]:
        ports: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            ports = json.loads((self.state_dir / "ports.json").read_text())
        return ports

    def _save_ports(self, ports: dict[str, int]) -> None:
        (self.state_dir / "ports.json").write_text(json.dumps(ports))

    def _start(self, binaries: Binaries, features: FeatureGates = NONE) -> None:
        """Every component in order, each once the ones it needs answer: etcd, the apiserver,
        then those of the controller manager, the scheduler and kwok it runs."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        write_state(self.state_dir, features)
        pki = create_cluster_pki(self.state_dir / "pki")
        etcd_port, etcd_peer, api_port, cm_port, sched_port, kwok_port = free_ports(6)
        write_kubeconfig(self.kubeconfig, self.name, pki, api_port)
        own = self.kubeconfig.with_name(CONTROLLER_KUBECONFIG)
        write_kubeconfig(own, self.name, pki, api_port, pki.controller)
        args = ComponentArgs(self.name, self.state_dir, self.kubeconfig, binaries, pki, features)
        processes = self.processes
        records: list[ProcessRecord] = []

        processes.spawn("etcd", args.etcd(etcd_port, etcd_peer), records)
        processes.wait("etcd", records, lambda: http_ok(f"http://127.0.0.1:{etcd_port}/health"), 30)

        processes.spawn("kube-apiserver", args.apiserver(api_port, etcd_port), records)
        with self.client() as client:
            processes.wait("kube-apiserver", records, lambda: readyz(client), 90)

        # The others start together (none needs another), then each is awaited. A command
        # line is made only for a component that runs (the scheduler's and kwok's write files).
        others: dict[str, tuple[Callable[[], list[str]], Callable[[], bool]]] = {
            "kube-controller-manager": (
                lambda: args.controller_manager(cm_port),
                lambda: https_ok(f"https://127.0.0.1:{cm_port}/healthz"),
            ),
            "kube-scheduler": (
                lambda: args.scheduler(sched_port),
                lambda: https_ok(f"https://127.0.0.1:{sched_port}/healthz"),
            ),
            "kwok": (
                lambda: args.kwok(kwok_port),
                lambda: http_ok(f"http://127.0.0.1:{kwok_port}/healthz"),
            ),
        }
        wanted = [c for c in others if c in self.components]
        for component in wanted:
            processes.spawn(component, others[component][0](), records)
        for component in wanted:
            processes.wait(component, records, others[component][1], 60)
        ports = {
            "etcd": etcd_port,
            "kube-apiserver": api_port,
            "kube-controller-manager": cm_port,
            "kube-scheduler": sched_port,
            "kwok": kwok_port,
        }
        self._save_ports({c: port for c, port in ports.items() if c in self.components})

    # ------------------------------------------------------------------------ faults
    def restart(self, component: str, sig: int = signal.SIGKILL, down_for: float = 0.0) -> float:
        """Kill one component with `sig` (kill -9 by default), leave it down `down_for`
        seconds, and start it again with the same command line: the same ports, certificates
        and (etcd) data, as a crashed process restarted by its supervisor. Returns the seconds
        from the kill until it answered its health check again. For fault tests."""
        processes = self.processes
        records = processes.records()
        record = next((r for r in records if r.component == component and alive(r)), None)
        if record is None:
            raise ClusterError(f"cluster {self.name!r} runs no live {component}")
        began = time.monotonic()
        processes.kill(record, sig)
        time.sleep(down_for)
        records.remove(record)
        processes.spawn(component, record.argv, records)
        port = self._ports()[component]
        with self.client() as client:
            processes.wait(component, records, health_check(component, port, client), 90)
        return time.monotonic() - began

    # --------------------------------------------------------------------------- down
    def down(self, quiet: bool = False, keep_logs: bool = False) -> list[int]:
        """Stop every process this cluster started and remove its state. Returns stopped pids."""
        stopped = self.processes.stop_all()
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
        features = self.features
        ports = self._ports()
        components = []
        for record in self.records():
            components.append(
                {
                    "component": record.component,
                    "pid": record.pid,
                    "running": alive(record),
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
                **{op.component: op.version for op in self.operators()},
            },
            "featureGates": dict(sorted(features.gates.items())),
            "runtimeConfig": features.runtime_config(),
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
            ensure_nodes(client, count, shape, group, timeout, workers, self.log)


CONTROLLER_KUBECONFIG = "controller.kubeconfig"
"""muster's own kubeconfig, beside the admin's in a cluster's state directory."""


def controller_kubeconfig(kubeconfig: Path) -> Path:
    """The kubeconfig `muster run --local` should use against the cluster of ``kubeconfig``:
    for a local control plane (`up` wrote ``kubeconfig``), muster's own beside it (its updates
    then skip muster's update review, the admin's do not: `webhook.configuration.own_identity`);
    for any other cluster, ``kubeconfig`` itself."""
    own = Path(kubeconfig).with_name(CONTROLLER_KUBECONFIG)
    if Path(kubeconfig).name == "kubeconfig" and own.exists():
        return own
    return Path(kubeconfig)


def operators_of(kubeconfig: Path) -> list[Operator]:
    """The operators the local cluster of `kubeconfig` runs; none for a cluster `up` did not
    start (whatever runs there is not ours to know)."""
    cluster = LocalCluster.of_kubeconfig(kubeconfig)
    return cluster.operators() if cluster is not None else []


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
