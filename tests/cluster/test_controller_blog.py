"""The blog burst (MiniClusters of 4..64 one-per-node pods on 149 nodes of 8 cpu / 30Gi).

With node-aware admission every gang completes and none is evicted; with node-blind quota
admission (`nodeFit: false`) gangs clog and the clog detector evicts and requeues them until all
complete. Pods behave as gang members (simulator/controlplane/gangrun.py): they hold their nodes
and work only once all members of their gang run. Runtimes are scaled from minutes to seconds
(÷25); the nodes are their own group and the gangs select it, so the session's big nodes stay
out of it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeport.kubeapi import KubeClient
from policies.durations import parse_duration
from policies.vocabulary import GANG_RUNTIME
from simulator.controlplane.gangrun import GangRunner
from simulator.controlplane.minicluster import job_maker
from simulator.controlplane.nodes import NODE_GROUP_LABEL
from tests.conftest import MusterProcess
from tests.controller_helpers import (
    all_jobs,
    create_nodes,
    create_queue,
    delete_nodes,
    delete_queue,
    evictions,
    wait_all_finished,
)
from tests.kube import create_through_webhook

pytestmark = [pytest.mark.cluster]

TRACE = Path(__file__).resolve().parents[2] / "simulator/traces/blog-burst.yaml"
GROUP = "blog"
TIME_SCALE = 25.0


@pytest.fixture(scope="module")
def blog_nodes(kube: KubeClient) -> Iterator[str]:
    create_nodes(kube, GROUP, {f"kwok-{GROUP}-{i}": {} for i in range(149)})
    yield GROUP
    delete_nodes(kube, GROUP)


def miniclusters(queue: str) -> list[dict[str, Any]]:
    trace = yaml.safe_load(TRACE.read_text())
    out = []
    for entry in trace["jobs"]:
        runtime = parse_duration(entry["runtime"], field="runtime") / TIME_SCALE
        for i in range(entry["count"]):
            out.append(
                {
                    "apiVersion": "flux-framework.org/v1alpha2",
                    "kind": "MiniCluster",
                    "metadata": {
                        "name": f"{entry['name']}-{i:02d}",
                        "labels": {"muster.dev/queue": queue},
                    },
                    "spec": {
                        "size": entry["size"],
                        "minSize": entry["minSize"],
                        "containers": [
                            {"image": "lammps", "resources": {"requests": entry["podRequests"]}}
                        ],
                        "pod": {
                            "annotations": {GANG_RUNTIME: f"{runtime:g}s"},
                            "nodeSelector": {NODE_GROUP_LABEL: GROUP},
                            "tolerations": [
                                {
                                    "key": "kwok.x-k8s.io/node",
                                    "operator": "Exists",
                                    "effect": "NoSchedule",
                                }
                            ],
                        },
                    },
                }
            )
    return out


def run_burst(
    kube: KubeClient, namespace: str, queue: str, flux_operator: bool
) -> list[dict[str, Any]]:
    gangs = miniclusters(queue)
    path = f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"

    def submit(part: list[dict[str, Any]]) -> None:
        with KubeClient(kube.credentials) as own:
            for body in part:
                create_through_webhook(own, path, body)

    threads = [threading.Thread(target=submit, args=(gangs[i::8],)) for i in range(8)]
    reconciler = job_maker(kube, namespace, real=flux_operator).start()
    runner = GangRunner(KubeClient(kube.credentials), namespace).start()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_all_finished(kube, namespace, len(gangs), 600)
    finally:
        reconciler.stop()
        runner.stop()
        runner.client.close()
    assert not reconciler.errors, reconciler.errors[:3]
    assert not runner.errors, runner.errors[:3]
    assert runner.runs >= len(gangs)
    return all_jobs(kube, namespace)


def test_blog_burst_with_node_fit_completes_without_evictions(
    kube: KubeClient,
    namespace: str,
    muster: MusterProcess,
    blog_nodes: str,
    flux_operator: bool,
) -> None:
    queue = f"{namespace}-fit"
    create_queue(kube, queue, {"nodeFit": True, "clogTimeout": "60s"})
    try:
        jobs = run_burst(kube, namespace, queue, flux_operator)
    finally:
        delete_queue(kube, queue)
    assert len(jobs) == 106
    assert all(evictions(j) == 0 for j in jobs), [
        j["metadata"]["name"] for j in jobs if evictions(j)
    ]


def test_blog_burst_node_blind_clogs_and_the_detector_recovers(
    kube: KubeClient,
    namespace: str,
    muster: MusterProcess,
    blog_nodes: str,
    flux_operator: bool,
) -> None:
    queue = f"{namespace}-blind"
    create_queue(
        kube,
        queue,
        {
            # Node-blind quota equal to the cluster: 149 x 8 cpu, 149 x 30Gi.
            "nominal": {"cpu": "1192", "memory": "4470Gi"},
            "nodeFit": False,
            # Longer than the longest (scaled) runtime, so waiting behind a running gang is not
            # taken for a clog; cycles of partial gangs are the deadlock detector's (3 s grace),
            # which evicts the youngest and so lets the oldest finish. Requeues spread over up
            # to 30 s so evicted gangs do not all come back at the same instant.
            "clogTimeout": "30s",
            "backoff": {"base": "2s", "max": "30s", "limit": 1000},
        },
    )
    try:
        jobs = run_burst(kube, namespace, queue, flux_operator)
    finally:
        delete_queue(kube, queue)
    assert len(jobs) == 106
    assert sum(evictions(j) for j in jobs) > 0
