"""Every write of the controller that suspends a Job muster let run.

Three causes: the plan preempts a victim (`preempt`, awaited by the cycle, which admits the
preemptors only once their room is free), a detector evicts a clogged or deadlocked gang
(`evict`: `policies.lifecycle.evict` says what that does: backoff, failure, the message), and a
Job was unsuspended without muster's admission (`resuspend_unadmitted`). Each is counted in the
cache at once (`Cache.assume_suspended`: its quota and nodes are free for the next cycle) and
rolled back if its write is refused. `evicting` holds the gangs whose suspension is in flight:
the planner leaves them alone, and the detectors do not look at them again meanwhile; `refused`
holds those whose suspension the apiserver refused for good, until their next try (a backoff
per gang: `admission.retries`), and `held` says why a plan that needs one is not carried out.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping

from admission.cache import Cache
from admission.gangs import JobRecord
from admission.jobstore import Suspension
from admission.metrics import ControllerMetrics
from admission.retries import Hold, RetryBackoff
from admission.writes import JobRef, Spawn, Writer
from kubeport.kubeapi import ApiError
from policies import Reason
from policies.kinds.pinning import Original
from policies.lifecycle import EvictReason, evict

RESTORE_RETRY = 5.0
"""Seconds between tries of one waiting restore (`Suspender.restore_waiting`)."""

log = logging.getLogger("muster.controller")

_JITTER = random.Random()


class Suspender:
    """Suspends preemption victims, evicted gangs and unsanctioned unsuspends; owns `evicting`."""

    def __init__(
        self, cache: Cache, writer: Writer, metrics: ControllerMetrics, spawn: Spawn
    ) -> None:
        self.cache, self.writer, self.metrics, self.spawn = cache, writer, metrics, spawn
        self.evicting: set[str] = set()
        """Jobs (by key) being suspended and restored: the write is in flight."""
        self.refused = RetryBackoff()
        """Gangs whose suspension the apiserver refused for good, until their next try."""
        self.held: tuple[str, Hold] | None = None
        """The victim (key, refusal) that held back the last plan's admissions, if one did."""
        self.restoring: dict[str, float] = {}
        """Objects (by key) whose waiting restore was last sent, and when (`restore_waiting`)."""

    def holds(self, key: str, now: float) -> bool:
        """Whether a gang's suspension waits out a refusal (the detectors leave it alone)."""
        return self.refused.held(key, now) is not None

    # -- preemption ----------------------------------------------------------------------

    async def preempt(self, victims: Mapping[str, Reason]) -> bool:
        """Suspend each victim (its pods go), all at once; True if every victim's capacity is
        free now (suspended here, finished, or gone)."""
        chosen: list[tuple[JobRecord, Reason]] = []
        now = time.time()
        self.held = None
        for key, reason in victims.items():
            record = self.cache.jobs.get(key)
            if record is None or record.finished:
                continue  # its capacity is free already
            if record.admission is None or key in self.evicting:
                # Not what the plan saw (a watch event came in while it ran): touch nothing,
                # plan again.
                return False
            if (hold := self.refused.held(key, now)) is not None:
                # Refused for good a moment ago: not sent again before its backoff ends.
                self.held = (key, hold)
                return False
            chosen.append((record, reason))
        outcomes = await asyncio.gather(*(self._send_preempt(r, why) for r, why in chosen))
        return all(outcomes)

    async def _send_preempt(self, record: JobRecord, reason: Reason) -> bool:
        """Suspend one victim and record the preemption on it; True if its capacity is free."""
        writer, ref = self.writer, JobRef.of(record)
        preemptions = record.gang.preemptions + 1
        self.evicting.add(record.key)
        try:
            outcome = await writer.call(
                lambda: writer.preempt(ref, preemptions=preemptions, message=reason.message)
            )
        finally:
            self.evicting.discard(record.key)
        if outcome == "gone":
            self.refused.pop(record.key, None)
            return True
        if outcome == "refused":
            hold = self.refused.refused(record.key, writer.refusal(ref), time.time())
            self.held = (record.key, hold)
        if outcome != "ok":
            log.warning("preempt %s: not suspended (%s)", record.key, outcome)
            if outcome == "conflict":
                # The object is not what the plan saw: let the cache hold the truth. If this
                # read fails too, the watch brings it.
                try:
                    body = await writer.call(writer.get_object, JobRef.of(record))
                except (ApiError, OSError) as exc:
                    log.info("preempt %s: re-reading the object failed: %s", record.key, exc)
                    body = None
                if body is not None:
                    self.cache.apply_gang(record.object_kind, "MODIFIED", body)
            return False
        self.refused.pop(record.key, None)
        current = self.cache.jobs.get(record.key)
        if current is not None and current.uid == record.uid and current.suspended is False:
            # The watch has not brought our write yet: show it now (the plan's capacity is
            # free for the next cycle, and the status service says why the gang waits).
            self.cache.assume_suspended(current, preemption=(preemptions, reason.message))
        else:
            self.cache.drop_reservation(record.key)
        self.metrics.preemptions.labels(record.queue).inc()
        log.info("%s %s", record.key, reason.message)
        writer.event(ref, "Preempted", reason.message, "Normal")
        return True

    # -- eviction ------------------------------------------------------------------------

    def evict(
        self,
        record: JobRecord,
        reason: EvictReason,
        why: str,
        now: float,
        *,
        restore: Original | None = None,
    ) -> None:
        """Evict an admitted gang (`reason`, `why`: what the detector saw): suspended and
        restored (to ``restore`` when given: `policies.kinds.release.as_changed`), requeued
        after its backoff, or failed after too many evictions."""
        tree = self.cache.queues.tree
        backoff = tree[record.queue].backoff if tree is not None and record.queue in tree else None
        eviction = evict(record.evictions, backoff, jitter=_JITTER)
        evictions, failed = eviction.evictions, eviction.failed
        requeue_at = now + eviction.delay
        message = eviction.message(reason, why)
        self.evicting.add(record.key)
        self.metrics.evictions.labels(reason).inc()
        if failed:
            self.metrics.failed.inc()
        log.warning("%s %s", record.key, message)
        # Optimistic: quota and nodes are free for the next cycle at once.
        old = self.cache.assume_suspended(
            record, evictions=evictions, requeue_at=requeue_at, failed=failed
        )
        self.spawn(
            self._send_evict(record, reason, message, evictions, requeue_at, failed, old, restore)
        )

    async def _send_evict(
        self,
        record: JobRecord,
        reason: EvictReason,
        message: str,
        evictions: int,
        requeue_at: float,
        failed: bool,
        old: Suspension,
        restore: Original | None,
    ) -> None:
        writer, ref = self.writer, JobRef.of(record)
        try:
            outcome = await writer.call(
                lambda: writer.evict(
                    ref,
                    evictions=evictions,
                    requeue_at=requeue_at,
                    reason=reason,
                    failed=failed,
                    restore=restore,
                )
            )
            if outcome == "ok":
                self.refused.pop(record.key, None)
                writer.event(ref, "Failed" if failed else "Evicted", message, "Warning")
            elif outcome == "refused":
                self.cache.forget_suspension(record, old)
                self.refused.refused(record.key, writer.refusal(ref), time.time())
                log.warning(
                    "%s: eviction %s", record.key, self.refused[record.key].message(time.time())
                )
        finally:
            self.evicting.discard(record.key)

    # -- restores that had to wait ------------------------------------------------------

    def restore_waiting(self, now: float) -> None:
        """Put back what an eviction or a preemption could not yet (the object's pods were
        still active: Kubernetes 1.36 and later let a suspended Job's template change only once
        none are): each suspended object still carrying muster.dev/restore whose pods are gone,
        at most every `RESTORE_RETRY` seconds each."""
        for key in list(self.cache.jobs.restores):
            record = self.cache.jobs.get(key)
            if record is None or record.active_pods > 0 or key in self.evicting:
                continue
            if now - self.restoring.get(key, -RESTORE_RETRY) < RESTORE_RETRY:
                continue
            self.restoring[key] = now
            self.spawn(self._send_restore(record))

    async def _send_restore(self, record: JobRecord) -> None:
        outcome = await self.writer.call(self.writer.unpin, JobRef.of(record))
        if outcome in ("ok", "gone"):
            self.restoring.pop(record.key, None)
        else:
            log.info("restore %s: %s; tried again later", record.key, outcome)

    # -- unsanctioned unsuspends ---------------------------------------------------------

    def resuspend_unadmitted(self) -> None:
        """Suspend again every Job running without muster's admission (someone set
        `spec.suspend: false` by hand, or another controller did)."""
        for record in list(self.cache.jobs.unfinished_records()):
            if (
                record.suspended
                or record.finished
                or record.admission is not None
                or record.key in self.evicting
            ):
                continue
            self.evicting.add(record.key)
            message = (
                "unsuspended without admission by muster; suspended again. Jobs labelled "
                "muster.dev/queue start when muster admits them (see `muster explain`)"
            )
            log.warning("%s %s", record.key, message)
            self.metrics.resuspended.inc()
            self.cache.jobs.assume_resuspended(record)
            self.spawn(self._send_suspend(record, message))

    async def _send_suspend(self, record: JobRecord, message: str) -> None:
        writer = self.writer
        try:
            outcome = await writer.call(writer.suspend, JobRef.of(record))
            if outcome == "ok":
                writer.event(JobRef.of(record), "NotAdmitted", message, "Warning")
        finally:
            self.evicting.discard(record.key)
