"""Admission writes and pod placement: the plan's admissions, sent, and gated pods placed.

`admit` counts an admission in the cache at once (`Cache.assume_admitted`: the next cycle plans
on it), then sends the release: for a native gang its PodGroups first
(`admission.nativegangs.NativeGangs.writes`: kube-scheduler then binds each pod set whole), then
what the gang's kind writes (`policies.kinds.release.release_writes`, one PATCH,
`Writer.admit`: unsuspend, the pin of each pod set to its planned nodes, an elastic gang's
size, and muster's scheduling gate unless the pin alone is exact); a refused write is
forgotten (`Cache.forget_admission`) and the gang planned again. `place_pods` names each gated
pod's node from its pod set's plan and ungates it (between cycles too, as pods arrive).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping

from admission.cache import Cache
from admission.gangs import JobRecord
from admission.metrics import ControllerMetrics
from admission.nativegangs import NativeGangs
from admission.settings import ControllerSettings
from admission.writes import JobRef, Spawn, Writer
from policies import Admission
from policies.kinds import members
from policies.kinds.pinning import HOSTNAME
from policies.kinds.registry import pod_gang
from policies.kinds.release import Release, Write, release_writes
from policies.topology import placement_note

log = logging.getLogger("muster.controller")

PLACE_RETRY = 30.0
"""Seconds after which a gated pod the watch still shows gated is placed again."""


class Admitter:
    """Sends the plan's admissions and places admitted gangs' gated pods; owns `placing`."""

    def __init__(
        self,
        cache: Cache,
        writer: Writer,
        settings: ControllerSettings,
        metrics: ControllerMetrics,
        spawn: Spawn,
        native: NativeGangs,
    ) -> None:
        self.cache, self.writer, self.settings = cache, writer, settings
        self.metrics, self.spawn = metrics, spawn
        self.native = native
        self.placing: dict[str, tuple[str, float]] = {}
        """Gated pod uid -> (hostname it was sent to, when), until the watch shows it ungated."""

    def admit(self, admission: Admission, now: float) -> None:
        """Admit one gang of the plan: counted in the cache at once, then one PATCH."""
        record = self.cache.jobs.get(admission.gang_id)
        if record is None or record.admission is not None:
            return
        placements = record.gang.placements(admission.placement, admission.other_placements)
        self.cache.assume_admitted(record, now, admission.size, placements)
        self.spawn(self._send_admit(record, admission, now))

    def _release(self, record: JobRecord, admission: Admission, now: float) -> Release:
        """What the admission sets besides unsuspending: the pin of each pod set to its planned
        nodes (unless pinning is off) and, for an elastic gang admitted smaller, its size."""
        # A pod gang is released pod by pod, each to a node of its set's plan: it always
        # records its placement.
        pinned = self.settings.pin or pod_gang(record.object_kind) is not None
        placements = (
            record.gang.placements(admission.placement, admission.other_placements)
            if pinned and (admission.placement or admission.other_placements)
            else {}
        )
        nodes = self.cache.nodes
        names = {name for placement in placements.values() for name in placement}
        return Release(
            when=now,
            size=admission.size,
            placements=placements,
            hostnames={
                name: nodes[name].labels.get(HOSTNAME) if name in nodes else name for name in names
            },
            gate=self._needs_gate(record, placements),
            started=record.started,
        )

    def _needs_gate(self, record: JobRecord, placements: Mapping[str, Mapping[str, int]]) -> bool:
        """Whether the gang's pods must wait at the gate for muster to name each one's node.

        Always for a kind whose templates muster cannot pin by affinity (the gate is then the
        only pin); for several pod sets, when a set's pods may go to more than one node; for a
        gang of one pod set, unless its affinity alone is exact (`_inexact`)."""
        if not record.object_kind.pins_affinity:
            return any(placements.values())
        if record.gang.others:
            return any(len(placement) > 1 for placement in placements.values())
        return self._inexact(record, placements.get(record.gang.set_name) or {})

    def _inexact(self, record: JobRecord, placement: Mapping[str, int]) -> bool:
        """Whether a gang of one pod set's pods must wait at the gate (the affinity alone is
        not exact).

        Not when the node affinity alone is exact: the plan names one node (a one-pod gang,
        or a gang packed on one node), or on every planned node the gang could fit no more
        pods than planned there even if the node were empty (one pod per node for a
        one-pod-per-node gang, a node that holds one pod): then the scheduler, held to those
        nodes, can only place them as planned, and the gang costs no pod writes.

        Not what the node has free now: other pods end between the plan and the binding (a
        CI run bound all three pods of a gang planned 2 + 1 on the first node, freed by pods
        that finished meanwhile), and what the plan left free on a node may be another gang's."""
        if len(placement) <= 1:
            return False  # one planned node (or none): every pod of the gang can only go there
        gang = record.gang
        request = gang.pod_requests
        cache = self.cache
        for name, planned in placement.items():
            node = cache.nodes.get(name)
            if node is None:
                return True
            room = request.pods_that_fit(node.allocatable, gang.one_pod_per_node)
            if room is None or room > planned:
                return True
        return False

    def _writes(self, record: JobRecord, release: Release) -> list[Write]:
        """The release's writes, as the gang object's kind makes them."""
        gang = pod_gang(record.object_kind)
        if gang is not None:  # recorded on its record; its pods are released by `place_pods`
            return members.release_writes(gang, record.namespace, record.name, record.spec, release)
        original = record.original or record.object_kind.original(record.spec)
        gang_kind = record.owner[0] if record.owner is not None else None
        # A native gang's PodGroups first: no pod of it is ever made without its group.
        writes = self.native.writes(record, release.size)
        return writes + release_writes(
            record.object_kind,
            record.uid,
            record.spec,
            original,
            record.templates,
            release,
            gang_kind,
        )

    async def _send_admit(self, record: JobRecord, admission: Admission, now: float) -> None:
        ref = JobRef.of(record)
        writes = self._writes(record, self._release(record, admission, now))
        outcome = await self.writer.call(lambda: self.writer.admit(ref, writes))
        if outcome == "conflict":
            # Someone changed the object under us (admitted elsewhere, or not suspended). Read
            # it and let the cache hold the truth; a still-pending gang is planned again.
            body = await self.writer.call(self.writer.get_object, ref)
            self.cache.forget_admission(record)
            if body is not None:
                self.cache.apply_gang(record.object_kind, "MODIFIED", body)
            log.info("admit %s: the object changed under us; re-reading it", record.key)
            return
        if outcome != "ok":
            self.cache.forget_admission(record)
            log.warning("admit %s rolled back (%s)", record.key, outcome)
            return
        self.cache.confirm_admission(record, now, admission.size)
        self.metrics.admitted.labels(admission.queue).inc()
        self.metrics.wait.observe(max(0.0, now - record.gang.submitted.time))
        where = ""
        if admission.placement:
            where = f" on {len(admission.placement)} nodes" + placement_note(
                self.settings.topology, record.gang.topology, admission.placement, self._labels
            )
        message = (
            f"admitted {admission.size} of {record.gang.size} pods from queue "
            f"{admission.queue}{where}"
        )
        log.info("%s %s", record.key, message)
        if self.settings.admit_events:
            self.writer.event(ref, "Admitted", message, "Normal")

    def _labels(self, node: str) -> Mapping[str, str] | None:
        """A node's labels as the cache holds them; None for a node it does not hold."""
        found = self.cache.nodes.get(node)
        return None if found is None else found.labels

    def place_pods(self) -> None:
        """Give each gated pod of an admitted gang a planned node with room left in the plan
        (planned pods minus the gang's live pods already sent there), and ungate it.

        The plan is the object's muster.dev/placement for the pod's pod set (or, before the
        watch brings the admitted object, this controller's reservation); which pods went where
        is read from the pods' nodeSelectors, so a restarted controller places the rest of a
        half-placed gang the same way. A pod is sent once (`placing`) until the watch shows it
        ungated, or again after PLACE_RETRY seconds if it does not."""
        cache = self.cache
        now = time.monotonic()
        for uid, (_, sent_at) in list(self.placing.items()):
            if uid not in cache.pods.gated or now - sent_at > PLACE_RETRY:
                del self.placing[uid]
        waiting: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for uid, pod in cache.pods.gated.items():
            if uid not in self.placing and pod.gang is not None:
                waiting.setdefault((pod.gang, pod.pod_set), []).append((pod.ref, uid))
        if not waiting:
            return
        in_flight: dict[str | None, Counter[str]] = {}
        for uid, (sent_to, _) in self.placing.items():
            placed = cache.pods.gated.get(uid)
            if placed is not None and placed.gang is not None and sent_to:
                in_flight.setdefault(placed.set_key, Counter())[sent_to] += 1
        owners = {
            f"{r.namespace}/{r.gang_label}": r
            for r in cache.jobs.unfinished_records()
            if r.admission is not None and not r.finished
        }
        for (gang, pod_set), pods in waiting.items():
            record = owners.get(gang)
            if record is None:
                continue  # not admitted (or suspended again): its kind's controller deletes them
            key = f"{gang}/{pod_set}" if pod_set else gang
            room = self._room(record, pod_set, key, in_flight)
            members_only = pod_gang(record.object_kind) is not None
            plans = record.pinned or cache.reservations.get(record.key) or {}
            planned = bool(plans.get(pod_set))
            for ref, uid in sorted(pods):
                free = [h for h, left in room.items() if left > 0]
                host = max(free, key=lambda h: (room[h], h)) if free else None
                if host is not None:
                    room[host] -= 1
                elif members_only:
                    break  # a pod gang's pods beyond its plan are not in it: they stay gated
                elif planned:
                    # More pods than planned: a pod whose predecessor is still going (placed
                    # when it goes), or a gang grown past its admission, which the guard
                    # suspends (admission.guard). Either way it does not run beyond the plan.
                    continue
                else:
                    log.warning("%s: no planned node for pod %s; ungated unpinned", gang, ref)
                self.placing[uid] = (host or "", now)
                self.spawn(self._send_place(ref, host or None))

    def _room(
        self,
        record: JobRecord,
        pod_set: str,
        key: str,
        in_flight: Mapping[str | None, Counter[str]],
    ) -> Counter[str]:
        """Pods of a pod set still to place, per hostname: planned minus live pods sent there
        (and sends in flight). A pod gang admitted without a placement (a node-blind queue)
        has its set's admitted count to release anywhere ("": only ungated)."""
        cache = self.cache
        plans = record.pinned or cache.reservations.get(record.key) or {}
        plan = plans.get(pod_set) or {}
        room = Counter[str]()
        if not plan and pod_gang(record.object_kind) is not None:
            admitted = record.admission[1] if record.admission is not None else 0
            gang = record.gang
            wanted = next((s.count for s in gang.others if s.name == pod_set), None)
            if wanted is None:
                wanted = admitted - gang.fixed
            sending = sum(
                1
                for uid, _ in self.placing.items()
                if (pod := cache.pods.gated.get(uid)) is not None and pod.set_key == key
            )
            room[""] = wanted - cache.pods.set_released.get(key, 0) - sending
            return room
        nodes = cache.nodes
        for name, count in plan.items():
            node = nodes.get(name)
            # "": a node without a hostname label; its pods are only ungated.
            room[(node.labels.get(HOSTNAME) or "") if node is not None else name] += count
        room.subtract(cache.pods.gang_sent.get(key) or {})
        room.subtract(in_flight.get(key) or {})
        return room

    async def _send_place(self, ref: str, host: str | None) -> None:
        outcome = await self.writer.call_place(ref, host)
        if outcome != "ok" and outcome != "gone":
            log.warning("place pod %s on %s: %s", ref, host, outcome)
