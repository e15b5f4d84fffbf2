"""The controller's DRA objects (admission/devicebook.py) and the webhook's (webhook/devices.py):
nodes get their devices, gangs their claims' devices, quota and fit count them, a missing
template keeps a gang waiting until it comes, claims no gang accounts for hold devices."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from admission.cache import Cache
from policies import plan
from policies.devices import DeviceMapping
from policies.devices.objects import POD_CLAIM_NAME
from policies.kinds.reading import format_admitted
from policies.resources import Resources
from policies.vocabulary import GANG, QUEUE, SUBMITTED
from simulator.controlplane.dra import DeviceShape, claim_template, device_class, node_slice
from tests import builders
from webhook.configuration import JOB_PATH
from webhook.decision import WebhookSettings
from webhook.devices import WebhookDevices
from webhook.handlers import set_queue
from webhook.review import WebhookState, review_response

GPU = "muster.dev/gpu"
MAPPING = DeviceMapping({"gpu.muster.dev": GPU})
STAMP = "2026-01-02T03:04:05.000000001Z/000000000001"


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }


def gang_job(
    name: str, pods: int, *, admitted: float | None = None, rv: int = 10
) -> dict[str, Any]:
    """A stored gang of queue q: `pods` pods of 1 cpu, each claiming from template `gpus`."""
    annotations = {QUEUE: "q", SUBMITTED: STAMP}
    if admitted is not None:
        annotations["muster.dev/admitted"] = format_admitted(admitted, pods)
    return builders.job(
        name,
        "q",
        namespace="ns",
        pods=pods,
        suspend=admitted is None,
        runtime=None,
        tolerations=(),
        annotations=annotations,
        gang_label=True,
        resource_version=rv,
        claim_templates=["gpus"],
    )


def cache_with_gpus(nodes: int = 2, gpus: int = 8, quota: str | None = None) -> Cache:
    cache = Cache(devices=MAPPING)
    spec: dict[str, Any] = {"sizeRatio": None}
    if quota is not None:
        spec["nominal"] = {GPU: quota}
    cache.apply_queue("ADDED", {"metadata": {"name": "q"}, "spec": spec})
    cache.apply_device("deviceclass", "ADDED", device_class("gpu.muster.dev"))
    for i in range(nodes):
        cache.apply_node("ADDED", node(f"n{i}"))
        cache.apply_device("resourceslice", "ADDED", node_slice(f"n{i}", DeviceShape(gpus)))
    return cache


def template(name: str = "gpus", count: int = 4) -> dict[str, Any]:
    body = claim_template(name, {"gpu.muster.dev": count})
    body["metadata"]["namespace"] = "ns"
    return body


def test_nodes_offer_their_devices_as_the_mapped_resource() -> None:
    cache = cache_with_gpus()
    assert cache.nodes["n0"].allocatable[GPU] == 8
    # A slice seen before its node still gives the node its devices.
    cache.apply_device("resourceslice", "ADDED", node_slice("late", DeviceShape(2)))
    cache.apply_node("ADDED", node("late"))
    assert cache.nodes["late"].allocatable[GPU] == 2
    cache.apply_device("resourceslice", "DELETED", node_slice("late", DeviceShape(2)))
    assert GPU not in cache.nodes["late"].allocatable


def test_a_gang_waits_for_its_template_then_counts_its_devices() -> None:
    cache = cache_with_gpus()
    cache.apply_job("ADDED", gang_job("a", 2))
    record = cache.jobs["ns/a"]
    assert record.parse_error is not None
    assert "ResourceClaimTemplate ns/gpus not found" in record.parse_error
    assert not plan(cache.snapshot(0.0)).admitted
    cache.apply_device("resourceclaimtemplate", "ADDED", template(count=4))
    record = cache.jobs["ns/a"]
    assert record.parse_error is None
    assert record.gang.pod_requests == Resources({"cpu": 1000, GPU: 4})
    decisions = plan(cache.snapshot(0.0))
    assert [a.gang_id for a in decisions.admitted] == ["ns/a"]


def test_device_quota_and_node_devices_hold_back_a_gang() -> None:
    cache = cache_with_gpus(nodes=2, gpus=8, quota="16")
    cache.apply_device("resourceclaimtemplate", "ADDED", template(count=8))
    cache.apply_job("ADDED", gang_job("a", 2, admitted=1.0))
    cache.apply_pod("ADDED", pod("a-0", "n0", "a"))
    cache.apply_pod("ADDED", pod("a-1", "n1", "a"))
    cache.apply_job("ADDED", gang_job("b", 1))
    decisions = plan(cache.snapshot(10.0))
    assert not decisions.admitted
    assert decisions.pending["ns/b"].code == "QuotaExhausted"
    # More quota: now the nodes' devices are what is short.
    spec = {"nominal": {GPU: "64"}, "sizeRatio": None}
    cache.apply_queue("MODIFIED", {"metadata": {"name": "q"}, "spec": spec})
    decisions = plan(cache.snapshot(10.0))
    assert not decisions.admitted
    assert decisions.pending["ns/b"].code == "NoFit"
    assert GPU in decisions.pending["ns/b"].message


def claim(name: str, node_name: str, devices: list[str], owner: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "resourceVersion": "5"}
    if owner:
        meta["annotations"] = {POD_CLAIM_NAME: "c0"}
        meta["ownerReferences"] = [{"kind": "Pod", "uid": owner, "controller": True}]
    results = [
        {"request": "r0", "driver": "gpu.muster.dev", "pool": node_name, "device": d}
        for d in devices
    ]
    return {
        "metadata": meta,
        "spec": template()["spec"]["spec"],
        "status": {"allocation": {"devices": {"results": results}}},
    }


def pod(uid: str, node_name: str, gang: str | None) -> dict[str, Any]:
    labels = {GANG: gang} if gang else {}
    return {
        "metadata": {
            "name": uid,
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": "7",
            "labels": labels,
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }


def test_claims_no_gang_accounts_for_hold_their_devices() -> None:
    cache = cache_with_gpus(nodes=1)
    cache.apply_pod("ADDED", pod("other", "n0", None))
    cache.apply_device("resourceclaim", "ADDED", claim("theirs", "n0", ["gpu-0", "gpu-1"], "other"))
    cache.apply_device("resourceclaim", "ADDED", claim("shared", "n0", ["gpu-2"]))
    cache.apply_pod("ADDED", pod("mine", "n0", "a"))
    cache.apply_device("resourceclaim", "ADDED", claim("mine", "n0", ["gpu-3"], "mine"))
    assert cache.snapshot(0.0).nodes[0].used[GPU] == 3
    # The gang's pod goes: its claim, still allocated, holds its device until it is freed.
    cache.apply_pod("DELETED", pod("mine", "n0", "a"))
    assert cache.snapshot(0.0).nodes[0].used[GPU] == 4
    gone = claim("mine", "n0", [], "mine")
    gone["metadata"]["resourceVersion"] = "6"
    cache.apply_device("resourceclaim", "DELETED", gone)
    assert cache.snapshot(0.0).nodes[0].used[GPU] == 3


def test_without_a_mapping_claims_are_not_counted() -> None:
    cache = Cache()
    cache.apply_queue("ADDED", {"metadata": {"name": "q"}, "spec": {}})
    cache.apply_job("ADDED", gang_job("a", 2))
    record = cache.jobs["ns/a"]
    assert record.parse_error is None and record.devices is None
    assert record.gang.pod_requests == Resources({"cpu": 1000})


# -- the webhook ---------------------------------------------------------------------------


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": obj},
    }


def webhook_state(gpus_per_node: int = 8, nodes: int = 2) -> WebhookState:
    state = WebhookState(queues={"q"})
    set_queue(state, {"metadata": {"name": "q"}, "spec": {"neverFits": "Reject"}})
    state.never_fits.relist_nodes([node(f"n{i}") for i in range(nodes)])
    devices = state.devices = WebhookDevices(MAPPING, state.never_fits)
    devices.relisted("deviceclasses")([device_class("gpu.muster.dev")], 1)
    slices = [node_slice(f"n{i}", DeviceShape(gpus_per_node)) for i in range(nodes)]
    devices.relisted("resourceslices")(slices, 1)
    return state


def answer(state: WebhookState, obj: dict[str, Any]) -> dict[str, Any]:
    response: dict[str, Any] = review_response(
        review(obj),
        path=JOB_PATH,
        state=state,
        settings=WebhookSettings(),
        stamp=lambda: STAMP,
    )["response"]
    return response


def created(pods: int, **fields: Any) -> dict[str, Any]:
    return builders.job("a", "q", namespace="ns", pods=pods, suspend=None, tolerations=(), **fields)


def test_the_webhook_refuses_a_gang_that_can_never_get_its_devices() -> None:
    state = webhook_state(gpus_per_node=8, nodes=2)
    assert state.devices is not None
    state.devices.observe("resourceclaimtemplates")("ADDED", template(count=8))
    fits = answer(state, created(2, claim_templates=["gpus"]))
    assert fits["allowed"], fits
    never = answer(state, created(3, claim_templates=["gpus"]))
    assert not never["allowed"]
    assert GPU in never["status"]["message"] and "never fits" in never["status"]["message"]


def test_the_webhook_refuses_claims_it_cannot_count_and_warns_of_a_missing_template() -> None:
    state = webhook_state()
    assert state.devices is not None
    missing = answer(state, created(1, claim_templates=["gpus"]))
    assert missing["allowed"]
    assert any("ResourceClaimTemplate ns/gpus not found" in w for w in missing["warnings"])
    every = template()
    every["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    state.devices.observe("resourceclaimtemplates")("ADDED", every)
    refused = answer(state, created(1, claim_templates=["gpus"]))
    assert not refused["allowed"]
    message = refused["status"]["message"]
    assert "ResourceClaimTemplate ns/gpus: spec.spec.devices.requests[0].exactly" in message
    assert "allocationMode" in message


@pytest.mark.parametrize("mapped", [True, False])
def test_the_webhook_patch_is_the_same_with_or_without_claims(mapped: bool) -> None:
    state = webhook_state()
    if not mapped:
        state.devices = None
    result = answer(state, created(1))
    assert result["allowed"]
    ops = json.loads(base64.b64decode(result["patch"]))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops


def test_a_gang_mixing_extended_resources_and_claims_is_counted_once_for_each() -> None:
    cache = cache_with_gpus(nodes=1, gpus=8, quota="8")
    with_plugin = node("n0")
    with_plugin["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    with_plugin["metadata"]["resourceVersion"] = "2"
    cache.apply_node("MODIFIED", with_plugin)
    assert cache.nodes["n0"].allocatable[GPU] == 8
    assert cache.nodes["n0"].allocatable["nvidia.com/gpu"] == 4
    cache.apply_device("resourceclaimtemplate", "ADDED", template(count=8))
    mixed = gang_job("mixed", 1)
    container = mixed["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["nvidia.com/gpu"] = "4"
    cache.apply_job("ADDED", mixed)
    gang = cache.jobs["ns/mixed"].gang
    assert gang.demand(1) == Resources({"cpu": 1000, "nvidia.com/gpu": 4, GPU: 8})
    decisions = plan(cache.snapshot(0.0))
    assert [a.gang_id for a in decisions.admitted] == ["ns/mixed"]
    # With the queue's device quota at 4, the same gang waits on the devices alone.
    spec = {"nominal": {GPU: "4", "nvidia.com/gpu": "4"}, "sizeRatio": None}
    cache.apply_queue("MODIFIED", {"metadata": {"name": "q", "resourceVersion": "9"}, "spec": spec})
    decisions = plan(cache.snapshot(0.0))
    assert not decisions.admitted
    assert GPU in decisions.reason("ns/mixed").message  # type: ignore[union-attr]
