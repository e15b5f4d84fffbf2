"""The controller's DRA objects, and what they change in the cache.

With a DeviceClass mapped to a resource (`muster run --device-class CLASS=RESOURCE`), the
controller watches DeviceClasses, ResourceSlices, ResourceClaimTemplates and ResourceClaims
into one `policies.devices.DeviceCatalog`. `DeviceBook` is the only writer of what follows
from it:

- each node's devices, as resources, in the node table (`NodeTable.set_devices`): capacity
  from its slices, and as used what allocated claims hold that muster's own gangs do not
  account for (a claim made for a pod of a gang muster admits is its gang's: the gang's
  requests hold its devices on its nodes; any other claim, a shared one or another workload's,
  holds them as another workload's pods hold cpu);
- the records of gangs whose claims' objects changed (a template that came after its gang, a
  DeviceClass changed), read again with the catalog (`admission.gangs.with_claims`): a gang
  whose template is missing waits with that reason until it exists.

Without a mapping the book is off: nothing is watched, claims are not counted (as before DRA
support)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.gangs import with_claims
from admission.jobstore import JobStore
from admission.nodetable import NodeTable
from admission.podledger import PodLedger
from admission.statusview import StatusView
from kubeport import kubeapi
from policies.devices import DeviceCatalog, DeviceMapping

DEVICE_KINDS: Final = {
    "deviceclass": kubeapi.DEVICE_CLASSES,
    "resourceslice": kubeapi.RESOURCE_SLICES,
    "resourceclaimtemplate": kubeapi.RESOURCE_CLAIM_TEMPLATES,
    "resourceclaim": kubeapi.RESOURCE_CLAIMS,
}
"""The DRA kinds the cache holds (cache kind -> its API resource), in the order they are
LISTed: classes and slices before the claims that name their devices."""


class DeviceBook:
    """See the module docstring."""

    __slots__ = ("catalog", "jobs", "nodes", "pods", "status")

    def __init__(
        self,
        mapping: DeviceMapping,
        jobs: JobStore,
        nodes: NodeTable,
        pods: PodLedger,
        status: StatusView,
    ) -> None:
        self.catalog = DeviceCatalog(mapping) if mapping else None
        self.jobs, self.nodes, self.pods, self.status = jobs, nodes, pods, status
        jobs.devices = self.catalog

    @property
    def enabled(self) -> bool:
        """Some DeviceClass is mapped: the DRA kinds are watched."""
        return self.catalog is not None

    def keys(self, kind: str) -> set[str]:
        """What the book holds of `kind`, by cache key (for `Cache.prune`)."""
        catalog = self.catalog
        if catalog is None:
            return set()
        return catalog.held(DEVICE_KINDS[kind].plural)

    def apply(self, kind: str, event: str | None, body: Mapping[str, Any]) -> bool:
        """A watch event of a DRA kind; True when the planner must look again."""
        catalog = self.catalog
        if catalog is None:
            return False
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        namespace = str(meta.get("namespace") or "")
        live = None if event == "DELETED" else body
        if kind == "deviceclass":
            if not catalog.set_class(name, live):
                return False
            renoded = self._renode(set(catalog.nodes()))
            return self._reclaim(all_gangs=True) or renoded
        if kind == "resourceslice":
            return self._renode(catalog.set_slice(name, live))
        if kind == "resourceclaimtemplate":
            return catalog.set_template(namespace, name, live) and self._reclaim(
                namespace, template=name
            )
        before = catalog.claims.get((namespace, name))
        changed = self._renode(catalog.set_claim(namespace, name, live))
        if catalog.claims.get((namespace, name)) != before:
            changed |= self._reclaim(namespace, claim=name)
        return changed

    def remove(self, kind: str, key: str) -> None:
        """Forget an object a fresh LIST no longer holds (`Cache.prune`)."""
        namespace, _, name = key.rpartition("/")
        metadata = {"name": name, "namespace": namespace}
        self.apply(kind, "DELETED", {"metadata": metadata})

    def pod_changed(self, uid: str) -> bool:
        """A pod came or went: the claims made for it are its gang's, or not, from now on."""
        catalog = self.catalog
        if catalog is None:
            return False
        owned = catalog.claims_owned_by(uid)
        if not owned:
            return False
        nodes: set[str] = set()
        for key in owned:
            nodes |= catalog.claim_nodes(key)
        return self._renode(nodes)

    def _counted(self, uid: str) -> bool:
        """A pod of a gang muster admits: its gang's requests hold its claims' devices."""
        pod = self.pods.get(uid)
        return pod is not None and pod.gang is not None

    def _renode(self, names: set[str]) -> bool:
        """The device capacity and use of nodes `names`, into the node table."""
        catalog = self.catalog
        assert catalog is not None
        changed = False
        for name in names:
            capacity = catalog.capacity(name)
            held = catalog.usage_on(name, self._counted)
            if self.nodes.set_devices(name, capacity, held):
                self.pods.forget_view(name)
                changed = True
        return changed

    def _reclaim(
        self, namespace: str = "", *, template: str = "", claim: str = "", all_gangs: bool = False
    ) -> bool:
        """Read again the gangs whose claims name `template` or `claim` (of `namespace`), or
        every gang that claims devices; True if one's gang changed."""
        catalog = self.catalog
        assert catalog is not None
        changed = False
        jobs = self.jobs
        for key, record in list(jobs.items()):
            reading = record.devices
            if reading is None:
                continue
            claims = reading.claims
            if not all_gangs and (
                claims.namespace != namespace
                or (template and template not in claims.templates())
                or (claim and claim not in claims.shared())
            ):
                continue
            again = with_claims(record, catalog)
            if again.gang != record.gang or again.parse_error != record.parse_error:
                jobs[key] = again
                self.status.touch(key)
                changed = True
        return changed
