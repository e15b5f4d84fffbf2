"""A gang's devices: what its pod sets' claims request, added to its pods' requests.

`gang_claims` reads which claims each pod template's pods use (pure reading of the object);
`with_devices` adds what they request, as the catalog counts it (`DeviceCatalog`), to the
gang the kind's reader made: a claim made per pod from a template is a request of each pod
of the set (alongside its containers' requests, extended resources included: a pod asking for
`nvidia.com/gpu` and for devices is counted for both), a shared ResourceClaim is taken once by
the gang (`Gang.shared`, however many of its pods and sets name it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from policies.devices.catalog import DeviceCatalog
from policies.devices.claims import ClaimRef, DeviceError, claim_refs
from policies.model import Gang
from policies.resources import Resources


@dataclass(frozen=True, slots=True)
class GangClaims:
    """The claims of a gang's pods: per pod set (by name) that uses any, its pods' claims."""

    namespace: str
    sets: tuple[tuple[str, tuple[ClaimRef, ...]], ...]

    def templates(self) -> frozenset[str]:
        """The claim templates its pods use."""
        return frozenset(r.template for _, refs in self.sets for r in refs if r.template)

    def shared(self) -> frozenset[str]:
        """The ResourceClaims its pods share."""
        return frozenset(r.claim for _, refs in self.sets for r in refs if r.claim)


def gang_claims(
    namespace: str, templates: Sequence[tuple[str, Mapping[str, Any]]]
) -> GangClaims | None:
    """The claims of each (pod set name, pod spec); None when no pod uses a claim."""
    sets = tuple((name, refs) for name, spec in templates if (refs := claim_refs(spec)))
    return GangClaims(namespace, sets) if sets else None


def with_devices(gang: Gang, claims: GangClaims, catalog: DeviceCatalog) -> tuple[Gang, str | None]:
    """`gang` with what its claims request (see the module docstring), or `gang` as it is and
    why it must wait (a template not there yet, a request muster cannot count)."""
    try:
        return claimed(gang, claims, catalog), None
    except DeviceError as exc:
        return gang, f"pod resourceClaims: {exc}"


def claimed(gang: Gang, claims: GangClaims, catalog: DeviceCatalog) -> Gang:
    """`gang` with what its claims request; raises `DeviceError` (`DeviceMissing`: not yet)."""
    namespace = claims.namespace
    per_set: dict[str, Resources] = {}
    shared: dict[str, Resources] = {}
    for name, refs in claims.sets:
        per_pod = Resources()
        for ref in refs:
            if ref.template:
                per_pod = per_pod + catalog.template_devices(namespace, ref.template)
            else:
                shared[ref.claim] = catalog.claim_devices(namespace, ref.claim)
        per_set[name] = per_pod
    if not any(per_set.values()) and not any(shared.values()):
        return gang
    once = Resources()
    for devices in shared.values():
        once = once + devices
    main = per_set.get(gang.set_name)
    return replace(
        gang,
        pod_requests=gang.pod_requests + main if main else gang.pod_requests,
        others=tuple(
            replace(o, requests=o.requests + per_set[o.name]) if per_set.get(o.name) else o
            for o in gang.others
        ),
        shared=(gang.shared or Resources()) + once if once else gang.shared,
    )
