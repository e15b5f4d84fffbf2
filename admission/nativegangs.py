"""The controller's side of Kubernetes' own gangs (`policies.kinds.nativegroups`): whether the
cluster serves PodGroups, the groups an admitted native gang gets, their repair after a start,
and the native gangs not to admit again while pods of their last admission are still there.

Discovery decides, once at start (no flag): where PodGroups are served, a gang whose pod
templates the webhook linked (`JobRecord.links`) is released through its groups; elsewhere, and
for a gang created before the API was served, by pins alone. Everything lives in the cluster:
the links in the gang object's templates, each group's minimum in the group, the admission on
the gang object, so a restarted controller finds what to repair with one LIST (`repair`).
"""

from __future__ import annotations

import logging
from collections import defaultdict

from admission.cache import Cache
from admission.gangs import JobRecord
from admission.jobstore import waiting
from admission.writes import JobRef, Spawn, Writer
from kubeport import kubeapi
from kubeport.kubeapi import ApiError, KubeClient
from policies.kinds.nativegroups import (
    GroupLink,
    GroupOwner,
    admitted_counts,
    group_writes,
    stale_links,
)
from policies.kinds.writes import Write

log = logging.getLogger("muster.controller")


def serves_pod_groups(client: KubeClient) -> bool:
    """Whether the cluster serves PodGroups (Kubernetes 1.37 with GenericWorkload); False when
    discovery cannot tell (logged: the pin path then runs, as on an older cluster)."""
    try:
        served = client.serves(kubeapi.POD_GROUPS)
    except (ApiError, OSError) as exc:
        log.warning("cannot tell whether PodGroups are served (%s): releasing by pins", exc)
        return False
    log.info(
        "PodGroups %s",
        "served: linked gangs are bound whole by kube-scheduler"
        if served
        else "not served: gangs are released by pins alone",
    )
    return served


class NativeGangs:
    """The native gang path of the controller; `served` is set once the controller is synced."""

    def __init__(self, cache: Cache, writer: Writer, spawn: Spawn) -> None:
        self.cache, self.writer, self.spawn = cache, writer, spawn
        self.served = False
        """The cluster serves PodGroups (discovery at start)."""

    def native(self, record: JobRecord) -> bool:
        """The gang is released through its PodGroups."""
        return self.served and bool(record.links)

    def writes(self, record: JobRecord, size: int) -> list[Write]:
        """The applies that make the gang's groups gangs of its admitted pods (none for a gang
        that is not native), to send before its release."""
        if not self.native(record):
            return []
        return self._writes(record, record.links, size)

    def _writes(self, record: JobRecord, links: tuple[GroupLink, ...], size: int) -> list[Write]:
        owner = GroupOwner(record.object_kind.api, record.name, record.uid, record.gang_label)
        return group_writes(links, admitted_counts(record.gang, size), owner)

    def draining(self) -> set[str]:
        """Keys of the native gangs that wait to be admitted while pods of their last admission
        are still live: kube-scheduler counts a group's bound pods toward its minimum, so new
        pods admitted beside terminating ones could bind part of the gang."""
        if not self.served:
            return set()
        jobs, pods = self.cache.jobs, self.cache.pods
        out: set[str] = set()
        for gangs in (pods.gang_bound, pods.gang_unbound):
            for gang in gangs:
                key = jobs.gangs.get(gang)
                record = jobs.get(key) if key is not None else None
                if record is not None and record.links and waiting(record):
                    out.add(record.key)
        return out

    async def repair(self) -> int:
        """After a start: apply again each group of an admitted native gang that is missing or
        does not hold the admitted count (deleted, or changed by hand, while no controller
        ran). One LIST of muster's groups; returns how many gangs were repaired."""
        if not self.served:
            return 0
        try:
            listed = await self.writer.call(self.writer.pod_group_counts)
        except (ApiError, OSError) as exc:
            log.warning("cannot list PodGroups to repair them (%s); the next admissions do", exc)
            return 0
        stored: dict[str, dict[str, int | None]] = defaultdict(dict)
        for (namespace, name), min_count in listed.items():
            stored[namespace][name] = min_count
        repaired = 0
        for record in list(self.cache.jobs.values()):
            if not record.links or record.finished or record.admitted_at is None:
                continue
            counts = admitted_counts(record.gang, record.admitted_size)
            stale = tuple(stale_links(record.links, counts, stored.get(record.namespace, {})))
            if stale:
                repaired += 1
                self.spawn(self._send(record, self._writes(record, stale, record.admitted_size)))
        if repaired:
            log.info("repairing the PodGroups of %d admitted gangs", repaired)
        return repaired

    async def _send(self, record: JobRecord, writes: list[Write]) -> None:
        ref = JobRef.of(record)
        outcome = await self.writer.call(lambda: self.writer.send(ref, writes))
        if outcome != "ok":
            log.warning("repair of %s's PodGroups: %s", record.key, outcome)
