"""DRA devices as muster counts them (policies/devices): the DeviceClass -> resource mapping,
the CEL selectors it reads, ResourceSlices, what claims request (and what is refused), the
catalog of nodes' capacity and allocated devices, and a gang's devices."""

from __future__ import annotations

from typing import Any

import pytest

from policies.devices import DeviceCatalog, DeviceError, DeviceMapping, DeviceMissing, with_devices
from policies.devices.claims import ClaimRef, claim_devices, claim_refs
from policies.devices.objects import POD_CLAIM_NAME, read_allocation, read_device_class, read_slice
from policies.devices.selectors import SelectorError, Version, parse_selector
from policies.kinds import JOB
from policies.kinds.reading import gang_of, read_gang
from policies.model import PolicyError
from policies.resources import Resources
from simulator.controlplane.dra import DeviceShape, claim_template, device_class, node_slice
from tests import builders

GPU = "muster.dev/gpu"
MAPPING = DeviceMapping({"gpu.muster.dev": GPU})


def catalog(
    nodes: dict[str, int] | None = None,
    *,
    mapping: DeviceMapping = MAPPING,
    attributes: dict[str, Any] | None = None,
) -> DeviceCatalog:
    """A catalog with the fake driver's class and `nodes`' devices (8 each by default)."""
    found = DeviceCatalog(mapping)
    found.set_class("gpu.muster.dev", device_class("gpu.muster.dev"))
    for node, count in (nodes or {"n0": 8}).items():
        shape = DeviceShape(count, attributes=attributes or {"model": "H100"})
        found.set_slice(f"{node}-slice", node_slice(node, shape))
    return found


# -- the mapping ---------------------------------------------------------------------------


def test_mapping_reads_class_equals_resource() -> None:
    mapping = DeviceMapping.parse(["gpu.example.com=example.com/gpu", "nic.example.com=nic"])
    assert mapping.resource("gpu.example.com") == "example.com/gpu"
    assert mapping.resource("other") is None
    assert mapping.flags() == [
        "--device-class",
        "gpu.example.com=example.com/gpu",
        "--device-class",
        "nic.example.com=nic",
    ]
    assert DeviceMapping.parse(mapping.flags()[1::2]) == mapping


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("gpu.example.com", "expected CLASS=RESOURCE"),
        ("GPU=example.com/gpu", "is not a DeviceClass name"),
        ("gpu=cpu", "is not a resource name"),
        ("gpu=a/b/c", "is not a resource name"),
        ("gpu=example.com/" + "x" * 64, "is not a resource name"),
    ],
)
def test_mapping_refuses_bad_entries(entry: str, words: str) -> None:
    with pytest.raises(PolicyError, match=words) as err:
        DeviceMapping.parse([entry])
    assert "--device-class" in str(err.value)


# -- selectors -----------------------------------------------------------------------------

H100: dict[tuple[str, str], str | int | bool | Version] = {
    ("gpu.muster.dev", "model"): "H100",
    ("gpu.muster.dev", "memory"): 80,
}


@pytest.mark.parametrize(
    ("expression", "admits"),
    [
        ('device.driver == "gpu.muster.dev"', True),
        ("device.driver == 'other'", False),
        ('device.attributes["gpu.muster.dev"].model == "H100"', True),
        ('device.attributes["gpu.muster.dev"]["model"] == "A100"', False),
        ('"H100" == device.attributes["gpu.muster.dev"].model', True),
        ('device.attributes["gpu.muster.dev"].memory == 80', True),
        ('device.attributes["gpu.muster.dev"].memory == "80"', False),  # like types only
        ('device.attributes["gpu.muster.dev"].missing == true', False),
        (
            '(device.driver == "gpu.muster.dev") && '
            'device.attributes["gpu.muster.dev"].model == "H100"',
            True,
        ),
    ],
)
def test_selectors_muster_reads(expression: str, admits: bool) -> None:
    assert parse_selector(expression).admits("gpu.muster.dev", H100) is admits


@pytest.mark.parametrize(
    "expression",
    [
        'device.driver != "gpu.muster.dev"',
        'device.driver == "a" || device.driver == "b"',
        'device.capacity["gpu.muster.dev"].memory.compareTo(quantity("40Gi")) >= 0',
        "device.attributes['x'].y",
        'device.driver == "a" &&',
        "",
        '"a" == "a"',
    ],
)
def test_selectors_muster_refuses(expression: str) -> None:
    with pytest.raises(SelectorError, match="muster reads only conjunctions"):
        parse_selector(expression)


def test_a_version_attribute_equals_no_literal() -> None:
    attributes = {("d", "v"): Version("1.0.0")}
    assert not parse_selector('device.attributes["d"].v == "1.0.0"').admits("d", attributes)


def test_device_class_with_a_selector_muster_does_not_read_has_a_problem() -> None:
    body = {
        "metadata": {"name": "big"},
        "spec": {"selectors": [{"cel": {"expression": "device.attributes['d'].mem > 4"}}]},
    }
    rule = read_device_class(body)
    assert rule.problem is not None
    assert rule.problem.startswith("DeviceClass big: spec.selectors[0].cel.expression:")
    assert "muster reads only" in rule.problem


# -- slices and allocations ------------------------------------------------------------------


def test_slice_devices_are_on_the_slices_node_with_their_attributes() -> None:
    body = node_slice("n1", DeviceShape(2, attributes={"model": "H100", "memory": 80}))
    found = read_slice(body)
    assert [d.name for d in found.devices] == ["gpu-0", "gpu-1"]
    assert {d.node for d in found.devices} == {"n1"}
    assert found.devices[0].attributes == H100


def test_a_newer_pool_generation_replaces_the_older() -> None:
    found = catalog({"n0": 8})
    assert found.capacity("n0") == Resources({GPU: 8})
    newer = node_slice("n0", DeviceShape(4))
    newer["metadata"]["name"] = "n0-next"
    newer["spec"]["pool"]["generation"] = 2
    assert found.set_slice("n0-next", newer) == {"n0"}
    assert found.capacity("n0") == Resources({GPU: 4})
    found.set_slice("n0-next", None)
    assert found.capacity("n0") == Resources({GPU: 8})


def test_allocation_reads_devices_and_the_pod_it_was_made_for() -> None:
    claim = allocated_claim("c", ["gpu-0", "gpu-1"], owner="pod-uid")
    allocation = read_allocation(claim)
    assert allocation is not None
    assert allocation.devices == (
        ("gpu.muster.dev", "n0", "gpu-0"),
        ("gpu.muster.dev", "n0", "gpu-1"),
    )
    assert allocation.owner_pod == "pod-uid"
    assert read_allocation({"metadata": {"name": "c"}, "status": {}}) is None


def allocated_claim(
    name: str, devices: list[str], *, node: str = "n0", owner: str = ""
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if owner:
        meta["annotations"] = {POD_CLAIM_NAME: "c0"}
        meta["ownerReferences"] = [{"kind": "Pod", "uid": owner, "controller": True}]
    results = [
        {"request": "r0", "driver": "gpu.muster.dev", "pool": node, "device": device}
        for device in devices
    ]
    return {
        "metadata": meta,
        "spec": template_spec({"gpu.muster.dev": len(devices)}),
        "status": {"allocation": {"devices": {"results": results}}},
    }


def template_spec(devices: dict[str, int]) -> dict[str, Any]:
    spec: dict[str, Any] = claim_template("t", devices)["spec"]["spec"]
    return spec


# -- the catalog: capacity and allocated devices -------------------------------------------


def test_capacity_counts_devices_the_mapped_classes_admit() -> None:
    mapping = DeviceMapping({"h100": GPU, "a100": GPU, "any": "muster.dev/accelerator"})
    found = DeviceCatalog(mapping)
    found.set_class("h100", device_class("h100", attributes={"model": "H100"}))
    found.set_class("a100", device_class("a100", attributes={"model": "A100"}))
    found.set_class("any", device_class("any"))
    found.set_slice("a", node_slice("n0", DeviceShape(8, attributes={"model": "H100"})))
    found.set_slice("b", node_slice("n1", DeviceShape(4, attributes={"model": "A100"})))
    other = node_slice("n1", DeviceShape(2, driver="other.dev"))
    found.set_slice("c", other)
    assert found.capacities() == {
        "n0": Resources({GPU: 8, "muster.dev/accelerator": 8}),
        "n1": Resources({GPU: 4, "muster.dev/accelerator": 4}),
    }
    # A class muster cannot read counts nothing, and says why.
    found.set_class("h100", {"metadata": {"name": "h100"}, "spec": {"selectors": [{}]}})
    assert found.capacity("n0") == Resources({"muster.dev/accelerator": 8})
    assert "missing" in str(found.class_problem("h100"))
    assert isinstance(found.class_problem("l40"), DeviceMissing)
    assert "not found" in str(found.class_problem("l40"))


def test_usage_on_leaves_out_claims_of_pods_counted_already() -> None:
    found = catalog({"n0": 8})
    found.set_claim("team-a", "mine", allocated_claim("mine", ["gpu-0", "gpu-1"], owner="p1"))
    found.set_claim("team-a", "theirs", allocated_claim("theirs", ["gpu-2"], owner="p2"))
    found.set_claim("team-a", "shared", allocated_claim("shared", ["gpu-3"]))
    assert found.usage_on("n0", lambda uid: uid == "p1") == Resources({GPU: 2})
    assert found.claims_owned_by("p1") == {("team-a", "mine")}
    assert found.claim_nodes(("team-a", "mine")) == {"n0"}
    assert found.set_claim("team-a", "mine", None) == {"n0"}
    assert found.usage_on("n0", lambda uid: False) == Resources({GPU: 2})


def test_a_claim_seen_before_its_slice_still_holds_its_devices() -> None:
    found = DeviceCatalog(MAPPING)
    found.set_claim("team-a", "early", allocated_claim("early", ["gpu-0"]))
    found.set_class("gpu.muster.dev", device_class("gpu.muster.dev"))
    found.set_slice("s", node_slice("n0", DeviceShape(8)))
    assert found.usage_on("n0", lambda uid: False) == Resources({GPU: 1})


# -- what claims request -------------------------------------------------------------------


def test_claim_devices_counts_exact_counts_of_mapped_classes() -> None:
    found = catalog()
    spec = template_spec({"gpu.muster.dev": 4, "unmapped.example.com": 2})
    assert claim_devices(spec, "t", MAPPING, found.class_problem) == Resources({GPU: 4})
    admin = {
        "devices": {
            "requests": [{"exactly": {"deviceClassName": "gpu.muster.dev", "adminAccess": True}}]
        }
    }
    assert claim_devices(admin, "t", MAPPING, found.class_problem) == Resources()
    default = {"devices": {"requests": [{"exactly": {"deviceClassName": "gpu.muster.dev"}}]}}
    assert claim_devices(default, "t", MAPPING, found.class_problem) == Resources({GPU: 1})


def _exactly(**fields: Any) -> dict[str, Any]:
    return {"devices": {"requests": [{"exactly": {"deviceClassName": "gpu.muster.dev", **fields}}]}}


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (_exactly(allocationMode="All"), "exactly.allocationMode", "ask for a count"),
        (
            _exactly(selectors=[{"cel": {"expression": "true"}}]),
            "exactly.selectors",
            "make a DeviceClass with these selectors",
        ),
        (_exactly(count=0), "exactly.count", "at least 1"),
        (_exactly(capacity={"requests": {"memory": "1Gi"}}), "exactly.capacity", "whole"),
        (
            {**_exactly(), "devices": {**_exactly()["devices"], "constraints": [{}]}},
            "devices.constraints",
            "constraints",
        ),
        (
            {
                "devices": {
                    "requests": [
                        {
                            "firstAvailable": [
                                {"deviceClassName": "gpu.muster.dev", "count": 1},
                                {"deviceClassName": "gpu.muster.dev", "count": 2},
                            ]
                        }
                    ]
                }
            },
            "firstAvailable",
            "the same count",
        ),
    ],
)
def test_claim_devices_refuses_what_it_cannot_count(
    spec: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(DeviceError, match=words) as err:
        claim_devices(
            spec, "ResourceClaimTemplate a/t: spec.spec", MAPPING, catalog().class_problem
        )
    assert str(err.value).startswith("ResourceClaimTemplate a/t: spec.spec.")
    assert field in str(err.value)


def test_first_available_alternatives_of_one_resource_and_count_are_counted() -> None:
    spec = {
        "devices": {
            "requests": [
                {
                    "firstAvailable": [
                        {"deviceClassName": "gpu.muster.dev", "count": 2},
                        {"deviceClassName": "gpu.muster.dev", "count": 2},
                    ]
                }
            ]
        }
    }
    assert claim_devices(spec, "t", MAPPING, catalog().class_problem) == Resources({GPU: 2})


def test_claims_of_an_unmapped_class_are_not_counted_nor_refused() -> None:
    spec = {
        "devices": {
            "requests": [
                {"exactly": {"deviceClassName": "nic.example.com", "allocationMode": "All"}}
            ],
            "constraints": [{"matchAttribute": "x"}],
        }
    }
    assert claim_devices(spec, "t", MAPPING, catalog().class_problem) == Resources()


def test_a_missing_template_is_a_reason_to_wait() -> None:
    with pytest.raises(DeviceError, match="ResourceClaimTemplate team-a/gpus not found"):
        catalog().template_devices("team-a", "gpus")


# -- a gang's devices ------------------------------------------------------------------------


def gpu_job(pods: int = 2, **fields: Any) -> dict[str, Any]:
    return builders.job(
        "train",
        "prod",
        namespace="team-a",
        pods=pods,
        gang_label=True,
        tolerations=(),
        **fields,
    )


def test_a_gang_claiming_through_a_template_asks_each_pod_for_the_devices() -> None:
    found = catalog()
    found.set_template("team-a", "gpus", claim_template("gpus", {"gpu.muster.dev": 4}))
    body = gpu_job(claim_templates=["gpus"])
    assert claim_refs(body["spec"]["template"]["spec"]) == (ClaimRef("c0", template="gpus"),)
    gang = gang_of(JOB, body, found)
    assert gang.pod_requests == Resources({"cpu": 1000, GPU: 4})
    assert gang.demand(2) == Resources({"cpu": 2000, GPU: 8})
    # Without the mapping (no catalog) the claims are not counted, as before DRA support.
    assert gang_of(JOB, body).pod_requests == Resources({"cpu": 1000})


def test_a_gang_mixing_extended_resources_and_claims_is_counted_once_for_each() -> None:
    found = catalog()
    found.set_template("team-a", "gpus", claim_template("gpus", {"gpu.muster.dev": 4}))
    body = gpu_job(claim_templates=["gpus"], extended={"nvidia.com/gpu": "2"})
    gang = gang_of(JOB, body, found)
    assert gang.pod_requests == Resources({"cpu": 1000, "nvidia.com/gpu": 2, GPU: 4})
    assert gang.demand(2) == Resources({"cpu": 2000, "nvidia.com/gpu": 4, GPU: 8})


def test_a_shared_claim_is_taken_once_by_the_gang() -> None:
    found = catalog()
    found.set_claim(
        "team-a",
        "pool",
        {"metadata": {"name": "pool"}, "spec": template_spec({"gpu.muster.dev": 2})},
    )
    gang = gang_of(JOB, gpu_job(pods=4, shared_claims=["pool"]), found)
    assert gang.pod_requests == Resources({"cpu": 1000})
    assert gang.shared == Resources({GPU: 2})
    assert gang.demand(4) == Resources({"cpu": 4000, GPU: 2})


def test_a_gang_whose_template_is_missing_waits_with_the_reason() -> None:
    body = gpu_job(claim_templates=["gpus"])
    meta = body["metadata"]
    reading = read_gang(JOB, "team-a", "train", body["spec"], meta["labels"], {})
    assert reading.claims is not None
    gang, problem = with_devices(reading.gang, reading.claims, catalog())
    assert gang == reading.gang
    assert problem is not None and "ResourceClaimTemplate team-a/gpus not found" in problem
