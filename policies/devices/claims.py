"""What a pod asks of DRA: its claims (`spec.resourceClaims`: a ResourceClaimTemplate's claim
made for each pod, or one shared ResourceClaim), and the devices a claim's spec requests, per
resource muster counts them as (`policies.devices.mapping`).

A request muster can count is one of a mapped DeviceClass, `exactly` `count` devices (default
1) with no selectors of its own, or `firstAvailable` alternatives that all count as one
resource with one count (as Kueue charges them). The rest of a mapped class's requests is
refused with `DeviceError`, naming the field, rather than counted wrong: allocationMode `All`
(as many as the node has), a request's own `selectors` or `capacity` (they narrow which devices
qualify, which muster does not model per request), claim `constraints`. Requests of classes no
mapping names are not counted at all, as before DRA support. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from policies.devices.mapping import DeviceMapping
from policies.resources import Resources


class DeviceError(ValueError):
    """A claim muster cannot count; the message names the object, the field and what to do. A
    gang with one waits with the message (and is refused at create)."""


class DeviceMissing(DeviceError):
    """A claim muster cannot count yet: its template, its shared claim or its DeviceClass does
    not exist (yet). A gang with one waits until it does (and is allowed at create)."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """One entry of a pod's `spec.resourceClaims`: a claim made per pod from `template`, or
    the one ResourceClaim `claim` its pods share."""

    name: str
    template: str = ""
    claim: str = ""


def claim_refs(pod_spec: Mapping[str, Any]) -> tuple[ClaimRef, ...]:
    """The claims a pod template's pods use (entries naming neither are left out: the
    apiserver refuses them)."""
    out = []
    for entry in pod_spec.get("resourceClaims") or []:
        if not isinstance(entry, Mapping):
            continue
        template = entry.get("resourceClaimTemplateName")
        claim = entry.get("resourceClaimName")
        if isinstance(template, str) and template:
            out.append(ClaimRef(str(entry.get("name") or ""), template=template))
        elif isinstance(claim, str) and claim:
            out.append(ClaimRef(str(entry.get("name") or ""), claim=claim))
    return tuple(out)


ClassCheck = Callable[[str], DeviceError | None]
"""A DeviceClass name -> None when muster can count its devices, else why not (`DeviceMissing`
when it does not exist, `DeviceError` for a selector muster does not read)."""

FIX_SELECTORS: Final = (
    "muster counts devices per DeviceClass and does not model a request's own selectors: "
    "make a DeviceClass with these selectors, map it (muster run --device-class), and request "
    "it without selectors"
)


def claim_devices(
    spec: Mapping[str, Any], where: str, mapping: DeviceMapping, classes: ClassCheck
) -> Resources:
    """The devices a ResourceClaimSpec requests, as resources (`mapping`); DeviceError naming
    `where` + the field for a request of a mapped class muster cannot count."""
    devices = spec.get("devices") or {}
    requests = devices.get("requests") or []
    total: dict[str, int] = {}
    counted = False
    for i, request in enumerate(requests if isinstance(requests, list) else []):
        at = f"{where}.devices.requests[{i}]"
        if not isinstance(request, Mapping):
            raise DeviceError(f"{at}: expected a device request")
        found = _request(request, at, mapping, classes)
        if found is not None:
            resource, count = found
            total[resource] = total.get(resource, 0) + count
            counted = True
    if counted and devices.get("constraints"):
        raise DeviceError(
            f"{where}.devices.constraints: muster does not model constraints between devices "
            "(they decide which devices may go together on a node); leave them out of claims "
            "of classes muster counts, or unmap those classes"
        )
    return Resources(total)


def _request(
    request: Mapping[str, Any], at: str, mapping: DeviceMapping, classes: ClassCheck
) -> tuple[str, int] | None:
    """(resource, count) of one request; None when it is not counted (an unmapped class)."""
    alternatives = request.get("firstAvailable")
    if alternatives:
        return _first_available(alternatives, f"{at}.firstAvailable", mapping, classes)
    exactly = request.get("exactly")
    if not isinstance(exactly, Mapping):
        raise DeviceError(f"{at}: expected exactly or firstAvailable")
    return _exactly(exactly, f"{at}.exactly", mapping, classes)


def _exactly(
    exactly: Mapping[str, Any], at: str, mapping: DeviceMapping, classes: ClassCheck
) -> tuple[str, int] | None:
    device_class = str(exactly.get("deviceClassName") or "")
    resource = mapping.resource(device_class)
    if resource is None:
        return None
    problem = classes(device_class)
    if problem is not None:
        raise type(problem)(f"{at}.deviceClassName: {problem}")
    if exactly.get("adminAccess"):
        return resource, 0  # admin access takes no device from others
    mode = exactly.get("allocationMode") or "ExactCount"
    if mode != "ExactCount":
        raise DeviceError(
            f"{at}.allocationMode: {mode!r} is not counted: muster counts ExactCount requests "
            "(All takes as many devices as the node has, which depends on the node); ask for "
            "a count"
        )
    if exactly.get("selectors"):
        raise DeviceError(f"{at}.selectors: {FIX_SELECTORS}")
    if exactly.get("capacity"):
        raise DeviceError(
            f"{at}.capacity: muster counts whole devices and does not model consumable "
            "capacity; request whole devices of a class muster counts"
        )
    return resource, _count(exactly.get("count", 1), f"{at}.count")


def _count(value: object, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise DeviceError(f"{at}: {value!r} is not a whole number of devices of at least 1")
    return value


def _first_available(
    alternatives: object, at: str, mapping: DeviceMapping, classes: ClassCheck
) -> tuple[str, int] | None:
    """Alternatives are counted when every one counts as the same resource with the same
    count (then the charge is right whichever kube-scheduler picks); none mapped: not
    counted."""
    if not isinstance(alternatives, list):
        raise DeviceError(f"{at}: expected a list of alternatives")
    found: list[tuple[str, int] | None] = []
    for i, alternative in enumerate(alternatives):
        if not isinstance(alternative, Mapping):
            raise DeviceError(f"{at}[{i}]: expected a device sub-request")
        found.append(_exactly(alternative, f"{at}[{i}]", mapping, classes))
    if all(f is None for f in found):
        return None
    if len(set(found)) != 1:
        raise DeviceError(
            f"{at}: muster counts alternatives only when every one asks for the same count "
            "of devices counted as the same resource (found "
            + ", ".join("not counted" if f is None else f"{f[1]} {f[0]}" for f in found)
            + "); map their classes to one resource and ask each for the same count"
        )
    return found[0]
