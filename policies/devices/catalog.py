"""The cluster's DRA objects as muster counts them: `DeviceCatalog`.

It holds the DeviceClasses, the ResourceSlices, the ResourceClaimTemplates and the
ResourceClaims the watches deliver (the controller's `admission.devicebook`, the webhook's
`webhook.devices`, the kwok engine), and answers what the planner needs:

- each node's **capacity** of every resource a DeviceClass counts as (`policies.devices.mapping`):
  its devices, in its pools' current generation, that a class mapped to the resource admits
  (a device two classes of one resource admit counts once);
- the devices each allocated claim **holds** on each node, so what muster's own gangs do not
  hold is taken from the nodes (`usage_on`);
- what a claim template or a shared claim **requests** (`policies.devices.claims`).

Pure and not thread-safe: its owners serialise the calls."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from policies.devices.claims import DeviceError, DeviceMissing, claim_devices
from policies.devices.mapping import DeviceMapping
from policies.devices.objects import (
    POD_CLAIM_NAME,
    Allocation,
    Device,
    DeviceClassRule,
    SliceReading,
    read_allocation,
    read_device_class,
    read_slice,
)
from policies.resources import Resources

Pool = tuple[str, str]
"""(driver, pool name)."""
Key = tuple[str, str]
"""(namespace, name) of a namespaced object."""


class DeviceCatalog:
    """See the module docstring."""

    def __init__(self, mapping: DeviceMapping) -> None:
        self.mapping = mapping
        self.classes: dict[str, DeviceClassRule] = {}
        self._slices: dict[str, SliceReading] = {}
        self._pools: dict[Pool, dict[str, SliceReading]] = {}
        self._pool_devices: dict[Pool, tuple[Device, ...]] = {}
        self._node_pools: dict[str, set[Pool]] = {}
        self._index: dict[tuple[str, str, str], Device] = {}
        self._counts_as: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self._capacity: dict[str, Resources] = {}
        self.templates: dict[Key, Mapping[str, Any]] = {}
        self.claims: dict[Key, Mapping[str, Any]] = {}
        self._allocations: dict[Key, Allocation] = {}
        self._holders: dict[tuple[str, str, str], set[Key]] = {}
        self._owned: dict[str, set[Key]] = {}

    # -- what the watches deliver ------------------------------------------------------------

    def set_class(self, name: str, body: Mapping[str, Any] | None) -> bool:
        """A DeviceClass came, changed or went; True when what muster reads of it changed
        (then every node's capacity and every gang's demand may have: `capacities`)."""
        rule = None if body is None else read_device_class(body)
        if self.classes.get(name) == rule:
            return False
        if rule is None:
            self.classes.pop(name, None)
        else:
            self.classes[name] = rule
        self._counts_as.clear()
        self._capacity.clear()
        return self.mapping.resource(name) is not None

    def set_slice(self, name: str, body: Mapping[str, Any] | None) -> set[str]:
        """A ResourceSlice came, changed or went; the nodes whose capacity may have changed."""
        old = self._slices.pop(name, None)
        new = None if body is None else read_slice(body)
        pools: set[Pool] = set()
        if old is not None:
            self._pools.get((old.driver, old.pool), {}).pop(name, None)
            pools.add((old.driver, old.pool))
        if new is not None:
            self._slices[name] = new
            self._pools.setdefault((new.driver, new.pool), {})[name] = new
            pools.add((new.driver, new.pool))
        touched: set[str] = set()
        for pool in pools:
            touched |= self._repool(pool)
        for node in touched:
            self._capacity.pop(node, None)
        return touched

    def _repool(self, pool: Pool) -> set[str]:
        """The pool's devices again: those of its slices of the newest generation (a driver
        publishing a new generation replaces the old one slice by slice)."""
        before = self._pool_devices.pop(pool, ())
        for device in before:
            self._index.pop(device.key, None)
            self._counts_as.pop(device.key, None)
        slices = self._pools.get(pool) or {}
        newest = max((s.generation for s in slices.values()), default=0)
        devices = tuple(d for s in slices.values() if s.generation == newest for d in s.devices)
        if not slices:
            self._pools.pop(pool, None)
        if devices:
            self._pool_devices[pool] = devices
        touched = {d.node for d in before} | {d.node for d in devices}
        for device in before:
            self._node_pools.get(device.node, set()).discard(pool)
        for device in devices:
            self._index[device.key] = device
            self._node_pools.setdefault(device.node, set()).add(pool)
        touched.discard("")
        return touched

    def set_template(self, namespace: str, name: str, body: Mapping[str, Any] | None) -> bool:
        """A ResourceClaimTemplate came, changed or went; True when its claim spec changed."""
        key = (namespace, name)
        spec = None if body is None else ((body.get("spec") or {}).get("spec") or {})
        if self.templates.get(key) == spec:
            return False
        if spec is None:
            self.templates.pop(key, None)
        else:
            self.templates[key] = spec
        return True

    def set_claim(self, namespace: str, name: str, body: Mapping[str, Any] | None) -> set[str]:
        """A ResourceClaim came, changed or went; the nodes where what it holds changed."""
        key = (namespace, name)
        meta = (body or {}).get("metadata") or {}
        if body is None or POD_CLAIM_NAME in (meta.get("annotations") or {}):
            self.claims.pop(key, None)  # a claim made for one pod is no pod's to share
        else:
            self.claims[key] = body.get("spec") or {}
        touched = self.claim_nodes(key)
        old = self._allocations.pop(key, None)
        if old is not None:
            self._forget(key, old)
        new = None if body is None else read_allocation(body)
        if new is not None:
            self._allocations[key] = new
            if new.owner_pod:
                self._owned.setdefault(new.owner_pod, set()).add(key)
            for device_key in new.devices:
                self._holders.setdefault(device_key, set()).add(key)
            touched |= self.claim_nodes(key)
        return touched

    def _forget(self, key: Key, old: Allocation) -> None:
        if old.owner_pod:
            owned = self._owned.get(old.owner_pod)
            if owned is not None:
                owned.discard(key)
                if not owned:
                    del self._owned[old.owner_pod]
        for device_key in old.devices:
            holders = self._holders.get(device_key)
            if holders is not None:
                holders.discard(key)
                if not holders:
                    del self._holders[device_key]

    # -- what the planner asks ----------------------------------------------------------------

    def class_problem(self, device_class: str) -> DeviceError | None:
        """None when muster can count `device_class`'s devices, else why not."""
        rule = self.classes.get(device_class)
        if rule is None:
            return DeviceMissing(
                f"DeviceClass {device_class} not found: create it (kubectl get deviceclasses), "
                "or request a class that exists"
            )
        return None if rule.problem is None else DeviceError(rule.problem)

    def counts_as(self, device: Device) -> tuple[str, ...]:
        """The resources `device` counts as: those of the mapped classes that admit it."""
        found = self._counts_as.get(device.key)
        if found is None:
            names = set()
            for device_class, resource in self.mapping.classes.items():
                rule = self.classes.get(device_class)
                if (
                    rule is not None
                    and rule.problem is None
                    and rule.filter.admits(device.driver, device.attributes)
                ):
                    names.add(resource)
            found = self._counts_as[device.key] = tuple(sorted(names))
        return found

    def capacity(self, node: str) -> Resources:
        """What `node`'s devices offer, per resource a class counts them as."""
        found = self._capacity.get(node)
        if found is None:
            counts: dict[str, int] = {}
            for pool in self._node_pools.get(node) or ():
                for device in self._pool_devices.get(pool, ()):
                    if device.node == node:
                        for resource in self.counts_as(device):
                            counts[resource] = counts.get(resource, 0) + 1
            found = self._capacity[node] = Resources(counts)
        return found

    def nodes(self) -> Iterable[str]:
        """Every node some device is on."""
        return [node for node, pools in self._node_pools.items() if pools]

    def capacities(self) -> dict[str, Resources]:
        """Every node's device capacity (nodes with none left out)."""
        out = {node: self.capacity(node) for node in self.nodes()}
        return {node: capacity for node, capacity in out.items() if capacity}

    def slice_names(self) -> set[str]:
        """The ResourceSlices held."""
        return set(self._slices)

    def claim_keys(self) -> set[Key]:
        """The ResourceClaims held: the shared ones, and every allocated one."""
        return set(self.claims) | set(self._allocations)

    def claims_owned_by(self, pod_uid: str) -> set[Key]:
        """The allocated claims made for pod `pod_uid` from a template."""
        return set(self._owned.get(pod_uid) or ())

    def claim_nodes(self, key: Key) -> set[str]:
        """The nodes where claim `key` holds devices."""
        allocation = self._allocations.get(key)
        if allocation is None:
            return set()
        devices = (self._index.get(k) for k in allocation.devices)
        return {d.node for d in devices if d is not None and d.node}

    def usage_on(self, node: str, counted: Callable[[str], bool]) -> Resources:
        """What allocated claims hold of `node`'s devices, but for the claims made for a pod
        that `counted` says is counted already (a pod of a gang muster admits: its gang's
        requests hold its devices)."""
        counts: dict[str, int] = {}
        for pool in self._node_pools.get(node) or ():
            for device in self._pool_devices.get(pool, ()):
                if device.node != node:
                    continue
                holders = self._holders.get(device.key)
                if holders and any(self._uncounted(key, counted) for key in holders):
                    for resource in self.counts_as(device):
                        counts[resource] = counts.get(resource, 0) + 1
        return Resources(counts)

    def _uncounted(self, key: Key, counted: Callable[[str], bool]) -> bool:
        owner = self._allocations[key].owner_pod
        return not owner or not counted(owner)

    def template_devices(self, namespace: str, name: str) -> Resources:
        """What each claim made from template `namespace/name` requests; DeviceError when it
        does not exist (yet) or cannot be counted."""
        where = f"ResourceClaimTemplate {namespace}/{name}"
        return self._devices(self.templates.get((namespace, name)), where, f"{where}: spec.spec")

    def claim_devices(self, namespace: str, name: str) -> Resources:
        """What the shared claim `namespace/name` requests; DeviceError as `template_devices`."""
        where = f"ResourceClaim {namespace}/{name}"
        return self._devices(self.claims.get((namespace, name)), where, f"{where}: spec")

    def _devices(self, spec: Mapping[str, Any] | None, where: str, path: str) -> Resources:
        if spec is None:
            raise DeviceMissing(
                f"{where} not found: the gang waits until it exists (create it in the gang's "
                "namespace)"
            )
        return claim_devices(spec, path, self.mapping, self.class_problem)

    def held(self, plural: str) -> set[str]:
        """The keys of what the catalog holds of the DRA resource ``plural`` (`deviceclasses`,
        `resourceslices`: names; `resourceclaimtemplates`, `resourceclaims`: namespace/name),
        for the watches that keep it current."""
        if plural == "deviceclasses":
            return set(self.classes)
        if plural == "resourceslices":
            return self.slice_names()
        keys = self.templates if plural == "resourceclaimtemplates" else self.claim_keys()
        return {f"{namespace}/{name}" for namespace, name in keys}
