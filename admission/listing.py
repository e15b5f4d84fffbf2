"""The cache's LISTs: one of each kind it holds, at start and when a standby replica takes over.

Before the first cycle the controller LISTs every kind once (`load_everything`, page by page),
so a restarted controller plans from the whole cluster (admitted gangs included), never from a
half-filled cache; watch events older than what that LIST returned are ignored. A LIST is also
a resync: what the cache holds but the LIST no longer does is dropped (`Cache.prune`: a
standby's paused watches may have missed the deletion). The read-only commands load the same
listing into a cache of their own (`list_everything`, `apply_listing`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from admission.cache import GANG_OBJECTS, Cache, cache_key
from admission.devicebook import DEVICE_KINDS
from admission.writes import resource_of
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from kubeport.streamwatch import list_collection
from policies.kinds.members import RECORDS
from policies.vocabulary import GANG_RECORD, QUEUE

log = logging.getLogger("muster.controller")

PODS = kubeapi.PODS.path()
NODES = kubeapi.NODES.path()
QUEUES = kubeapi.QUEUES.path()
NAMESPACES = kubeapi.NAMESPACES.path()
GANG_RECORDS = kubeapi.Resource(RECORDS.group, RECORDS.version, RECORDS.plural).path()


Listing = list[tuple[str, list[Any], int]]


KINDS: tuple[tuple[str, str, Mapping[str, str] | None], ...] = (
    ("queue", QUEUES, None),
    ("node", NODES, None),
    # Before the gang objects: a gang's claims are counted as its record is read. Only with a
    # DeviceClass mapped (`Cache.devices.enabled`).
    *((kind, resource.path(), None) for kind, resource in DEVICE_KINDS.items()),
    # Before the pods: a pod gang's virtual gang object is assembled from both, and one
    # assembled from its pods alone reads as never admitted (a finished group would enter the
    # history once, without its admission).
    ("gangrecord", GANG_RECORDS, {"labelSelector": GANG_RECORD}),
    ("pod", PODS, None),
    *(
        (name, resource_of(kind).path(), {"labelSelector": QUEUE})
        for name, kind in GANG_OBJECTS.items()
    ),
    ("namespace", NAMESPACES, None),
)
"""What the cache holds: (kind, collection path, LIST parameters); every gang object kind muster
admits (`policies.kinds.registry`) among them."""
LEAN_KINDS = frozenset({"pod", "gangrecord", *GANG_OBJECTS, *DEVICE_KINDS})
"""Kinds watched by `admission.cachewatch` (busy: every gang pod changes each several times);
the others by kopf's `@on.event`."""


def _tolerated(kind: str, exc: ApiError) -> bool:
    """A LIST failure the controller works without (and logs); others are raised."""
    if exc.status == 404 and kind == "queue":
        log.warning("Queue CRD not installed: kubectl apply -f manifests/crd/")
        return True
    if exc.status == 404 and kind in GANG_OBJECTS and kind != "job":
        # A kind whose operator is not installed: none of its gangs to admit (its watch is
        # not started either).
        log.info("%s API not served: its gangs are not admitted", GANG_OBJECTS[kind].name)
        return True
    if exc.status == 404 and kind == "gangrecord":
        log.warning(
            "GangRecord CRD not installed: pod groups are not admitted; kubectl apply -f "
            "manifests/crd/"
        )
        return True
    if exc.status in (403, 404) and kind in DEVICE_KINDS:
        # A cluster without resource.k8s.io/v1 (before Kubernetes 1.34), or a ClusterRole from
        # before DRA support: devices are not counted, the rest is admitted as before.
        log.warning(
            "cannot list %s (%s): DRA devices are not counted; grant get, list, watch on "
            "resource.k8s.io deviceclasses, resourceslices, resourceclaims and "
            "resourceclaimtemplates (manifests/base/rbac.yaml)",
            DEVICE_KINDS[kind].plural,
            exc.status,
        )
        return True
    if exc.status == 403 and kind == "namespace":
        # Read-only views (muster explain) may lack it; queues' namespaceSelectors are then
        # not checked (the controller's ClusterRole grants it).
        log.warning("cannot list namespaces: queues' namespaceSelector not checked")
        return True
    return False


def list_everything(client: KubeClient) -> Listing:
    """One LIST of each kind the cache holds: (kind, items, collection version). Blocking."""
    out: Listing = []
    for kind, path, params in KINDS:
        if kind in DEVICE_KINDS:
            continue  # the read-only views know no mapping: they count no device
        try:
            items, version = list_collection(client, path, params)
        except ApiError as exc:
            if _tolerated(kind, exc):
                continue
            raise
        out.append((kind, items, version))
    return out


async def load_everything(cache: Cache, client: KubeClient) -> dict[str, int]:
    """LIST every kind into the cache page by page; return each collection's version.

    Like `list_everything` + `apply_listing`, but never holds more than one page of objects:
    the parsed bodies of 10k Jobs at once were the controller's memory peak, and CPython keeps
    much of such a peak as its resident size afterwards.
    """
    versions: dict[str, int] = {}
    for kind, path, params in KINDS:
        if kind in DEVICE_KINDS and not cache.devices.enabled:
            continue
        apply = cache.applier(kind)
        keys: set[str] = set()
        query = {"limit": "500", **(params or {})}
        version = 0
        try:
            while True:
                page = await asyncio.to_thread(client.get, path, query)
                meta = page.get("metadata") or {}
                # Later pages of a chunked LIST are served at the first page's version.
                version = version or int(meta.get("resourceVersion") or 0)
                for item in page.get("items") or []:
                    item.setdefault("metadata", {})
                    apply("ADDED", item)
                    keys.add(cache_key(kind, item))
                del page
                token = meta.get("continue")
                if not token:
                    break
                query["continue"] = token
        except ApiError as exc:
            if _tolerated(kind, exc):
                continue
            raise
        dropped = cache.prune(kind, keys, version)
        if dropped:
            log.info("resync dropped %d %s(s) deleted while unwatched", dropped, kind)
        versions[kind] = version
    return versions


def apply_listing(cache: Cache, listing: Listing) -> None:
    """Load a listing into the cache, on the event loop's thread (the cache's only writer).

    Also a resync: what the cache holds but the LIST no longer does is dropped (a standby
    replica's paused watches may have missed the deletion).
    """
    for kind, items, version in listing:
        apply = cache.applier(kind)
        for item in items:
            item.setdefault("metadata", {})
            apply("ADDED", item)
        dropped = cache.prune(kind, {cache_key(kind, item) for item in items}, version)
        if dropped:
            log.info("resync dropped %d %s(s) deleted while unwatched", dropped, kind)
