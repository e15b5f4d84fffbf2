"""DRA devices in traces (simulator/tracedevices.py): node groups carry devices, jobs claim them,
and a trace with GPUs as devices gives the same in-process decisions as the same trace with GPUs
as extended resources (the shipped gpu-mixed and gpu-mixed-dra)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.resources import Resources
from simulator.engine import simulate
from simulator.kwok_devices import flags, namespace_templates, pod_claims, refuse
from simulator.kwok_objects import gang_object, node_bodies
from simulator.kwok_settings import KwokError
from simulator.records import EngineConfig
from simulator.trace import TraceError, expand, from_dict, load
from simulator.tracedevices import claim_templates, device_objects, without_devices

GPU = "muster.dev/gpu"


def document(**job: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "cluster": {
            "deviceClasses": [{"name": "gpu.muster.dev", "resource": GPU}],
            "nodes": [
                {
                    "name": "gpu",
                    "count": 2,
                    "allocatable": {"cpu": "8"},
                    "devices": [{"count": 4, "attributes": {"model": "A100"}}],
                }
            ],
        },
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "j",
                "queue": "q",
                "size": 2,
                "podRequests": {"cpu": "1"},
                "podDevices": {"gpu.muster.dev": 4},
                "runtime": "10m",
                **job,
            }
        ],
    }


def test_node_devices_and_pod_devices_are_the_resource_their_class_counts_as() -> None:
    trace = from_dict(document())
    assert trace.nodes()[0].allocatable == Resources({"cpu": 8000, GPU: 4})
    assert trace.jobs[0].pod_requests == Resources({"cpu": 1000, GPU: 4})
    assert trace.devices.mapping.resource("gpu.muster.dev") == GPU
    # What the kwok engine creates instead: the class, each node's slice, the claim template.
    objects = device_objects(trace.devices, trace.node_groups, {0: ["gpu-0", "gpu-1"]})
    assert [o["kind"] for o in objects] == ["DeviceClass", "ResourceSlice", "ResourceSlice"]
    assert len(objects[1]["spec"]["devices"]) == 4
    assert without_devices(trace.jobs[0].pod_requests, trace.devices) == Resources(cpu=1000)
    (template,) = claim_templates(trace.jobs[0])
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request == {"deviceClassName": "gpu.muster.dev", "count": 4}


def test_a_class_attribute_the_devices_lack_admits_none_of_them() -> None:
    doc = document()
    doc["cluster"]["deviceClasses"][0]["attributes"] = {"model": "H100"}
    trace = from_dict(doc)
    assert GPU not in trace.nodes()[0].allocatable


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"podDevices": {"nic.muster.dev": 1}}, "jobs[0] (j).podDevices.nic.muster.dev: no such"),
        ({"podDevices": {"gpu.muster.dev": 0}}, "jobs[0] (j).podDevices.gpu.muster.dev"),
        ({"podRequests": {"cpu": "1", GPU: "1"}}, f"jobs[0] (j).podRequests.{GPU}: the resource"),
    ],
)
def test_bad_device_fields_name_the_field(change: dict[str, Any], words: str) -> None:
    with pytest.raises(TraceError) as err:
        from_dict(document(**change))
    assert words in str(err.value)


def test_pod_sets_claim_devices_of_their_own() -> None:
    doc = document()
    job = doc["jobs"][0]
    del job["podRequests"], job["podDevices"]
    job["size"] = 3
    job["kind"] = "JobSet"
    job["podSets"] = [
        {"name": "launcher", "count": 1, "podRequests": {"cpu": "1"}},
        {"name": "worker", "podRequests": {"cpu": "1"}, "podDevices": {"gpu.muster.dev": 2}},
    ]
    trace = from_dict(doc)
    group = trace.jobs[0]
    assert group.set_name == "worker" and group.pod_requests[GPU] == 2
    assert group.others[0].requests == Resources(cpu=1000)
    assert [t["metadata"]["name"] for t in claim_templates(group)] == ["j-worker-devices"]


def _decisions(name: str) -> list[tuple[str, float | None, float | None, tuple[Any, ...]]]:
    result = simulate(load(name), EngineConfig(admission="muster", seed=0, check=True))
    return [
        (g.gang.id, g.first_admitted, g.finished, tuple(sorted(g.bound.items())))
        for g in sorted(result.gangs, key=lambda g: g.gang.id)
    ]


def test_gpus_as_devices_give_the_same_decisions_as_gpus_as_extended_resources() -> None:
    extended = load("gpu-mixed")
    devices = load("gpu-mixed-dra")
    # The same cluster and gangs but for the resource's name.
    gpu_nodes = [n for n in devices.nodes() if GPU in n.allocatable]
    assert len(gpu_nodes) == 8 and all(n.allocatable[GPU] == 8 for n in gpu_nodes)
    assert sum(n.allocatable["nvidia.com/gpu"] for n in extended.nodes()) == 64
    assert _decisions("gpu-mixed-dra") == _decisions("gpu-mixed")


def test_the_kwok_engine_gives_devices_as_slices_and_claims_not_as_resources() -> None:
    trace = load("gpu-mixed-dra")
    plans = node_bodies(trace, "run")
    gpu_nodes = [p for p in plans if p.trace_name.startswith("gpu-")]
    assert all(GPU not in p.body["status"]["allocatable"] for p in plans)
    assert len(gpu_nodes) == 8
    session_objects = device_objects(
        trace.devices, trace.node_groups, {1: [p.name for p in gpu_nodes]}
    )
    slices = [o for o in session_objects if o["kind"] == "ResourceSlice"]
    assert sorted(s["spec"]["nodeName"] for s in slices) == sorted(p.name for p in gpu_nodes)
    arrival = next(a for a in expand(trace) if a.group == "llm")
    claims = pod_claims(trace)
    assert set(claims) == {"llm", "finetune"}
    obj = gang_object(
        arrival, namespace="ns", admission="muster", scale=25, run="run", claims=claims["llm"]
    )
    pod = obj.body["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "devices", "resourceClaimTemplateName": "llm-devices"}
    ]
    container = pod["containers"][0]["resources"]
    assert GPU not in container["requests"] and container["claims"] == [{"name": "devices"}]
    templates = namespace_templates(trace, {"default": "replay-ns"})
    assert [(ns, t["metadata"]["name"]) for ns, t in templates] == [
        ("replay-ns", "llm-devices"),
        ("replay-ns", "finetune-devices"),
    ]
    assert flags(trace) == ("--device-class", f"gpu.muster.dev={GPU}")


def test_the_kwok_engine_refuses_devices_on_pods_an_operator_makes() -> None:
    doc = document(kind="MiniCluster")
    with pytest.raises(KwokError, match="made by its operator"):
        refuse(from_dict(doc))
    refuse(from_dict(document()))  # a Job's pods claim devices
