"""A gang that can never run, on the real control plane: the webhook says so at create (issue
#15). `spec.neverFits: Warn` (the default): stored, with a warning kubectl prints; `Reject`:
refused (400), nothing stored. Against both servers, as tests/cluster/test_webhook.py."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kubeport.kubeapi import ApiError, KubeClient
from tests import builders
from tests.builders import KWOK_TOLERATION
from tests.cluster.test_queue_limits import webhook_metric
from tests.conftest import MusterProcess
from tests.kube import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("webhook_server")]

QUEUES = "/apis/muster.dev/v1alpha1/queues"
_COUNTER = itertools.count()


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def minicluster_path(namespace: str) -> str:
    return f"/apis/flux-framework.org/v1alpha2/namespaces/{namespace}/miniclusters"


def minicluster(name: str, queue: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": name, "labels": {"muster.dev/queue": queue}},
        "spec": {
            "size": size,
            "pod": {"tolerations": [KWOK_TOLERATION]},  # else no node takes its pods
            "containers": [{"image": "lammps", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


def dry_run_warnings(kube: KubeClient, path: str, body: dict[str, Any]) -> tuple[str, ...]:
    """The warnings of a create that stores nothing (raises ApiError when refused)."""
    kube.request("POST", path, body, params={"dryRun": "All"})
    return kube.last_warnings


@pytest.fixture
def make_queue(kube: KubeClient, namespace: str) -> Iterator[Callable[..., str]]:
    """Make a Queue and wait until the webhook says `probe` (default: an 8-pod gang of 1 cpu)
    never fits it (its watch has seen the queue); deleted afterwards."""
    made: list[str] = []

    def make(probe: dict[str, Any] | None = None, **spec: Any) -> str:
        name = f"never-{os.getpid() % 10000}-{next(_COUNTER)}"
        kube.create(
            QUEUES,
            {
                "apiVersion": "muster.dev/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        made.append(name)

        body = probe or builders.job("probe", name, pods=8)
        body["metadata"]["labels"]["muster.dev/queue"] = name

        def judged() -> bool:
            try:
                warnings = dry_run_warnings(kube, jobs_path(namespace), body)
            except ApiError as exc:
                return exc.status == 400 and "never fits" in exc.message
            return any("never fits" in w for w in warnings)

        wait_for(judged, timeout=30, what=f"the webhook to see queue {name}")
        return name

    yield make
    for name in made:
        kube.delete(f"{QUEUES}/{name}")


def test_warn_stores_the_gang_and_the_response_carries_the_warning(
    kube: KubeClient, namespace: str, make_queue: Callable[..., str], webhook_server: str
) -> None:
    queue = make_queue(nominal={"cpu": "4"})
    stored = kube.create(jobs_path(namespace), builders.job("big", queue, pods=8))
    assert stored["spec"]["suspend"] is True
    (warning,) = kube.last_warnings
    assert warning.startswith(
        f"never fits: needs 8 cpu, queue {queue} can get at most 4 cpu (nominal plus what it "
        "may borrow); raise the queue's quota or shrink the job"
    )
    kube.create(jobs_path(namespace), builders.job("small", queue, pods=4))
    assert kube.last_warnings == ()


def test_reject_refuses_with_the_message_and_stores_nothing(
    kube: KubeClient,
    muster: MusterProcess,
    namespace: str,
    make_queue: Callable[..., str],
    webhook_server: str,
) -> None:
    queue = make_queue(nominal={"cpu": "4"}, neverFits="Reject")
    with pytest.raises(ApiError) as refused:
        kube.create(jobs_path(namespace), builders.job("big", queue, pods=8))
    assert refused.value.status == 400
    message = refused.value.message
    assert f"never fits: needs 8 cpu, queue {queue} can get at most 4 cpu" in message
    assert f"queue {queue} has spec.neverFits: Reject" in message
    assert "spec.nominal" in message and "spec.parallelism" in message
    with pytest.raises(ApiError) as missing:
        kube.get(f"{jobs_path(namespace)}/big")
    assert missing.value.status == 404
    if webhook_server == "lean":
        refusals = webhook_metric(
            muster, "muster_webhook_refusals_total", queue=queue, reason="NeverFits"
        )
        assert refusals is not None and refusals >= 1


def test_a_gang_larger_than_every_node_together_is_warned(
    kube: KubeClient, namespace: str, make_queue: Callable[..., str]
) -> None:
    """No quota: the nodes are the limit (the planner's room on the empty cluster)."""
    queue = make_queue(probe=builders.job("probe", "", pods=1, cpu="100000"))
    kube.create(jobs_path(namespace), builders.job("huge", queue, pods=100_000))
    (warning,) = kube.last_warnings
    assert re.match(
        r"never fits: needs 100000 pods of 1 cpu, the whole cluster .*holds \d+", warning
    )
    assert "resources.requests" in warning
    kube.create(jobs_path(namespace), builders.job("fits", queue, pods=2))
    assert kube.last_warnings == ()


def test_a_minicluster_too_big_is_warned(
    kube: KubeClient, namespace: str, make_queue: Callable[..., str]
) -> None:
    queue = make_queue(nominal={"cpu": "4"})
    kube.create(minicluster_path(namespace), minicluster("flux", queue, 8))
    (warning,) = kube.last_warnings
    assert warning.startswith(f"never fits: needs 8 cpu, queue {queue} can get at most 4 cpu")
    assert "spec.size" in warning


def test_a_minicluster_too_big_is_refused_by_a_reject_queue(
    kube: KubeClient, namespace: str, make_queue: Callable[..., str]
) -> None:
    queue = make_queue(nominal={"cpu": "4"}, neverFits="Reject")
    with pytest.raises(ApiError) as refused:
        kube.create(minicluster_path(namespace), minicluster("flux", queue, 8))
    assert refused.value.status == 400 and "spec.size" in refused.value.message
    with pytest.raises(ApiError) as missing:
        kube.get(f"{minicluster_path(namespace)}/flux")
    assert missing.value.status == 404


def test_the_apiserver_refuses_an_unknown_never_fits_value(kube: KubeClient) -> None:
    body = {
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": f"never-bad-{os.getpid() % 10000}"},
        "spec": {"neverFits": "Refuse"},
    }
    with pytest.raises(ApiError) as refused:
        kube.create(QUEUES, body)
    assert refused.value.status == 422 and "spec.neverFits" in refused.value.message
