"""The clog and deadlock detectors: admitted gangs that do not get running, found each cycle.

A **clog** is an admitted gang below its minimum of ready pods for longer than its clog timeout
(`policies.lifecycle.check_clog` decides, as in the simulator); a **deadlock** is two or more
gangs each partially bound and each waiting for nodes another holds (the wait-for graph of
`admission.deadlock`). Both evict through the `Suspender`, and neither looks at a gang whose
suspension is in flight.
"""

from __future__ import annotations

import logging
from typing import Any

from admission.cache import Cache
from admission.deadlock import PartialGang, gangs_to_evict, wait_for_graph
from admission.gangs import JobRecord
from admission.metrics import ControllerMetrics
from admission.settings import ControllerSettings
from admission.suspender import Suspender
from policies.lifecycle import Progress, check_clog, clog_timeout

log = logging.getLogger("muster.controller")

CLOG_CHECK_EVERY = 1.0
"""Least seconds between two passes of the clog detector. Under a burst a cycle comes every
0.2-0.6 s, and each pass looks again at every admitted gang whose pods have not all started
(the largest piece of a cycle's CPU in a burst); clog timeouts are minutes, and a pass a
second times them as well (an eviction comes at most this much later, a gang's progress is
noted at most this much later)."""


class ClogDetector:
    """Times each admitted gang against its minimum; evicts one clogged past its timeout."""

    def __init__(
        self,
        cache: Cache,
        settings: ControllerSettings,
        metrics: ControllerMetrics,
        suspender: Suspender,
    ) -> None:
        self.cache, self.settings, self.metrics = cache, settings, metrics
        self.suspender = suspender
        self.checked_at = float("-inf")
        """When the last pass ran (at most one per CLOG_CHECK_EVERY)."""

    def detect(self, now: float) -> None:
        if 0.0 <= now - self.checked_at < CLOG_CHECK_EVERY:
            return
        self.checked_at = now
        cache, evicting, suspender = self.cache, self.suspender.evicting, self.suspender
        pods = cache.pods
        for record in list(cache.jobs.unfinished_records()):
            if record.admitted_at is None or record.finished or record.key in evicting:
                continue
            if record.suspended or (suspender.refused and suspender.holds(record.key, now)):
                continue  # the guard requeues it; or its eviction waits out a refusal
            ready = pods.ready_pods(record) + pods.succeeded_pods(record)
            if record.reached_min and record.below_min_since is None and ready >= record.gang.min:
                # Running at its minimum or above (most admitted gangs): `check_clog` would
                # change only the clock's measure, which no one reads once the minimum was
                # reached (a fall below it is timed from then: `below_min_since`).
                continue
            check = check_clog(
                Progress(
                    record.reached_min,
                    record.below_min_since,
                    record.advanced,
                    record.advanced_at,
                ),
                admitted_at=record.admitted_at,
                ready=ready,
                minimum=record.gang.min,
                timeout=self._timeout(record),
                now=now,
                **self._clock(record),
            )
            cache.jobs.note_progress(record, check.progress)
            if check.evict is not None:
                self.metrics.clogs.inc()
                seen = (
                    f"{pods.describe(record)}; Job status: {record.ready} ready, "
                    f"{record.succeeded} succeeded"
                )
                self.suspender.evict(record, check.evict, f"{check.why}; {seen}", now)

    def _timeout(self, record: JobRecord) -> float:
        tree = self.cache.queues.tree
        queue = tree[record.queue] if tree is not None and record.queue in tree else None
        return clog_timeout(record.clog_timeout, queue)

    def _clock(self, record: JobRecord) -> dict[str, Any]:
        """`check_clog`'s view of a gang's start (none with `clog_progress` off): whether it
        waits on the control plane (`PodLedger.gang_waits`) and how far its pods have come."""
        if not self.settings.clog_progress:
            return {}
        pods = self.cache.pods
        return {"advanced": pods.start_measure(record), "waiting": pods.gang_waits(record)}


class DeadlockDetector:
    """Finds partially bound gangs waiting on each other's nodes; evicts the youngest."""

    def __init__(
        self,
        cache: Cache,
        settings: ControllerSettings,
        metrics: ControllerMetrics,
        suspender: Suspender,
    ) -> None:
        self.cache, self.settings, self.metrics = cache, settings, metrics
        self.suspender = suspender
        self._last_partial: tuple[object, ...] = ()

    def detect(self, now: float) -> None:
        cache, evicting = self.cache, self.suspender.evicting
        bound_of, unbound_of = cache.pods.gang_bound, cache.pods.gang_unbound
        partial: list[PartialGang] = []
        for record in cache.jobs.unfinished_records():
            adm = record.admitted_at
            if adm is None or record.finished or record.reached_min or record.key in evicting:
                continue
            if self.suspender.refused and self.suspender.holds(record.key, now):
                continue
            if now - adm < self.settings.deadlock_grace:
                continue
            gang_key = f"{record.namespace}/{record.gang_label}"
            bound = bound_of.get(gang_key)
            waiting = unbound_of.get(gang_key, 0)
            if bound and waiting:
                partial.append(PartialGang(record.gang, waiting, dict(bound)))
        if len(partial) < 2:
            return
        nodes = [cache.nodes[n] for n in cache.nodes]
        graph = wait_for_graph(nodes, cache.pods.used, partial)
        shape = (tuple(sorted(p.gang.id for p in partial)), tuple(sorted(graph.edges)))
        if shape != self._last_partial:
            self._last_partial = shape
            log.info("partial gangs %s; waits %s", list(shape[0]), list(shape[1]))
        victims = gangs_to_evict(graph, {p.gang.id: p.gang for p in partial})
        for victim in victims:
            record = cache.jobs[victim]
            others = sorted(n for n in graph.successors(victim)) + sorted(
                n for n in graph.predecessors(victim)
            )
            self.metrics.deadlocks.inc()
            self.suspender.evict(
                record,
                "Deadlock",
                f"deadlock with {', '.join(sorted(set(others)))}: each holds nodes the other "
                "needs; evicting the youngest gang of the cycle",
                now,
            )
