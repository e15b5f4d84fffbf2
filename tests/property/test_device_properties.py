"""DRA devices as muster counts them (policies/devices), for random devices, classes and claims:

- a node's capacity of a resource is the number of its devices some class mapped to it admits
  (brute force over the same devices), whatever order slices and classes come in;
- a selector muster writes as CEL is read back to the same filter;
- what allocated claims hold of a node never exceeds its capacity, and claims of counted pods
  hold nothing;
- a gang with devices is a gang with those requests: quota and node devices are never exceeded
  by a plan."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies import Gang, Node, Queue, QueueTree, Resources, Snapshot, SubmitStamp, plan
from policies.devices import DeviceCatalog, DeviceMapping
from policies.devices.selectors import Clause, DeviceFilter, parse_selector

DRIVERS = ("a.example.com", "b.example.com")
MODELS = ("H100", "A100", "L4")

devices = st.lists(
    st.tuples(
        st.sampled_from(["n0", "n1", "n2"]),
        st.sampled_from(DRIVERS),
        st.sampled_from(MODELS),
        st.integers(0, 2),
    ),
    max_size=24,
)
classes = st.lists(
    st.tuples(
        st.sampled_from(["r/one", "r/two"]),
        st.one_of(st.none(), st.sampled_from(DRIVERS)),
        st.one_of(st.none(), st.sampled_from(MODELS)),
    ),
    max_size=4,
)


def _literal(value: str | int | bool) -> str:
    return json.dumps(value)


def _class_body(name: str, driver: str | None, model: str | None) -> dict[str, Any]:
    clauses = []
    if driver is not None:
        clauses.append(f"device.driver == {_literal(driver)}")
    if model is not None:
        clauses.append(f'device.attributes["{DRIVERS[0]}"].model == {_literal(model)}')
    selectors = [{"cel": {"expression": " && ".join(clauses)}}] if clauses else []
    return {"metadata": {"name": name}, "spec": {"selectors": selectors}}


def _slice(i: int, node: str, driver: str, model: str, rack: int) -> dict[str, Any]:
    device = {
        "name": f"d{i}",
        # The model under the first driver's domain, whatever the device's driver.
        "attributes": {f"{DRIVERS[0]}/model": {"string": model}, "rack": {"int": rack}},
    }
    return {
        "metadata": {"name": f"s{i}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": f"p{i}", "generation": 1},
            "devices": [device],
        },
    }


@settings(max_examples=200, deadline=None)
@given(devices=devices, classes=classes, classes_first=st.booleans())
def test_capacity_is_the_devices_a_mapped_class_admits(
    devices: list[tuple[str, str, str, int]],
    classes: list[tuple[str, str | None, str | None]],
    classes_first: bool,
) -> None:
    mapping = DeviceMapping({f"c{i}": resource for i, (resource, _, _) in enumerate(classes)})
    catalog = DeviceCatalog(mapping)

    def add_classes() -> None:
        for i, (_, driver, model) in enumerate(classes):
            catalog.set_class(f"c{i}", _class_body(f"c{i}", driver, model))

    if classes_first:
        add_classes()
    for i, (node, driver, model, rack) in enumerate(devices):
        catalog.set_slice(f"s{i}", _slice(i, node, driver, model, rack))
    if not classes_first:
        add_classes()
    for node in ("n0", "n1", "n2"):
        expected: dict[str, int] = {}
        for d_node, driver, model, _ in devices:
            if d_node != node:
                continue
            counted = {
                resource
                for resource, c_driver, c_model in classes
                if c_driver in (None, driver) and c_model in (None, model)
            }
            for resource in counted:
                expected[resource] = expected.get(resource, 0) + 1
        assert catalog.capacity(node) == Resources(expected)


clauses = st.lists(
    st.one_of(
        st.builds(lambda d: Clause("", "", d, driver=True), st.sampled_from(DRIVERS)),
        st.builds(
            Clause,
            st.sampled_from(DRIVERS),
            st.sampled_from(["model", "memory", "nvlink"]),
            st.one_of(st.sampled_from(MODELS), st.integers(-5, 5), st.booleans()),
        ),
    ),
    min_size=1,
    max_size=4,
)


def _expression(clause: Clause, flipped: bool) -> str:
    field = (
        "device.driver" if clause.driver else f'device.attributes["{clause.domain}"].{clause.name}'
    )
    value = _literal(clause.value)
    return f"{value} == {field}" if flipped else f"({field} == {value})"


@settings(max_examples=200, deadline=None)
@given(clauses=clauses, flips=st.lists(st.booleans(), min_size=4, max_size=4))
def test_selectors_read_back_to_the_same_filter(clauses: list[Clause], flips: list[bool]) -> None:
    text = " && ".join(_expression(c, f) for c, f in zip(clauses, flips, strict=False))
    assert parse_selector(text) == DeviceFilter(tuple(clauses))


def _allocated(name: str, node: str, picks: list[int], owner: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if owner:
        meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": "c"}
        meta["ownerReferences"] = [{"kind": "Pod", "uid": owner, "controller": True}]
    results = [
        {"request": "r", "driver": DRIVERS[0], "pool": node, "device": f"g{p}"} for p in picks
    ]
    return {
        "metadata": meta,
        "spec": {},
        "status": {"allocation": {"devices": {"results": results}}},
    }


@settings(max_examples=200, deadline=None)
@given(
    claims=st.lists(
        st.tuples(
            st.lists(st.integers(0, 7), max_size=3, unique=True),
            st.sampled_from(["", "counted", "other"]),
        ),
        max_size=6,
    )
)
def test_held_devices_never_exceed_capacity_and_counted_pods_hold_none(
    claims: list[tuple[list[int], str]],
) -> None:
    catalog = DeviceCatalog(DeviceMapping({"gpu": "r/gpu"}))
    catalog.set_class("gpu", _class_body("gpu", DRIVERS[0], None))
    devices = [{"name": f"g{i}", "attributes": {}} for i in range(8)]
    spec = {"driver": DRIVERS[0], "nodeName": "n0", "pool": {"name": "n0"}, "devices": devices}
    catalog.set_slice("s", {"metadata": {"name": "s"}, "spec": spec})
    held: set[int] = set()
    for i, (picks, owner) in enumerate(claims):
        catalog.set_claim("ns", f"c{i}", _allocated(f"c{i}", "n0", picks, owner))
        if owner != "counted":
            held |= set(picks)
    usage = catalog.usage_on("n0", lambda uid: uid == "counted")
    assert usage == Resources({"r/gpu": len(held)})
    assert usage.fits_in(catalog.capacity("n0"))


@settings(max_examples=100, deadline=None)
@given(
    per_pod=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    sizes=st.lists(st.integers(1, 4), min_size=6, max_size=6),
    quota=st.integers(0, 40),
)
def test_plans_never_exceed_device_quota_nor_node_devices(
    per_pod: list[int], sizes: list[int], quota: int
) -> None:
    nodes = [Node(f"n{i}", Resources({"cpu": 64000, "r/gpu": 8})) for i in range(3)]
    tree = QueueTree.build(
        [
            Queue(
                "q",
                nominal=Resources({"r/gpu": quota}),
                size_ratio=None,
                quota_names=frozenset({"r/gpu"}),
            )
        ]
    )
    gangs = [
        Gang(
            f"ns/g{i}",
            "q",
            Resources({"cpu": 1000, "r/gpu": devices}),
            sizes[i],
            submitted=SubmitStamp(float(i), i, f"g{i}"),
        )
        for i, devices in enumerate(per_pod)
    ]
    decisions = plan(Snapshot(nodes, tree, [], gangs, 0.0))
    by_id = {g.id: g for g in gangs}
    total = 0
    on_node: dict[str, int] = {}
    for admission in decisions.admitted:
        gang = by_id[admission.gang_id]
        total += gang.pod_requests["r/gpu"] * admission.size
        for node, pods in admission.placement.items():
            on_node[node] = on_node.get(node, 0) + gang.pod_requests["r/gpu"] * pods
    assert total <= quota
    assert all(used <= 8 for used in on_node.values())
