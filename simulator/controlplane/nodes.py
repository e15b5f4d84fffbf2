"""kwok's fake nodes on a local control plane: what one node is (`kwok_node`: annotated so kwok
manages it, tainted so only pods that tolerate it land there), node groups of one shape
(`NodeShape`, `ensure_nodes`), and waiting until nodes are Ready.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from simulator.controlplane.dra import DeviceShape, device_class, ensure_class, ensure_slice
from simulator.controlplane.errors import ClusterError

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_NODE_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
NODE_GROUP_LABEL = "muster.dev/node-group"

Log = Callable[[str], None]


@dataclass(frozen=True)
class NodeShape:
    """What one group of kwok nodes offers (Kubernetes quantities) and how it is labelled."""

    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"
    extended: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    devices: DeviceShape | None = None
    """Its DRA devices: a ResourceSlice per node, and the driver's DeviceClass (`dra`)."""

    def allocatable(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": self.pods, **self.extended}


def kwok_node(
    name: str,
    allocatable: Mapping[str, str],
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """The body of a fake node that kwok manages (annotation), pods must tolerate (taint)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **labels,
            },
        },
        "spec": {"taints": [dict(FAKE_NODE_TAINT), *(dict(t) for t in taints)]},
        "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)},
    }


def ensure_nodes(
    client: KubeClient,
    count: int,
    shape: NodeShape,
    group: str,
    timeout: float,
    workers: int,
    log: Log,
) -> None:
    """Make sure `count` kwok nodes of this group exist and are Ready (creates the missing)."""
    selector = f"{NODE_GROUP_LABEL}={group}"
    existing = {
        n["metadata"]["name"]
        for n in client.get(kubeapi.NODES.path(), {"labelSelector": selector})["items"]
    }
    wanted = [f"kwok-{group}-{i}" for i in range(count)]
    missing = [name for name in wanted if name not in existing]
    started = time.monotonic()
    if shape.devices is not None:
        ensure_class(client, device_class(shape.devices.driver, shape.devices.driver))
    if missing:
        log(f"creating {len(missing)} kwok nodes in group {group!r} ...")
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for done, _ in enumerate(
                pool.map(lambda n: _create_node(client, n, shape, group), missing), 1
            ):
                if done % 250 == 0 or done == len(missing):
                    log(f"  created {done}/{len(missing)}")
    ready = wait_nodes_ready(client, count, selector, timeout)
    log(f"{ready} kwok nodes Ready in group {group!r} ({time.monotonic() - started:.1f}s)")


def _create_node(client: KubeClient, name: str, shape: NodeShape, group: str) -> None:
    body = kwok_node(name, shape.allocatable(), {NODE_GROUP_LABEL: group, **shape.labels})
    try:
        created = client.create(kubeapi.NODES.path(), body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        created = client.get(kubeapi.NODES.path(name=name))
    if shape.devices is not None:
        ensure_slice(client, name, shape.devices, created["metadata"].get("uid") or "")


def count_ready(nodes: Sequence[Mapping[str, Any]]) -> int:
    ready = 0
    for node in nodes:
        for cond in node.get("status", {}).get("conditions") or []:
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                ready += 1
                break
    return ready


def wait_nodes_ready(client: KubeClient, count: int, selector: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    ready = 0
    while time.monotonic() < deadline:
        items = client.get(kubeapi.NODES.path(), {"labelSelector": selector})["items"]
        ready = count_ready(items)
        if ready >= count:
            return ready
        time.sleep(0.5)
    raise ClusterError(
        f"only {ready}/{count} kwok nodes became Ready within {timeout:.0f}s; "
        "check the kwok log (muster cluster status)"
    )
