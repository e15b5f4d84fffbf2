"""The webhook's view of the cluster's DRA objects, and what it says of a gang's claims at create.

With a DeviceClass mapped (`muster run --device-class`), the webhook keeps a
`policies.devices.DeviceCatalog` of the DeviceClasses, ResourceSlices, ResourceClaimTemplates
and shared ResourceClaims, from lean list-then-watch streams (`device_watches`), and:

- refuses a created gang whose claims muster cannot count (`DevicesRefused`, naming the field:
  allocationMode All, a request's own selectors, ...), as the controller would keep it waiting
  with the same words;
- allows, with a warning, one whose claim template (or shared claim, or DeviceClass) does not
  exist yet: the controller waits for it;
- gives the never-fits check the nodes' device capacity and the gang with its devices, so a gang
  that can never get its devices is told so at create like any never-fitting gang.

Thread-safe: the streams and the review handlers share it under one lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from kubeport.streamwatch import StreamWatch, list_collection
from policies.devices import DeviceCatalog, DeviceError, DeviceMapping, DeviceMissing, claimed
from policies.kinds import Kind
from policies.kinds.reading import read_gang
from policies.kinds.registry import kind_named
from policies.model import Gang
from webhook.decision import AdmissionRejected
from webhook.neverfits import NeverFitsCheck, merged

DEVICE_STREAMS: Final = (
    "deviceclasses",
    "resourceslices",
    "resourceclaimtemplates",
    "resourceclaims",
)
"""The DRA collections the webhook follows (`kubeport.kubeapi` resources of these plurals)."""


class DevicesRefused(AdmissionRejected):
    """A new gang refused because muster cannot count the devices its pods claim."""


class WebhookDevices:
    """See the module docstring."""

    def __init__(self, mapping: DeviceMapping, never_fits: NeverFitsCheck) -> None:
        self._lock = threading.Lock()
        self.catalog = DeviceCatalog(mapping)
        self.never_fits = never_fits

    # -- what the streams feed ----------------------------------------------------------------

    def observe(self, plural: str) -> Callable[[str, Mapping[str, Any]], None]:
        """What applies a watch event of the collection `plural`."""
        return lambda event, body: self._apply(plural, event, body)

    def relisted(self, plural: str) -> Callable[[list[Any], int], None]:
        """What applies a fresh LIST of the collection `plural` (what it no longer holds goes)."""

        def relist(items: list[Any], _version: int) -> None:
            with self._lock:
                for key in self._held(plural) - {self._key(plural, item) for item in items}:
                    namespace, _, name = key.rpartition("/")
                    metadata = {"name": name, "namespace": namespace}
                    self._set(plural, "DELETED", {"metadata": metadata})
                for item in items:
                    self._set(plural, "ADDED", item)
                self._capacity_changed()

        return relist

    def _apply(self, plural: str, event: str, body: Mapping[str, Any]) -> None:
        with self._lock:
            if self._set(plural, event, body):
                self._capacity_changed()

    def _set(self, plural: str, event: str, body: Mapping[str, Any]) -> bool:
        """Apply one object; True when nodes' capacity may have changed."""
        meta = body.get("metadata") or {}
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        live = None if event == "DELETED" else body
        catalog = self.catalog
        if plural == "deviceclasses":
            return catalog.set_class(name, live)
        if plural == "resourceslices":
            return bool(catalog.set_slice(name, live))
        if plural == "resourceclaimtemplates":
            catalog.set_template(namespace, name, live)
        else:
            catalog.set_claim(namespace, name, live)
        return False

    def _held(self, plural: str) -> set[str]:
        return self.catalog.held(plural)

    @staticmethod
    def _key(plural: str, body: Mapping[str, Any]) -> str:
        meta = body.get("metadata") or {}
        if plural in ("deviceclasses", "resourceslices"):
            return str(meta.get("name") or "")
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"

    def _capacity_changed(self) -> None:
        self.never_fits.set_devices(self.catalog.capacities())

    # -- the question at create ------------------------------------------------------------

    def gang_at_create(
        self, kind: Kind, obj: Mapping[str, Any], namespace: str, patch: Mapping[str, Any]
    ) -> tuple[Gang, str | None]:
        """The gang the controller will read once `obj` is stored with `patch`, with its claims'
        devices, and a warning when a claim's object does not exist yet; `DevicesRefused` for
        a claim muster cannot count."""
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("namespace", namespace)
        body = kind.gang_object(merged({**obj, "metadata": meta}, patch))
        gang_kind = kind_named(str(body.get("kind") or ""))
        body_meta = body.get("metadata") or {}
        reading = read_gang(
            gang_kind,
            str(body_meta.get("namespace") or namespace),
            str(body_meta.get("name") or ""),
            body.get("spec") or {},
            body_meta.get("labels") or {},
            body_meta.get("annotations") or {},
        )
        if reading.claims is None:
            return reading.gang, None
        with self._lock:
            try:
                return claimed(reading.gang, reading.claims, self.catalog), None
            except DeviceMissing as exc:
                return reading.gang, f"{exc}; muster counts its devices once it exists"
            except DeviceError as exc:
                raise DevicesRefused(f"pod resourceClaims: {exc}") from None


def device_watches(client: KubeClient, devices: WebhookDevices) -> list[tuple[StreamWatch, int]]:
    """One LIST of each DRA collection into `devices` and the stream that keeps it current; a
    collection the cluster does not serve (or muster may not read) is left out, with a log."""
    resources = {
        r.plural: r
        for r in (
            kubeapi.DEVICE_CLASSES,
            kubeapi.RESOURCE_SLICES,
            kubeapi.RESOURCE_CLAIM_TEMPLATES,
            kubeapi.RESOURCE_CLAIMS,
        )
    }
    watches: list[tuple[StreamWatch, int]] = []
    for plural in DEVICE_STREAMS:
        path = resources[plural].path()
        try:
            items, version = list_collection(client, path)
        except ApiError as exc:
            logging.warning(
                "cannot list %s (%s): DRA devices are not counted at create", plural, exc.message
            )
            continue
        devices.relisted(plural)(items, version)
        watch = StreamWatch(
            client,
            path,
            {},
            apply=devices.observe(plural),
            relist=devices.relisted(plural),
            lister=list_collection,
            name=f"webhook-{plural}",
        )
        watches.append((watch, version))
    return watches
