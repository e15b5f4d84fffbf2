"""What the benches share, written once: the cluster a bench runs against (`bench_cluster`), the
body of every Job a bench makes (`job_body`), and latencies as printed (`latency_ms`, on the one
percentile rule of `policies.percentiles`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.percentiles import percentile
from policies.vocabulary import QUEUE, RUNTIME
from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.nodes import NodeShape

KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def job_body(
    name: str,
    queue: str | None,
    *,
    pods: int = 1,
    cpu: str | None = "100m",
    suspend: bool = False,
    runtime: str | None = "2s",
    annotations: Mapping[str, str] | None = None,
    kwok: bool = True,
) -> dict[str, Any]:
    """A Job of `pods` pods (parallelism and completions), each requesting `cpu` (None: no
    requests), labelled for `queue` when one is given. Its pods tolerate kwok's nodes (unless
    not `kwok`: a bench with no nodes of kwok's) and succeed after `runtime` (kwok's Stage
    `muster-pod-complete`; None: they run until deleted). `annotations` go on the Job, e.g. the
    stamps of a Job created as the webhook would have stamped it."""
    labels = {QUEUE: queue} if queue else {}
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if annotations:
        metadata["annotations"] = dict(annotations)
    template_meta = {"annotations": {RUNTIME: runtime}} if runtime else {}
    container: dict[str, Any] = {"name": "m", "image": "x"}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if kwok:
        pod["tolerations"] = [dict(KWOK_TOLERATION)]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": suspend,
            "template": {
                "metadata": template_meta,
                "spec": pod,
            },
        },
    }


@dataclass(frozen=True)
class BenchCluster:
    """The cluster of one bench run."""

    kubeconfig: Path
    local: LocalCluster | None
    """The local control plane behind `kubeconfig` (whose components' CPU a bench reads), or
    None for a cluster `muster cluster up` did not start."""
    started: bool
    """Started for this run (and stopped after it): nothing the bench made there outlives it."""


@contextmanager
def bench_cluster(
    kubeconfig: str | Path | None,
    *,
    name: str,
    nodes: int = 0,
    reuse_running: bool = False,
    log: Callable[[str], None],
) -> Iterator[BenchCluster]:
    """The cluster a bench measures: the one `kubeconfig` names, left running; else, with
    `reuse_running`, the running `muster` cluster (`muster cluster up`'s default), left running;
    else a local control plane named `name` with `nodes` kwok nodes, started here and stopped
    when the block ends, however it ends."""
    if kubeconfig:
        path = Path(kubeconfig)
        yield BenchCluster(path, LocalCluster.of_kubeconfig(path), started=False)
        return
    if reuse_running:
        running = LocalCluster(log=log)
        if running.is_healthy():
            yield BenchCluster(running.kubeconfig, running, started=False)
            return
    cluster = LocalCluster(name=name, log=log)
    try:
        cluster.up(nodes=nodes, shape=NodeShape())
        yield BenchCluster(cluster.kubeconfig, cluster, started=True)
    finally:
        cluster.down(quiet=True)


def latency_ms(seconds: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0 to 100) of latencies in seconds, in milliseconds to 0.01 as the
    benches print them; None for no latencies."""
    value = percentile(seconds, q)
    return None if value is None else round(1000 * value, 2)
