"""The local control plane is real: kwok nodes, the real scheduler, the real Job controller."""

from __future__ import annotations

from typing import Any

import pytest

from kubeport.kubeapi import KubeClient
from simulator.controlplane.nodes import count_ready
from tests import builders
from tests.conftest import TEST_NODES
from tests.kube import job_condition, wait_for

pytestmark = pytest.mark.cluster


def _pods(kube: KubeClient, namespace: str, job: str) -> list[dict[str, Any]]:
    selector = {"labelSelector": f"batch.kubernetes.io/job-name={job}"}
    items: list[dict[str, Any]] = kube.get(f"/api/v1/namespaces/{namespace}/pods", selector)[
        "items"
    ]
    return items


def test_at_least_1000_kwok_nodes_are_ready(kube: KubeClient) -> None:
    nodes = kube.get("/api/v1/nodes", {"labelSelector": "type=kwok"})["items"]
    assert len(nodes) >= TEST_NODES
    assert count_ready(nodes) >= TEST_NODES
    taints = nodes[0]["spec"]["taints"]
    assert {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"} in taints


def test_job_is_scheduled_by_the_real_scheduler_and_completes(
    kube: KubeClient, namespace: str
) -> None:
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    kube.create(jobs, builders.job("smoke", pods=20, runtime="5s"))

    def completed() -> dict[str, Any] | None:
        job = kube.get(f"{jobs}/smoke")
        return job if job_condition(job, "Complete") else None

    job = wait_for(completed, timeout=120, what="job smoke to Complete")
    assert job["status"]["succeeded"] == 20
    pods = _pods(kube, namespace, "smoke")
    # Every pod was bound by kube-scheduler to a kwok node (there is no other scheduler here).
    assert len(pods) == 20
    assert all(p["spec"]["nodeName"].startswith("kwok-") for p in pods)
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)


def test_suspended_job_creates_no_pods_until_unsuspended(kube: KubeClient, namespace: str) -> None:
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    kube.create(jobs, builders.job("held", pods=4, runtime="3s", suspend=True))
    # The Job controller has seen the Job once it reports the Suspended condition.
    wait_for(
        lambda: job_condition(kube.get(f"{jobs}/held"), "Suspended"),
        timeout=60,
        what="job held to report Suspended",
    )
    assert _pods(kube, namespace, "held") == []

    kube.patch(f"{jobs}/held", {"spec": {"suspend": False}})
    wait_for(lambda: len(_pods(kube, namespace, "held")) == 4, timeout=60, what="4 pods to appear")
    wait_for(
        lambda: job_condition(kube.get(f"{jobs}/held"), "Complete"),
        timeout=120,
        what="job held to Complete",
    )
