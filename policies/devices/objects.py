"""What muster reads of the DRA objects (`resource.k8s.io/v1`): a DeviceClass's selectors, a
ResourceSlice's devices and where they are, a ResourceClaim's allocation. Pure: plain dicts in,
as the API delivers them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.devices.selectors import (
    EVERY_DEVICE,
    Attributes,
    AttrValue,
    DeviceFilter,
    SelectorError,
    Version,
    parse_selector,
)

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
"""The annotation the resourceclaim controller puts on a claim it made for a pod from a
ResourceClaimTemplate (the pod's `spec.resourceClaims[].name`)."""


@dataclass(frozen=True, slots=True)
class DeviceClassRule:
    """The devices a DeviceClass admits: every selector's (ANDed); or why muster cannot tell."""

    name: str
    filter: DeviceFilter = EVERY_DEVICE
    problem: str | None = None


def read_device_class(body: Mapping[str, Any]) -> DeviceClassRule:
    """A DeviceClass: its CEL selectors as muster reads them (`policies.devices.selectors`);
    one it does not read gives the class a problem (its devices are not counted, and gangs
    that ask for it wait with the problem)."""
    name = str((body.get("metadata") or {}).get("name") or "")
    selectors = (body.get("spec") or {}).get("selectors") or []
    found = EVERY_DEVICE
    for i, selector in enumerate(selectors if isinstance(selectors, list) else []):
        expression = ((selector or {}).get("cel") or {}).get("expression")
        where = f"DeviceClass {name}: spec.selectors[{i}].cel.expression"
        if expression is None:
            return DeviceClassRule(name, problem=f"{where}: missing; muster reads CEL selectors")
        try:
            found = found & parse_selector(str(expression))
        except SelectorError as exc:
            return DeviceClassRule(name, problem=f"{where}: {_short(expression)}: {exc}")
    return DeviceClassRule(name, found)


def _short(expression: object) -> str:
    text = " ".join(str(expression).split())
    return repr(text if len(text) <= 80 else f"{text[:77]}...")


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice, on its node (`node` "" for a device no single node has:
    network-attached, not counted)."""

    driver: str
    pool: str
    name: str
    node: str
    attributes: Attributes

    @property
    def key(self) -> tuple[str, str, str]:
        """How an allocation names it: (driver, pool, device)."""
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, slots=True)
class SliceReading:
    """What a ResourceSlice holds: its pool, that pool's generation, and its devices."""

    driver: str
    pool: str
    generation: int
    devices: tuple[Device, ...]


def _attribute(value: Mapping[str, Any]) -> AttrValue | Version | None:
    if not isinstance(value, Mapping):
        return None
    if isinstance(value.get("string"), str):
        return str(value["string"])
    if isinstance(value.get("bool"), bool):
        return bool(value["bool"])
    if isinstance(value.get("int"), int) and not isinstance(value.get("int"), bool):
        return int(value["int"])
    if isinstance(value.get("version"), str):
        return Version(value["version"])
    return None


def _attributes(driver: str, raw: object) -> dict[tuple[str, str], AttrValue | Version]:
    out: dict[tuple[str, str], AttrValue | Version] = {}
    for key, value in (raw if isinstance(raw, Mapping) else {}).items():
        domain, _, name = str(key).rpartition("/")
        parsed = _attribute(value)
        if parsed is not None:
            out[(domain or driver, name)] = parsed
    return out


def read_slice(body: Mapping[str, Any]) -> SliceReading:
    """A ResourceSlice's devices, each on the node its slice (`spec.nodeName`) or the device
    itself (`nodeName`, with `spec.perDeviceNodeSelection`) names; others are on no node."""
    spec = body.get("spec") or {}
    driver = str(spec.get("driver") or "")
    pool = spec.get("pool") or {}
    pool_name = str(pool.get("name") or "")
    generation = pool.get("generation")
    node = str(spec.get("nodeName") or "")
    devices = []
    for device in spec.get("devices") or []:
        if not isinstance(device, Mapping):
            continue
        own = device.get("nodeName")
        devices.append(
            Device(
                driver,
                pool_name,
                str(device.get("name") or ""),
                str(own) if isinstance(own, str) and own else node,
                _attributes(driver, device.get("attributes")),
            )
        )
    whole = generation if isinstance(generation, int) and not isinstance(generation, bool) else 0
    return SliceReading(driver, pool_name, whole, tuple(devices))


@dataclass(frozen=True, slots=True)
class Allocation:
    """A ResourceClaim's allocated devices, and who it is for: the pod that owns it (a claim
    made from a template), if any."""

    devices: tuple[tuple[str, str, str], ...]
    """(driver, pool, device) of each allocated device (admin access ones left out: they take
    no device from others)."""
    owner_pod: str
    """The uid of the pod it was made for from a template; "" for a claim of its own."""


def read_allocation(body: Mapping[str, Any]) -> Allocation | None:
    """A ResourceClaim's allocation; None when it is not allocated."""
    allocation = (body.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        return None
    results = (allocation.get("devices") or {}).get("results") or []
    devices = tuple(
        (str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
        for r in results
        if isinstance(r, Mapping) and not r.get("adminAccess")
    )
    meta = body.get("metadata") or {}
    owner = ""
    if POD_CLAIM_NAME in (meta.get("annotations") or {}):
        owner = next(
            (
                str(ref.get("uid") or "")
                for ref in meta.get("ownerReferences") or []
                if ref.get("kind") == "Pod" and ref.get("controller")
            ),
            "",
        )
    return Allocation(devices, owner)
