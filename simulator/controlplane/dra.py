"""The local control plane's fake DRA driver: the ResourceSlice of a kwok node's devices, the
DeviceClass that selects them, and the ResourceClaimTemplate a gang's pods claim them through
(`resource.k8s.io/v1`, served by default since Kubernetes 1.34).

kube-scheduler allocates claims against these slices for real (its DynamicResources plugin),
and kube-controller-manager makes each pod's claim from its template. Nothing prepares the
devices: no kubelet, no driver plugin (kwok fakes the pods' lifecycle; docs/devices.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient

DRIVER: Final = "gpu.muster.dev"
"""The fake driver's name (and its DeviceClass's)."""
GROUP: Final = "resource.k8s.io"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"


FAKE_GPU: Final[Mapping[str, str | int | bool]] = {"model": "kwok-gpu", "memory": 80}
"""The attributes of `muster cluster up --devices`' fake GPUs (memory in GiB)."""


@dataclass(frozen=True)
class DeviceShape:
    """The devices of each node of a group: `count` devices of `driver`, named
    `<prefix>-0..`, each with `attributes` (strings, integers or booleans)."""

    count: int
    driver: str = DRIVER
    attributes: Mapping[str, str | int | bool] = field(default_factory=dict)
    prefix: str = "gpu"


def _attribute(value: str | int | bool) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def node_slice(node: str, shape: DeviceShape, node_uid: str = "") -> dict[str, Any]:
    """The ResourceSlice of `node`'s devices: one pool named after the node (generation 1, one
    slice), owned by the node so it goes with it."""
    meta: dict[str, Any] = {"name": slice_name(node, shape.driver)}
    if node_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {
            "driver": shape.driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"{shape.prefix}-{i}",
                    "attributes": {k: _attribute(v) for k, v in shape.attributes.items()},
                }
                for i in range(shape.count)
            ],
        },
    }


def slice_name(node: str, driver: str) -> str:
    return f"{node}-{driver.replace('.', '-')}"[:253]


def device_class(
    name: str, driver: str = DRIVER, attributes: Mapping[str, str | int | bool] | None = None
) -> dict[str, Any]:
    """A DeviceClass of `driver`'s devices (with these attributes, when given): the CEL
    selectors muster reads (`policies.devices.selectors`)."""
    clauses = [f'device.driver == "{driver}"']
    for key, value in (attributes or {}).items():
        literal = (
            ("true" if value else "false")
            if isinstance(value, bool)
            else str(value)
            if isinstance(value, int)
            else f'"{value}"'
        )
        clauses.append(f'device.attributes["{driver}"].{key} == {literal}')
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": " && ".join(clauses)}}]},
    }


def claim_template(name: str, devices: Mapping[str, int]) -> dict[str, Any]:
    """A ResourceClaimTemplate whose claim asks for `count` devices of each DeviceClass."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": f"r{i}",
                            "exactly": {"deviceClassName": cls, "count": count},
                        }
                        for i, (cls, count) in enumerate(sorted(devices.items()))
                    ]
                }
            }
        },
    }


def pod_claims(template: str) -> list[dict[str, str]]:
    """A pod spec's `resourceClaims` for one claim made from `template`."""
    return [{"name": "devices", "resourceClaimTemplateName": template}]


def ensure_class(client: KubeClient, body: Mapping[str, Any]) -> None:
    """Create a DeviceClass, or leave the one of that name."""
    try:
        client.create(kubeapi.DEVICE_CLASSES.path(), dict(body))
    except ApiError as exc:
        if exc.status != 409:
            raise


def ensure_slice(client: KubeClient, node: str, shape: DeviceShape, node_uid: str = "") -> None:
    """Create `node`'s ResourceSlice, or leave the one there."""
    try:
        client.create(kubeapi.RESOURCE_SLICES.path(), node_slice(node, shape, node_uid))
    except ApiError as exc:
        if exc.status != 409:
            raise
