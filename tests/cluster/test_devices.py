"""GPUs handed out by DRA on kwok (issue 35, docs/devices.md): kwok nodes publish ResourceSlices
of the fake driver gpu.muster.dev, muster runs with --device-class gpu.muster.dev=muster.dev/gpu,
and gangs claim GPUs through ResourceClaimTemplates.

A gang requesting GPUs through claims is held, counted against its queue's device quota,
admitted whole only where the devices are free, and kube-scheduler allocates its claims on the
nodes muster planned; a gang that can never get its devices is reported at create.

Its own small control plane (4 nodes of 8 devices, `$MUSTER_DRA_CLUSTER`, default
`muster-test-dra`): device capacity on the session's 1000 nodes would not be the test's, and
its own `muster run --local` with the mapping would fight the session's over the webhook
configuration (`MUSTER_DRA_CLUSTER` of a running cluster keeps it up after the tests).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from admission.crd import muster_crds
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.kinds.pinning import decode_placement
from policies.vocabulary import PLACEMENT
from simulator.controlplane.cluster import LocalCluster
from simulator.controlplane.dra import FAKE_GPU, DeviceShape, claim_template
from simulator.controlplane.minicluster import apply_crd
from simulator.controlplane.nodes import NodeShape
from tests import builders
from tests.builders import KWOK_TOLERATION
from tests.conftest import MusterProcess, start_muster
from tests.controller_helpers import (
    admitted,
    create_queue,
    delete_queue,
    finished,
    jobs_path,
    pending_reason,
)
from tests.kube import create_through_webhook, wait_for

pytestmark = pytest.mark.cluster

GPU = "muster.dev/gpu"
NODES = 4
DEVICES = 8
CLUSTER = os.environ.get("MUSTER_DRA_CLUSTER", "muster-test-dra")
_COUNTER = itertools.count()


@pytest.fixture(scope="module")
def dra() -> Iterator[LocalCluster]:
    cluster = LocalCluster(name=CLUSTER, log=lambda _: None)
    keep = cluster.is_healthy()
    shape = NodeShape(cpu="32", memory="256Gi", devices=DeviceShape(DEVICES, attributes=FAKE_GPU))
    cluster.up(nodes=NODES, shape=shape, group="gpu")
    try:
        yield cluster
    finally:
        if not keep:
            cluster.down(quiet=True)


@pytest.fixture(scope="module")
def dkube(dra: LocalCluster) -> Iterator[KubeClient]:
    with dra.client() as client:
        yield client


@pytest.fixture(scope="module")
def dmuster(dra: LocalCluster, dkube: KubeClient) -> Iterator[MusterProcess]:
    for crd in muster_crds():
        apply_crd(dkube, crd)
    process = start_muster(dra.kubeconfig, "--device-class", f"gpu.muster.dev={GPU}")
    yield process
    process.stop()


@pytest.fixture
def dns(dkube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace with the claim template `gpus` (8 devices of gpu.muster.dev)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().replace("_", "-"))[:30]
    name = f"d-{slug.strip('-')}-{next(_COUNTER)}-{os.getpid() % 10000}"
    dkube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    template = claim_template("gpus", {"gpu.muster.dev": DEVICES})
    dkube.create(kubeapi.RESOURCE_CLAIM_TEMPLATES.path(name), template)
    yield name
    dkube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def queues(dkube: KubeClient, dmuster: MusterProcess) -> Iterator[Callable[..., str]]:
    """Make a queue of the test's (the size ratio off, and `spec`), deleted afterwards."""
    made: list[str] = []

    def make(**spec: Any) -> str:
        name = f"dra-{next(_COUNTER)}-{os.getpid() % 10000}"
        create_queue(dkube, name, {"sizeRatio": None, **spec})
        made.append(name)
        return name

    yield make
    for name in made:
        delete_queue(dkube, name)


def gpu_job(name: str, queue: str, pods: int, runtime: str = "5s", **fields: Any) -> dict[str, Any]:
    """A Job of `pods` pods, each of 1 cpu and the 8 GPUs of a claim made from `gpus`."""
    return builders.job(
        name,
        queue,
        pods=pods,
        suspend=None,
        runtime=runtime,
        claim_templates=["gpus"],
        **fields,
    )


def job(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(f"{jobs_path(namespace)}/{name}")


def pods_of(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = {"labelSelector": f"batch.kubernetes.io/job-name={name}"}
    return list(kube.get(kubeapi.PODS.path(namespace), selector)["items"])


def claim_nodes(kube: KubeClient, namespace: str, pod: dict[str, Any]) -> set[str]:
    """The nodes whose devices the pod's claims were allocated (each slice's pool is its node)."""
    nodes: set[str] = set()
    for status in pod.get("status", {}).get("resourceClaimStatuses") or []:
        claim = kube.get(kubeapi.RESOURCE_CLAIMS.path(namespace, status["resourceClaimName"]))
        allocation = claim.get("status", {}).get("allocation") or {}
        nodes |= {r["pool"] for r in allocation.get("devices", {}).get("results") or []}
    return nodes


def running_with_claims(kube: KubeClient, namespace: str, name: str, pods: int) -> Any:
    """The Job's pods once each is bound and its claims allocated: (pod node, claim nodes)."""
    found = []
    for pod in pods_of(kube, namespace, name):
        node = pod["spec"].get("nodeName")
        nodes = claim_nodes(kube, namespace, pod) if node else set()
        if not node or not nodes:
            return None
        found.append((node, nodes))
    return found if len(found) == pods else None


def test_a_gang_claiming_gpus_is_held_counted_and_allocated_on_its_planned_nodes(
    dkube: KubeClient, dmuster: MusterProcess, dns: str, queues: Callable[..., str]
) -> None:
    queue = queues(nominal={GPU: "16"})
    path = jobs_path(dns)
    created = create_through_webhook(dkube, path, gpu_job("first", queue, 2, runtime="40s"))
    assert created["spec"]["suspend"] is True  # held at create, as any gang
    wait_for(lambda: admitted(job(dkube, dns, "first")), timeout=60, what="the first admitted")
    # The queue's 16 GPUs are the first gang's: the second waits on device quota.
    create_through_webhook(dkube, path, gpu_job("second", queue, 1))
    url = f"{dmuster.status_url}/v1/gangs/{dns}/second"
    status = wait_for(
        lambda: pending_reason(url, "QuotaExhausted"), timeout=60, what="QuotaExhausted"
    )
    assert GPU in status["reason"]["message"], status
    assert not admitted(job(dkube, dns, "second"))
    # kube-scheduler allocated each pod's 8 devices on the node muster planned for it.
    placed = wait_for(
        lambda: running_with_claims(dkube, dns, "first", 2), timeout=60, what="claims allocated"
    )
    planned = decode_placement(job(dkube, dns, "first")["metadata"]["annotations"][PLACEMENT], "")
    planned_nodes = set(next(iter(planned.values())))
    assert {node for node, _ in placed} == planned_nodes and len(planned_nodes) == 2
    assert all(nodes == {node} for node, nodes in placed), placed
    # Once the first ends, its devices and quota go to the second.
    wait_for(lambda: finished(job(dkube, dns, "first")), timeout=120, what="the first finished")
    wait_for(lambda: admitted(job(dkube, dns, "second")), timeout=60, what="the second admitted")


def foreign_pod(name: str) -> dict[str, Any]:
    """A pod muster does not manage (no queue) claiming 8 GPUs: kube-scheduler's alone."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"muster.dev/runtime": "10m"}},
        "spec": {
            "tolerations": [KWOK_TOLERATION],
            "resourceClaims": [{"name": "c0", "resourceClaimTemplateName": "gpus"}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "c0"}]},
                }
            ],
        },
    }


def test_a_gang_is_admitted_whole_only_where_the_devices_are_free(
    dkube: KubeClient, dmuster: MusterProcess, dns: str, queues: Callable[..., str]
) -> None:
    queue = queues()
    dkube.create(kubeapi.PODS.path(dns), foreign_pod("other"))

    def taken() -> str | None:
        pod = dkube.get(kubeapi.PODS.path(dns, "other"))
        node = pod["spec"].get("nodeName")
        return node if node and claim_nodes(dkube, dns, pod) == {node} else None

    busy = wait_for(taken, timeout=60, what="the other workload's claim allocated")
    path = jobs_path(dns)
    # Each pod takes a node's 8 GPUs: three fit, on the nodes the other workload left free.
    create_through_webhook(dkube, path, gpu_job("three", queue, NODES - 1, runtime="30s"))
    wait_for(lambda: admitted(job(dkube, dns, "three")), timeout=60, what="three admitted")
    planned = decode_placement(job(dkube, dns, "three")["metadata"]["annotations"][PLACEMENT], "")
    assert busy not in next(iter(planned.values()))
    placed = wait_for(
        lambda: running_with_claims(dkube, dns, "three", NODES - 1),
        timeout=60,
        what="claims allocated",
    )
    assert all(nodes == {node} and node != busy for node, nodes in placed), placed
    # No node has 8 GPUs free now: a gang of one such pod waits, though cpu is plenty.
    create_through_webhook(dkube, path, gpu_job("one", queue, 1))
    url = f"{dmuster.status_url}/v1/gangs/{dns}/one"
    status = wait_for(lambda: pending_reason(url, "NoFit"), timeout=60, what="NoFit")
    assert f"8 {GPU}" in status["reason"]["message"], status
    assert not admitted(job(dkube, dns, "one"))


def test_a_gang_that_can_never_get_its_devices_is_reported_at_create(
    dkube: KubeClient, dmuster: MusterProcess, dns: str, queues: Callable[..., str]
) -> None:
    queue = queues(neverFits="Reject")
    path = jobs_path(dns)
    # 5 pods of 8 GPUs: more than the 4 nodes' 32 (retried until the webhook knows the queue).
    message = wait_for(
        lambda: _refusal(dkube, path, gpu_job("five", queue, NODES + 1), "never fits"),
        timeout=30,
        what="the never-fits refusal",
    )
    assert GPU in message, message
    # 4 pods of 8 GPUs fit the cluster's devices exactly: allowed, and no warning.
    dkube.request("POST", path, gpu_job("four", queue, NODES), params={"dryRun": "All"})
    assert not dkube.last_warnings, dkube.last_warnings
    # A claim muster cannot count is refused naming the field; a missing template is allowed
    # with a warning, and waits for it.
    every = claim_template("every", {"gpu.muster.dev": 1})
    request = every["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    request["allocationMode"] = "All"
    request.pop("count")
    dkube.create(kubeapi.RESOURCE_CLAIM_TEMPLATES.path(dns), every)
    body = builders.job("all", queue, suspend=None, claim_templates=["every"])
    message = wait_for(
        lambda: _refusal(dkube, path, body, "allocationMode"), timeout=30, what="the refusal"
    )
    assert "ResourceClaimTemplate" in message and "allocationMode" in message, message
    create_through_webhook(
        dkube, path, builders.job("later", queue, suspend=None, claim_templates=["later"])
    )
    assert any("not found" in w for w in dkube.last_warnings), dkube.last_warnings
    url = f"{dmuster.status_url}/v1/gangs/{dns}/later"
    status = wait_for(lambda: pending_reason(url), timeout=60, what="a reason to wait")
    assert "ResourceClaimTemplate" in status["reason"]["message"], status
    dkube.create(
        kubeapi.RESOURCE_CLAIM_TEMPLATES.path(dns), claim_template("later", {"gpu.muster.dev": 1})
    )
    wait_for(lambda: admitted(job(dkube, dns, "later")), timeout=60, what="later admitted")


def _refusal(kube: KubeClient, path: str, body: dict[str, Any], words: str) -> str | None:
    """The webhook's refusal of `body` (a dry run) once it says `words` (its view of the queue
    and the templates may lag a moment behind the apiserver)."""
    try:
        kube.request("POST", path, body, params={"dryRun": "All"})
    except ApiError as exc:
        if exc.status == 400 and words in exc.message:
            return exc.message
    return None
