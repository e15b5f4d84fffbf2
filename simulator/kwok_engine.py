"""The kwok engine: replays a trace on a real local control plane with kwok nodes.

Where the in-process engine models the cluster, this one drives it: etcd, kube-apiserver,
kube-controller-manager (the Job controller), kube-scheduler and kwok, with muster's real
webhook and controller (`muster run --local`, a subprocess) in front. For one `replay`:

1. a control plane: the one `--kubeconfig` names, or a `LocalCluster` brought up for the
   replay (and taken down after it);
2. the trace's node groups as kwok nodes (allocatable, labels, taints as the trace says), the
   Queue CRD and the MiniCluster CRD (the Flux Operator's from ../shared/crds beside the
   repository, else muster's stand-in: `minicluster_crd`), the trace's queues as Queue objects
   (durations compressed by the time scale), and muster (unless one is running already:
   `external_muster`);
3. per admission (`none`, then `muster`, or `external`): fresh namespaces (with `external`,
   the `--namespace-manifest` objects in each, e.g. a Kueue LocalQueue); the MiniCluster
   reconciler and the gang runner (a gang's pods work only once its minimum members run, so a
   node-blind or absent gang admission clogs for real); submitters that create each gang's Job
   or MiniCluster at its trace time ÷ time scale (with `none` without the `muster.dev/queue`
   label, so the default scheduler alone places pods; with `external` suspended and with the
   `--label` labels, for a controller muster does not run to admit); a loop that LISTs the
   replay's Jobs and live Pods and records what it sees (`simulator.kwok_timeline`), until
   every gang finished, nothing can change any more (then the rest is stuck), or the horizon;
4. everything it started is stopped and everything it created is deleted, also on Ctrl-C.

The result of each admission is an `EngineResult` like the in-process engine's, in trace time,
so `simulator.report` writes the same outputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from admission import kubeapi
from admission.crd import queue_crd
from admission.kubeapi import ApiError, KubeClient, KubeconfigError
from admission.launcher import LaunchError, MusterRun, launch
from policies.history import to_csv
from simulator.controlplane.build import Binaries
from simulator.controlplane.cluster import ClusterError, LocalCluster, wait_nodes_ready
from simulator.controlplane.gangrun import GangRunner
from simulator.controlplane.minicluster import (
    MiniClusterReconciler,
    apply_crd,
    install_crd,
    minicluster_crd,
)
from simulator.engine import FAILED, FINISHED, Admission, EngineResult
from simulator.kwok_external import (
    ControllerProcess,
    ExternalController,
    ExternalError,
    controller_process,
    in_namespace,
)
from simulator.kwok_objects import (
    QUEUES_PATH,
    SIM_RUN,
    GangObject,
    gang_object,
    namespace_body,
    node_bodies,
    queue_body,
)
from simulator.kwok_timeline import Timeline
from simulator.kwok_watch import WatchCache
from simulator.trace import SubmittedGang, Trace, expand
from webhook.configuration import NAME as WEBHOOK_CONFIGURATION

WEBHOOK_CONFIG: Final = kubeapi.WEBHOOK_CONFIGURATIONS.path(name=WEBHOOK_CONFIGURATION)
MAX_NODES: Final = 5000
"""kwok nodes one local control plane takes on a small machine (heartbeats of 5000 fake nodes
already keep a core busy); a larger trace is refused rather than replayed badly."""
MIN_WALL_RUNTIME: Final = 1.0
"""Wall seconds below which a compressed runtime is mostly control-plane latency (warned)."""
LIVE_PODS: Final = "status.phase!=Succeeded,status.phase!=Failed"

Log = Callable[[str], None]


class KwokError(RuntimeError):
    """The kwok engine cannot run or lost its footing; the message says what to do."""


@dataclass(frozen=True)
class KwokSettings:
    """How to run the kwok engine (the `muster sim --engine kwok` options)."""

    time_scale: float = 25.0
    """Trace seconds per wall second: 25 replays 100 s of trace time in 4 s."""
    kubeconfig: Path | None = None
    """Use this control plane; None = bring one up (`cluster_name`) and take it down after."""
    cluster_name: str = "muster-sim"
    external_muster: bool = False
    """muster (webhook + controller) already runs against the cluster: do not start one; trace
    queues that already exist are used as they are."""
    keep_cluster: bool = False
    """Leave a cluster this engine brought up running (for inspection)."""
    policy: str = "drf"
    seed: int = 0
    horizon: float | None = None
    """Trace seconds after which unfinished gangs are stuck; None = the trace's."""
    min_clog_timeout: float = 30.0
    """Wall seconds below which a queue's compressed clog timeout is not set: starting a
    64-pod gang takes this control plane several seconds on a busy machine, and a shorter
    timeout would evict gangs that are merely starting."""
    stall: float = 5.0
    """Wall seconds without any change (and nothing running or backing off) after which the
    unfinished gangs are reported stuck."""
    poll: float = 0.1
    """Wall seconds between two looks at the watch caches (longer when a look takes long)."""
    submitters: int = 8
    """Parallel submitters (as the blog's parallel workers)."""
    out_dir: Path | None = None
    """Where muster's log goes (muster-run.log)."""
    muster_args: tuple[str, ...] = ()
    external: ExternalController = field(default_factory=ExternalController)
    """How the `external` admission hands the replay to a controller muster does not run."""
    controller_pids: tuple[int, ...] = ()
    """Processes (with their children) whose CPU seconds each replay's figures attribute: an
    outside controller, or a muster running outside (`external_muster`)."""


@dataclass(frozen=True)
class Progress:
    """What the progress display shows, in trace time."""

    admission: Admission
    trace_time: float
    done: int
    total: int
    running: int
    pods_bound: int
    looks: int


ProgressFn = Callable[[Progress], None]


# --------------------------------------------------------------------------- checks


def check_trace(trace: Trace, settings: KwokSettings, log: Log) -> None:
    """Refuse what the kwok engine cannot replay faithfully; warn about what it distorts."""
    if not settings.time_scale > 0:
        raise KwokError(f"--time-scale must be positive, got {settings.time_scale}")
    if trace.node_count > MAX_NODES:
        raise KwokError(
            f"trace {trace.name!r} has {trace.node_count} nodes; the kwok engine takes at most "
            f"{MAX_NODES} on one local control plane: use the in-process engine or a smaller "
            "cluster (muster sweep resizes node groups)"
        )
    if settings.min_clog_timeout < 0:
        raise KwokError("--min-clog-timeout must not be negative")
    if settings.stall <= 0 or settings.poll <= 0 or settings.submitters < 1:
        raise KwokError("--stall and the poll interval must be positive, submitters at least 1")
    if settings.external.stall <= 0:
        raise KwokError("--external-stall must be positive")
    for group in trace.jobs:
        wall = group.runtime / settings.time_scale
        if wall < MIN_WALL_RUNTIME:
            log(
                f"warning: jobs {group.name}: runtime {group.runtime:g}s is {wall:.2f}s of wall "
                f"time at --time-scale {settings.time_scale:g}; control-plane latency (about "
                "0.5-1 s per gang) will weigh on it: a smaller --time-scale is more faithful"
            )
    for spec in trace.queues:
        wall = spec.clog_timeout / settings.time_scale
        if wall < settings.min_clog_timeout and spec.name in {g.queue for g in trace.jobs}:
            log(
                f"note: queue {spec.name}: clogTimeout {spec.clog_timeout:g}s is {wall:.1f}s of "
                f"wall time at --time-scale {settings.time_scale:g}; muster gets "
                f"{settings.min_clog_timeout:g}s (--min-clog-timeout) so gangs still starting "
                "are not evicted as clogged"
            )
    if any(g.priority < 0 for g in trace.jobs):
        shift = -min(g.priority for g in trace.jobs)
        log(
            f"note: muster.dev/priority is 0..1e9; the trace's priorities are replayed shifted "
            f"by +{shift} (the order within each queue is the same)"
        )


def missing_binaries() -> list[Path]:
    return Binaries.at().missing()


def _not_built(missing: Sequence[Path]) -> str:
    return (
        "the local control-plane binaries are not built (missing "
        f"{', '.join(p.name for p in missing)}): run `muster cluster build` once (about 20 "
        "min), or pass --kubeconfig of a running cluster"
    )


# --------------------------------------------------------------------------- the session


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
        self.nodes_created = False
        self.queues_created: list[str] = []
        self.muster: MusterRun | None = None
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

    def _connect(self) -> None:
        settings = self.settings
        if settings.kubeconfig is None:
            missing = missing_binaries()
            if missing:
                raise KwokError(_not_built(missing))
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
                cluster.up(nodes=0)
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

    def _prepare(self) -> None:
        client = self._api()
        if "muster" in self.admissions:
            # Only muster reads Queues: an external replay leaves a cluster without muster so.
            apply_crd(client, queue_crd())
        try:
            crd = minicluster_crd()
        except (OSError, ValueError) as exc:
            raise KwokError(f"cannot read the MiniCluster CRD: {exc}") from None
        self.log(f"kwok engine: MiniCluster CRD: {install_crd(client, crd)}")
        self._create_nodes()

    def _check_namespace_objects(self) -> None:
        """Find where each `--namespace-manifest` object is created and have the apiserver
        check it (a dry-run create in `default`), before the replay creates anything."""
        client = self._api()
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
        client = self._api()
        plans = node_bodies(self.trace, self.run, prefix=self.node_prefix)
        self.log(f"kwok engine: creating {len(plans)} kwok nodes")
        self._cleanups.append(("delete nodes", self._delete_nodes))
        self.nodes_created = True
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

    def _delete_nodes(self) -> None:
        if self.cluster is not None and not self.settings.keep_cluster:
            return  # the whole control plane goes
        client = self._api()
        client.request(
            "DELETE", kubeapi.NODES.path(), params={"labelSelector": f"{SIM_RUN}={self.run}"}
        )

    # -- queues ---------------------------------------------------------------------

    def ensure_queues(self) -> None:
        client = self._api()
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
        client = self._api()
        for name in self.queues_created:
            with contextlib.suppress(ApiError):
                client.delete(f"{QUEUES_PATH}/{name}")
        self.queues_created = []

    # -- muster ---------------------------------------------------------------------

    def ensure_muster(self) -> None:
        """Start `muster run --local` (webhook + controller) unless it runs already."""
        if self.muster is not None or self.settings.external_muster:
            return
        client = self._api()
        try:
            client.get(WEBHOOK_CONFIG)
        except ApiError as exc:
            if exc.status != 404:
                raise
        else:
            raise KwokError(
                "a muster webhook is already registered on this cluster (another `muster run`?): "
                "stop it, or pass --external-muster to replay through it"
            )
        out = self.settings.out_dir or Path(".")
        out.mkdir(parents=True, exist_ok=True)
        log_path = out / "muster-run.log"
        log_path.write_text("", encoding="utf-8")
        self.log("kwok engine: starting muster (webhook + controller)")
        self._cleanups.append(("stop muster", self._stop_muster))
        try:
            # Its own session: Ctrl-C reaches only us, and we stop it in order.
            self.muster = launch(
                self.kubeconfig,
                "--no-admit-events",
                "--policy",
                self.settings.policy,
                *self.settings.muster_args,
                timeout=120,
                log_path=log_path,
                keep_lines=200,
                new_session=True,
            )
        except LaunchError as exc:
            raise KwokError(f"{exc}\n(its log: {log_path})") from exc

    def _stop_muster(self) -> None:
        muster = self.muster
        if muster is None:
            return
        if muster.stop(timeout=30):
            # Killed before its cleanup: its webhook configuration would refuse every
            # labelled create on this cluster from now on.
            with contextlib.suppress(ApiError, OSError):
                self._api().delete(WEBHOOK_CONFIG)
        self.muster = None

    def muster_alive(self) -> None:
        muster = self.muster
        if muster is not None and muster.proc.poll() is not None:
            tail = muster.tail(15)
            raise KwokError(
                f"muster run --local exited ({muster.proc.returncode}) during the replay; its log "
                f"{muster.log_path}:\n{tail}"
            )

    def _metrics(self) -> str:
        """muster's metrics text ("" when we do not run it or it does not answer)."""
        muster = self.muster
        if muster is None or muster.metrics_url is None:
            return ""
        try:
            with urllib.request.urlopen(f"{muster.metrics_url}/metrics", timeout=5) as response:
                return str(response.read().decode())
        except (OSError, urllib.error.URLError):
            return ""

    def write_figures(self) -> dict[str, float]:
        """muster's API writes so far by kind (`muster_api_writes_total`), and its admissions
        (`admitted`): the replay's writes per admitted gang are the difference of two."""
        figures = self.muster.api_figures() if self.muster is not None else {}
        out = {k.removeprefix("writes:"): v for k, v in figures.items() if k.startswith("writes:")}
        if "admitted" in figures:
            out["admitted"] = figures["admitted"]
        return out

    def plan_figures(self) -> tuple[int, float]:
        """(admit cycles, seconds in them) from muster's metrics, when we run it."""
        text = self._metrics()
        if not text:
            return 0, 0.0
        count, total = 0, 0.0
        for line in text.splitlines():
            if line.startswith("muster_plan_cycle_duration_seconds_count"):
                count = int(float(line.rsplit(" ", 1)[1]))
            elif line.startswith("muster_plan_cycle_duration_seconds_sum"):
                total = float(line.rsplit(" ", 1)[1])
        return count, total

    def gang_reason(self, namespace: str, name: str) -> str | None:
        """Why muster does not admit a gang, from its status service ("rejected: ..." when the
        planner can never admit it)."""
        muster = self.muster
        if muster is None or muster.status_url is None:
            return None
        url = f"{muster.status_url}/v1/gangs/{namespace}/{name}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except (OSError, urllib.error.URLError, ValueError):
            return None
        reason = body.get("reason") or {}
        if not reason:
            return None
        text = f"{reason.get('code')}: {reason.get('message')}"
        return f"rejected: {text}" if body.get("rejected") else text

    def save_history(self, namespaces: Sequence[str], expected: int) -> Path | None:
        """Write muster's history of this replay's gangs (`/v1/history`, as `muster history -o
        csv` prints it) to history.csv in the output folder; wall-clock seconds, so
        `muster sim TRACE --jobs-csv history.csv --csv-time-scale X` replays it in trace time.

        Waits (10 s at most) until the controller holds `expected` rows: it may see the last
        Jobs end a moment after the engine did."""
        muster = self.muster
        if muster is None or muster.status_url is None or self.settings.out_dir is None:
            return None
        prefixes = tuple(f"{namespace}/" for namespace in namespaces)
        rows: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"{muster.status_url}/v1/history", timeout=30) as r:
                    body = json.load(r)
            except (OSError, urllib.error.URLError, ValueError) as exc:
                self.log(f"warning: cannot read muster's history: {exc}")
                return None
            rows = [g for g in body.get("gangs") or [] if str(g.get("gang")).startswith(prefixes)]
            if len(rows) >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        path = self.settings.out_dir / "history.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_csv(rows), encoding="utf-8")
        self.log(
            f"kwok engine: muster's history of {len(rows)} gangs in {path} (wall seconds; "
            f"replay it in-process with --jobs-csv {path} --csv-time-scale "
            f"{self.settings.time_scale:g})"
        )
        return path

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by this process, muster and each control-plane component
        (those we started), and each `--controller-pid` process that is still there, for
        figures measured on a shared machine."""
        out = {"engine": time.process_time()}
        if self.muster is not None:
            # `muster run` serves the webhook from a child process: count both.
            out["muster"] = _tree_cpu(self.muster.proc.pid)
        for controller in self.controllers:
            if Path(f"/proc/{controller.pid}").exists():
                out[controller.label] = _tree_cpu(controller.pid)
        if self.cluster is not None:
            for record in self.cluster.records():
                out[record.component] = _process_cpu(record.pid)
        return out

    def _api(self) -> KubeClient:
        if self.client is None:
            raise KwokError("the kwok engine lost its cluster connection")
        return self.client

    # -- one replay -----------------------------------------------------------------

    def replay(
        self, admission: Admission, progress: ProgressFn | None = None, *, last: bool = False
    ) -> EngineResult:
        """Replay the whole trace once with one admission; return what was recorded.

        Its namespaces are deleted afterwards (so the next replay finds every node free),
        unless this is the `last` replay on a cluster that is about to be taken down anyway."""
        if admission == "muster":
            self.ensure_queues()
            self.ensure_muster()
        if admission == "external" and self.muster is not None:
            self.log(
                "kwok engine: muster keeps running during the external replay; its webhook "
                "leaves objects without muster.dev/queue alone"
            )
        discard = last and self.cluster is not None and not self.settings.keep_cluster
        return _Replay(self, admission, progress).run(clean_up=not discard)


def _difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live children (a webhook or worker child)."""
    return _process_cpu(pid) + sum(_process_cpu(c) for c in _children(pid))


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _ignore_sigint() -> Callable[[], None]:
    """Ignore Ctrl-C (main thread only) until the returned function restores it."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore


# --------------------------------------------------------------------------- one replay


class _Replay:
    def __init__(
        self, session: KwokSession, admission: Admission, progress: ProgressFn | None
    ) -> None:
        self.session = session
        self.admission = admission
        self.progress = progress
        settings = session.settings
        self.settings = settings
        trace = session.trace
        self.trace = trace
        self.client = session._api()
        self.arrivals: list[SubmittedGang] = expand(trace, seed=settings.seed)
        self.run_id = f"{session.run}-{admission}"
        namespaces = sorted({a.gang.id.split("/", 1)[0] for a in self.arrivals})
        self.namespaces = {ns: f"{self.run_id}-{ns}"[:63].rstrip("-") for ns in namespaces}
        self.timeline = Timeline(
            trace,
            self.arrivals,
            admission,
            settings.time_scale,
            self.namespaces,
            settings.seed,
            settings.min_clog_timeout,
        )
        on_run_nodes = {SIM_RUN: session.run} if session.node_prefix else None
        priority_shift = max(0, -min((a.gang.priority for a in self.arrivals), default=0))
        handed = settings.external.labels if admission == "external" else None
        self.objects: list[GangObject] = [
            gang_object(
                arrival,
                namespace=self.namespaces[arrival.gang.id.split("/", 1)[0]],
                admission=admission,
                scale=settings.time_scale,
                run=self.run_id,
                node_selector=on_run_nodes,
                priority_shift=priority_shift,
                labels=handed,
            )
            for arrival in self.arrivals
        ]
        self.errors: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.stop = threading.Event()
        self.dispatched = threading.Event()
        self.reconcilers: dict[str, MiniClusterReconciler] = {}
        horizon = settings.horizon if settings.horizon is not None else trace.horizon
        self.horizon = horizon if horizon is not None else trace.default_horizon()
        self.looks = 0
        self.look_seconds = 0.0
        self.jobs_by_name: dict[tuple[str, str], dict[str, Any]] = {}
        mine = f"{SIM_RUN}={self.run_id}"
        credentials = self.client.credentials
        self.pods = WatchCache(
            KubeClient(credentials),
            kubeapi.PODS.path(),
            {"labelSelector": mine, "fieldSelector": LIVE_PODS},
            name="watch-pods",
        )
        self.jobs = WatchCache(
            KubeClient(credentials),
            kubeapi.JOBS.path(),
            {"labelSelector": mine},
            name="watch-jobs",
        )

    def run(self, clean_up: bool = True) -> EngineResult:
        try:
            return self._run(clean_up)
        except BaseException:
            # On a cluster we did not bring up, leave none of the replay's objects behind.
            self._delete_namespaces()
            raise

    def _run(self, clean_up: bool) -> EngineResult:
        began = time.perf_counter()
        cpu_before = self.session.cpu_seconds()
        writes_before = self.session.write_figures()
        client = self.client
        timeline = self.timeline
        self._create_namespaces()
        selector = f"{SIM_RUN}={self.run_id}"
        runner_client = KubeClient(client.credentials)
        runner = GangRunner(
            runner_client,
            None,
            selector=selector,
            live_only=True,
            on_start=timeline.run_started,
            patch_workers=8,
            job_lookup=lambda namespace, name: self.jobs_by_name.get((namespace, name)),
        )
        gang_runner = threading.Thread(target=self._run_gangs, args=(runner,), name="gang-runner")
        pool = ThreadPoolExecutor(self.settings.submitters, thread_name_prefix="submit")
        dispatcher = threading.Thread(target=self._dispatch, args=(pool,), name="dispatch")
        try:
            self.pods.start()
            self.jobs.start()
            if not (self.pods.wait_synced(60) and self.jobs.wait_synced(60)):
                raise KwokError(
                    "cannot list the replay's pods and jobs: "
                    + "; ".join(self.pods.errors[-1:] + self.jobs.errors[-1:])
                )
            gang_runner.start()
            self._start_reconcilers()
            # A short lead so the first submissions are not already late when the loop begins.
            timeline.start(time.time() + 0.2)
            dispatcher.start()
            horizon_reached, end_wall = self._watch()
        finally:
            self.stop.set()
            if dispatcher.is_alive():
                dispatcher.join()
            pool.shutdown(wait=True, cancel_futures=True)
            if gang_runner.is_alive():
                gang_runner.join()
            runner.stop()
            runner_client.close()
            for reconciler in self.reconcilers.values():
                reconciler.stop()
                reconciler.client.close()
            self.pods.stop()
            self.jobs.stop()
        reasons = self._stuck_reasons(horizon_reached)
        plan_calls, plan_seconds = self.session.plan_figures()
        self._warn_problems(runner)
        result = timeline.result(
            stuck_reasons=reasons,
            horizon_reached=horizon_reached,
            end_wall=end_wall,
            wall_seconds=time.perf_counter() - began,
            plan_calls=plan_calls,
            plan_seconds=plan_seconds,
        )
        cpu_after = self.session.cpu_seconds()
        for gone in sorted(set(cpu_before) - set(cpu_after)):
            self.session.log(f"warning: {gone} exited during the replay: its CPU is not counted")
        writes = _difference(self.session.write_figures(), writes_before)
        if self.admission == "muster":
            ended = sum(1 for r in result.gangs if r.state in (FINISHED, FAILED))
            self.session.save_history(list(self.namespaces.values()), ended)
        if self.admission == "external":
            result.controller = self.settings.external.name
        if clean_up:
            self._cleanup_namespaces()
        self._record_figures(runner, result, cpu_before, cpu_after, writes)
        self._log_start_latency()
        return result

    def _start_reconcilers(self) -> None:
        """The operator's stand-in, per namespace, when the trace has MiniClusters; with
        `external` it creates their Jobs suspended, as the other controller's webhook would."""
        if not any(o.kind == "MiniCluster" for o in self.objects):
            return
        for namespace in self.namespaces.values():
            self.reconcilers[namespace] = MiniClusterReconciler(
                KubeClient(self.client.credentials),
                namespace,
                interval=2.0,
                suspend=self.admission == "external",
            ).start()

    def _create_namespaces(self) -> None:
        """The replay's namespaces; with `external`, each with the namespace-manifest objects
        (e.g. a Kueue LocalQueue) before any gang is submitted into it."""
        client = self.client
        objects = self.session.namespace_objects if self.admission == "external" else []
        for namespace in self.namespaces.values():
            client.create(kubeapi.NAMESPACES.path(), namespace_body(namespace, self.run_id))
            for resource, body in objects:
                try:
                    client.create(resource.path(namespace), in_namespace(body, namespace))
                except ApiError as exc:
                    raise KwokError(
                        f"--namespace-manifest: cannot create {body['kind']} "
                        f"{body['metadata']['name']} in {namespace}: {exc.message}"
                    ) from None

    def _delete_namespaces(self) -> None:
        for namespace in self.namespaces.values():
            with contextlib.suppress(ApiError, OSError):
                self.client.delete(kubeapi.NAMESPACES.path(name=namespace))

    def _warn_problems(self, runner: GangRunner) -> None:
        """Log the first errors of the runner, reconcilers and watches, and any second wave."""
        problems = [
            *runner.errors[:3],
            *(e for r in self.reconcilers.values() for e in r.errors[:3]),
            *self.pods.errors[:3],
            *self.jobs.errors[:3],
        ]
        if runner.stragglers:
            waves = ", ".join(
                f"{ns}/{gang} ({n})" for (ns, gang), n in sorted(runner.stragglers.items())[:3]
            )
            problems.append(
                f"{sum(runner.stragglers.values())} pods of {len(runner.stragglers)} gangs "
                "started after their gang's run was over (a second wave; given the runtime at "
                f"once): {waves}"
            )
        for problem in problems:
            self.session.log(f"warning: {problem}")

    def _record_figures(
        self,
        runner: GangRunner,
        result: EngineResult,
        cpu_before: dict[str, float],
        cpu_after: dict[str, float],
        writes: dict[str, float],
    ) -> None:
        """The replay's own figures (looks, submit lag, latencies, CPU, muster's writes per
        admission) for the benches."""
        lags = sorted(self.timeline.lags)
        admitted = writes.pop("admitted", 0.0)
        self.session.figures[self.admission] = {
            "looks": self.looks,
            "look_s_mean": round(self.look_seconds / self.looks, 4) if self.looks else None,
            "submit_lag_p50_s": round(lags[len(lags) // 2], 3) if lags else None,
            "submit_lag_max_s": round(lags[-1], 3) if lags else None,
            "gang_runs": runner.runs,
            "second_wave_pods": sum(runner.stragglers.values()),
            "latency_wall_s": self.timeline.latency_figures(),
            "replay_wall_s": round(result.wall_seconds, 3),
            "cpu_s": {
                name: round(cpu_after[name] - cpu_before.get(name, 0.0), 2) for name in cpu_after
            },
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
            "muster_writes": {kind: int(n) for kind, n in sorted(writes.items())},
            "muster_writes_per_admission": (
                {kind: round(n / admitted, 2) for kind, n in sorted(writes.items())}
                if admitted
                else None
            ),
        }

    def _log_start_latency(self) -> None:
        """Say how long admitted gangs took to run, in wall and in trace time."""
        started = self.timeline.latency_figures().get("admitted_to_started")
        if started is not None:
            in_trace = started["p50"] * self.settings.time_scale
            self.session.log(
                f"kwok engine: gangs ran {started['p50']:.1f}s (median; p95 {started['p95']:.1f}s)"
                f" of wall time after their admission, {in_trace:.0f}s of trace time at "
                f"--time-scale {self.settings.time_scale:g} (the in-process engine models "
                f"{self.trace.pod_start_delay:g}s): waits and makespan include it; a smaller "
                "--time-scale weighs it less (docs/simulator.md, 'The kwok engine')"
            )

    # -- submissions ----------------------------------------------------------------

    def _dispatch(self, pool: ThreadPoolExecutor) -> None:
        """Hand each gang to the submitters at its (compressed) trace time, in arrival order."""
        timeline = self.timeline
        try:
            for index, arrival in enumerate(self.arrivals):
                due = timeline.wall_time(arrival.gang.submitted.time)
                delay = due - time.time()
                if delay > 0 and self.stop.wait(delay):
                    return
                if self.stop.is_set():
                    return
                pool.submit(self._submit, index)
        finally:
            self.dispatched.set()

    def _submit(self, index: int) -> None:
        if self.stop.is_set():
            return
        obj = self.objects[index]
        sent = time.time()
        try:
            body = self.client.create(obj.path, obj.body)
        except (ApiError, OSError) as exc:
            message = exc.message if isinstance(exc, ApiError) else str(exc)
            self.errors.put(f"cannot create {obj.kind} {obj.namespace}/{obj.job_name}: {message}")
            return
        self.timeline.submitted(index, sent)
        if obj.kind == "MiniCluster":
            # The operator reacts to the create at once; the reconciler's loop catches misses.
            self.reconcilers[obj.namespace].reconcile(body)

    # -- watching -------------------------------------------------------------------

    def _run_gangs(self, runner: GangRunner) -> None:
        """The gang runner, fed from the pod watch (no LIST of its own), every 50 ms or, when
        a pass over many pods takes longer, twice its cost (it shares two cores)."""
        pause = 0.05
        while not self.stop.wait(pause):
            began = time.perf_counter()
            try:
                self.jobs_by_name = {
                    ((j["metadata"].get("namespace") or ""), j["metadata"].get("name") or ""): j
                    for j in self.jobs.snapshot()
                }
                runner.observe(self.pods.snapshot())
            except (ApiError, OSError) as exc:
                runner.errors.append(str(exc))
            pause = max(0.05, 2 * (time.perf_counter() - began))

    def _watch(self) -> tuple[bool, float]:
        """Look until done, stalled or past the horizon; (horizon reached, wall end)."""
        timeline = self.timeline
        settings = self.settings
        horizon_wall = timeline.wall_time(self.horizon)
        # An outside controller may wait out a long requeue backoff the engine cannot see.
        stall = settings.external.stall if self.admission == "external" else settings.stall
        last_change = time.time()
        while True:
            began = time.time()
            jobs, pods = self.jobs.snapshot(), self.pods.snapshot()
            now = time.time()
            self.looks += 1
            self.look_seconds += now - began
            if timeline.observe(now, jobs, pods):
                last_change = now
            if not self.errors.empty():
                raise KwokError(self.errors.get())
            self.session.muster_alive()
            if self.progress is not None:
                done, running, bound = timeline.counts()
                self.progress(
                    Progress(
                        self.admission,
                        max(timeline.trace_time(now), timeline.origin),
                        done,
                        len(timeline.gangs),
                        running,
                        bound,
                        self.looks,
                    )
                )
            if timeline.finished():
                return False, now
            if now >= horizon_wall:
                return True, now
            if self.dispatched.is_set() and now - last_change >= stall and timeline.quiet(now):
                return False, now
            # A look over thousands of pods takes tens of ms of a shared core: at most a
            # quarter of one goes to looking.
            cost = time.time() - began
            time.sleep(max(settings.poll - cost, 3 * cost))

    def _stuck_reasons(self, horizon_reached: bool) -> dict[int, str]:
        reasons: dict[int, str] = {}
        if self.admission != "muster":
            return reasons
        for record in self.timeline.pending():
            namespace, name = record.gang.id.split("/", 1)
            reason = self.session.gang_reason(self.namespaces[namespace], name)
            if reason is not None:
                when = "at the horizon" if horizon_reached else "with nothing left to change"
                reasons[record.index] = (
                    reason if reason.startswith("rejected:") else f"{reason} ({when})"
                )
        return reasons

    def _cleanup_namespaces(self) -> None:
        """Delete the replay's namespaces and wait until its pods are gone (their nodes free)."""
        client = self.client
        self._delete_namespaces()
        deadline = time.monotonic() + 180
        selector = {"labelSelector": f"{SIM_RUN}={self.run_id}"}
        while time.monotonic() < deadline:
            if not client.get(kubeapi.PODS.path(), {**selector, "limit": "1"})["items"]:
                return
            time.sleep(0.5)
        self.session.log(f"warning: pods of {self.run_id} still present after 180 s")


# --------------------------------------------------------------------------- entry point


def replay(
    trace: Trace,
    admissions: Sequence[Admission],
    settings: KwokSettings,
    *,
    log: Log = lambda message: print(message, file=sys.stderr, flush=True),
    progress: Callable[[Admission], contextlib.AbstractContextManager[ProgressFn | None]]
    | None = None,
    figures: dict[str, dict[str, Any]] | None = None,
) -> list[EngineResult]:
    """Replay the trace on kwok once per admission (in the order given); tear down after.

    `figures`, if given, receives per admission the replay's own figures (looks at the cluster,
    submission lag, gang runs, wall time)."""
    if settings.kubeconfig is None and missing_binaries():
        # Before anything else is said: nothing else matters until they are built.
        raise KwokError(_not_built(missing_binaries()))
    check_trace(trace, settings, log)
    results: list[EngineResult] = []
    with KwokSession(trace, settings, log, admissions) as session:
        for i, admission in enumerate(admissions):
            with progress(admission) if progress else _no_progress() as show:
                last = i == len(admissions) - 1
                results.append(session.replay(admission, show, last=last))
            if figures is not None:
                figures.update(session.figures)
    return results


@contextlib.contextmanager
def _no_progress() -> Iterator[ProgressFn | None]:
    yield None
