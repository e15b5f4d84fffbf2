"""Devices handed out by Dynamic Resource Allocation (`resource.k8s.io/v1`), counted as muster
counts any resource: each DeviceClass an administrator maps (`mapping`) counts as one resource
name, so a Queue's quota, a gang's requests and a node's capacity name it like an extended
resource, and the planner's quota, DRF shares, fit, reasons and estimates need nothing new.

- `mapping`: the configured DeviceClass -> resource name mapping;
- `selectors`: the part of CEL muster reads in device selectors (equalities);
- `objects`: what muster reads of DeviceClasses, ResourceSlices and ResourceClaims;
- `claims`: a pod's claims, and what a claim spec requests (or why muster cannot count it);
- `catalog`: the cluster's DRA objects as muster counts them (`DeviceCatalog`): nodes'
  capacity, what allocated claims hold, what templates request;
- `gangs`: a gang's devices added to its pod sets' requests.

Pure: plain dicts in (docs/devices.md)."""

from policies.devices.catalog import DeviceCatalog
from policies.devices.claims import ClaimRef, DeviceError, DeviceMissing
from policies.devices.gangs import GangClaims, claimed, gang_claims, with_devices
from policies.devices.mapping import NO_DEVICES, DeviceMapping

__all__ = [
    "NO_DEVICES",
    "ClaimRef",
    "DeviceCatalog",
    "DeviceError",
    "DeviceMapping",
    "DeviceMissing",
    "GangClaims",
    "claimed",
    "gang_claims",
    "with_devices",
]
