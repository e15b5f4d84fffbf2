"""Backpressure at ingress on the real control plane: a Queue's `spec.limits` make the webhook
refuse (429) a new gang while the queue holds that many pending gangs; nothing is stored."""

from __future__ import annotations

import itertools
import json
import os
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from simulator.controlplane.minicluster import job_maker
from tests import builders
from tests.conftest import MusterProcess
from tests.kube import wait_for

pytestmark = pytest.mark.cluster

QUEUES = "/apis/muster.dev/v1alpha1/queues"
_COUNTER = itertools.count()


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def webhook_metric(muster: MusterProcess, name: str, **labels: str) -> float | None:
    """One sample of the webhook process's /metrics (None when absent)."""
    assert muster.webhook_metrics_url, "the webhook serves no metrics"
    with urllib.request.urlopen(f"{muster.webhook_metrics_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    match = re.search(rf"^{name}{{{re.escape(wanted)}}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


@pytest.fixture
def limited_queue(kube: KubeClient, muster: MusterProcess) -> Iterator[Any]:
    """Make a Queue with `limits` whose quota admits nothing (its gangs stay pending), and wait
    until the webhook's watch knows it; deleted afterwards."""
    made: list[str] = []

    def make(limits: dict[str, int]) -> str:
        name = f"limits-{os.getpid() % 10000}-{next(_COUNTER)}"
        body = {
            "apiVersion": "muster.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"nominal": {"cpu": "0"}, "limits": limits},
        }
        kube.create(QUEUES, body)
        made.append(name)
        wait_for(
            lambda: webhook_metric(muster, "muster_webhook_pending_gangs", queue=name) == 0,
            timeout=30,
            what=f"the webhook to see queue {name}",
        )
        return name

    yield make
    for name in made:
        kube.delete(f"{QUEUES}/{name}")


def test_max_pending_refuses_the_sixth_create_and_stores_nothing(
    kube: KubeClient, muster: MusterProcess, namespace: str, limited_queue: Any
) -> None:
    queue = limited_queue({"maxPending": 5})
    for i in range(5):
        kube.create(jobs_path(namespace), builders.job(f"job-{i}", queue, pods=2))

    with pytest.raises(ApiError) as refused:
        kube.create(jobs_path(namespace), builders.job("job-5", queue, pods=2))
    assert refused.value.status == 429
    assert (
        f"queue {queue} holds 5 pending gangs, its limit; retry later or raise "
        "spec.limits.maxPending"
    ) in refused.value.message
    with pytest.raises(ApiError) as missing:
        kube.get(f"{jobs_path(namespace)}/job-5")
    assert missing.value.status == 404
    assert len(kube.get(jobs_path(namespace))["items"]) == 5

    # The five stay pending: the controller agrees they wait (its Queue status).
    wait_for(
        lambda: (kube.get(f"{QUEUES}/{queue}").get("status") or {}).get("pending") == 5,
        timeout=30,
        what="the controller to count 5 pending gangs",
    )
    assert webhook_metric(muster, "muster_webhook_pending_gangs", queue=queue) == 5
    assert (
        webhook_metric(muster, "muster_webhook_refusals_total", queue=queue, reason="MaxPending")
        == 1
    )

    # The status service shows the limit next to the depth.
    with urllib.request.urlopen(f"{muster.status_url}/v1/queues", timeout=10) as r:
        shown = json.load(r)["queues"][queue]
    assert shown["pending"] == 5
    assert shown["spec"]["limits"] == {"maxPending": 5, "maxPendingPerNamespace": None}

    # Deleting a pending gang lets the next create in, once the webhook's watch sees it gone.
    kube.delete(f"{jobs_path(namespace)}/job-0")
    wait_for(
        lambda: webhook_metric(muster, "muster_webhook_pending_gangs", queue=queue) == 4,
        timeout=30,
        what="the webhook to count 4 pending gangs",
    )
    kube.create(jobs_path(namespace), builders.job("job-5", queue, pods=2))
    assert kube.get(f"{jobs_path(namespace)}/job-5")["spec"]["suspend"] is True
    with pytest.raises(ApiError) as again:
        kube.create(jobs_path(namespace), builders.job("job-6", queue, pods=2))
    assert again.value.status == 429


def test_max_pending_per_namespace_names_the_namespace(
    kube: KubeClient, muster: MusterProcess, limited_queue: Any
) -> None:
    queue = limited_queue({"maxPendingPerNamespace": 2})
    spaces = [f"limits-ns-{os.getpid() % 10000}-{next(_COUNTER)}" for _ in range(2)]
    for space in spaces:
        kube.create("/api/v1/namespaces", {"metadata": {"name": space}})
    try:
        first, second = spaces
        for i in range(2):
            kube.create(jobs_path(first), builders.job(f"job-{i}", queue, pods=2))
        with pytest.raises(ApiError) as refused:
            kube.create(jobs_path(first), builders.job("job-2", queue, pods=2))
        assert refused.value.status == 429
        assert (
            f"queue {queue} holds 2 pending gangs from namespace {first}, its limit per "
            "namespace; retry later or raise spec.limits.maxPendingPerNamespace"
        ) in refused.value.message
        # Another namespace still has room in the same queue.
        kube.create(jobs_path(second), builders.job("job-0", queue, pods=2))
        assert len(kube.get(jobs_path(first))["items"]) == 2
        assert (
            webhook_metric(
                muster,
                "muster_webhook_refusals_total",
                queue=queue,
                reason="MaxPendingPerNamespace",
            )
            == 1
        )
    finally:
        for space in spaces:
            kube.delete(f"/api/v1/namespaces/{space}")


def test_a_burst_faster_than_the_watch_does_not_overshoot(
    kube: KubeClient, muster: MusterProcess, namespace: str, limited_queue: Any
) -> None:
    """Creates sent back to back: the webhook counts the ones it allowed before its watch
    shows them, so exactly `maxPending` are stored."""
    queue = limited_queue({"maxPending": 3})
    codes = []
    for i in range(8):
        try:
            kube.create(jobs_path(namespace), builders.job(f"job-{i}", queue, pods=2))
            codes.append(201)
        except ApiError as exc:
            codes.append(exc.status)
    assert codes == [201] * 3 + [429] * 5
    assert len(kube.get(jobs_path(namespace))["items"]) == 3


def test_a_minicluster_and_its_job_count_as_one_gang(
    kube: KubeClient,
    muster: MusterProcess,
    namespace: str,
    limited_queue: Any,
    flux_operator: bool,
) -> None:
    """The MiniCluster is the gang: it counts toward the limit, and the Job its operator makes
    is neither refused nor counted again."""
    queue = limited_queue({"maxPending": 2})
    path = f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"

    def minicluster(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "metadata": {"name": name, "labels": {"muster.dev/queue": queue}},
            "spec": {"size": 2, "containers": [{"image": "lammps"}]},
        }

    kube.create(path, minicluster("mc-0"))
    reconciler = job_maker(kube, namespace, real=flux_operator).start()
    try:
        kube.create(path, minicluster("mc-1"))
        jobs = wait_for(
            lambda: len(kube.get(jobs_path(namespace))["items"]) == 2 or None,
            timeout=30,
            what="the MiniClusters' Jobs",
        )
        assert jobs and reconciler.errors == []
    finally:
        reconciler.stop()
    wait_for(
        lambda: webhook_metric(muster, "muster_webhook_pending_gangs", queue=queue) == 2,
        timeout=30,
        what="the webhook to count 2 pending gangs",
    )
    with pytest.raises(ApiError) as refused:
        kube.create(path, minicluster("mc-2"))
    assert refused.value.status == 429
    assert f"queue {queue} holds 2 pending gangs, its limit" in refused.value.message
    with pytest.raises(ApiError) as job_refused:
        kube.create(jobs_path(namespace), builders.job("job-0", queue, pods=2))
    assert job_refused.value.status == 429


def test_negative_limit_is_refused_by_the_apiserver_with_the_field_named(
    kube: KubeClient, crds: None
) -> None:
    body = {
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": f"limits-bad-{os.getpid() % 10000}"},
        "spec": {"limits": {"maxPending": -1}},
    }
    with pytest.raises(ApiError) as refused:
        kube.create(QUEUES, body)
    assert refused.value.status == 422
    assert "spec.limits.maxPending" in refused.value.message


def test_limits_set_later_count_the_gangs_already_pending(
    kube: KubeClient, muster: MusterProcess, namespace: str
) -> None:
    """The webhook follows managed Jobs only while some Queue sets limits: a limit added to a
    queue that already holds pending gangs starts that stream with a LIST, so the gangs stored
    before it count at once (and an unlimited queue has no webhook depth at all)."""
    name = f"later-{os.getpid() % 10000}-{next(_COUNTER)}"
    kube.create(
        QUEUES,
        {
            "apiVersion": "muster.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"nominal": {"cpu": "0"}},
        },
    )
    try:
        for i in range(3):
            kube.create(jobs_path(namespace), builders.job(f"early-{i}", name, pods=2))
        wait_for(
            lambda: (kube.get(f"{QUEUES}/{name}").get("status") or {}).get("pending") == 3,
            timeout=30,
            what="the controller to count 3 pending gangs",
        )
        assert webhook_metric(muster, "muster_webhook_pending_gangs", queue=name) is None
        kube.patch(f"{QUEUES}/{name}", {"spec": {"limits": {"maxPending": 3}}})
        wait_for(
            lambda: webhook_metric(muster, "muster_webhook_pending_gangs", queue=name) == 3,
            timeout=30,
            what="the webhook to count the 3 gangs stored before the limit",
        )
        with pytest.raises(ApiError) as refused:
            kube.create(jobs_path(namespace), builders.job("late", name, pods=2))
        assert refused.value.status == 429
        assert f"queue {name} holds 3 pending gangs, its limit" in refused.value.message
    finally:
        kube.delete(f"{QUEUES}/{name}")
