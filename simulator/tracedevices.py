"""DRA devices in a trace: the DeviceClasses muster counts (`cluster.deviceClasses`, each with
the resource it counts as), the devices of each node group (`devices`), and the devices each
pod of a job claims (`podDevices`).

Both engines see the same thing through the same reading: a node group's devices are the
ResourceSlice the kwok engine creates for each of its nodes (`simulator.controlplane.dra`), read
by `policies.devices.DeviceCatalog` into what the node offers; a job's devices are the claim
template the kwok engine creates, read the same way into what each pod requests. In-process,
those resources are added to the nodes' allocatable and the pods' requests (the planner cannot
tell them from extended resources); the kwok engine takes them out again and creates the slices,
classes and claim templates instead (`device_objects`, `simulator.kwok_objects`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from policies import PodSet, PolicyError, Resources, fields
from policies.devices import DeviceMapping
from policies.devices.mapping import check_class_name
from simulator.controlplane.dra import DRIVER, DeviceShape, claim_template, node_slice
from simulator.tracemodel import (
    NO_TRACE_DEVICES,
    JobGroup,
    NodeGroup,
    PodDevices,
    TraceDeviceClass,
    TraceDevices,
    TraceError,
)

NO_DEVICES: Final = NO_TRACE_DEVICES

_CLASS_FIELDS: Final = ("name", "resource", "driver", "attributes")
_DEVICE_FIELDS: Final = ("count", "driver", "attributes")


def device_classes(value: object, where: str = "cluster.deviceClasses") -> TraceDevices:
    """`cluster.deviceClasses`: a list of {name, resource, driver, attributes}."""
    classes = []
    seen: set[str] = set()
    for i, item in enumerate(_traced(fields.items, value, where)):
        at = f"{where}[{i}]"
        data = _traced(fields.mapping, item, at, _CLASS_FIELDS)
        name = _traced(fields.string, data.get("name"), f"{at}.name")
        at = f"{at} ({name})"
        _traced(check_class_name, name, f"{at}.name")
        if name in seen:
            raise TraceError(f"{at}.name: duplicate DeviceClass name")
        seen.add(name)
        resource = _traced(fields.string, data.get("resource"), f"{at}.resource")
        _traced(DeviceMapping.of, {name: resource}, f"{at}.resource")
        driver = _traced(fields.string, data.get("driver", DRIVER), f"{at}.driver")
        attributes = _attributes(data.get("attributes"), f"{at}.attributes")
        classes.append(TraceDeviceClass(name, resource, driver, attributes))
    return TraceDevices(tuple(classes))


def node_devices(value: object, where: str) -> tuple[DeviceShape, ...]:
    """A node group's `devices`: a list of {count, driver, attributes}, each node's."""
    shapes = []
    for i, item in enumerate(_traced(fields.items, value, where)):
        at = f"{where}[{i}]"
        data = _traced(fields.mapping, item, at, _DEVICE_FIELDS)
        count = _traced(fields.integer, data.get("count"), f"{at}.count", minimum=1)
        driver = _traced(fields.string, data.get("driver", DRIVER), f"{at}.driver")
        attributes = _attributes(data.get("attributes"), f"{at}.attributes")
        shapes.append(DeviceShape(count, driver, attributes, prefix=f"dev{i}"))
    return tuple(shapes)


def pod_devices(value: object, where: str) -> PodDevices:
    """A job's (or pod set's) `podDevices`: DeviceClass name -> devices each pod claims."""
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not value:
        raise TraceError(
            f"{where}: expected a mapping of DeviceClass name to a count, e.g. "
            "{gpu.muster.dev: 8}"
        )
    out = []
    for name, count in value.items():
        _traced(check_class_name, str(name), f"{where}.{name}")
        out.append((str(name), _traced(fields.integer, count, f"{where}.{name}", minimum=1)))
    return tuple(sorted(out))


def job_devices(data: Mapping[str, Any], where: str) -> tuple[tuple[str, PodDevices], ...]:
    """A job's `podDevices`, or each of its pod sets': (pod set name, devices) of those that
    claim any (the job's own pod set is named "")."""
    if data.get("podSets") is None:
        own = pod_devices(data.get("podDevices"), f"{where}.podDevices")
        return (("", own),) if own else ()
    out = []
    for j, item in enumerate(data["podSets"]):
        name = str(item.get("name") or "")
        counts = pod_devices(item.get("podDevices"), f"{where}.podSets[{j}] ({name}).podDevices")
        if counts:
            out.append((name, counts))
    return tuple(out)


def _attributes(value: object, where: str) -> dict[str, str | int | bool]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TraceError(f"{where}: expected a mapping of attribute name to a value")
    out: dict[str, str | int | bool] = {}
    for key, item in value.items():
        if not isinstance(item, str | int | bool):
            raise TraceError(f"{where}.{key}: expected a string, an integer or a boolean")
        out[str(key)] = item
    return out


def with_devices(
    devices: TraceDevices,
    node_groups: Sequence[NodeGroup],
    jobs: Sequence[JobGroup],
) -> tuple[tuple[NodeGroup, ...], tuple[JobGroup, ...]]:
    """Node groups and jobs with their devices added as the resources they count as (what the
    planner sees), checked: no extended resource named like a device class's resource."""
    names = devices.resources
    groups = []
    for i, group in enumerate(node_groups):
        clash = names & set(group.allocatable)
        if clash:
            raise TraceError(
                f"cluster.nodes[{i}].allocatable.{min(clash)}: the resource of a DeviceClass "
                "(cluster.deviceClasses); give the devices under devices, not as allocatable"
            )
        if group.devices:
            capacity = devices.capacity(group.devices)
            group = replace(group, allocatable=group.allocatable + capacity)
        groups.append(group)
    return tuple(groups), tuple(_job(devices, i, job) for i, job in enumerate(jobs))


def _job(devices: TraceDevices, index: int, job: JobGroup) -> JobGroup:
    where = f"jobs[{index}] ({job.name})"
    for pod_set in job.pod_sets:
        clash = devices.resources & set(pod_set.requests)
        if clash:
            raise TraceError(
                f"{where}.podRequests.{min(clash)}: the resource of a DeviceClass "
                "(cluster.deviceClasses); claim the devices with podDevices instead"
            )
    if not job.devices:
        return job
    claimed = {name: devices.per_pod(counts, f"{where}.podDevices") for name, counts in job.devices}
    main = claimed.get(job.set_name)
    others = tuple(
        replace(o, requests=o.requests + claimed[o.name]) if o.name in claimed else o
        for o in job.others
    )
    requests = job.pod_requests + main if main else job.pod_requests
    return replace(job, pod_requests=requests, others=others)


def device_objects(
    devices: TraceDevices, groups: Sequence[NodeGroup], node_names: Mapping[int, Sequence[str]]
) -> list[dict[str, Any]]:
    """The DRA objects a kwok replay of the trace creates before its gangs: the DeviceClasses,
    then each node's ResourceSlices (`node_names`: node group index -> its nodes' names)."""
    objects = [c.body() for c in devices.classes]
    for index, group in enumerate(groups):
        for node in node_names.get(index, ()):
            for i, shape in enumerate(group.devices):
                body = node_slice(node, shape)
                body["metadata"]["name"] = f"{body['metadata']['name']}-{i}"
                body["spec"]["pool"]["name"] = f"{node}-{i}"
                objects.append(body)
    return objects


def template_name(job: str, pod_set: str) -> str:
    """The claim template of a job's pod set (one per pod set that claims devices)."""
    return f"{job}-{pod_set}-devices" if pod_set else f"{job}-devices"


def claim_templates(job: JobGroup) -> list[dict[str, Any]]:
    """The ResourceClaimTemplates a job's gangs claim through (one per pod set with devices)."""
    return [claim_template(template_name(job.name, name), dict(c)) for name, c in job.devices]


def _traced(read: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return read(*args, **kwargs)
    except PolicyError as exc:
        raise TraceError(str(exc)) from None


def without_devices(requests: Resources, devices: TraceDevices) -> Resources:
    """`requests` (or allocatable) without the resources devices count as."""
    names = devices.resources
    if not names or not names & set(requests):
        return requests
    return Resources({k: v for k, v in requests.items() if k not in names})


def pod_set_devices(job: JobGroup, pod_set: PodSet) -> PodDevices:
    """What each pod of `pod_set` of `job` claims."""
    return dict(job.devices).get(pod_set.name, ())
