"""The cluster side of a kwok replay (`KwokSession`): the control plane (the one `--kubeconfig`
names, or a `LocalCluster` brought up for the replay and taken down after it, with the real
Flux Operator beside it for a trace with MiniClusters where it is built), the Queue and
MiniCluster CRDs, the trace's node groups as kwok nodes, the trace's queues as Queue objects
(durations compressed by the time scale), and the muster the replays run through (unless one
runs already: `external_muster`). A context manager: everything it started or created is
stopped and deleted, newest first, also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from admission.crd import muster_crds
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient, KubeconfigError
from policies.kinds import Kind
from policies.kinds.registry import kinds_named
from simulator.controlplane.build import Binaries
from simulator.controlplane.cluster import LocalCluster, operators_of
from simulator.controlplane.errors import ClusterError
from simulator.controlplane.minicluster import (
    apply_crd,
    describe_job_maker,
    install_crd,
    minicluster_crd,
)
from simulator.controlplane.nodes import wait_nodes_ready
from simulator.controlplane.operators import (
    FLUX,
    OPERATORS,
    Operator,
    binary_path,
    is_present,
    source_of,
)
from simulator.kwok_devices import KwokDevices
from simulator.kwok_devices import flags as device_flags
from simulator.kwok_external import (
    ControllerProcess,
    ExternalError,
    controller_process,
    in_namespace,
)
from simulator.kwok_muster import KwokMuster
from simulator.kwok_objects import QUEUES_PATH, SIM_RUN, node_bodies, queue_body
from simulator.kwok_settings import KwokError, KwokSettings, Log
from simulator.records import Admission
from simulator.trace import Trace

STAND_INS: Final = frozenset({FLUX.name})
"""Operators the kwok engine stands in for where they are not running: the MiniClusters' Jobs
are then made by `simulator.controlplane.minicluster`'s reconciler."""


class KwokSession:
    """The control plane, nodes, CRDs, queues and muster of one kwok replay; a context manager
    that stops and deletes everything it started or created, in reverse order."""

    def __init__(
        self,
        trace: Trace,
        settings: KwokSettings,
        log: Log,
        admissions: Sequence[Admission] = ("none", "muster"),
    ) -> None:
        self.trace = trace
        self.admissions = tuple(admissions)
        self.settings = settings
        self.log = log
        self.run = f"sim-{secrets.token_hex(3)}"
        self.cluster: LocalCluster | None = None
        self.kubeconfig: Path | None = settings.kubeconfig
        self.client: KubeClient | None = None
        self.node_prefix = ""
        self.queues_created: list[str] = []
        self.muster: KwokMuster | None = None
        try:
            self.controllers: list[ControllerProcess] = [
                controller_process(pid) for pid in settings.controller_pids
            ]
        except ExternalError as exc:
            raise KwokError(str(exc)) from None
        self.namespace_objects: list[tuple[kubeapi.Resource, Mapping[str, Any]]] = []
        """The `--namespace-manifest` objects and where they are created."""
        self.figures: dict[str, dict[str, Any]] = {}
        """Per admission: figures of the replay itself (looks, submission lag, wall time)."""
        self.devices: KwokDevices | None = None
        """The trace's DRA objects on the cluster (`simulator.kwok_devices`)."""
        self.flux_operator = False
        """The cluster runs the real Flux Operator: it makes the MiniClusters' Jobs, not
        muster's stand-in (`simulator.controlplane.minicluster.job_maker`)."""
        self._cleanups: list[tuple[str, Callable[[], None]]] = []

    # -- lifecycle ------------------------------------------------------------------

    def __enter__(self) -> KwokSession:
        try:
            self._connect()
            self._check_namespace_objects()
            self._prepare()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Undo everything, newest first; a second Ctrl-C does not cut this short."""
        if not self._cleanups and self.client is None:
            return
        restore = _ignore_sigint()
        try:
            while self._cleanups:
                what, undo = self._cleanups.pop()
                try:
                    undo()
                except Exception as exc:  # keep cleaning up the rest
                    self.log(f"warning: cleanup: {what} failed: {exc}")
            if self.client is not None:
                self.client.close()
                self.client = None
        finally:
            restore()

    def api(self) -> KubeClient:
        if self.client is None:
            raise KwokError("the kwok engine lost its cluster connection")
        return self.client

    def _connect(self) -> None:
        settings = self.settings
        if settings.kubeconfig is None:
            missing = Binaries.at().missing()
            if missing:
                raise KwokError(not_built(missing))
            cluster = LocalCluster(name=settings.cluster_name, log=self.log)
            if cluster.is_healthy():
                raise KwokError(
                    f"a cluster named {settings.cluster_name!r} is already running: pass "
                    f"--kubeconfig {cluster.kubeconfig} to use it, or another --cluster-name"
                )
            self.log(f"kwok engine: bringing up local control plane {settings.cluster_name!r}")
            self._cleanups.append(("cluster down", self._cluster_down))
            self.cluster = cluster
            try:
                cluster.up(nodes=0, operators=self._operators())
            except ClusterError as exc:
                raise KwokError(f"cannot bring up the local control plane: {exc}") from None
            self.kubeconfig = cluster.kubeconfig
        else:
            self.node_prefix = f"{self.run}-"
        assert self.kubeconfig is not None
        try:
            self.client = KubeClient.from_kubeconfig(self.kubeconfig)
            status, _ = self.client.raw_get("/readyz")
        except (KubeconfigError, OSError) as exc:
            raise KwokError(f"cannot reach the cluster of {self.kubeconfig}: {exc}") from None
        if status != 200:
            raise KwokError(f"the apiserver of {self.kubeconfig} is not ready (/readyz {status})")
        if any(kind.operator == FLUX.name for kind in self._kinds()):
            self.flux_operator = FLUX in operators_of(self.kubeconfig)
            self.log(f"kwok engine: MiniClusters' Jobs made by {self._job_maker()}")
        running = operators_of(self.kubeconfig)
        for kind in self._kinds():
            operator = OPERATORS.get(kind.operator or "")
            if operator is None or operator in running or operator.name in STAND_INS:
                continue
            # No stand-in: such a kind is run by its real operator, or not at all.
            raise KwokError(
                f"trace {self.trace.name!r} has {kind.name}s, and the cluster of "
                f"{self.kubeconfig} runs no {operator.component}: `muster cluster up "
                f"--operators {operator.name}` starts one (`muster cluster build` builds it once)"
            )

    def _kinds(self) -> list[Kind]:
        """The kinds of the trace's gangs."""
        return kinds_named(group.kind for group in self.trace.jobs)

    def _operators(self) -> list[Operator]:
        """The real operators beside a cluster brought up for a trace of their kinds (the
        JobSet controller for JobSets, the Flux Operator for MiniClusters), where their source
        is present and built (`muster cluster build` builds them; a replay does not wait
        minutes for a build)."""
        wanted = [OPERATORS[k.operator] for k in self._kinds() if k.operator in OPERATORS]
        out = []
        for operator in wanted:
            source = source_of(operator)
            if is_present(source) and os.access(binary_path(operator, source), os.X_OK):
                out.append(operator)
        return out

    def _job_maker(self) -> str:
        described = describe_job_maker(self.flux_operator)
        if self.flux_operator or not is_present(source_of(FLUX)):
            return described
        if self.cluster is not None:
            return f"{described}: it is not built; `muster cluster build` builds it"
        return f"{described} on this cluster; `muster cluster up --operators flux` starts it"

    def _cluster_down(self) -> None:
        if self.cluster is None:
            return
        if self.settings.keep_cluster:
            self.log(
                f"kwok engine: leaving cluster {self.cluster.name!r} running "
                f"(muster cluster down --name {self.cluster.name})"
            )
            return
        self.cluster.down(quiet=True)
        self.log(f"kwok engine: local control plane {self.cluster.name!r} stopped")

    @property
    def discards_cluster(self) -> bool:
        """The control plane goes when the session ends (brought up here, not kept)."""
        return self.cluster is not None and not self.settings.keep_cluster

    def _prepare(self) -> None:
        client = self.api()
        if "muster" in self.admissions:
            # Only muster reads Queues (and writes GangRecords): an external replay leaves a cluster
            # without muster so.
            for muster_crd in muster_crds():
                apply_crd(client, muster_crd)
        try:
            crd = minicluster_crd()
        except (OSError, ValueError) as exc:
            raise KwokError(f"cannot read the MiniCluster CRD: {exc}") from None
        self.log(f"kwok engine: MiniCluster CRD: {install_crd(client, crd)}")
        self._create_nodes()

    def _check_namespace_objects(self) -> None:
        """Find where each `--namespace-manifest` object is created and have the apiserver
        check it (a dry-run create in `default`), before the replay creates anything."""
        client = self.api()
        for body in self.settings.external.namespace_objects:
            kind = str(body["kind"])
            where = f"--namespace-manifest: {kind} {body['metadata']['name']}"
            try:
                resource = client.resource_for(str(body["apiVersion"]), kind)
            except LookupError as exc:
                raise KwokError(f"{where}: {exc.args[0]}") from None
            if not resource.namespaced:
                raise KwokError(
                    f"{where}: a {kind} is cluster-scoped: create it once yourself (the "
                    "manifest holds what each replay namespace needs, e.g. a Kueue LocalQueue)"
                )
            try:
                client.request(
                    "POST",
                    resource.path("default"),
                    in_namespace(body, "default"),
                    params={"dryRun": "All"},
                )
            except ApiError as exc:
                # 409: one of that name exists in default, so the rest of it was valid.
                if exc.status != 409:
                    raise KwokError(f"{where}: the apiserver refuses it: {exc.message}") from None
            self.namespace_objects.append((resource, body))

    # -- nodes ----------------------------------------------------------------------

    def _create_nodes(self) -> None:
        client = self.api()
        plans = node_bodies(self.trace, self.run, prefix=self.node_prefix)
        self.log(f"kwok engine: creating {len(plans)} kwok nodes")
        self._cleanups.append(("delete nodes", self._delete_nodes))
        errors: list[str] = []

        def create(body: dict[str, Any]) -> None:
            try:
                client.create(kubeapi.NODES.path(), body)
            except ApiError as exc:
                errors.append(f"node {body['metadata']['name']}: {exc.message}")

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(create, [p.body for p in plans]))
        if errors:
            raise KwokError(f"cannot create kwok nodes: {errors[0]}")
        try:
            wait_nodes_ready(client, len(plans), f"{SIM_RUN}={self.run}", 300)
        except ClusterError as exc:
            raise KwokError(
                f"{exc} (is kwok running with muster's stages? a cluster from `muster cluster "
                "up` has it)"
            ) from None
        if self.trace.devices.classes:
            self.devices = KwokDevices(client, self.trace, self.run)
            self._cleanups.append(("delete DRA objects", self.devices.delete_cluster_objects))
            created = self.devices.create_cluster_objects(plans)
            self.log(f"kwok engine: created {created} DeviceClasses and ResourceSlices")

    def _delete_nodes(self) -> None:
        if self.discards_cluster:
            return  # the whole control plane goes
        self.api().request(
            "DELETE", kubeapi.NODES.path(), params={"labelSelector": f"{SIM_RUN}={self.run}"}
        )

    # -- what one replay needs ------------------------------------------------------

    def prepare(self, admission: Admission) -> None:
        """What a replay with ``admission`` needs besides the nodes: for muster, the trace's
        queues and a muster to run through."""
        if admission == "muster":
            self._ensure_queues()
            self._ensure_muster()
        if admission == "external" and self.muster is not None:
            self.log(
                "kwok engine: muster keeps running during the external replay; its webhook "
                "leaves objects without muster.dev/queue alone"
            )

    def _ensure_queues(self) -> None:
        client = self.api()
        if not self.queues_created:
            self._cleanups.append(("delete queues", self._delete_queues))
        for spec in self.trace.queues:
            body = queue_body(
                spec, self.settings.time_scale, self.run, self.settings.min_clog_timeout
            )
            try:
                client.create(QUEUES_PATH, body)
            except ApiError as exc:
                if exc.status == 409 and self.settings.external_muster:
                    self.log(f"kwok engine: queue {spec.name!r} exists; using it as it is")
                    continue
                if exc.status == 409:
                    raise KwokError(
                        f"queue {spec.name!r} already exists in this cluster: delete it "
                        f"(kubectl delete queue {spec.name}), or pass --external-muster to "
                        "use the running muster and its queues"
                    ) from None
                raise KwokError(f"cannot create queue {spec.name!r}: {exc.message}") from None
            self.queues_created.append(spec.name)

    def _delete_queues(self) -> None:
        client = self.api()
        for name in self.queues_created:
            with contextlib.suppress(ApiError):
                client.delete(f"{QUEUES_PATH}/{name}")
        self.queues_created = []

    def _ensure_muster(self) -> None:
        """Start `muster run --local` (webhook + controller) unless it runs already."""
        if self.settings.external_muster and self.trace.topology.levels:
            self.log(
                "kwok engine: the trace has topology levels; the running muster places its "
                "gangs by them only if it runs with --topology-levels "
                + ",".join(self.trace.topology.levels)
            )
        if self.muster is not None or self.settings.external_muster:
            return
        client = self.api()
        self._cleanups.append(("stop muster", self._stop_muster))
        assert self.kubeconfig is not None
        self.muster = KwokMuster.start(
            client,
            self.kubeconfig,
            self.settings,
            self.log,
            self.trace.topology,
            device_flags(self.trace),
        )

    def _stop_muster(self) -> None:
        if self.muster is not None:
            self.muster.stop(self.client)
            self.muster = None


def not_built(missing: Sequence[Path]) -> str:
    return (
        "the local control-plane binaries are not built (missing "
        f"{', '.join(p.name for p in missing)}): run `muster cluster build` once (about 20 "
        "min), or pass --kubeconfig of a running cluster"
    )


def _ignore_sigint() -> Callable[[], None]:
    """Ignore Ctrl-C (main thread only) until the returned function restores it."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore
